"""The apex2amp verify probe: seeds, records per-iteration losses/scale/skips, stops after N steps.

Installed by sitecustomize in every Python process of a harness run (the launcher, mp.spawn children,
torchrun ranks). Environment: APEX2AMP_OUT (records folder), APEX2AMP_STEPS, APEX2AMP_SEED,
APEX2AMP_DEVICE ("cpu" = simulate CUDA on the CPU), APEX2AMP_NPROC, APEX2AMP_MASTER_PORT, APEX2AMP_FIND_NAN
("1" = trace non-finite values from the first step, see _apex2amp_nan),
APEX2AMP_CUT_AT_SAVE=1 (after step N, go on until the program's next torch.save, then stop: a resume's first leg).
One JSON line per optimizer step per process: {"rank", "it", "losses", "skipped", "scale", "nonfinite", "time",
"fwd_dtype", "fwd_autocast", "fwd_weights"} (the lowest floating dtype a top-level module's forward
returned this step, whether one ran under autocast, the lowest dtype of such a module's first parameter); a
resume's first leg adds {"event": "checkpoint", "paths": [...]}.

A step closes at each optimizer's own step() on both sides: the emulated apex step (skipped or not),
GradScaler.step(optimizer) (skipped when that optimizer's grads held inf/NaN), a plain optimizer.step(), or, for
a hand-written scaler whose backward ran on `loss * scale`, a zero_grad() or a new scale with no step in between
(the skipped step). Its losses are the unscaled losses backpropagated since the previous step of any optimizer.
"""
import atexit
import json
import math
import os
import sys
import threading
import time

_tls = threading.local()
_state = None


class _Recorder(object):
    def __init__(self, out_dir, steps):
        self.out_dir = out_dir
        self.steps = steps
        self.fh = None
        self.it = 0
        self.losses = []
        self.scales = []
        self.skipped = False
        self.t0 = time.perf_counter()
        self.managed = set()         # ids of optimizers stepped through a scaler or the apex emulation
        self.hand_scale = None       # the scale of a hand-written scaler's pending backward (loss * scale)
        self.on_boundary = None      # called with each step record (the NaN locator's trigger)
        self.finished = False
        self._rank = None
        self._flushed = 0.0
        self.depth = 0               # nesting of module forwards (0 = a top-level module is called)
        self.fwd_dtype = None
        self.fwd_autocast = False
        self.fwd_weights = None
        self.cut_at_save = os.environ.get("APEX2AMP_CUT_AT_SAVE") == "1"
        self.awaiting_save = False   # step N is done; the next torch.save ends the run
        self.saved = []              # checkpoint paths written while awaiting_save

    def rank(self):
        if self._rank is not None:
            return self._rank
        try:
            import torch.distributed as dist
            if dist.is_available() and dist.is_initialized():
                self._rank = dist.get_rank()  # fixed once the process group exists
                return self._rank
        except Exception:
            pass
        return int(os.environ.get("RANK", "0") or 0)

    def _write(self, obj):
        if self.fh is None:
            self.fh = open(os.path.join(self.out_dir, "records-%d.jsonl" % os.getpid()), "a")
            self._flushed = time.perf_counter()
        self.fh.write(json.dumps(obj) + "\n")
        now = time.perf_counter()
        # a flush (a system call) per step is measurable on millisecond steps: flush at most twice a
        # second here, and always in finish() (end of run, crash, the step-N cut)
        if now - self._flushed > 0.5:
            self.fh.flush()
            self._flushed = now

    def loss(self, value, scale=None):
        self.losses.append(value)
        if scale is not None:
            self.scales.append(float(scale))

    def forward_done(self, dtype, autocast, weights):
        """A top-level module's forward returned a floating tensor of `dtype` (a torch.dtype name)."""
        if self.fwd_dtype is None or _PRECISION.get(dtype, 9) < _PRECISION.get(self.fwd_dtype, 9):
            self.fwd_dtype = dtype
        if weights and (self.fwd_weights is None or _PRECISION.get(weights, 9) < _PRECISION.get(self.fwd_weights, 9)):
            self.fwd_weights = weights
        self.fwd_autocast = self.fwd_autocast or autocast

    def after_cut(self):
        """Past step N of a resume's first leg: stop once the checkpoint is written (or no save came)."""
        if self.saved:
            self.finish("done")
        elif self.awaiting_save:
            self.finish("nosave")

    def boundary(self, skipped=False, scale=None):
        if self.awaiting_save:  # a whole step after step N and no torch.save: no checkpoint at step N
            self.after_cut()
        now = time.perf_counter()
        if scale is None and self.scales:
            scale = self.scales[0]
        nonfinite = any(not math.isfinite(v) for v in self.losses)
        record = {"rank": self.rank(), "pid": os.getpid(), "it": self.it,
                  "losses": [v if math.isfinite(v) else repr(v) for v in self.losses],
                  "skipped": bool(skipped or self.skipped), "scale": scale, "nonfinite": nonfinite,
                  "time": now - self.t0, "fwd_dtype": self.fwd_dtype, "fwd_autocast": self.fwd_autocast,
                  "fwd_weights": self.fwd_weights}
        self._write(record)
        self.it += 1
        self.losses, self.scales, self.skipped = [], [], False
        self.hand_scale = None
        self.depth, self.fwd_dtype, self.fwd_autocast, self.fwd_weights = 0, None, False, None
        self.t0 = now
        if self.on_boundary is not None:
            self.on_boundary(record)
        if self.steps and self.it >= self.steps:
            if self.cut_at_save:
                self.awaiting_save = True
            else:
                self.finish("done")

    def hand_scaled_loss(self, value, scale):
        """A backward on `loss * scale` outside any scaler: a new scale with losses pending means a skipped step."""
        if self.hand_scale is not None and self.losses and scale != self.hand_scale:
            self.boundary(skipped=True)
        self.loss(value, scale)
        self.hand_scale = scale

    def grads_zeroed(self):
        """zero_grad() with a hand-scaled backward pending and no step since: that step was skipped."""
        if self.hand_scale is not None and self.losses:
            self.boundary(skipped=True)

    def finish(self, event, error=None):
        if self.finished:
            return
        self.finished = True
        if self.on_boundary is not None:
            try:
                self.on_boundary(None)
            except Exception:
                pass
        if self.saved:
            self._write({"event": "checkpoint", "rank": self.rank(), "after_step": self.it, "paths": self.saved})
        if event == "crash" or self.fh is not None or self.losses:
            self._write({"event": event, "rank": self.rank(), "pid": os.getpid(), "iterations": self.it,
                         "error": error, "opt_level": _apex_opt_level()})
        if self.fh is not None:
            self.fh.flush()
            os.fsync(self.fh.fileno())
        if event in ("done", "nosave"):
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)


