"""Shell and other launch files: `python -m torch.distributed.launch` -> `torchrun`; docs are only reported.

Shell scripts, Makefiles, Dockerfiles and SLURM files are rewritten line by line:
- `python -m torch.distributed.launch` / `python3 -m ...` becomes `torchrun`; other interpreters
  (`$PYTHON`, `/opt/conda/bin/python`, `python -u`) keep their spelling and run `-m torch.distributed.run`
  (the same program as torchrun). This also works inside strings such as
  `CMD="python3 -m torch.distributed.launch ... $CMD"`.
- `--use_env` / `--use-env` is dropped wherever it occurs in such a file (torchrun always behaves so),
  including variables like `DISTRIBUTED_ARGS="--nproc_per_node 8 --use_env"`. Every other launcher flag
  (`--nproc_per_node`, `--nnodes`, `--node_rank`, `--master_addr`, `--master_port`) means the same to torchrun.
- Commented-out code gets the same rewrite as live code: a `#` line holding a launch command, its
  backslash continuation lines and a commented assignment (`#ARGS="... --use_env"`). Other comments
  are prose and keep `--use_env`.
- `python -m apex.parallel.multiproc` is reported (A2A223).
YAML / INI config files (CI workflows, job definitions) are never rewritten either: each launch command
gets a finding (A2A414) with the torchrun line to use. Markdown files (README.md, docs) are never rewritten: each launch command gets a finding with its line,
which also says to drop `--use_env` when the command passes it.
"""
from __future__ import annotations

import os
import re
from typing import List

from codemods.base import FIX, INFO, WARNING, Finding
from codemods.suppression import Suppressions

_PLAIN = re.compile(r"(?<![\w/$.-])python(?:3(?:\.\d+)?)?\s+-m\s+torch\.distributed\.launch\b")
_OTHER = re.compile(r"-m\s+torch\.distributed\.launch\b")
# ` --use_env[=V]`, or `--use_env[=V] ` opening a quoted assignment (`ARGS="--use_env ..."`); V stops at quotes
_USE_ENV = re.compile(r"\s--use[_-]env\b(?:=[^\s\"']+)?|(?<==[\"'])--use[_-]env\b(?:=[^\s\"']+)?[ \t]*")
_MULTIPROC = re.compile(r"-m\s+apex\.parallel\.multiproc\b")
_DOC = re.compile(r"torch\.distributed\.launch\b|apex\.parallel\.multiproc\b")
_COMMENTED_ASSIGN = re.compile(r"#+\s*(?:export\s+)?[A-Za-z_]\w*=")


def _continues(body: str) -> bool:
    """Whether a line ends with a `\\` line continuation."""
    return body.rstrip().endswith("\\")


def rewrite_launch_text(text: str, select=lambda code: True) -> "tuple[str, List[Finding]]":
    """Rewrite one shell-like launch file; returns the new text and the findings (1-based lines)."""
    findings: List[Finding] = []
    if "torch.distributed.launch" not in text and "apex.parallel.multiproc" not in text:
        return text, findings
    sup = Suppressions(text)
    has_launch = bool(_OTHER.search(text))
    out: List[str] = []
    in_commented_launch = False  # the previous line was a commented launch ending in `\`
    for i, line in enumerate(text.splitlines(keepends=True), start=1):
        body = line.rstrip("\r\n")
        end = line[len(body):]
        new = body
        if _MULTIPROC.search(body) and select("A2A223") and not sup.covers(i, "A2A223"):
            findings.append(Finding("A2A223", "apex.parallel.multiproc launch: use `torchrun --nproc_per_node=gpu "
                                    "SCRIPT ...` and read RANK/WORLD_SIZE/LOCAL_RANK from the environment",
                                    i, _MULTIPROC.search(body).start() + 1, WARNING, False))
        if has_launch and select("A2A410") and not sup.covers(i, "A2A410"):
            m = _PLAIN.search(new) or _OTHER.search(new)
            new = _PLAIN.sub("torchrun", new)
            new = _OTHER.sub("-m torch.distributed.run", new)
            dropped = bool(_USE_ENV.search(new)) and _is_code(body, m is not None, in_commented_launch)
            if dropped:
                new = _USE_ENV.sub("", new)
            if new != body:
                col = (m.start() + 1) if m else 1
                what = "torch.distributed.launch -> torchrun" if m else "--use_env dropped (torchrun always sets LOCAL_RANK)"
                if m and dropped:
                    what += "; --use_env dropped"
                if m:
                    what += "; the script must read LOCAL_RANK (apex2amp rewrites --local_rank arguments)"
                findings.append(Finding("A2A410", what, i, col, FIX, True, new_line=i))
        is_comment = body.lstrip().startswith("#")
        in_commented_launch = is_comment and _continues(body) and \
            (in_commented_launch or bool(_OTHER.search(body)))
        out.append(new + end)
    return "".join(out), findings


