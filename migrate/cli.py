"""The `apex2amp` command line (click): rewrite, check, verify, explain, rules, convert-checkpoint."""
from __future__ import annotations

import gc
import os
import sys
from typing import List, Optional, Sequence

import click

from codemods.records import Options

from . import __version__
from .output import emit_run, folders_without_files
from .settings import QUIET_GC, RunConfig, Selection

DTYPES = click.Choice(["float16", "bfloat16", "fp16", "bf16"])


def _split(values: Sequence[str]) -> List[str]:
    out: List[str] = []
    for v in values:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def _parse_version(text: str) -> tuple:
    from .config import ConfigError, parse_version
    try:
        return parse_version(text, "--min-torch")
    except ConfigError as e:
        raise click.BadParameter(str(e)) from None


def _norm_dtype(d: Optional[str]) -> Optional[str]:
    if d is None:
        return None
    return {"fp16": "float16", "bf16": "bfloat16"}.get(d, d)


def common_options(f):
    opts = [
        click.argument("paths", nargs=-1, type=click.Path()),
        click.option("--select", multiple=True, help="Only these rule codes (prefix match, comma separated)."),
        click.option("--ignore", multiple=True, help="Skip these rule codes (prefix match, comma separated)."),
        click.option("--dtype", type=DTYPES, default=None, help="Autocast dtype: float16 (GradScaler) or bfloat16 (no scaler)."),
        click.option("--target", type=click.Choice(["ddp", "fsdp2"]), default=None,
                     help="Migration target: ddp (autocast + GradScaler, default) or fsdp2 (fully_shard, torch >= 2.6)."),
        click.option("--min-torch", default=None, help="Lowest torch version the migrated code must support (e.g. 2.1)."),
        click.option("--exclude", multiple=True, help="Glob of files or folders to skip (repeatable)."),
        click.option("--jobs", "-j", type=int, default=None, help="Worker processes (default: number of cores)."),
        click.option("--format", "fmt", type=click.Choice(["text", "json", "sarif", "github"]), default="text",
                     help="Output format for findings."),
        click.option("--report", type=click.Path(dir_okay=False), default=None, help="Write a Markdown migration report."),
        click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
                     help="Write the output (any --format; with --diff, the patch) to this file instead of stdout."),
        click.option("--quiet", "-q", is_flag=True, help="Only errors and the exit code."),
        click.option("--verbose", "-v", is_flag=True, help="Also list unchanged files."),
        click.option("--show-ignored", is_flag=True, help="List findings suppressed by `# apex2amp: ignore`."),
        click.option("--color/--no-color", default=None,
                     help="Colour output (default: on a terminal, unless NO_COLOR is set; FORCE_COLOR forces it)."),
        click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
                     help="pyproject.toml to read [tool.apex2amp] from (default: found by walking up)."),
        click.option("--verify-json", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="JSON written by `apex2amp verify --json`, summarised in the --report."),
        click.option("--unsafe-fixes/--no-unsafe-fixes", default=None,
                     help="Also apply fixes that change numerics (default: report them; see A2A145)."),
        click.option("--cache/--no-cache", "use_cache", default=True,
                     help="Reuse results of unchanged files from earlier runs (default: on)."),
        click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
                     help="Cache folder (default: .apex2amp_cache beside the project's pyproject.toml, the "
                          "closest above the first path, else in the working folder; or APEX2AMP_CACHE_DIR)."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _build_config(paths, select, ignore, dtype, min_torch, exclude, jobs, config_path, write: bool,
                  cache_dir: Optional[str] = None, target: Optional[str] = None,
                  unsafe_fixes: Optional[bool] = None) -> RunConfig:
    """Settings from `[tool.apex2amp]`, overridden by the command line."""
    from .config import load_config
    file_cfg = load_config(paths, config_path)
    sel = _split(select) or file_cfg.get("select", [])
    ign = _split(ignore) or file_cfg.get("ignore", [])
    ign = ign + file_cfg.get("extend-ignore", [])
    from .selectors import check_selectors
    check_selectors(sel + ign + [c for codes in file_cfg.get("per-file-ignores", {}).values() for c in codes])
    dt = _norm_dtype(dtype) or _norm_dtype(file_cfg.get("dtype")) or "float16"
    mt = _parse_version(min_torch) if min_torch else (
        _parse_version(str(file_cfg["min-torch"])) if file_cfg.get("min-torch") else (2, 4))
    target = target or file_cfg.get("target") or "ddp"
    if target == "fsdp2":
        from .target_floor import fsdp2_min_torch
        mt = fsdp2_min_torch(mt, explicit=bool(min_torch or file_cfg.get("min-torch")))
    excludes = list(exclude) + list(file_cfg.get("exclude", []))
    unsafe = unsafe_fixes if unsafe_fixes is not None else bool(file_cfg.get("unsafe-fixes", False))
    return RunConfig(options=Options(dtype=dt, min_torch=mt, target=target, unsafe_fixes=unsafe),
                     select=Selection(sel, ign), excludes=excludes,
                     write=write, jobs=jobs if jobs is not None else (os.cpu_count() or 1),
                     per_file_ignores=file_cfg.get("per-file-ignores", {}), cache_dir=cache_dir)


