"""`apex2amp verify`: run the original and the migrated program, compare them, print/write the verdict."""
from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from typing import List, Optional, Sequence

import click

from . import report
from .compare import compare
from .lints import migrated_tree_findings
from .modes import detect_checkpoint_args, detect_modes
from .precision import precision_problem, side_precision
from .resume import check_resume
from .resume import table as resume_table
from .runner import SideRun, cuda_available, detect_launcher, real_apex_available, run_side, tail
from .static_checks import backward_inside_autocast, likely_causes
from .unsafe_pairs import scaled_clip_sites, unsafe_fix_sites


def migrate_copy(original: str, target: str = "ddp", dtype: str = "float16") -> str:
    """Copy ORIGINAL to a temp folder and rewrite the copy in place with apex2amp for migration `target`
    ("ddp" or "fsdp2", at its torch floor) and mixed-precision `dtype`; returns the copy's path."""
    from migrate import rewrite_paths
    from migrate.target_floor import fsdp2_min_torch
    dst = os.path.join(tempfile.mkdtemp(prefix="apex2amp-migrated-"), os.path.basename(os.path.abspath(original)))
    shutil.copytree(original, dst)
    min_torch = fsdp2_min_torch((2, 4), explicit=False) if target == "fsdp2" else (2, 4)
    rewrite_paths([dst], write=True, dtype=dtype, min_torch=min_torch, target=target)
    return dst


def _side_failed(side: SideRun, steps: int) -> bool:
    reached = min((len(v) for v in side.records.values()), default=0)
    return reached < steps and (side.timed_out or bool(side.returncode) or side.error() is not None
                                or not side.records)


def verify(original: str, migrated: Optional[str], *, entry: str, steps: int = 10, nproc: Optional[int] = None,
           device: str = "auto", seed: int = 0, dtype: str = "float16", timeout: float = 600.0,
           tolerance: Optional[float] = None, args: Sequence[str] = (), modes: Optional[Sequence[str]] = None,
           resume: Optional[dict] = None, echo=click.echo, find_nan: bool = False, target: str = "ddp") -> dict:
    """Run both sides in every mode (and a resume when asked); the verdict dict plus `modes` and `exit_code`.

    `modes`: extra-argument strings appended to `args`, one configuration each (None: detected from the
    script's precision flags, see modes.py). `resume`: {"at", "save_args", "resume_args"} (missing ones
    detected from its checkpoint flags). The top level holds the first failing mode's verdict (else the
    first mode's), `modes` all of them. `nan_origin` (per side, per mode) names the first module and
    direction where a non-finite value appeared; it is traced after a side's first non-finite/skipped
    step, or from the first step with find_nan. Without `migrated`, a copy is migrated for `target` with
    `dtype` (the precision the comparison assumes).
    """
    if migrated is None:
        echo("verify: migrating a copy of %s with apex2amp%s" % (
            original, " (--target fsdp2, %s)" % dtype if target == "fsdp2" else ""))
        migrated = migrate_copy(original, target=target, dtype=dtype)
        echo("verify: the migrated copy is kept for review in %s" % migrated)
    if device == "auto":
        device = "cuda" if cuda_available() else "cpu"
    apex = "real" if real_apex_available() else "emulated"
    orig_entry, mig_entry = os.path.join(original, entry), os.path.join(migrated, entry)
    if not os.path.isfile(orig_entry):
        raise FileNotFoundError("entry script not found: %s" % orig_entry)
    launcher = detect_launcher(orig_entry, mig_entry, nproc)
    procs = nproc or (2 if launcher == "torchrun" else 1)  # device_count() the original sees
    meta = {"original": os.path.abspath(original), "migrated": os.path.abspath(migrated), "entry": entry,
            "steps": steps, "device": device, "simulated_cuda": device == "cpu", "apex": apex,
            "launchers": {"original": "python", "migrated": launcher}, "nproc": procs, "seed": seed,
            "args": list(args), "target": target}
    if device == "cpu":
        echo("verify: no CUDA here: simulating CUDA on the CPU (float16 CPU autocast, gloo instead of nccl)")
    echo("verify: original runs with %s apex; migrated runs under %s (%d process%s)" % (
        apex, launcher, procs, "es" if procs > 1 else ""))
    if modes:
        mode_list, why = list(modes), "given"
    else:
        mode_list, why = detect_modes(orig_entry, args)
    if len(mode_list) > 1 or modes:
        echo("verify: %d mode%s (%s): %s" % (len(mode_list), "s" if len(mode_list) > 1 else "", why,
                                            ", ".join(repr(m) for m in mode_list)))
    plan = None
    if resume is not None:
        plan, problem = _resume_plan(resume, orig_entry, steps, procs)
        if problem:
            verdict = {"passed": False, "first_divergent_step": None, "first_divergent_rank": None, "rows": [],
                       "reasons": [problem], "exit_code": 2, "modes": []}
            verdict.update(meta)
            return verdict
        echo("verify: resume check: save after step %d with %r, restart with %r" % (
            plan["at"], plan["save_args"], plan["resume_args"]))
    static = backward_inside_autocast(mig_entry)
    lints = migrated_tree_findings(migrated)
    causes = likely_causes(mig_entry)
    results = [_verify_mode(m, original, migrated, entry, list(args) + shlex.split(m), steps=steps, procs=procs,
                            nproc=nproc, launcher=launcher, device=device, seed=seed, dtype=dtype, timeout=timeout,
                            tolerance=tolerance, apex=apex, resume=plan, echo=echo, find_nan=find_nan)
               for m in mode_list]
    chosen = next((r for r in results if r["exit_code"]), results[0])
    verdict = {k: v for k, v in chosen.items()}
    verdict.update(meta)
    verdict["nproc"] = chosen.get("nproc", procs)
    verdict["modes"] = results
    if len(results) > 1:
        verdict["reasons"] = ["[mode %r] %s" % (r["mode_args"], x) for r in results for x in r["reasons"]]
    verdict["passed"] = all(r["passed"] for r in results)
    failing = [f for f in lints if f.get("severity") != "info"]
    if lints:
        verdict["check_findings"] = lints
    if static or failing:
        verdict["passed"] = False
        verdict["static_findings"] = static + [f["text"] for f in failing]
        verdict["reasons"] = ["static check: " + s for s in verdict["static_findings"]] + verdict["reasons"]
    if causes:  # bugs by construction; they also explain the divergence the table shows
        verdict["passed"] = False
        verdict["likely_causes"] = causes
        verdict["reasons"] = ["likely cause: " + s for s in causes] + verdict["reasons"]
    verdict["find_nan"] = find_nan
    codes = [r["exit_code"] for r in results]
    verdict["exit_code"] = 2 if 2 in codes else (0 if verdict["passed"] else 1)
    return verdict


