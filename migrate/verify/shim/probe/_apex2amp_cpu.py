"""Simulate CUDA on a CPU-only machine for apex2amp verify runs (APEX2AMP_DEVICE=cpu).

`.cuda()`, `.to("cuda")`, `device="cuda"` and `pin_memory` become CPU no-ops; `torch.cuda.set_device`,
`synchronize`, `empty_cache` do nothing; `torch.cuda.is_available()` is True and `device_count()` is the
number of harness processes; autocast and GradScaler "cuda" (also the deprecated torch.cuda.amp ones)
run on "cpu" with float16; nccl becomes gloo (in the probe); DDP loses device_ids/output_device;
SyncBatchNorm conversion is a no-op and SyncBatchNorm layers run as BatchNorm; FSDP2's `fully_shard` gets
a CPU device mesh (_apex2amp_fsdp2_cpu.py).
"""
import contextlib
import functools


def _is_cuda(d):
    import torch
    if d is None or isinstance(d, bool):
        return False
    if isinstance(d, int):
        return True
    if isinstance(d, str):
        return d.startswith("cuda")
    if isinstance(d, torch.device):
        return d.type == "cuda"
    return False


def _fix_device_kwarg(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if "device" in kwargs and _is_cuda(kwargs["device"]):
            kwargs["device"] = "cpu"
        return fn(*args, **kwargs)
    return wrapper


_FACTORIES = ["tensor", "as_tensor", "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm",
              "arange", "linspace", "logspace", "eye", "zeros_like", "ones_like", "empty_like", "full_like",
              "rand_like", "randn_like", "randint_like", "normal", "range", "tril_indices", "triu_indices"]
_TENSOR_NEW = ["new_tensor", "new_zeros", "new_ones", "new_empty", "new_full"]


def install(nproc):
    """Apply every CUDA-on-CPU redirection to the imported torch."""
    import torch
    import torch.nn as nn
    import torch.nn.modules.batchnorm as bn

    for name in _FACTORIES:
        if hasattr(torch, name):
            setattr(torch, name, _fix_device_kwarg(getattr(torch, name)))
    for name in _TENSOR_NEW:
        setattr(torch.Tensor, name, _fix_device_kwarg(getattr(torch.Tensor, name)))

    orig_to = torch.Tensor.to

    def tensor_to(self, *args, **kwargs):
        if args and _is_cuda(args[0]):
            args = ("cpu",) + tuple(args[1:])
        if "device" in kwargs and _is_cuda(kwargs["device"]):
            kwargs["device"] = "cpu"
        return orig_to(self, *args, **kwargs)

    torch.Tensor.to = tensor_to
    torch.Tensor.cuda = lambda self, device=None, non_blocking=False, **kw: self
    torch.Tensor.pin_memory = lambda self, *a, **k: self
    torch.Tensor.is_pinned = lambda self, *a, **k: False
    nn.Module.cuda = lambda self, device=None: self
    orig_module_to = nn.Module.to

    def module_to(self, *args, **kwargs):
        if args and _is_cuda(args[0]):
            args = ("cpu",) + tuple(args[1:])
        if "device" in kwargs and _is_cuda(kwargs["device"]):
            kwargs["device"] = "cpu"
        return orig_module_to(self, *args, **kwargs)

    nn.Module.to = module_to

    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: nproc
    cuda.set_device = lambda device: None
    cuda.synchronize = lambda device=None: None
    cuda.current_device = lambda: 0
    cuda.empty_cache = lambda: None
    cuda.get_device_name = lambda device=None: "simulated CUDA device (CPU)"
    cuda.get_device_capability = lambda device=None: (8, 0)
    cuda.is_bf16_supported = lambda *a, **k: True
    cuda.memory_allocated = cuda.max_memory_allocated = cuda.memory_reserved = lambda device=None: 0
    cuda.reset_peak_memory_stats = lambda device=None: None
    cuda.device = lambda device: contextlib.nullcontext()

    # autocast / GradScaler "cuda" -> "cpu" with fp16 (CUDA's default dtype; the CPU default is bf16)
    autocast_cls = torch.amp.autocast_mode.autocast
    orig_autocast_init = autocast_cls.__init__

    def autocast_init(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if _is_cuda(device_type):
            device_type = "cpu"
            if dtype is None:
                dtype = torch.float16
        return orig_autocast_init(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    autocast_cls.__init__ = autocast_init
    scaler_cls = torch.amp.GradScaler
    orig_scaler_init = scaler_cls.__init__

    def scaler_init(self, device="cuda", *args, **kwargs):
        if _is_cuda(device):
            device = "cpu"
        return orig_scaler_init(self, device, *args, **kwargs)

    scaler_cls.__init__ = scaler_init

    # DistributedDataParallel: a CPU module takes no device_ids/output_device
    ddp_cls = torch.nn.parallel.DistributedDataParallel
    orig_ddp_init = ddp_cls.__init__

    def ddp_init(self, module, *args, **kwargs):
        args = list(args)
        if args:
            args[0] = None
        if len(args) > 1:
            args[1] = None
        kwargs.pop("device_ids", None)
        kwargs.pop("output_device", None)
        for name, child in list(module.named_modules()):
            if isinstance(child, nn.SyncBatchNorm):
                child.__class__ = _SIM_BN
        return orig_ddp_init(self, module, *args, **kwargs)

    ddp_cls.__init__ = ddp_init

    class _SimulatedSyncBatchNorm(bn._BatchNorm):
        def _check_input_dim(self, input):
            if input.dim() < 2:
                raise ValueError("expected at least 2D input (got {}D input)".format(input.dim()))

    _SIM_BN = _SimulatedSyncBatchNorm
    nn.SyncBatchNorm.convert_sync_batchnorm = classmethod(lambda cls, module, process_group=None: module)
    nn.SyncBatchNorm.forward = _SimulatedSyncBatchNorm.forward

    dl = torch.utils.data.DataLoader
    orig_dl_init = dl.__init__

    def dl_init(self, *args, **kwargs):
        if len(args) <= 7:
            kwargs["pin_memory"] = False
        kwargs.pop("pin_memory_device", None)
        return orig_dl_init(self, *args, **kwargs)

    dl.__init__ = dl_init

    import _apex2amp_fsdp2_cpu
    _apex2amp_fsdp2_cpu.install()
