"""Shape predicates of hand-written fp16 training (codemods/manual_fp16.py): a loss scale and the loss
multiplied by it, the gradient division loop, the scale halved, fp32 copies, `model.parameters()` calls,
and the autocast wrapper under the fp16 flag."""
from __future__ import annotations

from typing import Callable, List, Optional, Tuple

import libcst as cst

from . import templates
from .code_layout import indent_continuations
from .names import code_of, dotted_name, literal_number, norm_code
from .scaling_shapes import walk_all

LOG_ROOTS = {"logger", "logging", "log", "print", "warnings", "tqdm"}


def is_scale(e: cst.BaseExpression) -> bool:
    """A loss scale: a name spelling `scale`, or a power of two of at least 8."""
    v = literal_number(e)
    if v is not None:
        return v >= 8 and float(v).is_integer() and (int(v) & (int(v) - 1)) == 0
    n = dotted_name(e)
    return n is not None and "scale" in n.lower()


def scaled_operand(e: cst.BaseExpression) -> Optional[Tuple[cst.BaseExpression, cst.BaseExpression]]:
    """(loss, scale) of `loss * scale` / `scale * loss`."""
    if isinstance(e, cst.BinaryOperation) and isinstance(e.operator, cst.Multiply):
        if is_scale(e.right) and not is_scale(e.left):
            return e.left, e.right
        if is_scale(e.left) and not is_scale(e.right):
            return e.right, e.left
    return None


def one_stmt(block: cst.BaseSuite) -> Optional[cst.BaseSmallStatement]:
    """The one small statement of a block holding exactly one simple statement."""
    if isinstance(block, cst.IndentedBlock) and len(block.body) == 1 and isinstance(
            block.body[0], cst.SimpleStatementLine) and len(block.body[0].body) == 1:
        return block.body[0].body[0]
    return None


def params_call(e: cst.CSTNode, model: Optional[str] = None) -> Optional[str]:
    """The model of `model.parameters()` / `model.named_parameters()` (checked against `model` if given)."""
    if isinstance(e, cst.Call) and isinstance(e.func, cst.Attribute) and not e.args \
            and e.func.attr.value in ("parameters", "named_parameters"):
        m = dotted_name(e.func.value)
        if m is not None and (model is None or m == model):
            return m
    return None


def halves(small: cst.CSTNode, scale: Optional[str] = None) -> Optional[str]:
    """The scale name of `S = S / 2`, `S /= 2`, `S = S * 0.5`, `S *= 0.5` (a scale-like name)."""
    if isinstance(small, cst.AugAssign):
        s = dotted_name(small.target)
        v = literal_number(small.value)
        ok = (isinstance(small.operator, cst.DivideAssign) and v == 2) or (
            isinstance(small.operator, cst.MultiplyAssign) and v == 0.5)
    elif isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.value, cst.BinaryOperation):
        s = dotted_name(small.targets[0].target)
        b = small.value
        v = literal_number(b.right)
        ok = dotted_name(b.left) == s and ((isinstance(b.operator, cst.Divide) and v == 2) or (
            isinstance(b.operator, cst.Multiply) and v == 0.5))
    else:
        return None
    if not ok or s is None or "scale" not in s.lower() or (scale is not None and s != scale):
        return None
    return s


def to_fp32(node: cst.CSTNode) -> bool:
    """`x.float()`, `x.type(torch.cuda.FloatTensor)`, `x.to(torch.float32)` (or `...dtype=torch.float)`)."""
    if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)):
        return False
    attr = node.func.attr.value
    if attr == "float":
        return not node.args
    args = [norm_code(a.value) for a in node.args]
    if attr == "type":
        return any("FloatTensor" in a or a in ("torch.float32", "torch.float") for a in args)
    return attr == "to" and any(a in ("torch.float32", "torch.float") for a in args)


def grad_division(loop: cst.CSTNode, scale: Optional[str] = None) -> Optional[str]:
    """The scale of `for p in ...: [if p.grad is not None:] p.grad(.data) = p.grad(.data) / S` (or `/= S`,
    `.div_(S)`, `.mul_(1 / S)`)."""
    if not isinstance(loop, cst.For) or loop.orelse is not None:
        return None
    var = dotted_name(loop.target)
    body = loop.body
    small = one_stmt(body)
    if small is None and isinstance(body, cst.IndentedBlock) and len(body.body) == 1 and isinstance(
            body.body[0], cst.If) and body.body[0].orelse is None and "grad" in code_of(body.body[0].test):
        small = one_stmt(body.body[0].body)
    if small is None or var is None:
        return None
    grads = {f"{var}.grad", f"{var}.grad.data"}
    found: Optional[cst.BaseExpression] = None
    if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.DivideAssign) \
            and dotted_name(small.target) in grads:
        found = small.value
    elif isinstance(small, cst.Assign) and len(small.targets) == 1 and dotted_name(small.targets[0].target) in grads \
            and isinstance(small.value, cst.BinaryOperation) and isinstance(small.value.operator, cst.Divide) \
            and dotted_name(small.value.left) in grads:
        found = small.value.right
    elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        c = small.value
        if isinstance(c.func, cst.Attribute) and dotted_name(c.func.value) in grads and len(c.args) == 1:
            arg = c.args[0].value
            if c.func.attr.value == "div_":
                found = arg
            elif c.func.attr.value == "mul_" and isinstance(arg, cst.BinaryOperation) and isinstance(
                    arg.operator, cst.Divide) and literal_number(arg.left) == 1:
                found = arg.right
    if found is None:
        return None
    s = dotted_name(found)
    if s is None or not is_scale(found) or (scale is not None and s != scale):
        return None
    return s