def _resume_plan(resume: dict, orig_entry: str, steps: int, procs: int):
    """({"at", "save_args", "resume_args"}, None) or (None, the usage problem)."""
    if procs > 1:
        return None, "resume check: runs single-process programs only (this one runs %d processes)" % procs
    at = resume.get("at") or steps // 2
    if not 0 < at < steps:
        return None, "resume check: --resume-at must be between 1 and --steps - 1 (got %d, steps %d)" % (at, steps)
    save_args, resume_args = resume.get("save_args"), resume.get("resume_args")
    if resume_args is None:
        det_save, det_resume, why = detect_checkpoint_args(orig_entry)
        if det_resume is None:
            return None, "resume check: " + why
        resume_args = det_resume
        save_args = det_save if save_args is None else save_args
    return {"at": at, "save_args": save_args or "", "resume_args": resume_args}, None


def _verify_mode(mode_args: str, original: str, migrated: str, entry: str, args: List[str], *, steps: int,
                 procs: int, nproc: Optional[int], launcher: str, device: str, seed: int, dtype: str,
                 timeout: float, tolerance: Optional[float], apex: str, resume: Optional[dict], echo,
                 find_nan: bool = False) -> dict:
    """One configuration: both sides' runs, the loss comparison, the forward precision, the resume."""
    mode = "same-engine" if device == "cpu" else "fidelity"
    meta = {"mode_args": mode_args, "args": args, "nproc": procs}
    from .fsdp2_side import original_launcher, shards_with_fsdp2
    a = run_side(original, entry, args, steps=steps, nproc=procs, device=device, seed=seed, timeout=timeout, apex=apex,
                 launcher=original_launcher(os.path.join(original, entry), launcher), find_nan=find_nan)
    if _side_failed(a, steps) or not a.records:
        verdict = {"passed": False, "first_divergent_step": None, "first_divergent_rank": None, "rows": [],
                   "reasons": ["the original program could not run: %s" % (a.error() or "exit code %s%s" % (
                       a.returncode, " (timed out)" if a.timed_out else ""))], "exit_code": 2}
        verdict.update(meta)
        verdict["original_output_tail"] = tail(a.output)
        return verdict
    if launcher == "torchrun" and not nproc:  # as many ranks as the original really started
        meta["nproc"] = procs = max(1, len(a.records))
    levels = sorted({e.get("opt_level") for e in a.events if e.get("opt_level")})
    if mode == "same-engine" and shards_with_fsdp2(os.path.join(migrated, entry)):
        mode = "fidelity"  # FSDP2 computes with the policy's low-precision parameters
        echo("verify: the migration shards with FSDP2 (MixedPrecisionPolicy parameters), so the fidelity tolerance applies")
    if mode == "same-engine" and any(lv in ("O2", "O3") for lv in levels):
        # O2/O3 become fp32 weights + autocast by design (A2A108): same engine no longer holds
        mode = "fidelity"
        echo("verify: the original ran apex %s (fp16 weights); the migration keeps fp32 weights under autocast, "
             "so the fidelity tolerance applies" % "/".join(levels))
    meta["apex_opt_levels"] = levels
    unsafe = unsafe_fix_sites(os.path.abspath(original), os.path.abspath(migrated)) if mode == "same-engine" else ()
    if unsafe:
        # an unsafe fix (--unsafe-fixes) changes the numerics by design: same engine no longer holds
        mode = "fidelity"
        echo("verify: the migration of %s is an unsafe fix (changes numerics by design), so the fidelity "
             "tolerance applies" % ", ".join(unsafe))
    meta["unsafe_fixes"] = list(unsafe)
    scaled = scaled_clip_sites(os.path.abspath(original)) if mode == "same-engine" else ()
    if scaled:
        mode = "fidelity"
        echo("verify: %s keep%s the clip on every micro-batch with its threshold times the scale (A2A148): "
             "torch's 1e-6 in the clip coefficient then weighs 1/scale as much, so the fidelity tolerance applies"
             % (", ".join(scaled), "s" if len(scaled) == 1 else ""))
    meta["scaled_clips"] = list(scaled)
    b = run_side(migrated, entry, args, steps=steps, nproc=procs, launcher=launcher, device=device, seed=seed,
                 timeout=timeout, apex=apex, find_nan=find_nan)
    verdict = compare(a.records, b.records, steps=steps, mode=mode, dtype=dtype, tolerance=tolerance)
    verdict.update(meta)
    verdict["nan_origin"] = {"original": nan_origins(a), "migrated": nan_origins(b)}
    verdict["find_nan"] = find_nan
    if _side_failed(b, steps):
        verdict["passed"] = False
        verdict["reasons"].insert(0, "the migrated program failed: %s" % (b.error() or "exit code %s%s" % (
            b.returncode, " (timed out)" if b.timed_out else "")))
        verdict["migrated_output_tail"] = tail(b.output)
        if verdict["first_divergent_step"] is None:
            verdict["first_divergent_step"] = min((len(v) for v in b.records.values()), default=0)
    verdict["precision"] = {"original": side_precision(a.records), "migrated": side_precision(b.records)}
    problem = precision_problem(mode_args, verdict["precision"]["original"], verdict["precision"]["migrated"])
    if problem:
        verdict["passed"] = False
        verdict["reasons"].insert(0, problem)
    code = 0 if verdict["passed"] else 1
    if resume is not None and not _side_failed(b, steps):
        run_kw = dict(nproc=procs, device=device, seed=seed, timeout=timeout, apex=apex)
        res = check_resume(original, migrated, entry, args, steps=steps, at=resume["at"],
                           save_args=resume["save_args"], resume_args=resume["resume_args"],
                           whole_original=a.records, whole_migrated=b.records,
                           original_kwargs=dict(run_kw, launcher="python"),
                           migrated_kwargs=dict(run_kw, launcher=launcher), mode=mode, dtype=dtype,
                           tolerance=tolerance)
        verdict["resume"] = res
        verdict["reasons"] += res["reasons"]
        if not res["passed"]:
            verdict["passed"] = False
        code = max(code, res["exit_code"])
    verdict["exit_code"] = code
    return verdict


