"""fp16 numerical hazards in (migrated) mixed-precision code: findings only, never a rewrite.

Runs last, on the migrated text, and only on files that use mixed precision at all (autocast,
GradScaler, apex, `.half()`), so clean fp32 repositories stay quiet. Each rule is tuned for
precision (see docs verification-notes section 5, rules L1-L12): it fires on shapes that overflow,
raise or silently produce inf/NaN in fp16, not on every large number.
"""
from __future__ import annotations

import re
from typing import List, Optional, Set, Tuple

import libcst as cst

from .base import WARNING, Codemod, FileContext, rule
from .index import ModuleIndex, positions_of
from .names import code_of, dotted_name, literal_number
from .walk import Visitor

FP16_MAX = 65504.0
MIXED_PRECISION = re.compile(r"autocast|GradScaler|\bapex\b|\.half\(\)|float16|scale_loss")
AUTOCAST_OR_SCALER = re.compile(r"autocast|GradScaler|\bapex\b|scale_loss")
FP16_CASTS = re.compile(r"\.half\(\)|\.to\([^)]*(float16|torch\.half)")
MASK_FUNCS = {"masked_fill", "masked_fill_", "fill_", "full", "full_like", "new_full", "where"}
CLIP_FUNCS = {"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm"}

FP16_TINY = 6e-8       # smallest fp16 subnormal is ~5.96e-8: anything below rounds to 0
FP16_INV_TINY = 1.5e-5  # 1/eps above 65504 overflows

rule("A2A601", "fp16-mask-constant", "mask constant outside the fp16 range", fixes=False, severity=WARNING,
     why="""
Under fp16 autocast every matmul output (attention scores) is fp16, whose range ends at 65504.
masked_fill(mask, -1e9) then raises "value cannot be converted to type c10::Half without overflow",
and an additive mask `scores + mask * -1e9` silently becomes -inf (and 0 * -inf is NaN). Use
torch.finfo(scores.dtype).min, or -1e4, which fits fp16.""",
     before="""
import torch


def attend(scores, mask):
    with torch.autocast("cuda", dtype=torch.float16):
        scores = scores.masked_fill(mask == 0, -1e9)
    return scores""",
     after="scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)")
rule("A2A602", "fp16-tiny-eps", "epsilon that vanishes or overflows in fp16", fixes=False, severity=WARNING,
     why="""
In fp16 any eps below ~6e-8 rounds to 0, so `x / (norm + 1e-8)` is NaN for a zero norm, and an eps
below ~1.5e-5 used as a divisor gives 1/eps > 65504 = inf. This file casts tensors to fp16 by hand,
where these guards do nothing. Use eps >= 1e-4 for fp16 tensors, or compute the guard in fp32.""",
     before="x = x / (x.norm(dim=-1, keepdim=True) + 1e-8)",
     after="x = x / (x.float().norm(dim=-1, keepdim=True) + 1e-8).to(x.dtype)")
rule("A2A603", "bce-under-autocast", "BCELoss / binary_cross_entropy in an autocast file", fixes=False,
     severity=WARNING,
     why="""
torch.nn.BCELoss and F.binary_cross_entropy raise inside a CUDA autocast region ("unsafe to autocast")
and apex O1 banned them. Feed logits to BCEWithLogitsLoss / binary_cross_entropy_with_logits (drop the
sigmoid), or compute the loss outside autocast on .float() inputs.""",
     before="""
import torch
from torch import nn


def step(model, x, y):
    criterion = nn.BCELoss()
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x)
        loss = criterion(torch.sigmoid(logits), y)
    return loss""",
     after="criterion = nn.BCEWithLogitsLoss()\nloss = criterion(logits, y)")
