"""fp16 casts outside the migrated autocast regions (A2A607): the rule and the per-file scan.

apex O1 patched torch functions process-wide once `amp.initialize` ran, so code anywhere in that
process (an evaluation loop, another module) could feed `.half()` tensors to fp32 layers. After the
migration autocast covers only the planned regions, and such code raises a dtype mismatch (or runs in
another precision). A2A604 already reports every cast in a file that uses autocast / GradScaler; this
scan covers the other files of the migrated program (which ones: `migrate/half_outside.py`). Findings
only, never a rewrite: whether the cast should go or the forward should run under autocast depends on
what the code feeds.
"""
from __future__ import annotations

import ast
from typing import List, Optional, Set, Tuple

from .base import WARNING, rule

CODE = "A2A607"

rule(CODE, "fp16-cast-outside-autocast", ".half() / float16 cast outside the migrated autocast regions",
     fixes=False, severity=WARNING,
     why="""
apex O1 patched torch functions process-wide, so code anywhere in the training program (an
evaluation loop, another module) could feed fp16 tensors to fp32 layers. After the migration autocast
covers only the regions it planned, so such a cast now raises a dtype mismatch ("expected scalar type
Half but found Float") or runs in another precision. Reported in the files of a migrated program (the
import graph of every script that reaches a file migrated from apex amp) that use no autocast
themselves: wrap the forward that uses the cast in `torch.autocast("cuda", dtype=torch.float16,
enabled=...)` with the same enabled= as training, or drop the cast. Casts plainly on purpose are not
reported (a round trip `x.half().float()`, one side of `x.half() if fp16 else x.float()`), nor
casts in a class that defines `forward` (an nn.Module runs where its caller runs, the training region
included) or stored into a buffer slot (`scores[i] = out.half()`).""",
     before="""
# file: train.py
import torch
from apex import amp

from evaluate import evaluate


def train(model, optimizer, loader, opt_level):
    model, optimizer = amp.initialize(model, optimizer, opt_level=opt_level)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
    return evaluate(model, loader, fp16=opt_level != "O0")
# file: evaluate.py
import torch


def evaluate(model, loader, fp16):
    with torch.no_grad():
        return [model(x.half() if fp16 else x) for x, _ in loader]""",
     after="""
# file: train.py
import torch

from evaluate import evaluate


def train(model, optimizer, loader, opt_level):
    scaler = torch.amp.GradScaler("cuda", enabled=opt_level != "O0")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16, enabled=opt_level != "O0"):
            loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    return evaluate(model, loader, fp16=opt_level != "O0")""")

HALF_DTYPES = {"torch.float16", "torch.half"}
HALF_TYPES = HALF_DTYPES | {"torch.HalfTensor", "torch.cuda.HalfTensor"}


def _dotted(node: ast.AST) -> str:
    parts: List[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _is_float_call(node: Optional[ast.AST]) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "float"


def _half_cast(node: ast.Call) -> str:
    """What fp16 cast `node` is ("" when none): `.half()`, `.to(torch.float16)`, `.type(torch.HalfTensor)`."""
    if not isinstance(node.func, ast.Attribute):
        return ""
    attr = node.func.attr
    if attr == "half" and not node.args and not node.keywords:
        return ".half()"
    if attr in ("to", "type"):
        values = list(node.args) + [k.value for k in node.keywords if k.arg == "dtype"]
        for v in values:
            d = _dotted(v)
            if (attr == "to" and d in HALF_DTYPES) or (attr == "type" and d in HALF_TYPES):
                return f".{attr}({d})"
            if attr == "type" and isinstance(v, ast.Constant) and isinstance(v.value, str) \
                    and "HalfTensor" in v.value:
                return f".type({v.value!r})"
    return ""


def _parents(tree: ast.AST) -> dict:
    out = {}
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            out[id(child)] = parent
    return out


def _deliberate(node: ast.Call, parents: dict) -> bool:
    """A round trip (`x.half().float()`) or one side of a switch whose other side is `.float()`."""
    parent = parents.get(id(node))
    if isinstance(parent, ast.Attribute) and parent.attr == "float" \
            and isinstance(parents.get(id(parent)), ast.Call):
        return True
    if isinstance(parent, ast.IfExp) and (parent.body is node or parent.orelse is node):
        return _is_float_call(parent.orelse if parent.body is node else parent.body)
    return False


def _in_autocast(node: ast.AST, parents: dict) -> bool:
    cur = parents.get(id(node))
    while cur is not None:
        if isinstance(cur, (ast.With, ast.AsyncWith)) and any(
                isinstance(i.context_expr, ast.Call) and _dotted(i.context_expr.func).endswith("autocast")
                for i in cur.items):
            return True
        cur = parents.get(id(cur))
    return False


def _in_module_class(node: ast.AST, parents: dict) -> bool:
    """Inside a class that defines `forward` (an nn.Module): its code runs wherever its caller runs,
    inside the migrated autocast region during training, so a cast there is not known to lie outside."""
    cur = parents.get(id(node))
    while cur is not None:
        if isinstance(cur, ast.ClassDef) and any(
                isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) and b.name == "forward" for b in cur.body):
            return True
        cur = parents.get(id(cur))
    return False


def _stored(node: ast.AST, parents: dict) -> bool:
    """The cast value is stored into a slot of a buffer (`scores[i] = out.half()`): it feeds no layer."""
    parent = parents.get(id(node))
    return isinstance(parent, ast.Assign) and parent.value is node \
        and all(isinstance(t, ast.Subscript) for t in parent.targets)


def fp16_casts(tree: ast.AST) -> List[Tuple[int, int, str]]:
    """(line, 1-based column, cast) of each fp16 cast in `tree` not on purpose, not under autocast, not
    in an nn.Module (a class with `forward`) and not stored into a buffer slot."""
    parents = _parents(tree)
    out: List[Tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            what = _half_cast(node)
            if what and not _deliberate(node, parents) and not _in_autocast(node, parents) \
                    and not _in_module_class(node, parents) and not _stored(node, parents):
                out.append((node.lineno, node.col_offset + 1, what))
    return sorted(out)


def imported_modules(tree: ast.AST, module: str, is_pkg: bool) -> Set[str]:
    """Dotted names a module may load: each `import a.b` gives a.b and a; `from p import q` gives p and
    p.q (q may be a submodule); relative imports are resolved against `module`."""
    package = module if is_pkg else module.rpartition(".")[0]
    out: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".") if package else []
                if node.level > 1:
                    base_parts = base_parts[:len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base:
                parts = base.split(".")
                out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
            for a in node.names:
                if a.name != "*":
                    out.add(f"{base}.{a.name}" if base else a.name)
    return out
