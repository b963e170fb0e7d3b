"""fp16 numerical hazards in (migrated) mixed-precision code: findings only, never a rewrite.

Runs last, on the migrated text, and only on files that use mixed precision at all (autocast,
GradScaler, apex, `.half()`), so clean fp32 repositories stay quiet. Each rule is tuned for
precision (see docs verification-notes section 5, rules L1-L12): it fires on shapes that overflow,
raise or silently produce inf/NaN in fp16, not on every large number.
"""
from __future__ import annotations

import ast
import functools
import itertools
import re
from typing import Iterator, List, Optional, Set, Tuple

import libcst as cst

from .base import WARNING, Codemod, FileContext, rule
from .index import ModuleIndex, positions_of
from .names import code_of, dotted_name, literal_number, power_value
from .walk import ast_nodes, ast_nodes_near, nested, parse_ast

FP16_MAX = 65504.0
FP16_TINY = 6e-8       # smallest fp16 subnormal is ~5.96e-8: anything below rounds to 0
FP16_INV_TINY = 1.5e-5  # 1/eps above 65504 overflows

rule("A2A601", "fp16-mask-constant", "mask constant outside the fp16 range", fixes=False, severity=WARNING,
     why="""
Under fp16 autocast every matmul output (attention scores) is fp16, whose range ends at 65504.
masked_fill(mask, -1e9) then raises "value cannot be converted to type c10::Half without overflow",
and an additive mask `scores + mask * -1e9` silently becomes -inf (and 0 * -inf is NaN). Use
torch.finfo(scores.dtype).min, or -1e4, which fits fp16.""",
     before="scores = scores.masked_fill(mask == 0, -1e9)",
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
     before="criterion = nn.BCELoss()\nloss = criterion(torch.sigmoid(logits), y)",
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
     before="model = model.cuda().half()\nimages = images.half()",
     after="model = model.cuda()")
rule("A2A605", "nonfinite-check-scaled", "isnan / isinf check on a scaled loss", fixes=False, severity=WARNING,
     why="""
The scaled loss (scaler.scale(loss), apex's scaled_loss) overflows by design on some steps; GradScaler
skips those steps itself. Checking it for NaN/inf (and skipping or aborting) fires on harmless
overflow steps. Check the unscaled loss instead.""",
     before="if torch.isnan(scaler.scale(loss)): raise RuntimeError('nan')",
     after="if torch.isnan(loss): raise RuntimeError('nan')")
rule("A2A606", "clip-before-unscale", "gradient clipping between scaler.scale().backward() and scaler.step() without unscale_",
     fixes=False, severity=WARNING,
     why="""
Until scaler.unscale_(optimizer) the gradients are multiplied by the loss scale (65536 at start), so
clip_grad_norm_(..., max_norm) clips far too hard (the effective max norm shrinks by the scale) and a
grad-norm log is scaled. Call scaler.unscale_(optimizer) once right before the clip.""",
     before="scaler.scale(loss).backward()\nclip_grad_norm_(model.parameters(), 1.0)\nscaler.step(optimizer)",
     after="scaler.scale(loss).backward()\nscaler.unscale_(optimizer)\nclip_grad_norm_(model.parameters(), 1.0)\n"
           "scaler.step(optimizer)")

MIXED_PRECISION = re.compile(r"autocast|GradScaler|\bapex\b|\.half\(\)|float16|scale_loss")
AUTOCAST_OR_SCALER = re.compile(r"autocast|GradScaler|\bapex\b|scale_loss")
MASK_FUNCS = {"masked_fill", "masked_fill_", "fill_", "full", "full_like", "new_full", "where"}
CLIP_FUNCS = {"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm"}
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
    PREFILTER = (b"autocast", b"GradScaler", b"apex", b".half()", b"float16", b"scale_loss")
    REPORTS_ONLY = True

    def wants(self, data: bytes, module_name: str = "") -> bool:
        """Exact-enough second stage without libcst: stdlib `ast` (about 10x faster) looks for anything
        a rule could fire on; files with nothing of the kind never reach libcst."""
        return _may_have_hazard(data)

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


FP16_CASTS = re.compile(r"\.half\(\)|\.to\([^)]*(float16|torch\.half)")


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


class _Lint(cst.CSTVisitor):
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


