"""Launch lines that run the repository's own copy of torch.distributed.launch -> torchrun (A2A421).

`python ./scripts/launch.py --nproc_per_node "$1" "$2" --cfg "$3"` runs a copy of the old launcher
that codemods/launch_copy.py showed torchrun replaces line for line (pass 1 records it in the facts,
with the literal arguments the copy appended to the script's). In shell-like files the line becomes
`torchrun --nproc_per_node "$1" "$2" --cfg "$3" --dist`: the interpreter and the copy's path become
`torchrun` (`python -u` and other interpreters keep their spelling and run `-m torch.distributed.run`),
the launcher options stay (they are torchrun's), and the appended arguments go at the end of the
command (its last `\\` continuation line). The line is only reported when:
- it passes an option before the training script that is not one of the copy's (--nnodes, --node_rank,
  --nproc_per_node, --master_addr, --master_port), or names no training script;
- the command goes on into a pipe, a redirection, `;`, `&`, a command substitution or a comment (the
  appended arguments' place is not the end of the line), or its quoting does not parse;
- it is a comment (documentation, as are Markdown files: findings only).
"""
from __future__ import annotations

import re
import shlex
from typing import Dict, List, Sequence, Tuple

from codemods.base import FIX, INFO, WARNING, Finding
from codemods.launch_copy import OPTIONS
from codemods.suppression import Suppressions

_SHELL_OPS = re.compile(r"[|&;<>`#]|\$\(")


def rewrite_copy_launches(text: str, bases: Sequence[str], scripts: Dict[str, Dict[str, object]],
                          select=lambda code: True, rewrite: bool = True) -> Tuple[str, List[Finding]]:
    """Rewrite (shell) or report (`rewrite=False`: docs) the lines that run a launcher copy."""
    from .launch_torchrun import _RUN, _resolve
    findings: List[Finding] = []
    copies = {p: i for p, i in scripts.items() if "launcher_copy" in i}
    if not copies or not select("A2A421"):
        return text, findings
    sup = Suppressions(text)
    raw = text.splitlines(keepends=True)
    bodies = [ln.rstrip("\r\n") for ln in raw]
    new = list(bodies)
    for i, body in enumerate(bodies):
        for m in reversed(list(_RUN.finditer(body))):
            info = _resolve(m.group("script"), bases, copies)
            if info is None or sup.covers(i + 1, "A2A421"):
                continue
            plan = info["launcher_copy"]
            last = i
            while bodies[last].rstrip().endswith("\\") and last + 1 < len(bodies):
                last += 1
            tail = " ".join([body[m.end():]] + bodies[i + 1:last + 1]).replace("\\", " ")
            launcher = _launcher(m)
            append = " ".join(shlex.quote(a) for a in plan["append"])  # type: ignore[index, union-attr]
            why = _why_not(tail)
            shown = f"{launcher}{tail.rstrip()}{' ' + append if append else ''}"
            unbuf = " (the copy ran the workers with `python -u`: set PYTHONUNBUFFERED=1 where the logs' order " \
                "matters)" if plan.get("unbuffered") else ""  # type: ignore[union-attr]
            if not rewrite or body.lstrip().startswith("#") or why:
                if why and rewrite:
                    todo = (f"not rewritten, {why}: by hand, run `{launcher}` in its place with the same launcher "
                            "options" + (f" and `{append}` right after the training script's last argument" if append
                                         else ""))
                else:
                    todo = f"update the command to `{' '.join(shown.split())}`"
                findings.append(Finding("A2A421", f"`{m.group(0)}` runs a copy of torch.distributed.launch that "
                                        f"torchrun replaces: {todo}{unbuf}", i + 1, m.start() + 1,
                                        WARNING if why and rewrite else INFO, False))
                continue
            if append:
                end = new[last].rstrip()
                new[last] = end + " " + append + new[last][len(end):]
            new[i] = new[i][:m.start()] + launcher + new[i][m.end():]
            what = f"; `{append}` (which the copy appended to the script's arguments) appended" if append else ""
            findings.append(Finding("A2A421", f"`{m.group(0)}` (a copy of torch.distributed.launch) -> `{launcher}`, "
                                    f"the same launcher options{what}{unbuf}", i + 1, m.start() + 1, FIX, True,
                                    new_line=i + 1))
    out = [n + line[len(b):] for n, b, line in zip(new, bodies, raw)]
    findings.sort(key=lambda f: (f.line, f.col))
    return "".join(out), findings


def _launcher(m: "re.Match[str]") -> str:
    interp, flags = m.group("interp"), m.group("flags")
    if re.fullmatch(r"python(?:3(?:\.\d+)?)?", interp) and not flags:
        return "torchrun"
    return f"{interp}{flags} -m torch.distributed.run"


def _why_not(tail: str) -> str:
    """Why the command after the copy's path cannot become torchrun's as written ("" when it can)."""
    if _SHELL_OPS.search(tail):
        return "as the command goes on into a pipe, a redirection, a command list or a comment"
    try:
        tokens = shlex.split(tail)
    except ValueError:
        return "as its quoting does not parse"
    k = 0
    while k < len(tokens) and tokens[k].startswith("-"):
        name = tokens[k].lstrip("-").split("=", 1)[0].replace("-", "_")
        if name not in OPTIONS or not tokens[k].startswith("--"):
            return f"as `{tokens[k]}` is not an option of the copy that torchrun takes the same way"
        k += 1 if "=" in tokens[k] else 2
    if k >= len(tokens):
        return "as it names no training script"
    return ""