rule("A2A604", "fp16-cast-left", ".half() / float16 cast left in mixed-precision code", fixes=False,
     severity=WARNING,
     why="""
With autocast + GradScaler the model and its inputs stay fp32: autocast picks fp16 per op, and
GradScaler raises "Attempting to unscale FP16 gradients" for fp16 parameters. `.half()` and
`.to(torch.float16)` casts left from apex O2/O3 or hand-written fp16 code should go (inference-only
code may keep them deliberately: add `# apex2amp: ignore[A2A604]`). Casts that are plainly on purpose
are not reported: a round trip (`model.half().float()`) and one side of a precision switch
(`model.half() if fp16 else model.float()`).""",
     before="""
import torch


def train(model, loader):
    scaler = torch.amp.GradScaler("cuda")
    model = model.cuda().half()
    for images, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(images.half()).mean()
        scaler.scale(loss).backward()""",
     after="model = model.cuda()")
rule("A2A605", "nonfinite-check-scaled", "isnan / isinf check on a scaled loss", fixes=False, severity=WARNING,
     why="""
The scaled loss (scaler.scale(loss), apex's scaled_loss) overflows by design on some steps; GradScaler
skips those steps itself. Checking it for NaN/inf (and skipping or aborting) fires on harmless
overflow steps. Check the unscaled loss instead.""",
     before="""
import torch


def step(model, optimizer, scaler, x):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).mean()
    if torch.isnan(scaler.scale(loss)):
        raise RuntimeError("nan")
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()""",
     after="if torch.isnan(loss): raise RuntimeError('nan')")
rule("A2A606", "clip-before-unscale", "gradient clipping between scaler.scale().backward() and scaler.step() without unscale_",
     fixes=False, severity=WARNING,
     why="""
Until scaler.unscale_(optimizer) the gradients are multiplied by the loss scale (65536 at start), so
clip_grad_norm_(..., max_norm) clips far too hard (the effective max norm shrinks by the scale) and a
grad-norm log is scaled. Call scaler.unscale_(optimizer) once right before the clip.""",
     before="""
import torch
from torch.nn.utils import clip_grad_norm_


def step(model, optimizer, scaler, x):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).mean()
    scaler.scale(loss).backward()
    clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()""",
     after="scaler.scale(loss).backward()\nscaler.unscale_(optimizer)\nclip_grad_norm_(model.parameters(), 1.0)\n"
           "scaler.step(optimizer)")

HALF_TYPES = {"torch.float16", "torch.half", "torch.HalfTensor", "torch.cuda.HalfTensor"}


def _big(node: cst.BaseExpression) -> Optional[str]:
    """A spelled constant that does not fit fp16 (literal, float(...) of one, finfo(float32).min/max, -inf)."""
    v = literal_number(node)
    if v is not None:
        return cst.Module([]).code_for_node(node) if abs(v) > FP16_MAX else None
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return _big(node.expression)
    if isinstance(node, cst.Call) and dotted_name(node.func) == "float" and len(node.args) == 1:
        inner = node.args[0].value
        s = inner.evaluated_value if isinstance(inner, cst.SimpleString) else None
        if isinstance(s, str) and s.strip().lower() in ("-inf", "inf", "+inf", "-infinity", "infinity"):
            return cst.Module([]).code_for_node(node)
        return _big(inner)
    if isinstance(node, cst.Attribute) and node.attr.value in ("min", "max") and isinstance(node.value, cst.Call):
        f = dotted_name(node.value.func) or ""
        if f.endswith("finfo") and node.value.args:
            d = dotted_name(node.value.args[0].value) or ""
            if d in ("torch.float32", "torch.float", "torch.float64", "torch.double", "np.float32", "numpy.float32"):
                return cst.Module([]).code_for_node(node)
    return None


def _looks_like_mask(node: cst.BaseExpression) -> bool:
    """A 0/1 mask expression: `1 - m`, `~m`, a name mentioning mask, `m.float()` of such."""
    code = cst.Module([]).code_for_node(node).lower()
    if "mask" in code or "pad" in code:
        return True
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Subtract) \
            and literal_number(node.left) == 1.0:
        return True
    return isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.BitInvert)


def _is_inf(code: str) -> bool:
    return "inf" in code.lower()


