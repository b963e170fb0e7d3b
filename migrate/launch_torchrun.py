"""Plain `python SCRIPT.py` launch lines of scripts whose mp.spawn the run moved to torchrun (A2A420).

After the migration such a script reads `LOCAL_RANK` from the environment, so the repository's own
`python train.py ARGS` line would fail with `KeyError: 'LOCAL_RANK'`. The engine collects, after
pass 1, the scripts of the run whose spawn was rewritten (their launch notes: nproc and the flags
that select the spawn) and hands them to the launch-file handler in the facts:
- in shell-like files, `python train.py ARGS` (python, python3, python3.X; other interpreters such as
  `$PYTHON` or `/opt/conda/bin/python`, and interpreter flags like `-u`, keep their spelling and run
  `-m torch.distributed.run`) becomes `torchrun --standalone --nproc_per_node=N train.py ARGS`;
- in Markdown, such a line gets a finding with the torchrun command.
A line is changed only when its script resolves (from the launch file's folder, else from the run's
root) to a file of the run whose spawn moved, and passes every flag the spawn sat under (without
them the script takes its unchanged, non-spawn path).
"""
from __future__ import annotations

import os
import re
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from codemods.base import FIX, INFO, Finding
from codemods.suppression import Suppressions

# RepoFacts.extra key: {absolute script path: {"nproc": str, "flags": [str]}} (rule A2A420: codemods/launch.py),
# and {absolute path of a copy of torch's launcher: {"launcher_copy": plan}} (A2A421: codemods/launch_copy.py)
FACT = "torchrun_scripts"

_INTERP = (r"(?P<interp>(?<![\w/$.-])python(?:3(?:\.\d+)?)?"
           r"|\$\{?\w*PYTHON\w*\}?"
           r"|(?<![\w$.-])/[\w./-]*/python(?:3(?:\.\d+)?)?)")
_RUN = re.compile(_INTERP + r"(?P<flags>(?:[ \t]+-[uBOsSEI]+)*)[ \t]+(?P<script>[\w./-]+\.py)(?![\w.])")


def scripts_moved_to_torchrun(results: Iterable[object]) -> Dict[str, Dict[str, object]]:
    """{absolute path: {"nproc", "flags"}} of the Python files whose launch notes say torchrun."""
    out: Dict[str, Dict[str, object]] = {}
    for fr in results:
        for note in getattr(fr, "launch_notes", None) or []:
            if isinstance(note, dict) and isinstance(note.get("launcher_copy"), dict):
                path = str(note.get("path") or getattr(fr, "path", ""))
                if path:  # a copy of torch's launcher that torchrun replaces (migrate/launch_scripts_copy.py)
                    out[os.path.abspath(path)] = {"launcher_copy": note["launcher_copy"]}
                continue
            if not isinstance(note, dict) or not str(note.get("command", "")).startswith("torchrun "):
                continue
            path = str(note.get("path") or getattr(fr, "path", ""))
            m = re.match(r"torchrun --standalone --nproc_per_node=(\S+) ", note["command"])
            if not m or not path:
                continue
            flags = [t for t in note["command"][m.end():].split()[1:] if t.startswith("-")]  # after the path
            out[os.path.abspath(path)] = {"nproc": m.group(1), "flags": flags}
    return out


def mentions_moved_script(data: bytes, scripts: Dict[str, Dict[str, object]]) -> bool:
    """Whether a launch file's bytes name one of the moved scripts (it then needs pass 2)."""
    return any(os.path.basename(p).encode() in data for p in scripts)


def _resolve(script: str, bases: Sequence[str], scripts: Dict[str, Dict[str, object]]) -> Optional[Dict[str, object]]:
    for base in bases:
        cand = os.path.abspath(os.path.join(base, script))
        if os.path.isfile(cand):
            return scripts.get(cand)  # the first file that exists is the one the line runs
    return None


def _torchrun_line(m: "re.Match[str]", nproc: str) -> str:
    interp, flags = m.group("interp"), m.group("flags")
    launcher = "torchrun" if re.fullmatch(r"python(?:3(?:\.\d+)?)?", interp) and not flags else \
        f"{interp}{flags} -m torch.distributed.run"
    return f"{launcher} --standalone --nproc_per_node={nproc} {m.group('script')}"


def _command(lines: List[str], start: int) -> str:
    out = [lines[start]]
    while out[-1].rstrip().endswith("\\") and start + len(out) < len(lines):
        out.append(lines[start + len(out)])
    return " ".join(out)


def rewrite_plain_launches(text: str, bases: Sequence[str], scripts: Dict[str, Dict[str, object]],
                           select=lambda code: True, rewrite: bool = True) -> Tuple[str, List[Finding]]:
    """Rewrite (shell) or report (`rewrite=False`, docs) `python SCRIPT.py` lines of moved scripts."""
    findings: List[Finding] = []
    if not scripts or not select("A2A420"):
        return text, findings
    sup = Suppressions(text)
    raw = text.splitlines(keepends=True)
    bodies = [ln.rstrip("\r\n") for ln in raw]
    out: List[str] = []
    for i, (line, body) in enumerate(zip(raw, bodies), start=1):
        new = body
        for m in reversed(list(_RUN.finditer(body))):
            info = _resolve(m.group("script"), bases, scripts)
            if info is None or "launcher_copy" in info or sup.covers(i, "A2A420"):
                continue
            command = _command(bodies, i - 1)
            if any(not re.search(r"(?<![\w-])" + re.escape(str(f)) + r"(?![\w-])", command) for f in info["flags"]):
                continue  # the line runs the script's non-spawn path, which the migration left as it was
            line_new = _torchrun_line(m, str(info["nproc"]))
            if rewrite:
                new = new[:m.start()] + line_new + new[m.end():]
                findings.append(Finding("A2A420", f"`{m.group(0)}` -> `{line_new}`: the run moved "
                                        f"{m.group('script')}'s mp.spawn to torchrun (it reads LOCAL_RANK)",
                                        i, m.start() + 1, FIX, True, new_line=i))
            else:
                findings.append(Finding("A2A420", f"documentation shows `{m.group(0)}`, but the run moved "
                                        f"{m.group('script')}'s mp.spawn to torchrun: update the command to "
                                        f"`{line_new} ...` (a plain python run fails on the missing LOCAL_RANK)",
                                        i, m.start() + 1, INFO, False))
        out.append(new + line[len(body):])
    findings.sort(key=lambda f: (f.line, f.col))
    return "".join(out), findings