def flag_autocast_maker(device: str, dtype: str, flag: str,
                        indent: str) -> Callable[[List[cst.BaseStatement]], cst.With]:
    def make(stmts: List[cst.BaseStatement]) -> cst.With:
        head = templates.statement(
            f"with torch.autocast(\"{device}\", dtype=torch.{dtype}, enabled={flag}):\n    pass\n")
        assert isinstance(head, cst.With)
        return head.with_changes(body=head.body.with_changes(body=indent_continuations(stmts, indent)))
    return make


def eval_only_cast(cast_if: cst.If, model: str, func: cst.FunctionDef, loop: cst.CSTNode, parents) -> Optional[str]:
    """None when `if F: M.half()` casts a model built afresh for evaluation after the training: the statement of
    `func`'s body holding it comes after the one holding the training `loop`, and the statement just before
    it binds `M = <call>` from a call that does not read M (`M = Model.from_pretrained(out_dir)`,
    not `M = M.to(device)`); else the reason. Such a cast stays: that model is loaded, cast and evaluated as
    before (its checkpoint now holds the fp32 weights it rounds)."""
    cast = cast_if.body.body[0].body[0].value if isinstance(cast_if.body, cst.IndentedBlock) else None
    if not (isinstance(cast, cst.Call) and dotted_name(cast.func.value) == model):
        return "another model is cast to fp16 in the function too"

    def top(node: cst.CSTNode) -> Optional[int]:
        while node is not None and parents.get(node) is not func.body:
            node = parents.get(node)
        return None if node is None else list(func.body.body).index(node)

    after, train = top(cast_if), top(loop)
    if after is None or train is None or after <= train:
        return f"{model} is cast to fp16 again where it may still be the trained model"
    block = parents.get(cast_if)
    body = list(block.body) if isinstance(block, (cst.IndentedBlock, cst.Module)) else []
    k = next((i for i, s in enumerate(body) if s is cast_if), None)
    prev = body[k - 1] if k else None
    small = prev.body[0] if isinstance(prev, cst.SimpleStatementLine) and len(prev.body) == 1 else None
    if not (isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.value, cst.Call)
            and model not in {dotted_name(n) for n in walk_all(small.value)}):
        return f"the later `{model}.half()` is not of a model built afresh on the line before (`{model} = <call>`)"
    return None


def label_cast(node: cst.CSTNode, flag: str, parents) -> bool:
    """`if FLAG: L = L.half()` of a label tensor built fp32 on the statement before (`L = torch.tensor(...,
    dtype=torch.float)`, L a name spelling `label`): the regression labels of the pytorch-pretrained-bert
    GLUE scripts, cast to meet the fp16 model's fp16 logits in the loss. With an fp32 model under autocast the
    cast goes: the loss (MSELoss and the other losses autocast runs in fp32) promotes fp16 logits to fp32 and
    the labels are only read by it and by the metrics."""
    if not (isinstance(node, cst.If) and dotted_name(node.test) == flag and node.orelse is None
            and isinstance(node.body, cst.IndentedBlock) and len(node.body.body) == 1):
        return False
    line = node.body.body[0]
    small = line.body[0] if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 else None
    if not (isinstance(small, cst.Assign) and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)):
        return False
    name = small.targets[0].target.value
    v = small.value
    if not ("label" in name.lower() and isinstance(v, cst.Call) and not v.args and isinstance(v.func, cst.Attribute)
            and v.func.attr.value == "half" and dotted_name(v.func.value) == name):
        return False
    block = parents.get(node)
    body = list(block.body) if isinstance(block, (cst.IndentedBlock, cst.Module)) else []
    k = next((i for i, s in enumerate(body) if s is node), None)
    prev = body[k - 1] if k else None
    made = prev.body[0] if isinstance(prev, cst.SimpleStatementLine) and len(prev.body) == 1 else None
    if not (isinstance(made, cst.Assign) and len(made.targets) == 1 and dotted_name(made.targets[0].target) == name
            and isinstance(made.value, cst.Call) and dotted_name(made.value.func) == "torch.tensor"):
        return False
    dtype = next((a.value for a in made.value.args if a.keyword is not None and a.keyword.value == "dtype"), None)
    return dtype is not None and norm_code(dtype) in ("torch.float", "torch.float32")