class Fp16HazardLint(Codemod):
    """fp16 numerical hazards (findings only)."""

    NAME = "hazards"
    DESCRIPTION = "fp16 numerical hazards (findings only)"
    CODES = ("A2A601", "A2A602", "A2A603", "A2A604", "A2A605", "A2A606")
    TOKENS = (b"autocast", b"GradScaler", b".half()", b"float16", b"scale_loss")  # MIXED_PRECISION's
    WORDS = (b"apex",)
    REPORTS_ONLY = True

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        index = ModuleIndex.of(module)
        text = FileText.of(module)
        if not text.mixed_precision():
            return module
        lint = _Lint(ctx, wrapper, autocast_file=text.autocast_or_scaler(), fp16_file=text)
        _replay(index, text.order, lint)
        lint.finish()
        return module




class FileText:
    """The regex tests on the module's text, answered from its tokens when that is exact.

    Every letter of a module's text lies in one token: a name, a string, an f-string's text or a
    comment (keywords and numbers hold none of the words searched for), and two such tokens never touch
    without a non-word character between them. So a pattern made of words (and `\\b`) matches the text
    exactly when it matches one token. `.half()` and `.to(...float16...)` span tokens: outside strings
    and comments they start at a call `x.half()` / `x.to(...)`, and the `[^)]*` stops inside that
    call's own parentheses, so searching the code of those calls finds them. Only a string or comment
    holding `.to(` (whose match could run on past it) needs the (costly) full text.
    """

    def __init__(self, module: cst.Module, index: ModuleIndex):
        self.order, texts = _scan(index)  # the nodes _Lint visits, in order; comment and f-string texts
        self.module = module
        self.index = index
        self._casts: Optional[List[str]] = None
        self.tokens: List[str] = sorted(index.name_values | index.attr_values)
        self.tokens += [s.value for s in index.strings]
        self.tokens += texts
        self._code: Optional[str] = None
        self._fp16: Optional[bool] = None

    @classmethod
    def of(cls, module: cst.Module) -> "FileText":
        """The (cached) text facts of `module`."""
        tables = ModuleIndex.of(module).tables
        text = tables.get("hazards.FileText")
        if text is None:
            text = tables["hazards.FileText"] = cls(module, ModuleIndex.of(module))
        return text  # type: ignore[return-value]

    def mentions_fp16(self) -> bool:
        """`".half()" in module.code or "float16" in module.code`"""
        return self._mentions("float16", ".half()") or any(".half()" in c for c in self._cast_calls())

    def _any(self, pattern: "re.Pattern[str]") -> bool:
        return any(pattern.search(t) for t in self.tokens)

    def _mentions(self, *words: str) -> bool:
        return any(w in t for t in self.tokens for w in words)

    def _text(self) -> str:
        if self._code is None:
            self._code = ModuleIndex.of(self.module).code
        return self._code

    def _cast_calls(self) -> List[str]:
        """The code of every `x.half(...)` / `x.to(...)` call."""
        if self._casts is None:
            self._casts = [code_of(c) for c in self.index.calls
                           if isinstance(c.func, cst.Attribute) and c.func.attr.value in ("half", "to")]
        return self._casts

    def mixed_precision(self) -> bool:
        """MIXED_PRECISION.search(module.code)"""
        if self._any(MIXED_PRECISION):
            return True
        return self._mentions("half") and any(".half()" in c for c in self._cast_calls())

    def autocast_or_scaler(self) -> bool:
        """AUTOCAST_OR_SCALER.search(module.code) (all its alternatives are words)"""
        return self._any(AUTOCAST_OR_SCALER)

    @property
    def fp16_casts(self) -> bool:
        """FP16_CASTS.search(module.code), computed on first use"""
        if self._fp16 is None:
            if self._any(FP16_CASTS):
                self._fp16 = True
            elif not self._mentions("half", "float16"):
                self._fp16 = False
            elif any(".to(" in t for t in self.tokens):
                self._fp16 = bool(FP16_CASTS.search(self._text()))
            else:
                self._fp16 = any(FP16_CASTS.search(c) for c in self._cast_calls())
        return self._fp16


_VISITED = (cst.FunctionDef, cst.With, cst.Assign, cst.Call, cst.BinaryOperation)  # what _Lint visits


