"""`python -m torch.distributed.launch` launch commands held in Python code (findings only, A2A415).

Job launchers and sweep scripts build the launch command themselves and start it with `subprocess`
or `os.system`: `f"python -m torch.distributed.launch --nproc_per_node={n} train.py"` or
`[sys.executable, "-m", "torch.distributed.launch", ...]`. Rewriting a command assembled at run time
cannot be shown right (its pieces may come from anywhere), so each one gets a finding at its line with
the torchrun command to use. Launch lines in YAML / INI config files: migrate/launch_scripts.py (A2A414).

A launch line shown in a docstring or a comment (`python -m torch.distributed.launch --nproc_per_node=N
train.py`) is documentation: A2A411 at that line with the torchrun line to use. A module that is itself a
copy of torch's launcher (its docstring documents `torch.distributed.launch`, it parses `--nproc_per_node`
and starts the workers with subprocess) gets one more A2A411: torchrun replaces it.
"""
from __future__ import annotations

import io
import re
import tokenize
from typing import Iterator, List, Optional, Tuple

import libcst as cst

from .base import WARNING, Codemod, FileContext, rule
from .index import ModuleIndex
from .launch_copy import launcher_copy_plan
from .launch_messages import is_prose

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
# a launch line, not prose about the launcher: the module is followed by a flag or a script
_DOC_LINE = re.compile(r"(?:[\w./${}-]+\s+)?-m\s+torch\.distributed\.launch"
                       r"(?=\s+(?:--?\w|\S+\.py\b))[^\n]*")


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
    CODES = (IN_CODE.code, "A2A411")
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
        for line, col, text in _doc_lines(module, docstrings, ctx):
            _report_doc_line(ctx, line, col, text)
        if _is_launcher_copy(module, index, docstrings):
            doc = module.body[0].body[0].value  # type: ignore[attr-defined]
            k = next(i for i, t in enumerate(doc.value.split("\n")) if "torch.distributed.launch" in t)
            plan, why = launcher_copy_plan(module.code)
            if plan is not None:
                ctx.launch_notes.append({"path": ctx.path, "launcher_copy": plan})
            ctx.report(doc, "A2A411", _copy_message(plan, why), at=(ctx.line_of(doc) + k, 1) if k else None)
        return module

    def _command_string(self, node: cst.BaseExpression, ctx: FileContext) -> None:
        text = _text(node)
        if text is None or not _OTHER.search(text) or ctx.suppressed(node, IN_CODE.code):
            return
        if is_prose(text):
            ctx.report(node, IN_CODE.code, "a string names `-m torch.distributed.launch` in prose, not a command "
                       "(A2A419 rewrites it where it is only a message: an argparse description / help, print, a "
                       "logger, a raised exception; here its use is not shown): if users read it, say "
                       "`-m torch.distributed.run` (torchrun), which sets LOCAL_RANK and passes no --local_rank")
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


def _copy_message(plan, why: str) -> str:
    """A2A411 for a module that is a copy of torch's launcher: what replaces it, and what to do with it."""
    head = "this module is a copy of torch's launcher (torch.distributed.launch), which torchrun replaces"
    if plan is None:
        return (f"{head}, but not line for line: {why}. Launch the training script with `torchrun "
                "--nproc_per_node=N SCRIPT.py ...` (it sets LOCAL_RANK, RANK and WORLD_SIZE and passes no "
                "--local_rank) once the script and the callers no longer need what this copy does, then drop it")
    extra = " ".join(plan["append"])
    tail = f" with `{extra}` appended at the end (this copy appended it to the script's arguments)" if extra else ""
    unbuf = "; it ran the workers with `python -u`: set PYTHONUNBUFFERED=1 where the logs' order matters" \
        if plan["unbuffered"] else ""
    return (f"{head} line for line (the same options and defaults, MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK/"
            f"LOCAL_RANK as torchrun sets them, no --local_rank): the run rewrote the shell lines that run it "
            f"(`python THIS_FILE.py ...`) to `torchrun ...`{tail} (A2A421){unbuf}. Nothing of it is needed then: "
            "delete this file once no other caller (a README line, a job outside the repository) runs it; "
            "apex2amp does not delete files")


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


