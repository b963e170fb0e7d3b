"""apex2amp: migrate NVIDIA apex mixed precision and mp.spawn launches to torch.amp and torchrun.

Python API for embedding the tool:

    from migrate import rewrite_source, rewrite_paths
    result = rewrite_source(text)            # -> Result(new_text, findings, error, ...)
    run = rewrite_paths(["repo/"], write=False)
"""
from __future__ import annotations

__version__ = "0.1.0"

from typing import Optional, Sequence

from codemods.records import Finding, Options, RepoFacts


def rewrite_source(text: str, *, path: str = "<string>", dtype: str = "float16", min_torch=(2, 4),
                   select: Sequence[str] = (), ignore: Sequence[str] = (), facts: Optional[RepoFacts] = None):
    """Rewrite one Python source text; returns `migrate.engine.Result` (never raises on bad input)."""
    from .engine import Selection, rewrite_source as _rewrite
    return _rewrite(text, path=path, options=Options(dtype=dtype, min_torch=tuple(min_torch)),
                    select=Selection(select, ignore), facts=facts)


def rewrite_paths(paths: Sequence[str], *, write: bool = False, dtype: str = "float16", min_torch=(2, 4),
                  select: Sequence[str] = (), ignore: Sequence[str] = (), exclude: Sequence[str] = (),
                  jobs: int = 1, target: str = "ddp"):
    """Rewrite every file under `paths` (in place when `write`) for migration `target` ("ddp" or "fsdp2");
    returns `migrate.engine.RunResult`."""
    from .engine import RunConfig, Selection, run
    config = RunConfig(options=Options(dtype=dtype, min_torch=tuple(min_torch), target=target),
                       select=Selection(select, ignore),
                       excludes=list(exclude), write=write, jobs=jobs)
    return run(list(paths), config)


__all__ = ["rewrite_source", "rewrite_paths", "Finding", "Options", "__version__"]