_PRECISION = {"float16": 0, "bfloat16": 0, "float32": 1, "float64": 2}


def _apex_opt_level():
    """The opt_level apex amp (real or emulated) was initialized with in this process, if any."""
    amp = sys.modules.get("apex.amp")
    state = getattr(amp, "_amp_state", None) if amp is not None else None
    props = getattr(state, "opt_properties", None)
    level = getattr(props, "opt_level", None)
    return level if isinstance(level, str) else None


def _loss_value(t):
    try:
        return float(t.detach().float().item())
    except Exception:
        return float("nan")


# ---- public hooks used by the apex emulation -------------------------------------------------------

def record_loss(loss, scale=None):
    """Record an unscaled loss (called by the emulated amp.scale_loss / FP16_Optimizer.backward)."""
    if _state is not None and hasattr(loss, "numel") and loss.numel() == 1:
        _state.loss(_loss_value(loss), scale)


def register_managed(optimizer):
    """The apex emulation owns this optimizer's iteration boundary."""
    if _state is not None:
        _state.managed.add(id(optimizer))


def managed_step(optimizer, skipped, scale=None):
    """The emulated optimizer stepped (or skipped the step): close the step."""
    if _state is None:
        return
    _state.managed.add(id(optimizer))
    _state.boundary(skipped=skipped, scale=scale)


# ---- torch patches -------------------------------------------------------------------------------

