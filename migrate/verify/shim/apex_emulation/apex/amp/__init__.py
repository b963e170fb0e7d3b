"""Emulated apex.amp: initialize (O0-O3), scale_loss, master_params, state_dict/load_state_dict.

O1 runs the rest of the program under one process-wide `torch.autocast(..., dtype=float16,
cache_enabled=False)` (the same cast engine the migrated code uses, so same-engine comparisons are
bitwise); O2 casts the model to fp16 with fp32 BatchNorm and keeps fp32 master weights in the optimizer;
O3 is pure fp16. The loss scaler, skip-on-overflow and the checkpoint format are apex's.
"""
import contextlib
import functools
import sys
import types
from collections import OrderedDict

import torch

from ._amp_state import _amp_state, master_params  # noqa: F401
from .scaler import LossScaler

__all__ = ["initialize", "scale_loss", "master_params", "state_dict", "load_state_dict", "disable_casts",
           "register_half_function", "register_float_function", "register_promote_function",
           "half_function", "float_function", "promote_function", "init"]

_OPT_LEVELS = {
    "O0": dict(cast_model_type=torch.float32, patch_torch_functions=False, keep_batchnorm_fp32=None,
               master_weights=False, loss_scale=1.0),
    "O1": dict(cast_model_type=None, patch_torch_functions=True, keep_batchnorm_fp32=None,
               master_weights=None, loss_scale="dynamic"),
    "O2": dict(cast_model_type=torch.float16, patch_torch_functions=False, keep_batchnorm_fp32=True,
               master_weights=True, loss_scale="dynamic"),
    "O3": dict(cast_model_type=torch.float16, patch_torch_functions=False, keep_batchnorm_fp32=False,
               master_weights=False, loss_scale=1.0),
}


class Properties(object):
    """The resolved opt_level properties (apex.amp.frontend.Properties)."""

    def __init__(self, opt_level, **overrides):
        self.enabled = True
        self.opt_level = opt_level
        for k, v in _OPT_LEVELS[opt_level].items():
            setattr(self, k, v)
        for k, v in overrides.items():
            if v is not None:
                setattr(self, k, v)
        if isinstance(self.keep_batchnorm_fp32, str):
            self.keep_batchnorm_fp32 = {"True": True, "False": False}[self.keep_batchnorm_fp32]
        if self.loss_scale != "dynamic":
            self.loss_scale = float(self.loss_scale)


def _probe():
    return sys.modules.get("_apex2amp_probe")


def _autocast_device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def _cast(x, dtype):
    if isinstance(x, torch.Tensor):
        return x.to(dtype) if x.is_floating_point() else x
    if isinstance(x, (list, tuple)):
        return type(x)(_cast(v, dtype) for v in x)
    if isinstance(x, dict):
        return type(x)((k, _cast(v, dtype)) for k, v in x.items())
    return x


