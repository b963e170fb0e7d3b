"""The verification harness behind `apex2amp verify`: run the legacy and the migrated program, compare losses.

Python API (used by the end-to-end tests):

    from migrate.verify import collect_losses, compare
    a = collect_losses("fixtures/runnable/single_accum/legacy", "train.py", args=["--fp16"], steps=10)
    b = collect_losses("out/single_accum", "train.py", args=["--fp16"], steps=10)
    verdict = compare(a, b, steps=10)          # verdict["passed"], verdict["first_divergent_step"], ...

- `collect_losses(folder, entry, args=[], steps=10, nproc=None, launcher="python"|"torchrun", device="cpu",
  seed=0, timeout=600) -> {rank: [record, ...]}` runs `folder/entry ARGS` in a subprocess with the probe
  (and the apex emulation when real apex is missing). A record is one optimizer step:
  `{"it", "losses": [unscaled loss per backward], "skipped", "scale", "nonfinite", "time"}`.
- `compare(original, migrated, steps=None, mode="same-engine"|"fidelity", dtype="float16", tolerance=None)`
  returns the verdict dict (passed, first_divergent_step, first_divergent_rank, reasons, rows, max_rel_diff).
- `verify(original, migrated, entry=..., modes=None, resume=None, ...)` does both sides in every mode
  (given, or detected by `modes.detect_modes`), the forward-precision check, the resume check when asked
  (`resume={"at", "save_args", "resume_args"}`) and the static checks (incl. `check`'s A2A7xx/A2A118
  findings), and returns the verdict with `modes` and `exit_code`; `run_verify(...)` is the CLI body (prints, writes JSON/PNG, returns 0/1/2).
- `run_side(...)` is `collect_losses` returning everything (records, crash events, exit code, output).
"""
from __future__ import annotations

from .compare import compare, rel_diff, tolerance_for
from .harness import migrate_copy, run_verify, verify
from .runner import collect_losses, detect_launcher, run_side
from .static_checks import backward_inside_autocast

__all__ = ["run_verify", "verify", "collect_losses", "compare", "run_side", "detect_launcher", "migrate_copy",
           "backward_inside_autocast", "rel_diff", "tolerance_for"]