def _cache_dir(paths, config_path, use_cache: bool, cache_dir: Optional[str]) -> Optional[str]:
    """The cache folder of this run, or None for --no-cache (or APEX2AMP_NO_CACHE=1)."""
    if not use_cache or os.environ.get("APEX2AMP_NO_CACHE", "") not in ("", "0"):
        return None
    if cache_dir:
        return cache_dir
    from .cache import default_dir
    from .config import find_pyproject
    return default_dir(paths, config_path or find_pyproject(list(paths)))


def _run_command(mode: str, paths, select, ignore, dtype, min_torch, exclude, jobs, fmt, report, output, quiet,
                 verbose, show_ignored, color, config_path, verify_json=None, diff: bool = False,
                 use_cache: bool = False, cache_dir: Optional[str] = None, target: Optional[str] = None,
                 unsafe_fixes: Optional[bool] = None) -> int:
    """Shared body of `rewrite` and `check`: configure, run (with a progress bar on a terminal), print."""
    from .config import ConfigError
    from .progress import RunProgress, stderr_is_terminal
    if not paths:
        paths = (".",)
    missing = [p for p in paths if not os.path.lexists(p)]
    if verify_json and not report:
        click.echo("error: --verify-json needs --report FILE.md", err=True)
        return 2
    try:
        config = _build_config(paths, select, ignore, dtype, min_torch, exclude, jobs, config_path,
                               write=(mode == "rewrite" and not diff),
                               cache_dir=_cache_dir(paths, config_path, use_cache, cache_dir), target=target,
                               unsafe_fixes=unsafe_fixes)
    except (click.BadParameter, ConfigError, ValueError) as e:
        click.echo(f"error: {getattr(e, 'message', None) or e}", err=True)
        return 2
    existing = [p for p in paths if os.path.lexists(p)]
    result = None
    from .interrupts import EXIT_INTERRUPTED, interrupted_exit, sigterm_interrupts
    if existing:
        bar = RunProgress(stderr_is_terminal() and not quiet)
        try:
            from .engine import run
            try:
                with sigterm_interrupts():
                    result = run(existing, config, on_result=bar)
            except KeyboardInterrupt as e:  # also migrate.write_groups.Interrupted
                return interrupted_exit(e, config.write)
        finally:
            bar.close()
    if missing:  # errors of the run like any unreadable file: every format lists them, the exit code is 2
        from .discovery import file_kind
        from .engine import FileResult, RunResult
        result = result if result is not None else RunResult()
        result.files.extend(FileResult(p, file_kind(p) or "python", error="no such file or directory")
                            for p in missing)
    for folder in folders_without_files(result, existing):
        click.echo(f"{folder}: warning: no Python files found (nothing to migrate here)", err=True)
    try:
        with sigterm_interrupts():
            code = emit_run(result, mode=mode, diff=diff, fmt=fmt, report=report, output=output, quiet=quiet,
                            verbose=verbose, show_ignored=show_ignored, color=color, verify_json=verify_json)
    except KeyboardInterrupt:  # the files are written (each group whole); only the report was cut short
        click.echo("interrupted while reporting: every file written is complete; run `apex2amp check` to "
                   "list what is left", err=True)
        return EXIT_INTERRUPTED
    if missing:
        return 2
    return code


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="apex2amp")
def main() -> None:
    """Migrate NVIDIA apex mixed precision and mp.spawn launches to torch.amp and torchrun."""


