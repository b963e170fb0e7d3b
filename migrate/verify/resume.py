"""The resume check of `verify`: train K steps, save, restart from the checkpoint, train on; compare.

Each side runs twice more beside its uninterrupted run, in one kept working folder: a first leg with the
save arguments that stops once the program's next `torch.save` after step K is written (the probe notes the
files), then a second leg with the resume arguments for the remaining steps. The first leg's K steps and
the second leg's steps make the resumed curve. It must match the other side's resumed curve (losses, skips,
loss scale per step) and, where the original's own restart reproduces its uninterrupted run, the migrated
side's uninterrupted run too. A loss scale that differs right after the restart names the scaler's state:
saved but not restored, or not saved at all. Placeholders in the arguments: {ckpt} (a checkpoint file the
harness chooses, or else the first file the program saved), {k} (the step), {dir} (the working folder).
"""
from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from typing import Dict, List, Optional, Sequence

from .compare import compare
from .runner import run_side, tail

CKPT_NAME = "apex2amp-resume.ckpt"


def _subst(text: str, ckpt: str, k: int, work: str) -> List[str]:
    return shlex.split(text.replace("{ckpt}", ckpt).replace("{k}", str(k)).replace("{dir}", work))


def _find_scaler_state(obj, where="checkpoint", depth=0) -> Optional[str]:
    """Where a GradScaler (or apex amp) state sits in a loaded checkpoint, e.g. checkpoint["amp"]."""
    if not isinstance(obj, dict) or depth > 3:
        return None
    keys = set(obj)
    if "scale" in keys and ("growth_factor" in keys or "_growth_tracker" in keys) or "loss_scaler0" in keys:
        return where
    for k, v in obj.items():
        found = _find_scaler_state(v, "%s[%r]" % (where, k), depth + 1)
        if found:
            return found
    return None


def scaler_state_in(path: str) -> Optional[str]:
    """The scaler state's place in the checkpoint file, or None (no such state, or it cannot be read)."""
    try:
        import torch
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:
            data = torch.load(path, map_location="cpu", weights_only=False)  # the user's own program wrote it
    except Exception:
        return None
    return _find_scaler_state(data)


def run_resumed(folder: str, entry: str, args: Sequence[str], *, steps: int, at: int, save_args: str,
                resume_args: str, **run_kwargs) -> dict:
    """One side's resumed run: {"records", "checkpoint", "scaler_state", "error", "output"}."""
    work = tempfile.mkdtemp(prefix="apex2amp-resume-")
    ckpt = os.path.join(work, CKPT_NAME)
    try:
        first = run_side(folder, entry, list(args) + _subst(save_args, ckpt, at, work), steps=at, cwd=work,
                         extra_env={"APEX2AMP_CUT_AT_SAVE": "1"}, **run_kwargs)
        saved = [p for e in first.events if e.get("event") == "checkpoint" for p in e.get("paths") or [] if p]
        reached = min((len(v) for v in first.records.values()), default=0)
        out = {"records": {}, "checkpoint": None, "scaler_state": None, "error": None, "output": tail(first.output)}
        if reached < at:
            out["error"] = "stopped after %d of the %d steps before the checkpoint: %s" % (
                reached, at, first.error() or "exit code %s" % first.returncode)
            return out
        if not saved:
            given = " ".join(first.command[2:]) or "none"
            out["error"] = ("wrote no checkpoint right after step %d (arguments: %s): give --save-args that make it "
                            "save there, e.g. \"--save {ckpt} --save-at {k}\"" % (at, given))
            return out
        path = ckpt if "{ckpt}" in save_args and os.path.exists(ckpt) else saved[0]
        out["checkpoint"] = path
        out["scaler_state"] = scaler_state_in(path)
        second = run_side(folder, entry, list(args) + _subst(resume_args, path, at, work), steps=steps - at,
                          cwd=work, **run_kwargs)
        out["output"] = tail(second.output)
        if not second.records:
            out["error"] = "could not restart from its checkpoint: %s" % (
                second.error() or "exit code %s" % second.returncode)
            return out
        out["records"] = {rank: first.records.get(rank, [])[:at] + [dict(r, it=r["it"] + at) for r in recs]
                          for rank, recs in second.records.items()}
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _scale_at(records: Dict[int, List[dict]], step: int):
    recs = records.get(0) or next(iter(records.values()), [])
    return recs[step].get("scale") if step < len(recs) else None


def _scaler_cause(at: int, resumed: dict, whole: Dict[int, List[dict]], orig_ok: bool) -> Optional[str]:
    """The named cause when the migrated side's scale diverges right after its restart."""
    got, want = _scale_at(resumed["records"], at), _scale_at(whole, at)
    if got is None or want is None or got == want or not orig_ok:
        return None
    init = _scale_at(whole, 0)
    first = ("the loss scale diverges right after the restart: step %d ran at scale %g where the uninterrupted "
             "run had %g" % (at, got, want))
    if got == init:
        first += " (the initial scale: the scaler state was not restored)"
    if resumed.get("scaler_state"):
        return first + ("; the checkpoint holds the scaler state (%s) but the resume never loads it: call "
                        "scaler.load_state_dict(...) with it where the checkpoint is restored"
                        % resumed["scaler_state"])
    return first + ("; the checkpoint holds no scaler state: save scaler.state_dict() with it and restore it with "
                    "scaler.load_state_dict(...)")


