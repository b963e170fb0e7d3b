"""`python -m torch.distributed.launch` launch commands held in Python code (findings only, A2A415).

Job launchers and sweep scripts build the launch command themselves and start it with `subprocess`
or `os.system`: `f"python -m torch.distributed.launch --nproc_per_node={n} train.py"` or
`[sys.executable, "-m", "torch.distributed.launch", ...]`. Rewriting a command assembled at run time
cannot be shown right (its pieces may come from anywhere), so each one gets a finding at its line with
the torchrun command to use. Launch lines in YAML / INI config files: migrate/launch_scripts.py (A2A414).
"""
from __future__ import annotations

import re
from typing import List, Optional

import libcst as cst

from .base import WARNING, Codemod, FileContext, rule
from .index import ModuleIndex

IN_CODE = rule(
    "A2A415", "launch-command-in-code", "a torch.distributed.launch command built in Python (subprocess, os.system)",
    fixes=False, severity=WARNING,
    why="""
The code starts training with `python -m torch.distributed.launch`, which is deprecated and, unlike
torchrun, passes `--local_rank` to the script. The command is built at run time (a string or an
argument list handed to subprocess or os.system), so apex2amp does not rewrite it: change it to the
torchrun line the finding shows (`torchrun ...`, or `sys.executable, "-m", "torch.distributed.run"` in an
argument list, the same program), and drop `--use_env`, which torchrun always behaves as.""",
    before='subprocess.run([sys.executable, "-m", "torch.distributed.launch", "--nproc_per_node=4", "--use_env", "train.py"])',
    after='subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=4", "train.py"])')

CONFIG = rule(
    "A2A414", "launch-command-in-config", "a torch.distributed.launch command in a YAML / INI config file",
    fixes=False, severity=WARNING,
    why="""
A config file (CI workflow, job or sweep definition: YAML, INI, .cfg) holds a launch command with
`python -m torch.distributed.launch`. Config files are not rewritten (their quoting and templating are
their own): replace the command with the torchrun line the finding shows; torchrun sets LOCAL_RANK
instead of passing --local_rank and rejects --use_env.""",
    before="""
command: python -m torch.distributed.launch --nproc_per_node=8 --use_env train.py""",
    after="command: torchrun --nproc_per_node=8 train.py")

_PLAIN = re.compile(r"(?<![\w/$.-])python(?:3(?:\.\d+)?)?\s+-m\s+torch\.distributed\.launch\b")
_OTHER = re.compile(r"-m\s+torch\.distributed\.launch\b")
_USE_ENV = re.compile(r"\s--use[_-]env\b(?:=\S+)?")


def torchrun_line(command: str) -> str:
    """`python -m torch.distributed.launch --use_env ARGS` -> `torchrun ARGS` (other interpreters keep
    their spelling and run `-m torch.distributed.run`)."""
    new = _PLAIN.sub("torchrun", command)
    new = _OTHER.sub("-m torch.distributed.run", new)
    return _USE_ENV.sub("", new).strip()


class LaunchCommandInCode(Codemod):
    """Report torch.distributed.launch commands built in Python code."""

    NAME = "launch_lines"
    DESCRIPTION = "torch.distributed.launch commands built in Python code (findings only)"
    CODES = (IN_CODE.code,)
    TOKENS = (b"torch.distributed.launch",)
    REPORTS_ONLY = True

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        index = ModuleIndex.of(module)
        docstrings = _docstrings(module, index)
        for node in index.nodes:
            if type(node) in (cst.List, cst.Tuple):
                self._argument_list(node, ctx)  # type: ignore[arg-type]
            elif type(node) in (cst.SimpleString, cst.FormattedString) and id(node) not in docstrings:
                parent = index.parent(node)
                if isinstance(parent, cst.ConcatenatedString):
                    continue  # reported once, at the whole string below
                self._command_string(node, ctx)
            elif type(node) is cst.ConcatenatedString and id(node) not in docstrings \
                    and not isinstance(index.parent(node), cst.ConcatenatedString):
                self._command_string(node, ctx)
        return module

    def _command_string(self, node: cst.BaseExpression, ctx: FileContext) -> None:
        text = _text(node)
        if text is None or not _OTHER.search(text) or ctx.suppressed(node, IN_CODE.code):
            return
        ctx.report(node, IN_CODE.code, "launch command with python -m torch.distributed.launch: use "
                   f"`{torchrun_line(text)}` (torchrun sets LOCAL_RANK and passes no --local_rank)")

    def _argument_list(self, node: cst.BaseExpression, ctx: FileContext) -> None:
        elements = [getattr(e, "value", None) for e in node.elements]  # type: ignore[attr-defined]
        strings = [e.evaluated_value if isinstance(e, cst.SimpleString) else None for e in elements]
        for i in range(len(strings) - 1):
            if strings[i] == "-m" and strings[i + 1] == "torch.distributed.launch":
                if ctx.suppressed(node, IN_CODE.code):
                    return
                drop = " and drop \"--use_env\"" if any(s in ("--use_env", "--use-env") for s in strings) else ""
                ctx.report(elements[i + 1], IN_CODE.code, "launch through torch.distributed.launch in an argument "
                           "list: use \"-m\", \"torch.distributed.run\" (torchrun)" + drop +
                           "; the script then reads LOCAL_RANK instead of --local_rank")
                return


def _text(node: cst.BaseExpression) -> Optional[str]:
    """The literal text of a string (f-string fields kept as `{...}` source)."""
    if isinstance(node, cst.SimpleString):
        v = node.evaluated_value
        return v if isinstance(v, str) else None
    if isinstance(node, cst.FormattedString):
        return cst.Module([]).code_for_node(node)[len(node.start):-len(node.end)]
    if isinstance(node, cst.ConcatenatedString):
        left, right = _text(node.left), _text(node.right)  # type: ignore[arg-type]
        return None if left is None or right is None else left + right
    return None


def _docstrings(module: cst.Module, index: ModuleIndex) -> set:
    """ids of the strings that are docstrings (the first statement of a module, class or function)."""
    out = set()
    bodies: List = [module.body]
    for node in index.nodes:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and isinstance(node.body, cst.IndentedBlock):
            bodies.append(node.body.body)
    for body in bodies:
        if body and isinstance(body[0], cst.SimpleStatementLine) and len(body[0].body) == 1 and \
                isinstance(body[0].body[0], cst.Expr):
            out.add(id(body[0].body[0].value))
    return out