def console_main() -> None:
    """The `apex2amp` command and `python -m migrate`.

    The garbage collector runs less often from the start: importing libcst creates thousands of
    objects, and the default thresholds spend about 5 ms of the import collecting none of them
    (a run raises them anyway, `engine._quiet_gc`)."""
    gc.set_threshold(*(max(old, new) for old, new in zip(gc.get_threshold(), QUIET_GC)))
    main()


@main.command()
@common_options
@click.option("--diff", is_flag=True, help="Print a unified diff instead of writing files.")
def rewrite(paths, select, ignore, dtype, target, min_torch, exclude, jobs, fmt, report, output, quiet, verbose,
            show_ignored, color, config_path, verify_json, unsafe_fixes, use_cache, cache_dir, diff):
    """Rewrite files in place (or print a diff with --diff)."""
    sys.exit(_run_command("rewrite", paths, select, ignore, dtype, min_torch, exclude, jobs, fmt, report, output,
                          quiet, verbose, show_ignored, color, config_path, verify_json, diff=diff,
                          use_cache=use_cache, cache_dir=cache_dir, target=target, unsafe_fixes=unsafe_fixes))


@main.command()
@common_options
@click.option("--diff", is_flag=True, help="Also print the diff of what rewrite would change.")
def check(paths, select, ignore, dtype, target, min_torch, exclude, jobs, fmt, report, output, quiet, verbose,
          show_ignored, color, config_path, verify_json, unsafe_fixes, use_cache, cache_dir, diff):
    """Write nothing; list what rewrite would change and every finding."""
    sys.exit(_run_command("check", paths, select, ignore, dtype, min_torch, exclude, jobs, fmt, report, output,
                          quiet, verbose, show_ignored, color, config_path, verify_json, diff=diff,
                          use_cache=use_cache, cache_dir=cache_dir, target=target, unsafe_fixes=unsafe_fixes))


@main.command()
@click.argument("codes", nargs=-1)
@click.option("--all", "all_codes", is_flag=True, help="Explain every rule.")
def explain(codes, all_codes: bool) -> None:
    """Explain rules: what each does, why, a before/after example, its severity."""
    from codemods.base import RULES
    from .explain import explain_text
    wanted = sorted(RULES) if all_codes else [c for arg in codes for c in _split([arg])]
    if not wanted:
        click.echo("usage: apex2amp explain CODE [CODE...] | --all (see `apex2amp rules`)", err=True)
        sys.exit(2)
    texts, unknown = [], []
    for code in wanted:
        text = explain_text(code)
        if text is None:
            unknown.append(code)
        else:
            texts.append(text)
    if texts:
        click.echo("\n\n".join(texts))
    for code in unknown:
        click.echo(f"error: unknown rule code {code!r} (see `apex2amp rules`)", err=True)
    if unknown:
        sys.exit(2)


@main.command()
def rules() -> None:
    """List every rule code with its summary."""
    from .explain import rules_table
    click.echo(rules_table())