def _scan(index: ModuleIndex) -> Tuple[List[cst.CSTNode], List[str]]:
    """(the nodes _Lint visits, in visiting order; the texts of comments and f-string parts).

    The index's parent map was filled in visiting order, so the first time each parent shows up is
    the pre-order of the nodes that have children (all the node kinds _Lint looks at, and the
    whitespace nodes that own comments).
    """
    seen: Set[int] = set()
    order: List[cst.CSTNode] = []
    texts: List[str] = []
    for node in index.parents.values():
        key = id(node)
        if key in seen:
            continue
        seen.add(key)
        kind = type(node)
        if kind in _VISITED_SET:
            order.append(node)
        elif kind is cst.TrailingWhitespace or kind is cst.EmptyLine:
            if node.comment is not None:  # type: ignore[attr-defined]
                texts.append(node.comment.value)  # type: ignore[attr-defined]
        elif kind is cst.FormattedString:
            texts += [p.value for p in node.parts if isinstance(p, cst.FormattedStringText)]  # type: ignore
    return order, texts


def _replay(index: ModuleIndex, order: List[cst.CSTNode], lint: "_Lint") -> None:
    """Drive `lint` as `module.visit(lint)` would, from the shared index instead of a tree walk.

    The open functions and `with` blocks are kept on a stack and left once a later node lies outside them.
    """
    stack: List[cst.CSTNode] = []
    for node in order:
        kind = type(node)
        while stack and not index.contains(stack[-1], node):
            _leave(lint, stack.pop())
        if kind is cst.Call:
            lint.visit_Call(node)  # type: ignore[arg-type]
        elif kind is cst.BinaryOperation:
            lint.visit_BinaryOperation(node)  # type: ignore[arg-type]
        elif kind is cst.Assign:
            lint.visit_Assign(node)  # type: ignore[arg-type]
        elif kind is cst.With:
            lint.visit_With(node)  # type: ignore[arg-type]
            stack.append(node)
        else:
            lint.visit_FunctionDef(node)  # type: ignore[arg-type]
            stack.append(node)
    while stack:
        _leave(lint, stack.pop())


def _leave(lint: "_Lint", node: cst.CSTNode) -> None:
    if isinstance(node, cst.With):
        lint.leave_With(node)
    else:
        lint.leave_FunctionDef(node)  # type: ignore[arg-type]


_VISITED_SET = frozenset(_VISITED)


