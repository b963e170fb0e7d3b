"""Strings that still name an apex API in a file the run migrated (findings only, A2A224).

A log line or message written for the apex code (`logger.info("Using apex.parallel.DistributedDataParallel
...")` next to the wrapping the run replaced) outlives the migration: after the rewrite it describes code
that is gone. Text is not rewritten (it may be read by tests, dashboards or parsers of the log), so each
such string gets an info finding at its line. Only files an earlier stage of this run changed are read,
and only strings that are text (they hold a space or are docstrings), not a module name handed to an
import (`importlib.import_module("apex.parallel")`), which the import passes own, nor the message of a
failed apex import (`except ImportError: raise ImportError("... apex.amp")`), nor a helper the run added.
"""
from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from .base import INFO, Codemod, FileContext, rule
from .index import ModuleIndex
from .walk import iter_nodes

NAMED_IN_TEXT = rule(
    "A2A224", "apex-named-in-text", "a string still names an apex API in a file the run migrated",
    fixes=False, severity=INFO,
    why="""
The run changed this file's apex code, but a string (a log or error message, a docstring) still names
the apex API, for example `"Using apex.parallel.DistributedDataParallel ..."` logged before the wrapping
the run replaced with torch's DistributedDataParallel. apex2amp does not rewrite text, which tests,
dashboards or log parsers may read: update it where it describes code that now uses torch.""",
    before='''
import logging

import apex

logger = logging.getLogger(__name__)


def wrap(model):
    logger.info("Using apex.parallel.DistributedDataParallel ...")
    return apex.parallel.DistributedDataParallel(model, delay_allreduce=True)''',
    after='''
import logging

import torch

logger = logging.getLogger(__name__)


def wrap(model):
    logger.info("Using apex.parallel.DistributedDataParallel ...")
    return torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False, find_unused_parameters=True)''')

_NAMED = re.compile(r"\bapex\.(?:parallel|amp|optimizers|normalization|fp16_utils)(?:\.\w+)*"
                    r"|\bamp\.(?:initialize|scale_loss|master_params)\b|\bconvert_syncbn_model\b|\bFP16_Optimizer\b")


def _text(node: cst.BaseExpression) -> Optional[str]:
    if isinstance(node, cst.SimpleString):
        v = node.evaluated_value
        return v if isinstance(v, str) else None
    if isinstance(node, cst.FormattedString):
        return "".join(p.value for p in node.parts if isinstance(p, cst.FormattedStringText))
    if isinstance(node, cst.ConcatenatedString):
        left, right = _text(node.left), _text(node.right)  # type: ignore[arg-type]
        return None if left is None or right is None else left + right
    return None


def _is_docstring(node: cst.CSTNode, index: ModuleIndex) -> bool:
    expr = index.parent(node)
    line = index.parent(expr) if isinstance(expr, cst.Expr) else None
    if not (isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1):
        return False
    block = index.parent(line)
    body = block.body if isinstance(block, (cst.Module, cst.IndentedBlock)) else None
    return bool(body) and body[0] is line and (isinstance(block, cst.Module) or
                                               isinstance(index.parent(block), (cst.FunctionDef, cst.ClassDef)))


def _in_import_error_handler(node: cst.CSTNode, index: ModuleIndex) -> bool:
    """Whether `node` sits in an `except ImportError:` (or ModuleNotFoundError) handler: the message of a
    failed apex import, true for as long as the file imports apex."""
    for a in index.ancestors(node):
        if isinstance(a, cst.ExceptHandler) and a.type is not None and any(
                isinstance(n, cst.Name) and n.value in ("ImportError", "ModuleNotFoundError")
                for n in iter_nodes(a.type)):
            return True
    return False


class ApexNamedInText(Codemod):
    """Report strings naming apex APIs in files the run migrated."""

    NAME = "apex_mentions"
    DESCRIPTION = "strings that still name an apex API in a migrated file (findings only)"
    CODES = (NAMED_IN_TEXT.code,)
    TOKENS = (b"apex.", b"amp.", b"convert_syncbn_model", b"FP16_Optimizer")
    REPORTS_ONLY = True

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        if not ctx.changed_by or not ctx.enabled(NAMED_IN_TEXT.code):
            return module
        index = ModuleIndex.of(module)
        for node in index.nodes:
            if type(node) not in (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString):
                continue
            if isinstance(index.parent(node), cst.ConcatenatedString):
                continue  # read once, as the whole string
            text = _text(node)  # type: ignore[arg-type]
            m = _NAMED.search(text) if text is not None else None
            if m is None or not (any(c.isspace() for c in text) or _is_docstring(node, index)):  # type: ignore
                continue
            if "apex2amp" in text or _in_import_error_handler(node, index):  # type: ignore[operator]
                continue  # a helper the run added names what it stands for; "install apex" while apex is imported
            if ctx.suppressed(node, NAMED_IN_TEXT.code):
                continue
            ctx.report(node, NAMED_IN_TEXT.code, f"this string still names `{m.group(0)}`, and the run changed "
                       "this file's apex code: update the text where it describes code that now uses torch")
        return module