_MIXED_PRECISION_B = re.compile(MIXED_PRECISION.pattern.encode())
_FP16_CASTS_B = re.compile(FP16_CASTS.pattern.encode())
_AUTOCAST_OR_SCALER_B = re.compile(AUTOCAST_OR_SCALER.pattern.encode())
# a number literal that may lie below FP16_INV_TINY (1.5e-5): an exponent <= -5, 0.0000..., or a power
_SMALL_LITERAL_B = re.compile(rb"(?i)\d[eE]-0*(?:[5-9]|[1-9]\d)|\.0000")  # or a power: _power_of_literals
_INF_WORDS = ("inf", "+inf", "-inf", "infinity", "-infinity")


def _ast_number(node: ast.AST) -> Optional[float]:
    """The stdlib-AST twin of `literal_number` for a power's operands (a signed int or float constant)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _ast_number(node.operand)
        return -v if v is not None else None
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    return None


def _ast_big(node: ast.AST, threshold: float = FP16_MAX) -> bool:
    """The stdlib-AST twin of `_big`: a spelled constant beyond `threshold` (or an infinity)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _ast_big(node.operand, threshold)
    if isinstance(node, ast.Constant):
        v = node.value
        return isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) >= threshold
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        v = power_value(_ast_number(node.left), _ast_number(node.right))  # as `literal_number` does
        return v is not None and abs(v) >= threshold
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float" and node.args:
        a = node.args[0]
        if isinstance(a, ast.Constant) and str(a.value).strip().lower() in _INF_WORDS:
            return True
        return _ast_big(a, threshold)
    if isinstance(node, ast.Attribute) and node.attr in ("min", "max") and isinstance(node.value, ast.Call):
        f = node.value.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        return name == "finfo"
    if isinstance(node, (ast.Name, ast.Attribute)):
        return (node.id if isinstance(node, ast.Name) else node.attr) in ("inf", "infty")
    return False


# Between a power's operands: spaces, line breaks, backslash continuations, comments, brackets, signs.
_POWER_GAP = rb"(?:[\s()\\+-]|#[^\n]*\n)*"  # a comment runs to its line end: one way to match
# Bytes every branch of the AST walk below needs (a superset, so most files skip the parse):
# a big or infinite constant (5+ integer digits, an exponent >= 4, hex/octal/binary, inf, finfo,
# a power of two number literals: `_ast_number` reads only those, so `x ** 2` and `**kwargs` never count),
# BCE, a non-finite check or clipping beside `.scale(`, or a half dtype in a cast.
_BIG_OR_INF_B = re.compile(rb"(?i)\binf(?:ty)?\b|['\"]\s*[+-]?inf(?:inity)?\s*['\"]|finfo|\b0[xob]"
                           rb"|[\d.]" + _POWER_GAP + rb"\*\*" + _POWER_GAP + rb"[\d.]"
                           rb"|(?<![\w.])\d[\d_]{4}|[\d.]e\+?0*(?:[4-9]|[1-9]\d)")

# `_big_or_inf` answers `_BIG_OR_INF_B.search` without scanning every byte with a seven-way regex
# (~15 MB/s): each branch is found from a literal it must contain, by bytes.find speed.
_INF_WORD_AT = re.compile(rb"\binf(?:ty)?\b")  # on lower-cased bytes, as (?i) reads them
_INF_QUOTED_AT = re.compile(rb"['\"]\s*[+-]?inf(?:inity)?\s*['\"]")
_EXPONENT_AT = re.compile(rb"[\d.]e\+?0*(?:[4-9]|[1-9]\d)")
_POWER_AFTER = re.compile(_POWER_GAP + rb"[\d.]")
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789_", b"0000000000")
_WORD = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_GAP_BYTES = frozenset(b" \t\n\r\f\v()\\+-")


def _find_all(data: bytes, literal: bytes) -> Iterator[int]:
    i = data.find(literal)
    while i >= 0:
        yield i
        i = data.find(literal, i + 1)