def check_resume(original: str, migrated: str, entry: str, args: Sequence[str], *, steps: int, at: int,
                 save_args: str, resume_args: str, whole_original: Dict[int, List[dict]],
                 whole_migrated: Dict[int, List[dict]], original_kwargs: dict, migrated_kwargs: dict,
                 mode: str = "same-engine", dtype: str = "float16", tolerance: Optional[float] = None) -> dict:
    """Both sides' resumed runs compared with each other and with their uninterrupted runs.

    Returns {"at", "passed", "exit_code" (2: the original could not resume), "reasons", "notes", "rows",
    "save_args", "resume_args", "checkpoint": {"original", "migrated"}, "scaler_state": {...}}.
    """
    res = {"at": at, "save_args": save_args, "resume_args": resume_args, "reasons": [], "notes": [], "rows": []}
    a = run_resumed(original, entry, args, steps=steps, at=at, save_args=save_args, resume_args=resume_args,
                    **original_kwargs)
    if a["error"]:
        res.update(passed=False, exit_code=2, reasons=["resume: the original program %s" % a["error"]],
                   original_output_tail=a["output"])
        return res
    b = run_resumed(migrated, entry, args, steps=steps, at=at, save_args=save_args, resume_args=resume_args,
                    **migrated_kwargs)
    res["checkpoint"] = {"original": os.path.basename(a["checkpoint"] or ""),
                         "migrated": os.path.basename(b["checkpoint"] or "")}
    res["scaler_state"] = {"original": a["scaler_state"], "migrated": b["scaler_state"]}
    if b["error"]:
        res.update(passed=False, exit_code=1, reasons=["resume: the migrated program %s" % b["error"]],
                   migrated_output_tail=b["output"])
        return res
    opts = dict(steps=steps, mode=mode, dtype=dtype, tolerance=tolerance)
    cross = compare(a["records"], b["records"], **opts)
    own_a = compare(whole_original, a["records"], **opts)
    own_b = compare(whole_migrated, b["records"], **opts)
    res["rows"] = _rows(at, whole_original, a["records"], whole_migrated, b["records"], steps)
    orig_scale_kept = _scale_at(a["records"], at) == _scale_at(whole_original, at)
    cause = _scaler_cause(at, b, whole_migrated, orig_scale_kept)
    if cause:
        res["reasons"].append("resume: " + cause)
    exact_b = own_b["passed"] and not cause and compare(whole_original, whole_migrated, **opts)["passed"]
    if not own_a["passed"] and exact_b:
        res["notes"].append("the original's own restart does not reproduce its uninterrupted run (%s), the migrated "
                            "program's does and matches the original's uninterrupted run: the migrated side resumes "
                            "exactly where the original's restart lost state (apex O2, for one, builds its fp32 master weights "
                            "from the fp16 model on the first step after a load, and the optimizer state is loaded "
                            "into the fp16 parameters' dtype), so the resumed runs are not compared across sides"
                            % own_a["reasons"][0])
        cross = {"passed": True, "reasons": []}
    elif not own_a["passed"]:
        res["notes"].append("the original's own restart does not reproduce its uninterrupted run (%s): state outside "
                            "the checkpoint (RNG, data order) differs, so the resumed runs are compared across sides "
                            "only" % own_a["reasons"][0])
    elif not own_b["passed"] and not cause:
        res["reasons"].append("resume: the migrated program's restart at step %d does not reproduce its uninterrupted "
                              "run: %s" % (at, own_b["reasons"][0]))
    shown = cross["reasons"][:3] if res["reasons"] else cross["reasons"]
    res["reasons"] += ["resume: resumed runs differ: " + r for r in shown]
    if len(shown) < len(cross["reasons"]):
        res["reasons"].append("resume: ... %d more differences in the JSON" % (len(cross["reasons"]) - len(shown)))
    res["differences"] = cross["reasons"]
    res["passed"] = not res["reasons"]
    res["exit_code"] = 0 if res["passed"] else 1
    return res


def _rows(at, whole_a, res_a, whole_b, res_b, steps) -> List[dict]:
    out = []
    for step in range(max(0, at - 1), steps):
        row = {"step": step}
        for key, recs in (("original", whole_a), ("original_resumed", res_a), ("migrated", whole_b),
                          ("migrated_resumed", res_b)):
            rank0 = recs.get(0) or next(iter(recs.values()), [])
            r = rank0[step] if step < len(rank0) else None
            row[key] = None if r is None else {"losses": r["losses"], "scale": r.get("scale"),
                                               "skipped": bool(r.get("skipped"))}
        out.append(row)
    return out


def table(res: dict) -> str:
    """Loss@scale per step around and after the restart: uninterrupted and resumed, both sides (rank 0)."""
    def cell(c):
        if c is None:
            return "-"
        loss = ", ".join("%.6g" % v for v in c["losses"]) or "-"
        scale = "" if c["scale"] is None else " @%g" % c["scale"]
        return (loss + scale + (" skip" if c["skipped"] else ""))[:26]
    lines = ["%-4s %-26s %-26s %-26s %-26s" % ("step", "original", "original resumed", "migrated",
                                               "migrated resumed")]
    for row in res["rows"]:
        mark = "  <-- restart" if row["step"] == res["at"] else ""
        lines.append("%-4d %-26s %-26s %-26s %-26s%s" % (row["step"], cell(row["original"]),
                                                          cell(row["original_resumed"]), cell(row["migrated"]),
                                                          cell(row["migrated_resumed"]), mark))
    return "\n".join(lines)
