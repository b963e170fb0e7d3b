"""Engine side of the checkpoint save/restore pairing (`codemods/checkpoint_pairs.py`).

Pass 1 reads each file without facts, so a file that hands the apex amp module to a checkpoint helper
of another module (`restart_from_checkpoint(..., amp=apex.amp)`, defined in `src/utils.py`, which holds
no apex token and is not even a candidate) leaves its amp code as it is and says so (A2A136). Here,
after pass 1, the project files such a file imports are read with the stdlib AST for their checkpoint
helpers; their facts are merged and the file goes to pass 2, which migrates the save and the restore
together when the helper only checkpoints the value. Likewise a pass-1 lint finding that saved
scaler state is restored nowhere (A2A704) is looked at again in pass 2 once another file published a
restore.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Sequence

from codemods.base import RepoFacts

from . import discovery
from .fileio import SourceError, read_bytes


def waits_for_helper(fr: Any) -> bool:
    """Whether a pass-1 result left amp code because a helper's file had not been read (A2A136)."""
    from codemods.checkpoint_pairs import WAITING
    return any(f.code == "A2A136" and WAITING in f.message for f in fr.findings)


def waits_for_restore(fr: Any, facts: RepoFacts) -> bool:
    """Whether a pass-1 result reported saved scaler state as never restored while another file of the
    run published a restore (its pass-2 lint then knows)."""
    from codemods.checkpoint_lint import restores_in_facts
    return any(f.code == "A2A704" for f in fr.findings) and bool(restores_in_facts(facts))  # findings first: fewer


def helper_facts(files: Sequence[discovery.Discovered], data_of: Any, waiting: Sequence[int]) -> RepoFacts:
    """The checkpoint-helper facts of the project files that the `waiting` files import."""
    from codemods.restore_helpers import restore_facts
    index: Dict[str, int] = {os.path.abspath(d.path): i for i, d in enumerate(files)}
    out = RepoFacts()
    seen: List[str] = []
    for i in waiting:
        data = _bytes(files[i].path, data_of.get(i))
        for path in discovery.imported_files(files[i].path, data) if data else ():
            if path in seen:
                continue
            seen.append(path)
            other = _bytes(path, data_of.get(index[path]) if path in index else None)
            if other is not None:
                out.merge(restore_facts(other, path, discovery.module_name_for(path)[0]))
    return out


def _bytes(path: str, data: Any) -> Any:
    if data is not None:
        return data
    try:
        return read_bytes(path)
    except SourceError:
        return None