class _Lint(Visitor):
    def __init__(self, ctx: FileContext, wrapper: cst.MetadataWrapper, autocast_file: bool, fp16_file: "FileText"):
        self.ctx = ctx
        self.wrapper = wrapper
        self._pos = None
        self.autocast_file = autocast_file
        self._text = fp16_file  # fp16_file (the file casts to fp16 by hand) is decided on first use
        self.autocast_depth: List[bool] = []  # enabled? per enclosing autocast `with`
        self.scaled_names: List[Set[str]] = [set()]
        self.functions: List[List[Tuple[int, str, cst.CSTNode]]] = [[]]  # events per function
        self.reported: Set[int] = set()

    def _report(self, node: cst.CSTNode, code: str, message: str) -> None:
        if id(node) in self.reported or not self.ctx.enabled(code) or self.ctx.suppressed(node, code):
            return
        self.reported.add(id(node))
        self.ctx.report(node, code, message)

    @property
    def fp16_file(self) -> bool:
        return self._text.fp16_casts

    @property
    def pos(self):
        """Positions, resolved on first use (most files record no clip-order events)."""
        if self._pos is None:
            self._pos = positions_of(self.wrapper.module)
        return self._pos

    def _line(self, node: cst.CSTNode) -> int:
        p = self.pos.get(node)
        return p.start.line * 10000 + p.start.column if p else 0

    # scopes --------------------------------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.append([])
        self.scaled_names.append(set())

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._check_clip_order(self.functions.pop())
        self.scaled_names.pop()

    def finish(self) -> None:
        self._check_clip_order(self.functions[0])

    def visit_With(self, node: cst.With) -> None:
        state: Optional[bool] = None
        for item in node.items:
            call = item.item
            if isinstance(call, cst.Call) and (dotted_name(call.func) or "").endswith("autocast"):
                enabled = True
                for a in call.args:
                    if a.keyword is not None and a.keyword.value == "enabled" and isinstance(a.value, cst.Name) \
                            and a.value.value == "False":
                        enabled = False
                state = enabled
            if item.asname is not None and isinstance(call, cst.Call):
                f = dotted_name(call.func) or ""
                if f.endswith("scale_loss"):
                    n = dotted_name(item.asname.name)  # type: ignore[arg-type]
                    if n:
                        self.scaled_names[-1].add(n)
        self.autocast_depth.append(state if state is not None else (self.autocast_depth[-1]
                                                                    if self.autocast_depth else False))

    def leave_With(self, node: cst.With) -> None:
        self.autocast_depth.pop()

    def _in_autocast_off(self) -> bool:
        return bool(self.autocast_depth) and self.autocast_depth[-1] is False and any(
            d is not None for d in self.autocast_depth)

    # assignments of scaled values ----------------------------------------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        if self._is_scaled(node.value):
            for t in node.targets:
                n = dotted_name(t.target)
                if n:
                    self.scaled_names[-1].add(n)
        for t in node.targets:
            if isinstance(t.target, cst.Subscript):
                big = _big(node.value)
                if big and not _is_inf(big):
                    self._report(node, "A2A601", f"assigning {big} into a tensor: it does not fit fp16 (max 65504); "
                                 "use torch.finfo(t.dtype).min/max or a value within +-65504")

    def _is_scaled(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "scale":
            owner = dotted_name(node.func.value) or ""
            return "scaler" in owner.lower()
        n = dotted_name(node)
        return n is not None and n in self.scaled_names[-1]

    # calls ---------------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        func = dotted_name(node.func) or ""
        last = func.rsplit(".", 1)[-1] if func else (
            node.func.attr.value if isinstance(node.func, cst.Attribute) else "")
        events = self.functions[-1]
        if self.autocast_file and last in MASK_FUNCS:
            for a in node.args:
                if a.keyword is not None and a.keyword.value not in ("value", "fill_value", "other", "input"):
                    continue
                big = _big(a.value)
                if big and not _is_inf(big):
                    self._report(node, "A2A601", f"{last}(..., {big}): {big} does not fit fp16 (max 65504) and raises "
                                 "or becomes inf under fp16 autocast; use torch.finfo(t.dtype).min or -1e4")
        if self.autocast_file and (func.endswith("BCELoss") or last == "binary_cross_entropy") \
                and not self._in_autocast_off():
            self._report(node, "A2A603", f"{last} raises under CUDA autocast (unsafe to autocast): use "
                         "BCEWithLogitsLoss / binary_cross_entropy_with_logits on logits, or compute it outside "
                         "autocast on .float() inputs")
        if self.autocast_file:
            self._half_cast(node, last)
        if last in ("isnan", "isinf", "isfinite") and node.args and self._is_scaled(node.args[0].value):
            self._report(node, "A2A605", f"{last}() on a scaled loss: it overflows on purpose and GradScaler "
                         "skips those steps; check the unscaled loss instead")
        if isinstance(node.func, cst.Attribute) and last in ("isnan", "isinf", "isfinite") and not node.args \
                and self._is_scaled(node.func.value):
            self._report(node, "A2A605", f".{last}() on a scaled loss: check the unscaled loss instead")
        if last in ("log", "sqrt", "rsqrt") and node.args and self.fp16_file:
            self._eps(node.args[0].value, node, divisor=last == "rsqrt")
        # event stream for clip-before-unscale
        if isinstance(node.func, cst.Attribute):
            owner = dotted_name(node.func.value) or ""
            if last == "backward" and isinstance(node.func.value, cst.Call) and self._is_scaled(node.func.value):
                events.append((self._line(node), "backward", node))
            elif last == "backward" and owner and self._is_scaled(node.func.value):
                events.append((self._line(node), "backward", node))
            elif last == "unscale_" and "scaler" in owner.lower():
                events.append((self._line(node), "unscale", node))
            elif last == "step" and "scaler" in owner.lower():
                events.append((self._line(node), "step", node))
        if last in CLIP_FUNCS:
            events.append((self._line(node), "clip", node))

    def _deliberate_precision(self, node: cst.Call) -> bool:
        """A cast the code makes on purpose, not for training: a round trip (`model.half().float()`,
        which rounds weights to fp16 precision) or one branch of a precision switch
        (`model.half() if fp16 else model.float()`, inference code choosing its dtype)."""
        parents = ModuleIndex.of(self.wrapper.module).parents
        parent = parents.get(id(node))
        if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value == "float" \
                and isinstance(parents.get(id(parent)), cst.Call):
            return True
        if isinstance(parent, cst.IfExp) and (parent.body is node or parent.orelse is node):
            other = parent.orelse if parent.body is node else parent.body
            return isinstance(other, cst.Call) and isinstance(other.func, cst.Attribute) \
                and other.func.attr.value == "float"
        return False

    def _half_cast(self, node: cst.Call, last: str) -> None:
        if not isinstance(node.func, cst.Attribute) or self._deliberate_precision(node):
            return
        if last == "half" and not node.args:
            self._report(node, "A2A604", ".half() left in mixed-precision code: keep the model and inputs fp32 "
                         "(autocast casts per op; GradScaler rejects fp16 gradients)")
        elif last in ("to", "type") and node.args:
            for a in node.args:
                if a.keyword is not None and a.keyword.value not in ("dtype",):
                    continue
                d = dotted_name(a.value) or ""
                s = a.value.evaluated_value if isinstance(a.value, cst.SimpleString) else ""
                if d in HALF_TYPES or (isinstance(s, str) and "HalfTensor" in s):
                    self._report(node, "A2A604", f".{last}({d or s}) left in mixed-precision code: keep tensors "
                                 "fp32 and let autocast choose fp16 per op")

    # arithmetic ----------------------------------------------------------------------------
    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        op = node.operator
        if self.autocast_file and isinstance(op, cst.Multiply):
            for side, other in ((node.left, node.right), (node.right, node.left)):
                big = _big(side)
                v = literal_number(side)
                if big is None and v is not None and abs(v) >= 1e4 and not _looks_like_mask(other):
                    self._report(node, "A2A601", f"{cst.Module([]).code_for_node(side)} times a non-mask tensor: "
                                 "scores of ~10 already overflow fp16 (max 65504) to -inf; multiply a 0/1 mask, "
                                 "or use masked_fill with torch.finfo(scores.dtype).min")
                    break
                if big:
                    what = "0 * -inf is NaN where the mask is 0" if _is_inf(big) else \
                        "the product overflows fp16 (max 65504) to -inf"
                    self._report(node, "A2A601", f"additive mask scaled by {big}: {what}; use "
                                 "torch.finfo(scores.dtype).min with masked_fill, or -1e4")
                    break
        if isinstance(op, cst.Divide) and self.fp16_file:
            self._eps(node.right, node, divisor=True)

    def _eps(self, expr: cst.BaseExpression, at: cst.CSTNode, divisor: bool) -> None:
        if not (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add)):
            return
        for side in (expr.left, expr.right):
            v = literal_number(side)
            if v is None or v <= 0:
                continue
            if v < FP16_TINY:
                self._report(at, "A2A602", f"eps {v:g} rounds to 0 in fp16 (smallest subnormal ~6e-8), so the guard "
                             "does nothing on fp16 tensors; use eps >= 1e-4 or compute in fp32")
            elif divisor and v < FP16_INV_TINY:
                self._report(at, "A2A602", f"dividing by an eps of {v:g} gives 1/eps > 65504 (inf) in fp16; use "
                             "eps >= 1e-4 or compute in fp32")

    # L3 ------------------------------------------------------------------------------------
    def _check_clip_order(self, events: List[Tuple[int, str, cst.CSTNode]]) -> None:
        events.sort(key=lambda e: e[0])
        state = "idle"
        pending: List[cst.CSTNode] = []
        for _, kind, node in events:
            if kind == "backward":
                state = "scaled"
            elif kind == "unscale":
                state = "unscaled"
            elif kind == "clip" and state == "scaled":
                pending.append(node)
            elif kind == "step":
                for clip in pending:
                    self._report(clip, "A2A606", "gradients are clipped while still scaled: call "
                                 "scaler.unscale_(optimizer) before clipping")
                pending = []
                state = "idle"