def _is_code(body: str, has_launch: bool, continues_launch: bool) -> bool:
    """Whether a line is live or commented-out code (where `--use_env` is dropped), not a prose comment."""
    stripped = body.lstrip()
    if not stripped.startswith("#"):
        return True
    return has_launch or continues_launch or bool(_COMMENTED_ASSIGN.match(stripped))


def report_doc_text(text: str, select=lambda code: True) -> List[Finding]:
    """Findings for launch commands shown in documentation (never rewritten)."""
    findings: List[Finding] = []
    if not select("A2A411"):
        return findings
    lines = text.splitlines()
    for i, line in enumerate(lines, start=1):
        m = _DOC.search(line)
        if m:
            target = "torchrun --nproc_per_node=..." if "torch.distributed" in m.group(0) else \
                "torchrun --nproc_per_node=gpu"
            if _USE_ENV.search(" ".join(_command_lines(lines, i - 1))):
                target += " and drop --use_env (torchrun rejects it)"
            findings.append(Finding("A2A411", f"documentation shows `{m.group(0)}`: update the command to {target} "
                                    "(torchrun passes no --local_rank; the script reads LOCAL_RANK)",
                                    i, m.start() + 1, INFO, False))
    return findings


def report_config_text(text: str, select=lambda code: True) -> List[Finding]:
    """Findings (A2A414) for launch commands in YAML / INI config files, each with its torchrun line;
    the file is never rewritten."""
    from codemods.launch_lines import torchrun_line
    findings: List[Finding] = []
    if not select("A2A414") or "torch.distributed.launch" not in text:
        return findings
    sup = Suppressions(text)
    lines = text.splitlines()
    for i, line in enumerate(lines, start=1):
        m = _OTHER.search(line)
        if not m or sup.covers(i, "A2A414"):
            continue
        start = _PLAIN.search(line)
        begin = start.start() if start else m.start()
        parts = _command_lines(lines, i - 1)
        parts[0] = parts[0][begin:]
        command = " ".join(p.strip().rstrip("\\").strip() for p in parts).strip().strip("\"'")
        findings.append(Finding("A2A414", f"config file launches with torch.distributed.launch: use "
                                f"`{torchrun_line(command)}` (torchrun sets LOCAL_RANK, passes no --local_rank)",
                                i, begin + 1, WARNING, False))
    return findings


def _command_lines(lines: List[str], start: int) -> List[str]:
    """The line at index `start` and the `\\` continuation lines that follow it."""
    out = [lines[start]]
    while _continues(out[-1]) and start + len(out) < len(lines):
        out.append(lines[start + len(out)])
    return out


def rewrite_launch_file(src, d, config, facts):
    """Engine handler for files of kind "shell" (rewritten) and "markdown" (reported only)."""
    from . import discovery
    from .results import FileResult
    from .source_rewrite import selection_for
    from .launch_torchrun import FACT, rewrite_plain_launches
    from .launch_scripts_copy import rewrite_copy_launches
    select = selection_for(d.path, d.root, config)
    moved = facts.extra.get(FACT) or {}  # scripts of the run whose mp.spawn moved to torchrun
    bases = [os.path.dirname(os.path.abspath(d.path)), d.root]
    if d.kind == discovery.MARKDOWN:
        _, plain = rewrite_plain_launches(src.text, bases, moved, select, rewrite=False)
        _, copies = rewrite_copy_launches(src.text, bases, moved, select, rewrite=False)
        return FileResult(d.path, d.kind, src.text, src.text, report_doc_text(src.text, select) + plain + copies)
    if d.kind == discovery.CONFIG:
        return FileResult(d.path, d.kind, src.text, src.text, report_config_text(src.text, select))
    new, findings = rewrite_launch_text(src.text, select)
    new, plain = rewrite_plain_launches(new, bases, moved, select)
    new, copies = rewrite_copy_launches(new, bases, moved, select)
    return FileResult(d.path, d.kind, src.text, new, sorted(findings + plain + copies, key=lambda f: (f.line, f.col)))
