"""Messages that tell the user to launch with `python -m torch.distributed.launch` (A2A419, a fix).

A help text or an error message names the deprecated launcher as the way to start the program:
`argparse.ArgumentParser(description="... using torchrun (python -m torch.distributed.launch) ...")`,
`raise RuntimeError("... using python " + "-m torch.distributed.launch to launch the command")`. The
text is prose, not a command (the launcher's name is followed by a word or a closing bracket, never by
a flag or a script), and it only reaches a human: the string (or the `+` / implicit concatenation it is
part of) is the `description` / `help` / `epilog` / `usage` of a call, the argument of `print`,
`warnings.warn`, a logger method or of the exception a `raise` creates, or what a function of this file
returns when every use of that function is such an argument. There `-m torch.distributed.launch` (and a
`--use_env` after it) becomes `-m torch.distributed.run`, the module torchrun runs: the message now
names the launcher the migrated program is started with. Nothing else changes (a message has no
behaviour). A string that could be a command, or whose use is not shown, keeps its finding (A2A415,
launch_lines.py).
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Set

import libcst as cst

from .base import FIX, Codemod, FileContext, rule
from .index import ModuleIndex

IN_MESSAGE = rule(
    "A2A419", "launch-named-in-message", "a help text / error message naming torch.distributed.launch names "
    "torch.distributed.run", fixes=True, severity=FIX,
    why="""
A help text or an error message tells the user to start the program with `python -m
torch.distributed.launch`, which is deprecated and, unlike torchrun, passes `--local_rank`. The string
is prose (the launcher's name is followed by a word or a bracket, not by a flag or a script) and only
reaches a human: an argparse description / help, the argument of print, warnings.warn, a logger or an
exception being raised, or the return value of a function used only that way. `-m
torch.distributed.launch` (with a `--use_env` after it) becomes `-m torch.distributed.run`, the
module torchrun runs, so the message names the launcher of the migrated program. A string that might
be a command keeps its A2A415 finding.""",
    before='''
import argparse

parser = argparse.ArgumentParser(
    description="Train the model. For several GPUs launch it with "
    "torchrun (python -m torch.distributed.launch) or horovodrun.")''',
    after='''
import argparse

parser = argparse.ArgumentParser(
    description="Train the model. For several GPUs launch it with "
    "torchrun (python -m torch.distributed.run) or horovodrun.")''')

# the launcher's name followed by prose: a closing bracket / punctuation, or a word and more text
_PROSE = re.compile(r"-m(\s+)torch\.distributed\.launch((?:\s+--use[_-]env)?)"
                    r"(?=\s*[)\],;:]|\s+(?:to|or|and|for|with|instead|which|is|was|from|in|on)\b)")
_MESSAGE_KEYWORDS = frozenset({"description", "help", "epilog", "usage", "msg", "message"})
_LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal"})
_LOGGERS = frozenset({"logger", "logging", "log", "LOGGER", "_logger", "_LOGGER"})


def is_prose(text: str) -> bool:
    """Whether `text` names `-m torch.distributed.launch` in a sentence rather than in a command."""
    return _PROSE.search(text) is not None


class LaunchNamedInMessage(Codemod):
    """`-m torch.distributed.launch` in a message's prose -> `-m torch.distributed.run`."""

    NAME = "launch_messages"
    DESCRIPTION = "messages naming torch.distributed.launch name torch.distributed.run"
    CODES = (IN_MESSAGE.code,)
    TOKENS = (b"torch.distributed.launch",)

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        if not ctx.enabled(IN_MESSAGE.code):
            return module
        index = ModuleIndex.of(module)
        returned_by = _message_functions(index)
        edits: Dict[int, cst.SimpleString] = {}
        for node in index.nodes:
            if type(node) is not cst.SimpleString or not _PROSE.search(node.value) or "b" in node.prefix.lower():
                continue
            top = _expression_top(node, index)
            if not _is_message(top, index, returned_by) or ctx.suppressed(node, IN_MESSAGE.code):
                continue
            edits[id(node)] = node.with_changes(value=_PROSE.sub(r"-m\1torch.distributed.run", node.value))
            ctx.report(node, IN_MESSAGE.code, "a message names `-m torch.distributed.launch` as the way to "
                       "launch: it now names `-m torch.distributed.run` (torchrun), the launcher of the migrated "
                       "program", fixed=True)
        if not edits:
            return module
        return module.visit(_Replace(edits))


class _Replace(cst.CSTTransformer):
    def __init__(self, edits: Dict[int, cst.SimpleString]):
        self.edits = edits

    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString) -> cst.BaseExpression:
        return self.edits.get(id(original), updated)


def _expression_top(node: cst.CSTNode, index: ModuleIndex) -> cst.CSTNode:
    """The outermost string expression `node` is a piece of (implicit or `+` concatenation)."""
    top = node
    parent = index.parent(top)
    while isinstance(parent, cst.ConcatenatedString) or \
            isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.Add):
        top = parent
        parent = index.parent(top)
    return top


def _is_message(top: cst.CSTNode, index: ModuleIndex, returned_by: Set[str]) -> bool:
    parent = index.parent(top)
    if isinstance(parent, cst.Arg):
        call = index.parent(parent)
        return isinstance(call, cst.Call) and _message_arg(call, parent, index)
    if isinstance(parent, cst.Return):
        fdef = next((a for a in index.ancestors(parent) if isinstance(a, cst.FunctionDef)), None)
        return fdef is not None and fdef.name.value in returned_by
    return False


def _message_arg(call: cst.Call, arg: cst.Arg, index: ModuleIndex) -> bool:
    """Whether `arg` of `call` is text only a human reads."""
    if arg.keyword is not None:
        return arg.keyword.value in _MESSAGE_KEYWORDS
    if arg.star:
        return False
    func = call.func
    if isinstance(func, cst.Name) and func.value == "print":
        return True
    if isinstance(func, cst.Attribute):
        owner = func.value
        if func.attr.value == "warn" and isinstance(owner, cst.Name) and owner.value == "warnings":
            return True
        if func.attr.value in _LOG_METHODS and (isinstance(owner, cst.Name) and owner.value in _LOGGERS or
                                                isinstance(owner, cst.Attribute) and owner.attr.value in _LOGGERS):
            return True
    raised = index.parent(call)
    return isinstance(raised, cst.Raise) and raised.exc is call


def _message_functions(index: ModuleIndex) -> Set[str]:
    """Module-level functions every reference of which is a call whose result is a message argument."""
    funcs = {s.name.value for s in index.module.body if isinstance(s, cst.FunctionDef)}
    uses: Dict[str, List[cst.Name]] = {f: [] for f in funcs}
    for node in index.nodes:
        if type(node) is cst.Name and node.value in uses and not isinstance(index.parent(node), cst.FunctionDef):
            uses[node.value].append(node)
    out = set()
    for name, refs in uses.items():
        if refs and all(_called_as_message(r, index) for r in refs):
            out.add(name)
    return out


def _called_as_message(ref: cst.Name, index: ModuleIndex) -> bool:
    call = index.parent(ref)
    if not (isinstance(call, cst.Call) and call.func is ref):
        return False
    top: Optional[cst.CSTNode] = _expression_top(call, index)
    parent = index.parent(top) if top is not None else None
    if not isinstance(parent, cst.Arg):
        return False
    outer = index.parent(parent)
    return isinstance(outer, cst.Call) and _message_arg(outer, parent, index)