@main.command("convert-checkpoint")
@click.argument("src", type=click.Path())
@click.argument("dst", type=click.Path())
@click.option("--key", default=None, help="Checkpoint key holding the apex amp state (default: found automatically).")
def convert_checkpoint(src: str, dst: str, key: Optional[str]) -> None:
    """Convert apex amp / FP16_Optimizer scaler state in a torch.save file to GradScaler state."""
    from .checkpoint import CheckpointError, convert_checkpoint_file
    try:
        msg = convert_checkpoint_file(src, dst, key=key)
    except CheckpointError as e:
        click.echo(f"{src}: error: {e}", err=True)
        sys.exit(2)
    click.echo(msg)


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("original", type=click.Path(exists=True))
@click.argument("migrated", required=False)
@click.option("--entry", required=True, help="Entry script, relative to ORIGINAL (and MIGRATED).")
@click.option("--steps", type=int, default=10, show_default=True, help="Optimizer steps to run on each side.")
@click.option("--nproc", type=int, default=None, help="Processes per side (torchrun --nproc_per_node).")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--dtype", type=DTYPES, default="float16", show_default=True,
              help="Mixed-precision dtype: sets the tolerance, and the copy's migration when MIGRATED is not given.")
@click.option("--target", type=click.Choice(["ddp", "fsdp2"]), default=None,
              help="Migration target of the copy migrated when MIGRATED is not given (default: `target` in "
                   "[tool.apex2amp], else ddp).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the verdict as JSON.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None, help="Draw both loss curves to a PNG.")
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds per side.")
@click.option("--tolerance", type=float, default=None, help="Override the per-step relative tolerance.")
@click.option("--mode", "modes", multiple=True,
              help="Extra arguments of one configuration (repeatable, e.g. --mode '' --mode=--fp16); default: "
                   "fp32 and mixed precision, detected from the script's flags.")
@click.option("--resume", "resume_flag", is_flag=True,
              help="Also check a restart: save after step K, restart from the checkpoint, train on.")
@click.option("--resume-at", type=int, default=None, help="Step K the checkpoint is written after (default steps/2).")
@click.option("--resume-args", default=None, help="Arguments that restart from the checkpoint, e.g. '--resume {ckpt}'.")
@click.option("--save-args", default=None, help="Arguments that save it after step K, e.g. '--save {ckpt} --save-at {k}'.")
@click.option("--find-nan", is_flag=True, help="Trace NaN/inf origins (module, direction) from the first step.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def verify(original, migrated, entry, steps, nproc, device, seed, dtype, target, json_path, plot, timeout, tolerance,
           modes, resume_flag, resume_at, resume_args, save_args, find_nan, args):
    """Run ORIGINAL and MIGRATED for N steps each, in every mode, and compare their losses.

    Without MIGRATED, a copy of ORIGINAL is migrated first. Program arguments go after `--`.
    """
    from .config import ConfigError, load_config
    from .verify import run_verify
    try:
        file_cfg = load_config([original])
    except ConfigError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    table = file_cfg.get("verify", {})
    target = target or file_cfg.get("target") or "ddp"
    modes = list(modes) or table.get("modes") or None
    resume_at = resume_at or table.get("resume-at")
    resume_args = resume_args if resume_args is not None else table.get("resume-args")
    save_args = save_args if save_args is not None else table.get("save-args")
    resume = None
    if resume_flag or resume_at or resume_args is not None or save_args is not None:
        resume = {"at": resume_at, "resume_args": resume_args, "save_args": save_args}
    if migrated is not None and migrated.startswith("-"):
        # `verify ORIGINAL -- --fp16`: click binds the first program argument to MIGRATED
        args, migrated = (migrated,) + tuple(args), None
    elif migrated is not None and not os.path.isdir(migrated):
        click.echo(f"error: MIGRATED folder {migrated!r} does not exist", err=True)
        sys.exit(2)
    sys.exit(run_verify(original, migrated, entry=entry, steps=steps, nproc=nproc, device=device, seed=seed,
                        dtype=_norm_dtype(dtype), json_path=json_path, plot=plot, timeout=timeout,
                        tolerance=tolerance, args=list(args), modes=modes, resume=resume, find_nan=find_nan,
                        target=target))


if __name__ == "__main__":  # pragma: no cover
    console_main()