def _big_or_inf(data: bytes) -> bool:
    """`_BIG_OR_INF_B.search(data) is not None`, except that a power after a comment line is always
    taken (a superset): each branch is looked for only where its literal occurs."""
    lowered = data.lower()
    for i in _find_all(lowered, b"inf"):
        if _INF_WORD_AT.match(lowered, i) or lowered[i - 1:i + 4] == b"finfo":
            return True
        j = i - 1
        if j >= 0 and lowered[j] in b"+-":
            j -= 1
        while j >= 0 and lowered[j] in b" \t\n\r\f\v":
            j -= 1
        if j >= 0 and _INF_QUOTED_AT.match(lowered, j):
            return True
    for base in (b"0x", b"0o", b"0b"):
        for i in _find_all(lowered, base):
            if i == 0 or lowered[i - 1] not in _WORD:
                return True
    if _power_of_literals(data):
        return True
    zeros = lowered.translate(_DIGITS_AS_ZERO)
    i = zeros.find(b"00000")
    while i >= 0:  # five digits (or underscores) in a row: a match starts a run, on a digit
        start = i
        while start > 0 and zeros[start - 1] == 48:
            start -= 1
        if data[start] != 95 and (start == 0 or (data[start - 1] not in _WORD and data[start - 1] != 46)):
            return True
        end = i + 5
        while end < len(zeros) and zeros[end] == 48:
            end += 1
        i = zeros.find(b"00000", end)
    for i in itertools.chain(_find_all(zeros, b"0e"), _find_all(lowered, b".e")):
        if _EXPONENT_AT.match(lowered, i):
            return True
    return False


_SPACE_OR_OPEN = frozenset(b" \t\r\n\f\\(")
_SPACE_OR_CLOSE = frozenset(b" \t\r\n\f\\)")
_TOKEN = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")


def _tiny_in_sum(data: bytes) -> bool:
    """A tiny number literal (`_SMALL_LITERAL_B`) written as an operand of `+`, the only place A2A602's
    eps check reads one (`x + 1e-8`, `(1e-8 + x)`); a comment between them is taken as a yes."""
    for m in _SMALL_LITERAL_B.finditer(data):
        start, end = m.start(), m.end()
        while start > 0 and data[start - 1] in _TOKEN:
            start -= 1
        while end < len(data) and data[end] in _TOKEN:
            end += 1
        j = start - 1
        while j >= 0 and data[j] in _SPACE_OR_OPEN:
            j -= 1
        k = end
        while k < len(data) and data[k] in _SPACE_OR_CLOSE:
            k += 1
        if (j >= 0 and data[j] in b"+#") or (k < len(data) and data[k] in b"+#"):
            return True
        if j >= 0 and _comment_before(data, j):
            return True  # the token may follow a comment line inside brackets
    return False


def _comment_before(data: bytes, j: int) -> bool:
    """Whether the line holding byte j has a `#` before it: j may then lie inside a comment, and a
    backward scan cannot tell where the code before it ends."""
    return b"#" in data[data.rfind(b"\n", 0, j) + 1:j]


def _power_of_literals(data: bytes) -> bool:
    """A `**` between two number literals (brackets, signs, spaces and comments around it), which
    `literal_number` evaluates; `x ** 2` and `**kwargs` are not."""
    for i in _find_all(data, b"**"):
        if _POWER_AFTER.match(data, i + 2) and _number_before_power(data, i):
            return True
    return False


def _number_before_power(data: bytes, i: int) -> bool:
    """Whether the bytes before the `**` at `i`, back over brackets, signs and spaces, end in a digit
    or `.`; a line with a comment on the way is taken as a yes (the regex may skip that comment)."""
    j = i - 1
    crossed_line = False
    while j >= 0:
        c = data[j]
        if c in _GAP_BYTES:
            crossed_line = crossed_line or c == 10
            j -= 1
            continue
        if 48 <= c <= 57 or c == 46:
            return True
        return crossed_line and _comment_before(data, j)
    return False


# A subscript assignment of a big finite number (the only rule without autocast; an infinity or finfo is
# fine there): `] =`, then brackets, signs, comments, chained targets or `float(`, then a number literal
# of 5+ digits, an exponent >= 4, hex/octal/binary, or the base of a power.
_SUBSCRIPT_BIG_B = re.compile(rb"\][\s\\]*=(?!=)(?:[\s(\\+-]|#[^\n]*\n|[\w.]+[\s\\]*=(?!=)|float\b)*"
                              rb"(?:\d[\d_]{4}|[\d.][\d_.]*[eE]\+?0*(?:[4-9]|[1-9]\d)|0[xXoObB]"
                              rb"|[\d.][\d_.]*[\s)\\]*\*\*)")