def _patch_capture(torch):
    rec = _state
    GradScaler = torch.amp.GradScaler
    orig_scale, orig_step = GradScaler.scale, GradScaler.step

    def scale(self, outputs):
        enabled = self.is_enabled()
        cur = float(self.get_scale()) if enabled else None
        tensors = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        for t in tensors:
            if hasattr(t, "numel") and t.numel() == 1:
                rec.loss(_loss_value(t), cur)
        out = orig_scale(self, outputs)
        for t in (out if isinstance(out, (list, tuple)) else [out]):
            try:
                t._apex2amp_scaled = True
            except Exception:
                pass
        return out

    def step(self, optimizer, *args, **kwargs):
        rec.managed.add(id(optimizer))
        result = orig_step(self, optimizer, *args, **kwargs)
        rec.boundary(skipped=_scaler_skipped(self, optimizer))
        return result

    GradScaler.scale, GradScaler.step = scale, step

    orig_tensor_backward = torch.Tensor.backward
    orig_autograd_backward = torch.autograd.backward

    def _note(t):
        if (hasattr(t, "numel") and t.numel() == 1 and not getattr(t, "_apex2amp_scaled", False)):
            value, hand = _loss_value(t), _hand_scale(t)
            if hand is None:
                rec.loss(value)
            else:
                rec.hand_scaled_loss(value / hand, hand)

    def tensor_backward(self, *args, **kwargs):
        if getattr(_tls, "inside", False):
            return orig_tensor_backward(self, *args, **kwargs)
        _note(self)
        _tls.inside = True
        try:
            return orig_tensor_backward(self, *args, **kwargs)
        finally:
            _tls.inside = False

    def autograd_backward(tensors, *args, **kwargs):
        if not getattr(_tls, "inside", False):
            for t in (tensors if isinstance(tensors, (list, tuple)) else [tensors]):
                _note(t)
        _tls.inside = True
        try:
            return orig_autograd_backward(tensors, *args, **kwargs)
        finally:
            _tls.inside = False

    torch.Tensor.backward = tensor_backward
    torch.autograd.backward = autograd_backward

    def post_step_hook(optimizer, args, kwargs):
        if id(optimizer) not in rec.managed:
            rec.boundary()

    from torch.optim.optimizer import register_optimizer_step_post_hook
    register_optimizer_step_post_hook(post_step_hook)

    for cls in (torch.optim.Optimizer, torch.nn.Module):
        cls.zero_grad = _after(cls.zero_grad, rec.grads_zeroed)


def _after(fn, then):
    import functools

    @functools.wraps(fn)
    def run(*args, **kwargs):
        then()
        return fn(*args, **kwargs)
    return run


def _scaler_skipped(scaler, optimizer):
    """GradScaler.step skipped this optimizer's step: its unscaled grads held inf/NaN."""
    if not scaler.is_enabled():
        return False
    try:
        found = scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
        return any(float(v.item()) for v in found.values())
    except Exception:
        return False


def _hand_scale(t):
    """The constant of a hand-written loss scaler's `loss * scale` (a power of two >= 8, or >= 128), else None."""
    fn = getattr(t, "grad_fn", None)
    if fn is None or type(fn).__name__ != "MulBackward0":
        return None
    try:
        nexts = [n for n, _ in fn.next_functions]
        if len(nexts) != 2 or (nexts[0] is None) == (nexts[1] is None):
            return None
        const = fn._saved_self if nexts[0] is None else fn._saved_other
        if const.numel() != 1:
            return None
        c = float(const)
    except Exception:
        return None
    if not math.isfinite(c) or c < 8 or (c < 128 and math.frexp(c)[0] != 0.5):
        return None
    return c


def _first_float_dtype(out, depth=0):
    """The dtype name of the first floating tensor in a forward's output (tensor, sequence, mapping)."""
    if hasattr(out, "dtype") and hasattr(out, "is_floating_point"):
        return str(out.dtype).replace("torch.", "") if out.is_floating_point() else None
    if depth < 2:
        items = out.values() if isinstance(out, dict) else out if isinstance(out, (list, tuple)) else ()
        for item in items:
            found = _first_float_dtype(item, depth + 1)
            if found:
                return found
    return None


def _autocast_enabled(torch):
    try:
        return torch.is_autocast_enabled("cuda") or torch.is_autocast_enabled("cpu")
    except TypeError:  # torch < 2.4
        return torch.is_autocast_enabled() or torch.is_autocast_cpu_enabled()


def _patch_forward_dtype(torch):
    """Global module hooks: the output dtype and autocast state of each top-level forward."""
    rec = _state
    from torch.nn.modules import module as nn_module
    autocast_at = []

    def pre_hook(module, args):
        if rec.depth == 0:
            if rec.saved:  # a resume's first leg: the checkpoint is written, the next step begins
                rec.after_cut()
            param = next(module.parameters(), None)
            weights = str(param.dtype).replace("torch.", "") if param is not None else None
            autocast_at.append((_autocast_enabled(torch), weights))
        rec.depth += 1

    def post_hook(module, args, output):
        rec.depth = max(0, rec.depth - 1)
        if rec.depth == 0 and autocast_at:
            autocast, weights = autocast_at.pop()
            del autocast_at[:]
            dtype = _first_float_dtype(output)
            if dtype:
                rec.forward_done(dtype, autocast, weights)

    nn_module.register_module_forward_pre_hook(pre_hook)
    nn_module.register_module_forward_hook(post_hook)


