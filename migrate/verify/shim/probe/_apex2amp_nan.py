"""The probe's NaN locator: the first module where a non-finite value appeared, and in which direction.

When: with APEX2AMP_FIND_NAN=1 it traces from the first step; otherwise it starts after the first step with a
non-finite loss or a skipped (overflowed) step and reports the first non-finite value seen from then on (the
step that triggered it ran untraced; a re-run of that step is not possible without changing the program's
state). It reports one origin per process, then removes its hooks.

How: process-wide module forward hooks (output non-finite while the inputs were finite: "forward output"), and
tensor hooks on each module's outputs, inputs and weights (grad of an input or weight non-finite while the grad of
the output was finite: "gradient"). Full module backward hooks are not used: they forbid in-place ops on a
module's output (ReLU(inplace=True) raises), which real models do. Names are the qualified names of
named_modules() of the outermost module called (DDP's `module.` prefix dropped, so both sides name alike).
"""
import math
import weakref

FP16_MAX = 65504.0
BF16_MAX = 3.3895313892515355e38


class NanLocator(object):
    """Installs the hooks on demand and hands the first origin found to `emit` (one event dict)."""

    def __init__(self, torch, recorder, emit, always):
        self.torch = torch
        self.rec = recorder
        self.emit = emit
        self.trigger = "--find-nan" if always else "after the first non-finite or skipped step"
        self.handles = []
        self.names = weakref.WeakKeyDictionary()
        self.stack = []
        self.grad_out_ok = {}
        self.seen = {}  # id(module) -> (inputs, outputs) of this step's forward, for a gradient origin's report
        self.hooked_params = set()
        self.pending = None
        self.fallback = None  # the first module whose output's gradient was non-finite (came from the loss side)
        self.done = False
        self.active = False
        if always:
            self.activate()

    # ---- switching ----------------------------------------------------------------------------------

    def activate(self):
        if self.active or self.done:
            return
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
        self.handles = [register_module_forward_pre_hook(self._pre), register_module_forward_hook(self._post)]
        self.active = True
        self.traced_steps = 0

    def deactivate(self):
        for h in self.handles:
            h.remove()
        self.handles = []
        self.active = False

    def on_step(self, record):
        """Called at every step boundary with its record (None at the end of the run)."""
        if self.done:
            return
        if record is None:
            if self.pending is not None:
                self._flush(self.rec.it, None)
            return
        if self.active:
            if self.pending is None and self.fallback is not None:
                self.pending = self.fallback
            if self.pending is None and (record["nonfinite"] or record["skipped"]) and self.traced_steps:
                self.pending = {"module": None, "direction": "loss",
                                "detail": "every module's output and gradient stayed finite: the loss "
                                          "computation outside the modules, or the optimizer step, produced it"}
            if self.pending is not None:
                self._flush(record["it"], record.get("scale"))
            self.traced_steps += 1
        elif record["nonfinite"] or record["skipped"]:
            self.activate()
        self.stack = []
        self.grad_out_ok = {}
        self.seen = {}
        self.fallback = None

    def _flush(self, step, scale):
        event = dict(self.pending)
        event.setdefault("rank", self.rec.rank())
        event.update({"event": "nonfinite", "step": step, "loss_scale": scale, "trigger": self.trigger})
        self.pending = None
        self.done = True
        self.deactivate()
        self.emit(event)

    # ---- names --------------------------------------------------------------------------------------

    def _name(self, module):
        name = self.names.get(module)
        return name if name is not None else type(module).__name__

    def _learn_names(self, root):
        if root in self.names:
            return
        inner, prefix = root, ""
        if "DataParallel" in type(root).__name__ and isinstance(getattr(root, "module", None),
                                                                self.torch.nn.Module):
            inner, prefix = root.module, "module."
        for name, m in root.named_modules():
            if name.startswith(prefix):
                name = name[len(prefix):]
            self.names.setdefault(m, name or type(inner if m is root else m).__name__)

    # ---- hooks --------------------------------------------------------------------------------------

    def _pre(self, module, args):
        if not self.active:
            return
        if not self.stack:
            self._learn_names(module)
        self.stack.append(module)

    def _post(self, module, args, output):
        if not self.active:
            return
        if self.stack and self.stack[-1] is module:
            self.stack.pop()
        if self.pending is not None or self.done:
            return
        ins, outs = _tensors(args), _tensors(output)
        in_ok, out_ok = _all_finite(ins), _all_finite(outs)
        if not out_ok and in_ok:
            self._found(module, "forward output", ins, outs, fp32=self._fp32_outputs(module, args))
        elif not in_ok and not self.stack:
            self._found(module, "model input", ins, outs)
        else:
            self._hook_grads(module, ins, outs)

    def _hook_grads(self, module, ins, outs):
        key = id(module)
        ref = weakref.ref(module)
        self.seen[key] = ([t.detach() for t in ins], [t.detach() for t in outs])
        for t in outs:
            if t.requires_grad:
                t.register_hook(lambda g, ref=ref, key=key: self._grad_out(ref, key, g))
        for t in ins:
            if t.requires_grad:
                t.register_hook(lambda g, ref=ref, key=key: self._grad_in(ref, key, g, "input"))
        for p in module.parameters(recurse=False):
            if p.requires_grad and id(p) not in self.hooked_params:
                self.hooked_params.add(id(p))
                p.register_hook(lambda g, ref=ref, key=key: self._grad_in(ref, key, g, "weight"))

    def _grad_out(self, ref, key, g):
        if not self.active or g is None:
            return
        ok = _finite(g)
        self.grad_out_ok[key] = self.grad_out_ok.get(key, True) and ok
        module = ref()
        if not ok and self.fallback is None and self.pending is None and module is not None:
            saved, self.pending = self.pending, None
            ins, outs = self.seen.get(key, ([], []))
            self._found(module, "gradient", ins, outs, grad={"of": "output", "absmax": _absmax([g]),
                                                          "dtype": str(g.dtype).replace("torch.", "")})
            self.fallback, self.pending = self.pending, saved
            self.fallback["detail"] = ("the gradient reaching this module's output was already non-finite: it "
                                       "overflowed after the module, outside any module (a cast to %s, or the "
                                       "loss times the loss scale too large for it?)" %
                                       self.fallback["gradient"]["dtype"])

    def _grad_in(self, ref, key, g, what):
        if not self.active or self.pending is not None or g is None or _finite(g):
            return
        if not self.grad_out_ok.get(key, True):
            return
        module = ref()
        if module is not None:
            ins, outs = self.seen.get(key, ([], []))
            self._found(module, "gradient", ins, outs, grad={"of": what, "absmax": _absmax([g]),
                                                             "dtype": str(g.dtype).replace("torch.", "")})

    # ---- the report ---------------------------------------------------------------------------------

    def _found(self, module, direction, ins, outs, fp32=None, grad=None):
        weights = [p for p in module.parameters(recurse=False)]
        self.pending = {"module": self._name(module), "module_type": type(module).__name__,
                        "direction": direction, "rank": self.rec.rank(),
                        "inputs": _stats(ins), "weights": _stats(weights), "outputs": _stats(outs)}
        if fp32 is not None:
            self.pending["fp32_outputs"] = fp32
        if grad is not None:
            self.pending["gradient"] = dict(grad, **_fits(grad["absmax"]))

    def _fp32_outputs(self, module, args):
        """The module's outputs recomputed in fp32 on a copy (no autocast, RNG restored): do they fit fp16?"""
        torch = self.torch
        import copy
        try:
            with torch.random.fork_rng(devices=[]), torch.no_grad():
                clone = copy.deepcopy(module).float()
                cast = [a.detach().float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                        for a in args]
                was, self.active = self.active, False
                try:
                    with _no_autocast(torch):
                        out = clone(*cast)
                finally:
                    self.active = was
            return _stats(_tensors(out))
        except Exception:
            return None