def _convert_network(model, dtype):
    """Cast the model to `dtype` except affine BatchNorm layers (apex fp16_utils.convert_network)."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.affine:
            continue
        for name, p in list(m.named_parameters(recurse=False)):
            if p is not None and p.is_floating_point():
                p.data = p.data.to(dtype)
        for name, b in list(m.named_buffers(recurse=False)):
            if b is not None and b.is_floating_point():
                setattr(m, name, b.to(dtype))
    return model


def _patch_forward(model, input_dtype, output_dtype):
    orig = model.forward

    @functools.wraps(orig)
    def forward(*args, **kwargs):
        if input_dtype is not None:
            args, kwargs = _cast(args, input_dtype), _cast(kwargs, input_dtype)
        out = orig(*args, **kwargs)
        return _cast(out, output_dtype) if output_dtype is not None else out

    model.forward = forward


class _Stash(object):
    pass


def _lazy_init(optimizer):
    """apex builds the fp32 masters on the first zero_grad / backward / step / add_param_group, not in
    initialize: a checkpoint loaded between initialize and that first call (model.load_state_dict,
    optimizer.load_state_dict) is what the masters start from, its optimizer state cast to the fp16 params'
    dtype on load and back to fp32 here (apex's `self.load_state_dict(self.state_dict())`)."""
    stash = optimizer._amp_stash
    if stash.lazy_init_called:
        return
    stash.lazy_init_called = True
    if stash.master_weights:
        for group in optimizer.param_groups:
            for i, p in enumerate(group["params"]):
                if p.requires_grad and p.dtype == torch.float16:
                    master = p.detach().clone().float()
                    master.requires_grad_(True)
                    group["params"][i] = master
                    if p in optimizer.state:
                        optimizer.state[master] = optimizer.state.pop(p)
                    stash.pairs.append((p, master))
        for _, master in stash.pairs:
            master.grad = None
        optimizer.load_state_dict(optimizer.state_dict())
    stash.model_params = [p for p, _ in stash.pairs]
    stash.fp32_params = [p for g in optimizer.param_groups for p in g["params"]
                         if all(p is not m for _, m in stash.pairs)]


def _setup_optimizer(optimizer, props):
    if hasattr(optimizer, "_amp_stash"):
        raise RuntimeError("A given optimizer should only be passed through amp.initialize once.")
    stash = optimizer._amp_stash = _Stash()
    stash.already_patched = False
    stash.params_have_scaled_gradients = False
    stash.lazy_init_called = False
    stash.master_weights = bool(props.master_weights)
    stash.pairs = []  # (model fp16 param, fp32 master)
    stash.model_params = []
    stash.fp32_params = [p for g in optimizer.param_groups for p in g["params"]]
    stash.grad_stash = {}
    orig_step = optimizer.step

    def step(self, closure=None):
        _lazy_init(self)
        if closure is not None and stash.pairs:
            raise RuntimeError("Currently, Amp does not support closure use with optimizers.")
        skipped = getattr(stash, "skip_next", False)
        if skipped:
            stash.skip_next = False
            for _, master in stash.pairs:
                master.grad = None
            print("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to {}".format(
                _amp_state.loss_scalers[0].loss_scale()) if _amp_state.loss_scalers else "Gradient overflow.")
            result = None
        else:
            _clear_cast_cache()
            with disable_casts():
                result = orig_step() if closure is None else orig_step(closure)
            for model_p, master in stash.pairs:
                model_p.data.copy_(master.data)
        p = _probe()
        if p is not None:
            p.managed_step(optimizer, skipped)
        return result

    # bound methods, as apex makes them (types.MethodType): torch's LR schedulers wrap `step.__func__`
    optimizer.step = types.MethodType(step, optimizer)
    if stash.master_weights:
        orig_zero = optimizer.zero_grad

        def zero_grad(self, set_to_none=True):
            _lazy_init(self)
            # a wrapper such as apex.parallel.LARC has zero_grad(self) only (apex's O2 zero_grad takes no argument)
            orig_zero() if set_to_none else orig_zero(set_to_none)
            for model_p in stash.model_params:
                model_p.grad = None

        optimizer.zero_grad = types.MethodType(zero_grad, optimizer)
    p = _probe()
    if p is not None:
        p.register_managed(optimizer)


def initialize(models, optimizers=None, enabled=True, opt_level="O1", cast_model_type=None,
               patch_torch_functions=None, keep_batchnorm_fp32=None, master_weights=None, loss_scale=None,
               cast_model_outputs=None, num_losses=1, verbosity=1, min_loss_scale=None, max_loss_scale=2. ** 24):
    """Emulated amp.initialize: same arguments, same return shapes, apex's O0-O3 properties."""
    _amp_state.verbosity = verbosity
    if not enabled:
        _amp_state.enabled = False
        return models if optimizers is None else (models, optimizers)
    if opt_level not in _OPT_LEVELS:
        raise RuntimeError("Unexpected optimization level {}. Options are 'O0', 'O1', 'O2', 'O3'.".format(opt_level))
    props = Properties(opt_level, cast_model_type=cast_model_type, patch_torch_functions=patch_torch_functions,
                       keep_batchnorm_fp32=keep_batchnorm_fp32, master_weights=master_weights,
                       loss_scale=loss_scale)
    _amp_state.opt_properties = props
    _amp_state.enabled = True

    model_list = models if isinstance(models, list) else [models]
    if optimizers is None:
        opt_list = []
    elif isinstance(optimizers, list):
        opt_list = optimizers
    elif isinstance(optimizers, torch.optim.Optimizer) or hasattr(optimizers, "param_groups"):
        opt_list = [optimizers]
    else:
        raise TypeError("optimizers must be either a single optimizer or a list of optimizers.")
    for m in model_list:
        if isinstance(m, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
            raise RuntimeError("Incoming model is an instance of DistributedDataParallel/DataParallel. "
                               "Parallel wrappers should only be applied to the model(s) AFTER "
                               "the model(s) have been returned from amp.initialize.")

    if props.cast_model_type not in (None, torch.float32):
        for m in model_list:
            if props.keep_batchnorm_fp32:
                _convert_network(m, props.cast_model_type)
            else:
                m.to(props.cast_model_type)
            _patch_forward(m, props.cast_model_type, cast_model_outputs or torch.float32)
    elif cast_model_outputs is not None:
        for m in model_list:
            _patch_forward(m, None, cast_model_outputs)

    for opt in opt_list:
        _setup_optimizer(opt, props)
    _amp_state.optimizers = list(opt_list)
    _amp_state.loss_scalers = [LossScaler(props.loss_scale, min_loss_scale=min_loss_scale,
                                          max_loss_scale=max_loss_scale) for _ in range(num_losses)]
    if props.patch_torch_functions and _amp_state.autocast is None:
        # apex O1 patches torch globally; one process-wide native region does the same.
        # Its fp16 weight cache is cleared where apex cleared its own (scale_loss exit, optimizer.step), so
        # stale casts never outlive a weight update.
        _amp_state.autocast = torch.autocast(_autocast_device(), dtype=torch.float16, cache_enabled=True)
        _amp_state.autocast.__enter__()
        _backward_without_casts()
    return models if optimizers is None else (models, optimizers)


def _backward_without_casts():
    """apex only patched forward functions; on the CPU the backward runs on this thread, so keep casts off there."""
    orig_tensor_backward, orig_backward, orig_grad = torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad

    def wrap(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with disable_casts():
                return fn(*args, **kwargs)
        return run

    torch.Tensor.backward = wrap(orig_tensor_backward)
    torch.autograd.backward = wrap(orig_backward)
    torch.autograd.grad = wrap(orig_grad)


def _clear_cast_cache():
    if _amp_state.autocast is not None:
        torch.clear_autocast_cache()


@contextlib.contextmanager
def disable_casts():
    """Run a block without O1 casting (apex wraps optimizer.step in this)."""
    if _amp_state.autocast is None:
        yield
        return
    with torch.autocast(_autocast_device(), enabled=False):
        yield


def _mark(t):
    try:
        t._apex2amp_scaled = True
    except Exception:
        pass
    return t


@contextlib.contextmanager
def scale_loss(loss, optimizers, loss_id=0, model=None, delay_unscale=False, delay_overflow_check=False):
    """Yield loss*scale; on exit unscale the grads of `optimizers`, update the scale, arm a one-shot skip."""
    try:
        with _scale_loss(loss, optimizers, loss_id, delay_unscale, delay_overflow_check) as scaled:
            yield scaled
    finally:
        _clear_cast_cache()  # apex clears its cast cache on every scale_loss exit


@contextlib.contextmanager
def _scale_loss(loss, optimizers, loss_id, delay_unscale, delay_overflow_check):
    p = _probe()
    if not _amp_state.enabled or not _amp_state.loss_scalers:
        if p is not None:
            p.record_loss(loss, None)
        yield _mark(loss)
        return
    opts = optimizers if isinstance(optimizers, list) else [optimizers]
    scaler = _amp_state.loss_scalers[loss_id]
    loss_scale = scaler.loss_scale()
    if p is not None:
        p.record_loss(loss, loss_scale)
    props = _amp_state.opt_properties
    if not props.master_weights and not scaler.dynamic and loss_scale == 1.0:
        yield _mark(loss.float())
        return

    for opt in opts:  # prepare backward: stash existing grads (they are already unscaled)
        _lazy_init(opt)
        stash = opt._amp_stash
        if not stash.params_have_scaled_gradients:
            stash.grad_stash = {}
            for q in stash.fp32_params:
                stash.grad_stash[id(q)] = q.grad
                q.grad = None
            for q in stash.model_params:
                q.grad = None
    yield _mark(loss.float() * loss_scale)
    if delay_unscale:
        for opt in opts:
            opt._amp_stash.params_have_scaled_gradients = True
        return

    scaler.clear_overflow_state()
    inv = 1.0 / loss_scale
    for opt in opts:
        stash = opt._amp_stash
        stashed_scaled = stash.params_have_scaled_gradients
        new = []
        for q in stash.fp32_params:
            old = stash.grad_stash.get(id(q))
            if stashed_scaled:
                old = None  # accumulated grads are still in q.grad, all scaled
            if q.grad is None:
                if old is not None:
                    q.grad = old
                continue
            q.grad = q.grad.mul(inv) if old is None else q.grad.mul(inv).add(old)
            new.append(q.grad)
        for model_p, master in stash.pairs:
            if model_p.grad is None:
                continue
            g = model_p.grad.float().mul(inv)
            master.grad = g if master.grad is None else master.grad.add(g)
            new.append(master.grad)
        scaler.check_overflow(new)
        stash.params_have_scaled_gradients = False
        stash.grad_stash = {}
    should_skip = False if delay_overflow_check else scaler.update_scale()
    if should_skip:
        for opt in opts:
            opt._amp_stash.skip_next = True


def state_dict(destination=None):
    """apex format: {"loss_scaler0": {"loss_scale": float, "unskipped": int}, ...}."""
    if destination is None:
        destination = OrderedDict()
    for idx, s in enumerate(_amp_state.loss_scalers):
        destination["loss_scaler%d" % idx] = {"loss_scale": s.loss_scale(), "unskipped": s._unskipped}
    return destination


def load_state_dict(state_dict):
    """Restore loss scalers in dict order (apex semantics, including its warnings and errors)."""
    if len(state_dict) != len(_amp_state.loss_scalers):
        print("Warning: state_dict contains {} entries, while {} loss_scalers are used".format(
            len(state_dict), len(_amp_state.loss_scalers)))
    state_dict = state_dict.copy()
    nb_loss_scalers = len(_amp_state.loss_scalers)
    unexpected_keys = []
    idx = 0
    for key in state_dict:
        if "loss_scaler" not in key:
            unexpected_keys.append(key)
        else:
            if idx > (nb_loss_scalers - 1):
                print("Skipping loss_scaler[{}], since num_losses was set to {}".format(idx, nb_loss_scalers))
                break
            _amp_state.loss_scalers[idx]._loss_scale = state_dict[key]["loss_scale"]
            _amp_state.loss_scalers[idx]._unskipped = state_dict[key]["unskipped"]
            idx += 1
    if unexpected_keys:
        raise RuntimeError("Error(s) in loading state_dict. Unexpected key(s) in state_dict: {}. ".format(
            ", ".join('"{}"'.format(k) for k in unexpected_keys)))


def init(*args, **kwargs):
    """Deprecated apex API; a no-op here."""
    return None


def _identity_decorator(fn):
    return fn


half_function = float_function = promote_function = _identity_decorator


def register_half_function(module, name):
    """No-op in the emulation (native autocast lists decide the casts)."""


register_float_function = register_promote_function = register_half_function