def _report_doc_line(ctx: FileContext, line: int, col: int, text: str) -> None:
    """A2A411 for a launch line shown in a docstring or a comment."""
    m = _DOC_LINE.search(text)
    if m is None or ctx.suppressions is not None and ctx.suppressions.covers(line, "A2A411"):
        return
    command = m.group(0).split("  #")[0].strip()
    while command and (command[-1] in ".,;:`'\"" or command[-1] == ")" and command.count("(") < command.count(")")):
        command = command[:-1]  # the sentence's punctuation, not the command's
    ctx.report(None, "A2A411", f"a docstring / comment shows `{command}`: update it to `{torchrun_line(command)}` "
               "(torchrun passes no --local_rank; the script reads LOCAL_RANK)", at=(line, col + m.start() + 1))


def _doc_lines(module: cst.Module, docstrings: set, ctx: FileContext) -> Iterator[Tuple[int, int, str]]:
    """(line, column, text) of every line of the module's docstrings and comments."""
    for node in _docstring_nodes(module):
        if id(node) not in docstrings or not isinstance(node, cst.SimpleString):
            continue
        first = ctx.line_of(node)
        if not first:
            continue
        for k, text in enumerate(node.value.split("\n")):
            yield first + k, 0, text
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(module.code).readline))
    except (tokenize.TokenError, SyntaxError):
        return
    for tok in tokens:
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.start[1], tok.string


def _docstring_nodes(module: cst.Module) -> List[cst.CSTNode]:
    out: List[cst.CSTNode] = []
    stack: List[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        body = node.body if isinstance(node, cst.Module) else \
            (node.body.body if isinstance(node.body, cst.IndentedBlock) else [])  # type: ignore[attr-defined]
        if body and isinstance(body[0], cst.SimpleStatementLine) and len(body[0].body) == 1 and \
                isinstance(body[0].body[0], cst.Expr):
            out.append(body[0].body[0].value)
        stack.extend(s for s in body if isinstance(s, (cst.FunctionDef, cst.ClassDef)))
    return out


def _is_launcher_copy(module: cst.Module, index: ModuleIndex, docstrings: set) -> bool:
    """Whether the module is a copy of torch's launcher: its docstring documents torch.distributed.launch,
    it declares a `--nproc_per_node` option, starts processes with subprocess and hands them `--local_rank` (or
    LOCAL_RANK),
    and no command of its own runs torch.distributed.launch (a job launcher that calls the real one)."""
    doc = module.body[0] if module.body else None
    if not (isinstance(doc, cst.SimpleStatementLine) and len(doc.body) == 1 and isinstance(doc.body[0], cst.Expr)
            and isinstance(doc.body[0].value, cst.SimpleString)):
        return False
    text = doc.body[0].value.evaluated_value
    if not isinstance(text, str) or "torch.distributed.launch" not in text:
        return False
    nproc = popen = local_rank = False
    for node in index.nodes:
        if type(node) in (cst.SimpleString, cst.FormattedString) and id(node) not in docstrings:
            code = cst.Module([]).code_for_node(node)
            if "torch.distributed.launch" in code:
                return False
            local_rank = local_rank or any(k in code for k in ("--local_rank", "--local-rank", "LOCAL_RANK"))
        if isinstance(node, cst.SimpleString) and node.evaluated_value in ("--nproc_per_node", "--nproc-per-node"):
            nproc = True
        elif isinstance(node, cst.Attribute) and node.attr.value == "Popen" and \
                isinstance(node.value, cst.Name) and node.value.value == "subprocess":
            popen = True
    return nproc and popen and local_rank