def _no_autocast(torch):
    import contextlib
    stack = contextlib.ExitStack()
    stack.enter_context(torch.autocast("cpu", enabled=False))
    if torch.cuda.is_available():
        stack.enter_context(torch.autocast("cuda", enabled=False))
    return stack


def _tensors(obj, out=None):
    import torch
    out = [] if out is None else out
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point():
            out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _tensors(v, out)
    elif isinstance(obj, dict):
        for v in obj.values():
            _tensors(v, out)
    return out


def _finite(t):
    import torch
    return bool(torch.isfinite(t).all())


def _all_finite(ts):
    return all(_finite(t) for t in ts)


def _absmax(ts):
    if not ts:
        return None
    m = 0.0
    for t in ts:
        if t.numel():
            v = float(t.detach().abs().max().float())
            if math.isnan(v):
                return v
            m = max(m, v)
    return m


def _fits(m):
    if m is None:
        return {"fits_fp16": None, "fits_bf16": None}
    return {"fits_fp16": math.isfinite(m) and m <= FP16_MAX, "fits_bf16": math.isfinite(m) and m <= BF16_MAX}


def _stats(ts):
    m = _absmax(ts)
    if m is None:
        return None
    d = {"absmax": m if math.isfinite(m) else repr(m), "dtype": str(ts[0].dtype).replace("torch.", "")}
    d.update(_fits(m))
    return d
