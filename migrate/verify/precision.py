"""Did the forward really run in reduced precision? Read from the probe's per-step forward records.

The probe notes, per step, the lowest floating dtype a top-level module's forward returned (`fwd_dtype`)
whether one ran under autocast (`fwd_autocast`) and the lowest dtype of such a module's first parameter
(`fwd_weights`: apex O2/O3 and `model.half()` keep fp16 weights and may return fp32). A side is "reduced"
when some step's forward returned float16/bfloat16, ran under an enabled autocast or used float16/bfloat16
weights; "float32" otherwise; "unknown" when no module forward
was seen (a functional model, or no step recorded).
"""
from __future__ import annotations

from typing import Dict, List, Optional

REDUCED = ("float16", "bfloat16")


def side_precision(records: Dict[int, List[dict]]) -> dict:
    """{"precision": "reduced"|"float32"|"unknown", "dtype": lowest dtype seen, "autocast": bool, "label"}."""
    dtypes, autocast, half_weights = set(), False, None
    for recs in records.values():
        for r in recs:
            if r.get("fwd_dtype"):
                dtypes.add(r["fwd_dtype"])
            autocast = autocast or bool(r.get("fwd_autocast"))
            if r.get("fwd_weights") in REDUCED:
                half_weights = r["fwd_weights"]
    low = next((d for d in REDUCED if d in dtypes), None) or ("float32" if "float32" in dtypes else
                                                             (sorted(dtypes)[0] if dtypes else None))
    if low in REDUCED or autocast or half_weights:
        kind = "reduced"
    elif low is None:
        kind = "unknown"
    else:
        kind = "float32"
    label = "unknown (no module forward seen)" if kind == "unknown" else low + (" (autocast)" if autocast else "") + (
        " (%s weights)" % half_weights if half_weights else "")
    return {"precision": kind, "dtype": low, "autocast": autocast, "weights": half_weights, "label": label}


def precision_problem(mode: str, original: dict, migrated: dict) -> Optional[str]:
    """The reason a mode fails on precision, or None: reduced on one side only."""
    name = repr(mode) if mode else "'' (the common arguments only)"
    if original["precision"] == "reduced" and migrated["precision"] == "float32":
        return ("mode %s became fp32: the original ran the forward in %s, the migrated program in %s "
                "(is autocast enabled by the flag that enabled apex?)" % (name, original["label"], migrated["label"]))
    if original["precision"] == "float32" and migrated["precision"] == "reduced":
        return ("mode %s runs in reduced precision only after the migration: the original ran the forward in %s, "
                "the migrated program in %s (autocast enabled where apex was off?)"
                % (name, original["label"], migrated["label"]))
    return None
