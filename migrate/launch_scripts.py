"""Shell and other launch files: torch.distributed.launch -> torchrun (placeholder until its change lands)."""
from __future__ import annotations


def rewrite_launch_file(src, d, config, facts):
    from .engine import FileResult
    return FileResult(d.path, d.kind, src.text, src.text)