def nan_origins(side: SideRun) -> list:
    """The probe's non-finite origin events of one side, one per process, by rank then step."""
    found = [e for e in side.events if e.get("event") == "nonfinite"]
    return sorted(found, key=lambda e: (e.get("rank", 0), e.get("step", 0)))


def _mode_label(m: str) -> str:
    return repr(m) if m else "'' (the common arguments only)"


def _mode_summary(r: dict) -> str:
    status = {0: "PASS", 1: "FAIL", 2: "ERROR (could not run)"}[r["exit_code"]]
    parts = ["verify: mode %s: %s" % (_mode_label(r["mode_args"]), status)]
    prec = r.get("precision")
    if prec:
        parts.append("forward %s -> %s" % (prec["original"]["label"], prec["migrated"]["label"]))
    res = r.get("resume")
    if res:
        parts.append("resume at step %d: %s" % (res["at"], "PASS" if res["passed"] else (
            "ERROR (could not run)" if res["exit_code"] == 2 else "FAIL")))
    return "; ".join(parts)


def run_verify(original, migrated, *, entry, steps=10, nproc=None, device="auto", seed=0, dtype="float16",
               json_path=None, plot=None, timeout=600.0, tolerance=None, args=(), modes=None, resume=None,
               find_nan=False, target="ddp") -> int:
    """CLI body: verify, print a table and the reasons per mode, a summary line per mode, write JSON/PNG.

    Returns 0 every mode passed, 1 one failed, 2 could not run.
    """
    args = list(args)
    if args and args[0] == "--":
        args = args[1:]
    try:
        verdict = verify(original, migrated, entry=entry, steps=steps, nproc=nproc, device=device, seed=seed,
                         dtype=dtype or "float16", timeout=timeout, tolerance=tolerance, args=args, modes=modes,
                         resume=resume, find_nan=find_nan, target=target)
    except (FileNotFoundError, OSError) as e:
        click.echo("verify: error: %s" % e, err=True)
        return 2
    results = verdict.get("modes") or []
    for r in results:
        if len(results) > 1:
            click.echo("--- mode %s ---" % _mode_label(r["mode_args"]))
        if r.get("rows"):
            click.echo(report.table(r))
        if r.get("resume", {}).get("rows"):
            at = r["resume"]["at"]
            click.echo("resume: checkpoint after %d steps, restarted at step %d" % (at, at))
            click.echo(resume_table(r["resume"]))
        for src in (r, r.get("resume") or {}):
            for key, label in (("original_output_tail", "original"), ("migrated_output_tail", "migrated")):
                if src.get(key):
                    click.echo("--- last output lines of the %s run ---\n%s" % (label, src[key]), err=True)
        for reason in r["reasons"][:20]:
            click.echo("  " + reason)
        for line in report.nan_lines(r):
            click.echo(line)
        for note in (r.get("resume") or {}).get("notes", []):
            click.echo("  note: resume: " + note)
    for reason in verdict["reasons"] if not results else ["static check: " + s for s in
                                                          verdict.get("static_findings", [])]:
        click.echo("  " + reason)
    for r in results:
        click.echo(_mode_summary(r))
    code = verdict["exit_code"]
    status = {0: "PASS", 1: "FAIL", 2: "ERROR (could not run)"}[code]
    where = "" if verdict.get("first_divergent_step") is None else " (first divergent step: %d, rank %s)" % (
        verdict["first_divergent_step"], verdict.get("first_divergent_rank"))
    if where and len(results) > 1:
        where = where[:-1] + ", mode %r)" % verdict.get("mode_args", "")
    sim = " [CUDA simulated on CPU]" if verdict.get("simulated_cuda") else ""
    worst = max(results or [verdict], key=lambda r: r.get("max_rel_diff", 0.0))
    verdict["summary"] = report.difference_summary(worst)
    click.echo("verify: %s%s%s; %s" % (status, where, sim, verdict["summary"]))
    if json_path:
        report.write_json(verdict, json_path)
    if plot:
        err = report.plot(verdict, plot)
        if err:
            click.echo("verify: no plot: " + err, err=True)
    return code