# Where a rule can fire, every statement holds one of these: a big constant, BCE, a cast, a check
# (a plain superset of _BIG_OR_INF_B's tokens, without look-behinds: this one runs over whole files).
_WHERE_B = re.compile(rb"\d[\d_]{4}|[\d.][eE]\+?0*(?:[4-9]|[1-9]\d)|\*\*|[iI][nN][fF]|finfo|0[xXoObB]"
                      rb"|BCELoss|binary_cross_entropy|\bhalf\b|\bto\b|\btype\b|isnan|isinf|isfinite|clip_grad")


def _lines_of(data: bytes, pattern: "re.Pattern[bytes]") -> Optional[List[int]]:
    """The sorted 1-based lines holding a match of `pattern`, as the stdlib parser numbers them
    (None when the file has bare carriage returns, which it also counts as line ends)."""
    if data.count(b"\r") != data.count(b"\r\n"):
        return None
    starts = [m.start() for m in pattern.finditer(data)]
    if not starts:
        return []
    out: List[int] = []
    line, pos = 1, 0
    for start in starts:
        line += data.count(b"\n", pos, start)
        pos = start
        if not out or out[-1] != line:
            out.append(line)
    return out


def _autocast_or_scaler(data: bytes) -> bool:
    """`_AUTOCAST_OR_SCALER_B.search(data)`, by bytes.find for each word (the regex has no literal prefix)."""
    if b"autocast" in data or b"GradScaler" in data or b"scale_loss" in data:
        return True
    return b"apex" in data and _APEX_WORD_B.search(data) is not None


_APEX_WORD_B = re.compile(rb"\bapex\b")


def _hazard_tokens(data: bytes, autocast: bool) -> bool:
    """Bytes some rule needs; without autocast only a subscript assignment and the scaler rules remain."""
    scaled = b".scale(" in data and any(w in data for w in (b"isnan", b"isinf", b"isfinite", b"clip_grad"))
    if not autocast:
        return scaled or _SUBSCRIPT_BIG_B.search(data) is not None
    if scaled or b"BCELoss" in data or b"binary_cross_entropy" in data:
        return True
    if _big_or_inf(data) and _big_in_rule_shape(data):
        return True
    return (b"float16" in data or b"half" in data.lower()) and _cast_tokens(data)


# A number literal that may be 1e4 or more: 5+ digits, an exponent >= 4, hex/octal/binary.
_BIG_TOKEN_B = re.compile(rb"\d[\d_]{4}|[\d.][\d_.]*[eE]\+?0*(?:[4-9]|[1-9]\d)|0[xXoObB]")
_MASK_CALL_B = re.compile(rb"\b(?:masked_fill_?|fill_|full(?:_like)?|new_full|where)[\s\\]*(?=\()")
_BACK_GAP = frozenset(b" \t\r\n\f\\()+-")


def _big_in_rule_shape(data: bytes) -> bool:
    """Where an autocast file's big-number rules can fire (A2A601): a big literal assigned into a
    subscript, passed to a mask function, or multiplied (a literal or a power of literals next to `*`)."""
    if _SUBSCRIPT_BIG_B.search(data):
        return True
    for m in _MASK_CALL_B.finditer(data):
        call = _CAST_CALL_B.match(data, m.end())
        if call is None or _BIG_TOKEN_B.search(call.group()) or _power_of_literals(call.group()):
            return True
    for i in _find_all(data, b"*"):
        if data[i + 1:i + 2] == b"*" or (i > 0 and data[i - 1] == 42):
            continue  # a power or **kwargs: its operands are read next to the `*` of a product
        if _big_operand_after(data, i + 1) or _big_operand_before(data, i):
            return True
    return False


def _big_operand_after(data: bytes, k: int) -> bool:
    """The operand right of a `*` at k - 1: a big literal, or the base of a power."""
    m = _POWER_AFTER.match(data, k)  # brackets, signs, spaces, comments, then a digit or `.`
    if m is None:
        return False
    start = m.end() - 1
    end = start
    while end < len(data) and (data[end] in _TOKEN or (data[end] in b"+-" and data[end - 1] in b"eE")):
        end += 1
    if _BIG_TOKEN_B.search(data, start, end):
        return True
    j = end
    while j < len(data) and data[j] in _SPACE_OR_CLOSE:
        j += 1
    return data[j:j + 2] == b"**" or data[j:j + 1] == b"#"


