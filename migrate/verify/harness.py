"""`apex2amp verify`: run the original and the migrated program, compare them, print/write the verdict."""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Optional, Sequence

import click

from . import report
from .compare import compare
from .runner import SideRun, cuda_available, detect_launcher, real_apex_available, run_side, tail
from .static_checks import backward_inside_autocast, likely_causes


def migrate_copy(original: str) -> str:
    """Copy ORIGINAL to a temp folder and rewrite the copy in place with apex2amp; returns the copy's path."""
    from migrate import rewrite_paths
    dst = os.path.join(tempfile.mkdtemp(prefix="apex2amp-migrated-"), os.path.basename(os.path.abspath(original)))
    shutil.copytree(original, dst)
    rewrite_paths([dst], write=True)
    return dst


def _side_failed(side: SideRun, steps: int) -> bool:
    reached = min((len(v) for v in side.records.values()), default=0)
    return reached < steps and (side.timed_out or bool(side.returncode) or side.error() is not None
                                or not side.records)


def verify(original: str, migrated: Optional[str], *, entry: str, steps: int = 10, nproc: Optional[int] = None,
           device: str = "auto", seed: int = 0, dtype: str = "float16", timeout: float = 600.0,
           tolerance: Optional[float] = None, args: Sequence[str] = (), echo=click.echo,
           find_nan: bool = False) -> dict:
    """Run both sides and return the verdict dict (see compare.compare) plus run metadata and `exit_code`.

    `nan_origin` (per side) names the first module and direction where a non-finite value appeared; it is
    traced after a side's first non-finite/skipped step, or from the first step with find_nan.
    """
    if migrated is None:
        echo("verify: migrating a copy of %s with apex2amp" % original)
        migrated = migrate_copy(original)
        echo("verify: the migrated copy is kept for review in %s" % migrated)
    if device == "auto":
        device = "cuda" if cuda_available() else "cpu"
    apex = "real" if real_apex_available() else "emulated"
    orig_entry, mig_entry = os.path.join(original, entry), os.path.join(migrated, entry)
    launcher = detect_launcher(orig_entry, mig_entry, nproc)
    procs = nproc or (2 if launcher == "torchrun" else 1)  # device_count() the original sees
    mode = "same-engine" if device == "cpu" else "fidelity"
    meta = {"original": os.path.abspath(original), "migrated": os.path.abspath(migrated), "entry": entry,
            "steps": steps, "device": device, "simulated_cuda": device == "cpu", "apex": apex,
            "launchers": {"original": "python", "migrated": launcher}, "nproc": procs, "seed": seed,
            "args": list(args)}
    if device == "cpu":
        echo("verify: no CUDA here: simulating CUDA on the CPU (float16 CPU autocast, gloo instead of nccl)")
    echo("verify: original runs with %s apex; migrated runs under %s (%d process%s)" % (
        apex, launcher, procs, "es" if procs > 1 else ""))
    static = backward_inside_autocast(mig_entry)
    causes = likely_causes(mig_entry)
    a = run_side(original, entry, args, steps=steps, nproc=procs, launcher="python", device=device, seed=seed,
                 timeout=timeout, apex=apex, find_nan=find_nan)
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
    if mode == "same-engine" and any(lv in ("O2", "O3") for lv in levels):
        # O2/O3 become fp32 weights + autocast by design (A2A108): same engine no longer holds
        mode = "fidelity"
        echo("verify: the original ran apex %s (fp16 weights); the migration keeps fp32 weights under autocast, "
             "so the fidelity tolerance applies" % "/".join(levels))
    meta["apex_opt_levels"] = levels
    b = run_side(migrated, entry, args, steps=steps, nproc=procs, launcher=launcher, device=device, seed=seed,
                 timeout=timeout, apex=apex, find_nan=find_nan)
    verdict = compare(a.records, b.records, steps=steps, mode=mode, dtype=dtype, tolerance=tolerance)
    verdict.update(meta)
    verdict["find_nan"] = find_nan
    verdict["nan_origin"] = {"original": nan_origins(a), "migrated": nan_origins(b)}
    if _side_failed(b, steps):
        verdict["passed"] = False
        verdict["reasons"].insert(0, "the migrated program failed: %s" % (b.error() or "exit code %s%s" % (
            b.returncode, " (timed out)" if b.timed_out else "")))
        verdict["migrated_output_tail"] = tail(b.output)
        if verdict["first_divergent_step"] is None:
            verdict["first_divergent_step"] = min((len(v) for v in b.records.values()), default=0)
    if static:
        verdict["passed"] = False
        verdict["static_findings"] = static
        verdict["reasons"] = ["static check: " + s for s in static] + verdict["reasons"]
    if causes:  # bugs by construction; they also explain the divergence the table shows
        verdict["passed"] = False
        verdict["likely_causes"] = causes
        verdict["reasons"] = ["likely cause: " + s for s in causes] + verdict["reasons"]
    verdict["exit_code"] = 0 if verdict["passed"] else 1
    return verdict


def nan_origins(side: SideRun) -> list:
    """The probe's non-finite origin events of one side, one per process, by rank then step."""
    found = [e for e in side.events if e.get("event") == "nonfinite"]
    return sorted(found, key=lambda e: (e.get("rank", 0), e.get("step", 0)))


def run_verify(original, migrated, *, entry, steps=10, nproc=None, device="auto", seed=0, dtype="float16",
               json_path=None, plot=None, timeout=600.0, tolerance=None, args=(), find_nan=False) -> int:
    """CLI body: verify, print the table and reasons, write JSON/PNG; returns 0 pass, 1 fail, 2 could not run."""
    args = list(args)
    if args and args[0] == "--":
        args = args[1:]
    try:
        verdict = verify(original, migrated, entry=entry, steps=steps, nproc=nproc, device=device, seed=seed,
                         dtype=dtype or "float16", timeout=timeout, tolerance=tolerance, args=args,
                         find_nan=find_nan)
    except (FileNotFoundError, OSError) as e:
        click.echo("verify: error: %s" % e, err=True)
        return 2
    verdict["summary"] = report.difference_summary(verdict)
    if verdict.get("rows"):
        click.echo(report.table(verdict))
    for key, label in (("original_output_tail", "original"), ("migrated_output_tail", "migrated")):
        if verdict.get(key):
            click.echo("--- last output lines of the %s run ---\n%s" % (label, verdict[key]), err=True)
    for reason in verdict["reasons"][:20]:
        click.echo("  " + reason)
    for line in report.nan_lines(verdict):
        click.echo(line)
    code = verdict["exit_code"]
    status = {0: "PASS", 1: "FAIL", 2: "ERROR (could not run)"}[code]
    where = "" if verdict.get("first_divergent_step") is None else " (first divergent step: %d, rank %s)" % (
        verdict["first_divergent_step"], verdict.get("first_divergent_rank"))
    sim = " [CUDA simulated on CPU]" if verdict.get("simulated_cuda") else ""
    click.echo("verify: %s%s%s; %s" % (status, where, sim, report.difference_summary(verdict)))
    if json_path:
        report.write_json(verdict, json_path)
    if plot:
        err = report.plot(verdict, plot)
        if err:
            click.echo("verify: no plot: " + err, err=True)
    return code
