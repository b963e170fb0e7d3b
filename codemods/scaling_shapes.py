"""Names and small syntax-tree helpers shared by the loss-scaling passes (manual_scaling, fp16_optimizer,
static_scaling): the apex fp16_utils names they recognise, statement/block lookups through a parent map,
the fp16 model-cast stripping, and the autocast wrapper they put around forward + loss."""
from __future__ import annotations

from typing import List, Optional, Sequence, Set

import libcst as cst

from . import templates
from .apex_names import Resolver
from .code_layout import indent_continuations
from .names import code_of, dotted_name, norm_code
from .walk import Visitor

FP16_OPT = "apex.fp16_utils.FP16_Optimizer"
FUSED_FP16_OPT = "apex.optimizers.FP16_Optimizer"  # apex < 0.1: FusedAdam's wrapper (it passed grad norms to step)
MODEL_WRAPPERS = {"apex.fp16_utils.network_to_half", "apex.fp16_utils.FP16Model", "apex.fp16_utils.BN_convert_float"}
MASTER_HELPERS = {"apex.fp16_utils.prep_param_lists", "apex.fp16_utils.model_grads_to_master_grads",
                  "apex.fp16_utils.master_params_to_model_params", "apex.fp16_utils.tofp16",
                  "apex.fp16_utils.convert_network", "apex.fp16_utils.convert_module",
                  "apex.fp16_utils.LossScaler", "apex.fp16_utils.DynamicLossScaler"}
STATIC_INTERVAL = "2**30"


def stmt_line(node: cst.CSTNode, parents) -> Optional[cst.SimpleStatementLine]:
    n = node
    while n is not None and not isinstance(n, cst.SimpleStatementLine):
        if isinstance(n, cst.BaseCompoundStatement):
            return None
        n = parents.get(n)
    return n


def enclosing(node: cst.CSTNode, parents, kinds) -> Optional[cst.CSTNode]:
    n = parents.get(node)
    while n is not None and not isinstance(n, kinds):
        n = parents.get(n)
    return n


def block_of(stmt: cst.CSTNode, parents) -> Optional[Sequence[cst.CSTNode]]:
    p = parents.get(stmt)
    if isinstance(p, (cst.IndentedBlock, cst.Module)):
        return p.body
    return None


def parse_stmts(code: str) -> List[cst.BaseStatement]:
    return templates.statements(code)


def walk_all(node: cst.CSTNode) -> List[cst.CSTNode]:
    out: List[cst.CSTNode] = []

    class V(Visitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            out.append(n)
            return True

    node.visit(V())
    return out


def within(outer: cst.CSTNode, inner: cst.CSTNode, parents) -> bool:
    n = inner
    while n is not None:
        if n is outer:
            return True
        n = parents.get(n)
    return False


def ancestors(node: cst.CSTNode, parents):
    n = parents.get(node)
    while n is not None:
        yield n
        n = parents.get(n)


def target_names(s: cst.CSTNode) -> Set[str]:
    if isinstance(s, cst.Assign):
        return {dotted_name(t.target) or "" for t in s.targets}
    return {dotted_name(s.target) or ""}  # type: ignore[attr-defined]


def calls_any(stmt: cst.CSTNode, names: Set[str]) -> bool:
    if not names:
        return False
    return any(isinstance(n, cst.Call) and (dotted_name(n.func) in names or (
        isinstance(n.func, cst.Attribute) and n.func.attr.value == "forward" and dotted_name(n.func.value) in names))
        for n in walk_all(stmt))


def base_of(e: cst.BaseExpression) -> cst.BaseExpression:
    """`model` of `model.cuda()` / `model.to(device)` chains."""
    while isinstance(e, cst.Call) and isinstance(e.func, cst.Attribute) and e.func.attr.value in ("cuda", "to", "cpu"):
        e = e.func.value
    return e


def strip_casts(e: cst.BaseExpression, res: Resolver) -> cst.BaseExpression:
    """`e` without `.half()` calls and fp16_utils model wrappers (the same node when there are none)."""
    if isinstance(e, cst.Call):
        q = res.apex_name(e.func)
        if q in MODEL_WRAPPERS and len(e.args) == 1 and e.args[0].keyword is None:
            return strip_casts(e.args[0].value, res)
        if isinstance(e.func, cst.Attribute):
            if e.func.attr.value == "half" and not e.args:
                return strip_casts(e.func.value, res)
            inner = strip_casts(e.func.value, res)
            if inner is not e.func.value and e.func.attr.value in ("cuda", "to", "cpu", "train", "eval"):
                return e.with_changes(func=e.func.with_changes(value=inner))
    return e


def divides_grads(loop: cst.For, scale: cst.BaseExpression) -> bool:
    """`for p in ...: [if p.grad is not None:] p.grad(.data).div_(S)` / `/= S` / `.mul_(1/S)`."""
    var = dotted_name(loop.target)
    if var is None or not isinstance(loop.body, cst.IndentedBlock) or loop.orelse is not None:
        return False
    body = list(loop.body.body)
    if len(body) == 1 and isinstance(body[0], cst.If) and body[0].orelse is None and isinstance(
            body[0].body, cst.IndentedBlock) and "grad" in code_of(body[0].test):
        body = list(body[0].body.body)
    if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine) or len(body[0].body) != 1:
        return False
    small = body[0].body[0]
    s = norm_code(scale)
    grads = {f"{var}.grad", f"{var}.grad.data"}
    if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.DivideAssign):
        return dotted_name(small.target) in grads and norm_code(small.value) == s
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        c = small.value
        if isinstance(c.func, cst.Attribute) and dotted_name(c.func.value) in grads and len(c.args) == 1:
            if c.func.attr.value == "div_":
                return norm_code(c.args[0].value) == s
            if c.func.attr.value == "mul_":
                return norm_code(c.args[0].value) in (f"1/{s}", f"1.0/{s}", f"1./{s}", f"(1/{s})", f"(1.0/{s})")
    return False


def autocast_maker(device: str, dtype: str, indent: str):
    def make(stmts: List[cst.BaseStatement]) -> cst.BaseStatement:
        head = templates.statement(f"with torch.autocast(\"{device}\", dtype=torch.{dtype}):\n    pass\n")
        assert isinstance(head, cst.With)
        return head.with_changes(body=head.body.with_changes(body=indent_continuations(stmts, indent)))
    return make