def _big_operand_before(data: bytes, i: int) -> bool:
    """The operand left of the `*` at i: a big literal, or the exponent of a power."""
    j = i - 1
    crossed_line = False
    while j >= 0 and data[j] in _BACK_GAP:
        crossed_line = crossed_line or data[j] == 10
        j -= 1
    if j < 0 or data[j] not in _TOKEN:
        return False
    if crossed_line and _comment_before(data, j):
        return True  # the operand may lie before a comment
    end = j + 1
    while j >= 0 and (data[j] in _TOKEN or (data[j] in b"+-" and j > 0 and data[j - 1] in b"eE")):
        j -= 1
    if not (48 <= data[j + 1] <= 57 or data[j + 1] == 46):
        return False  # a name, not a number
    if _BIG_TOKEN_B.search(data, j + 1, end):
        return True
    while j >= 0 and data[j] in _BACK_GAP:
        j -= 1
    return j >= 1 and data[j - 1:j + 1] == b"**"


# A call's arguments, up to three brackets deep: string literals and comments are single atoms, so
# a bracket inside them does not count. A call this does not match (deeper, an escape or a line
# break inside a string) is taken as a cast.
_ARG_ATOM = rb"""(?:[^()'"#]|"[^"\\\n]*"|'[^'\\\n]*'|#[^\n]*(?![^\n]))"""
_CAST_CALL_B = re.compile(rb"\(" + nested(_ARG_ATOM, ((rb"\(", rb"\)"),)) + rb"\)")
_CAST_OPEN_B = re.compile(rb"\.[\s\\]*(?:to|type)[\s\\]*(?=\()")
_HALF_CALL_B = re.compile(rb"\.[\s\\]*half[\s\\]*\(")


def _cast_tokens(data: bytes) -> bool:
    """A `.half(` call, or a `.to(` / `.type(` call whose arguments spell half or float16 (A2A604 reads
    the argument's dotted name or string)."""
    if _HALF_CALL_B.search(data):
        return True
    for m in _CAST_OPEN_B.finditer(data):
        call = _CAST_CALL_B.match(data, m.end())
        if call is None:
            return True
        args = call.group().lower()
        if b"half" in args or b"float16" in args:
            return True
    return False


@functools.lru_cache(maxsize=64)  # the screen, pass 1 and pass 2 ask about the same bytes
def _may_have_hazard(data: bytes) -> bool:
    """A superset of what `_Lint` reports, decided on the stdlib AST: mixed-precision code with a
    big constant in a mask function, a subscript assignment or a product; BCE; a half cast; a
    non-finite check or clipping next to a scaler. Syntax errors go on to libcst, which reports them."""
    autocast = _autocast_or_scaler(data)  # the lint's autocast_file
    if not autocast and b".half()" not in data and b"float16" not in data:
        return False  # not MIXED_PRECISION
    if _FP16_CASTS_B.search(data) and (autocast or _tiny_in_sum(data) or _power_of_literals(data)):
        return True  # .half() / .to(float16): A2A604 in an autocast file; A2A602 with a tiny eps
    if not _hazard_tokens(data, autocast):
        return False
    try:
        tree = parse_ast(data)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return True
    scaled = b".scale(" in data
    lines = _lines_of(data, _WHERE_B)
    for node in ast_nodes(tree) if lines is None else ast_nodes_near(tree, lines):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            if autocast and (_ast_big(node.left, 1e4) or _ast_big(node.right, 1e4)):
                return True
        elif isinstance(node, ast.Assign):
            if any(isinstance(t, ast.Subscript) for t in node.targets) and _ast_big(node.value):
                return True
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if autocast and name in MASK_FUNCS and any(
                    _ast_big(a) for a in list(node.args) + [k.value for k in node.keywords]):
                return True
            if autocast and (name.endswith("BCELoss") or name == "binary_cross_entropy"):
                return True
            if scaled and (name in ("isnan", "isinf", "isfinite") or name in CLIP_FUNCS):
                return True
            if autocast and isinstance(f, ast.Attribute) and (f.attr == "half" or f.attr in ("to", "type") and any(
                    "float16" in ast.dump(a) or "half" in ast.dump(a).lower()
                    for a in list(node.args) + [k.value for k in node.keywords])):
                return True
        elif autocast and isinstance(node, (ast.Name, ast.Attribute)):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if name.endswith("BCELoss") or name == "binary_cross_entropy":
                return True
    return False
