"""CUDA-on-CPU simulation for FSDP2 (`fully_shard`): a call without `mesh=` gets a CPU device mesh.

`fully_shard` builds its default mesh on the machine's accelerator; where CUDA exists but verify
simulates it on the CPU (`--device cpu`), that mesh would be a CUDA one over a gloo group, with the model
on the CPU. The patch is applied when the program imports `torch.distributed.fsdp` (importing it for
every run would cost each process a second).
"""
import importlib.abc
import sys

_PACKAGE = "torch.distributed.fsdp"


def _with_cpu_mesh(fully_shard):
    import functools

    @functools.wraps(fully_shard)
    def wrapper(module, *args, **kwargs):
        if not args and kwargs.get("mesh") is None:
            import torch.distributed as dist
            from torch.distributed.device_mesh import init_device_mesh
            if not dist.is_initialized():
                dist.init_process_group("gloo")
            kwargs["mesh"] = init_device_mesh("cpu", (dist.get_world_size(),))
        return fully_shard(module, *args, **kwargs)

    return wrapper


def _patch(package):
    if getattr(package, "fully_shard", None) is not None and not hasattr(package.fully_shard, "_apex2amp_cpu"):
        package.fully_shard = _with_cpu_mesh(package.fully_shard)
        package.fully_shard._apex2amp_cpu = True


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the real loader of torch.distributed.fsdp so the patch follows its import."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _PACKAGE:
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def install():
    """Patch `fully_shard` now if torch.distributed.fsdp is loaded, else when it is imported."""
    if _PACKAGE in sys.modules:
        _patch(sys.modules[_PACKAGE])
    else:
        sys.meta_path.insert(0, _Finder())
