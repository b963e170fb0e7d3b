"""Compare two runs' per-rank, per-step records and decide pass/fail (tolerance policy in docs/verify.md)."""
from __future__ import annotations

import math
from typing import Dict, List, Optional

SAME_ENGINE_REL = 1e-6      # CPU simulation: both sides on torch's CPU autocast -> expect bitwise
FIDELITY_REL_EARLY = 1e-3   # real GPU / different cast lists, steps < 10
FIDELITY_REL_LATE = 1e-2    # ... steps 10-50
BF16_REL = 1e-2


def tolerance_for(step: int, *, mode: str = "same-engine", dtype: str = "float16",
                  override: Optional[float] = None) -> float:
    """Relative per-step loss tolerance: same-engine 1e-6; fidelity 1e-3 (<10 steps) then 1e-2; bf16 1e-2 or more."""
    if override is not None:
        return override
    if mode == "same-engine":
        return SAME_ENGINE_REL if dtype != "bfloat16" else 1e-4
    base = FIDELITY_REL_EARLY if step < 10 else FIDELITY_REL_LATE
    return max(base, BF16_REL) if dtype == "bfloat16" else base


def rel_diff(a: float, b: float) -> float:
    """|a-b| / max(|a|, |b|); 0 for two equal values (incl. two NaNs or equal infs), inf when only one is finite."""
    if math.isnan(a) and math.isnan(b):
        return 0.0
    if a == b:
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b), 1e-30)


def _finite(vals: List[float]) -> bool:
    return all(math.isfinite(v) for v in vals)


def compare(original: Dict[int, List[dict]], migrated: Dict[int, List[dict]], *, steps: Optional[int] = None,
            mode: str = "same-engine", dtype: str = "float16", tolerance: Optional[float] = None) -> dict:
    """Per-step comparison of `collect_losses` outputs; returns the verdict dict.

    Keys: passed, first_divergent_step, first_divergent_rank, reasons (one line per problem, earliest first),
    rows (rank, step, original, migrated, rel_diff, tolerance, skipped, scale, ok), max_rel_diff.
    Fails on: a rank or step missing on one side, a different number of backward passes in a step,
    NaN/inf on one side only, a different skipped-step flag or loss scale, or a loss beyond tolerance.
    """
    rows: List[dict] = []
    problems: List[tuple] = []  # (step, rank, message, kind)
    max_rel = 0.0
    first_nonfinite: Dict[str, Optional[int]] = {"original": None, "migrated": None}
    for rank in sorted(set(original) | set(migrated)):
        a_recs, b_recs = original.get(rank, []), migrated.get(rank, [])
        if not a_recs or not b_recs:
            side = "migrated" if not b_recs else "original"
            problems.append((0, rank, "rank %d: no steps recorded on the %s side" % (rank, side), "missing"))
            continue
        n = max(len(a_recs), len(b_recs))
        if steps:
            n = min(n, steps)
        for step in range(n):
            a = a_recs[step] if step < len(a_recs) else None
            b = b_recs[step] if step < len(b_recs) else None
            if a is None or b is None:
                side = "migrated" if b is None else "original"
                problems.append((step, rank, "rank %d: the %s run stopped after %d steps" % (
                    rank, side, len(b_recs) if b is None else len(a_recs)), "stopped"))
                break
            tol = tolerance_for(step, mode=mode, dtype=dtype, override=tolerance)
            la, lb = a["losses"], b["losses"]
            msgs = []  # (kind, message)
            diffs = [rel_diff(x, y) for x, y in zip(la, lb)]
            d = max(diffs) if diffs else 0.0
            if len(la) != len(lb):
                msgs.append(("count", "%d loss value(s) (backward passes) in the original step, %d in the "
                                      "migrated one" % (len(la), len(lb))))
            one_sided = _finite(la) != _finite(lb)
            if one_sided:
                msgs.append(("nonfinite", "NaN/inf loss only in the %s run" % (
                    "migrated" if _finite(la) else "original")))
            for side, recs in (("original", la), ("migrated", lb)):
                if not _finite(recs) and first_nonfinite[side] is None:
                    first_nonfinite[side] = step
            if bool(a.get("skipped")) != bool(b.get("skipped")):
                msgs.append(("skipped", "step skipped (inf/NaN grads) only in the %s run" %
                             ("original" if a.get("skipped") else "migrated")))
            sa, sb = a.get("scale"), b.get("scale")
            if sa is not None and sb is not None and sa != sb:
                msgs.append(("scale", "loss scale %g vs %g" % (sa, sb)))
            if d > tol and len(la) == len(lb) and not one_sided:
                msgs.append(("loss", "loss differs by %.3g relative (tolerance %.0e)" % (d, tol)))
            max_rel = max(max_rel, d)  # inf when only one side is finite: the summary must not say 0
            rows.append({"rank": rank, "step": step, "original": la, "migrated": lb, "rel_diff": d,
                         "tolerance": tol, "skipped": [bool(a.get("skipped")), bool(b.get("skipped"))],
                         "scale": [sa, sb], "time": [a.get("time"), b.get("time")], "ok": not msgs})
            for kind, m in msgs:
                problems.append((step, rank, "rank %d step %d: %s" % (rank, step, m), kind))
        if steps and min(len(a_recs), len(b_recs)) < steps and len(a_recs) == len(b_recs):
            problems.append((len(a_recs), rank, "rank %d: both runs stopped after %d of %d steps" %
                             (rank, len(a_recs), steps), "stopped"))
    problems.sort(key=lambda p: (p[0], p[1]))
    first = problems[0] if problems else None
    return {"passed": not problems, "first_divergent_step": first[0] if first else None,
            "first_divergent_rank": first[1] if first else None, "reasons": fold_after_nonfinite(problems),
            "rows": rows, "max_rel_diff": max_rel, "mode": mode, "dtype": dtype,
            "first_nonfinite_step": first_nonfinite}


def fold_after_nonfinite(problems: List[tuple]) -> List[str]:
    """The reasons, with each rank's messages after its first one-sided NaN/inf step folded into one line."""
    first_bad: Dict[int, int] = {}
    for step, rank, _, kind in problems:
        if kind == "nonfinite" and rank not in first_bad:
            first_bad[rank] = step
    out: List[str] = []
    folded: Dict[int, list] = {}
    for step, rank, msg, kind in problems:
        if rank in first_bad and step > first_bad[rank] and kind not in ("missing", "stopped"):
            if rank not in folded:
                folded[rank] = [step, step, set(), set(), len(out)]
                out.append("")  # the folded line, written below
            entry = folded[rank]
            entry[1] = step
            entry[2].add(step)
            entry[3].add(kind)
            continue
        out.append(msg)
    for rank, (lo, hi, seen, kinds, at) in folded.items():
        out[at] = "rank %d steps %d-%d: %d more divergent step(s) after the first NaN/inf one at step %d (%s)" % (
            rank, lo, hi, len(seen), first_bad[rank], ", ".join(sorted(kinds)))
    return out