def _patch_save(torch):
    """A resume's first leg: note the files torch.save writes after step N (the run stops after them)."""
    rec = _state
    orig_save = torch.save

    def save(obj, f, *args, **kwargs):
        result = orig_save(obj, f, *args, **kwargs)
        if rec.awaiting_save:
            rec.saved.append(os.path.abspath(os.fspath(f)) if isinstance(f, (str, os.PathLike)) else None)
        return result

    torch.save = save


def _patch_launchers(torch):
    import torch.distributed as dist
    import torch.multiprocessing as mp

    orig_spawn = mp.spawn

    def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
        result = orig_spawn(fn, args=args, nprocs=nprocs, join=join, daemon=daemon, start_method=start_method)
        if join:  # every rank reported and exited: end the launcher too (skips post-training code)
            _state.finish("done")
        return result

    mp.spawn = spawn

    simulate = os.environ.get("APEX2AMP_DEVICE") == "cpu"
    orig_init = dist.init_process_group

    def init_process_group(*args, **kwargs):
        args = list(args)
        backend = kwargs.get("backend", args[0] if args else None)
        if simulate and (backend is None or "nccl" in str(backend).lower()):
            backend = "gloo"
            kwargs.pop("device_id", None)
        if args:
            args[0] = backend
        else:
            kwargs["backend"] = backend
        port = os.environ.get("APEX2AMP_MASTER_PORT")
        if port and not os.environ.get("TORCHELASTIC_RUN_ID"):
            init_method = kwargs.get("init_method", args[1] if len(args) > 1 else None)
            if init_method and str(init_method).startswith("tcp://"):
                init_method = "tcp://127.0.0.1:%s" % port
                if len(args) > 1:
                    args[1] = init_method
                else:
                    kwargs["init_method"] = init_method
            elif init_method in (None, "env://"):
                os.environ["MASTER_ADDR"] = "127.0.0.1"
                os.environ["MASTER_PORT"] = port
        return orig_init(*args, **kwargs)

    dist.init_process_group = init_process_group
    torch.distributed.init_process_group = init_process_group


def _seed(torch, seed):
    import random
    random.seed(seed)
    try:
        import numpy
        numpy.random.seed(seed)
    except Exception:
        pass
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:  # NaN-filling every torch.empty costs ~30% on tiny CPU models and changes no result
        import torch.utils.deterministic
        torch.utils.deterministic.fill_uninitialized_memory = False
    except Exception:
        pass
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True


def install():
    """Install seeding, CPU simulation (APEX2AMP_DEVICE=cpu), loss capture and the step-N cut."""
    global _state
    if _state is not None:
        return
    import torch
    _state = _Recorder(os.environ["APEX2AMP_OUT"], int(os.environ.get("APEX2AMP_STEPS", "0") or 0))
    _seed(torch, int(os.environ.get("APEX2AMP_SEED", "0") or 0))
    if os.environ.get("APEX2AMP_DEVICE") == "cpu":
        import _apex2amp_cpu
        _apex2amp_cpu.install(int(os.environ.get("APEX2AMP_NPROC", "1") or 1))
    _patch_capture(torch)
    _patch_forward_dtype(torch)
    if _state.cut_at_save:
        _patch_save(torch)
    _patch_launchers(torch)
    import _apex2amp_nan
    locator = _apex2amp_nan.NanLocator(torch, _state, lambda ev: _state._write(dict(ev, pid=os.getpid())),
                                       always=os.environ.get("APEX2AMP_FIND_NAN") == "1")
    _state.on_boundary = locator.on_step

    orig_hook = sys.excepthook

    def excepthook(exc_type, exc, tb):
        try:
            _state.finish("crash", "%s: %s" % (exc_type.__name__, exc))
        finally:
            orig_hook(exc_type, exc, tb)

    sys.excepthook = excepthook
    atexit.register(lambda: _state.finish("end"))
    sys.modules.setdefault("_apex2amp_probe", sys.modules[__name__])
