"""apex < 0.1's `apex.optimizers.FP16_Optimizer` wrapping FusedAdam -> fp32 model + autocast + GradScaler.

The pytorch-pretrained-bert fine-tuning shape, all in one function F, under one fp16 flag (`args.fp16`):

    if FLAG: M.half()                                          -> removed
    if FLAG:
        [try: from apex.optimizers import FP16_Optimizer, FusedAdam except ImportError: raise ...]
        T = FusedAdam(params, lr=..., [betas, eps, weight_decay])   -> T = torch.optim.AdamW(..., weight_decay=...)
        [if C:] T = FP16_Optimizer(T, dynamic_loss_scale=True)      -> removed
        [else:  T = FP16_Optimizer(T, static_loss_scale=S)]
    else:
        T = <the fp32 optimizer>                               (kept)
                                                               + scaler = GradScaler(..., enabled=FLAG)
    <forward + loss>                                           -> with torch.autocast(..., enabled=FLAG):
    if FLAG: T.backward(L)
    else: L.backward()                                         -> scaler.scale(L).backward()
    T.step()                                                   -> scaler.step(T); scaler.update()

That wrapper's DynamicLossScaler started at 2**16, doubled after 1000 clean steps and halved (not below 1)
on an overflow, skipping the step; in static mode it skipped an overflowing step too. GradScaler does
the same (init_scale=2.0**16, growth_interval=1000; a static scale S becomes init_scale=S with
growth_interval=2**30, and GradScaler then halves the scale on an overflow, which the wrapper did not).
Only `T.backward(L)`, `T.step()`, `T.zero_grad()` and `T.param_groups` may be used (FP16_Optimizer's
param_groups were FusedAdam's, so a warmup loop writing `param_group['lr']` stays as it is).

apex < 0.1's FusedAdam is migrated here, not by apex_modules (whose mapping is apex >= 0.1's, with another
positional order): to torch.optim.AdamW when it has no torch-inexpressible option, else (`bias_correction=False`,
`eps_inside_sqrt=True`, `max_grad_norm > 0`, arguments not bound: SpanBERT's and BERT-NER's
`FusedAdam(groups, lr=lr, bias_correction=False, max_grad_norm=1.0)`) to `LegacyFusedAdam(<the same
arguments>)`, a plain-PyTorch port of its update added to the file (codemods/fused_adam_legacy.py, A2A306).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from . import templates
from .call_args import rebuild_args
from .fused_adam_legacy import HELPER
from .fused_optimizers import TORCH_ADAM_SIG
from .code_layout import realign_call
from .fp16_shapes import eval_only_cast, flag_autocast_maker, label_cast
from .names import assigned_names, code_of, dotted_name, literal_number, sole_call
from .scaling_shapes import FUSED_FP16_OPT, STATIC_INTERVAL, ancestors, parse_stmts, stmt_line, walk_all

FUSED_ADAM = "apex.optimizers.FusedAdam"
# apex < 0.1's signatures (the positional order differs from apex >= 0.1's FusedAdam: eps_inside_sqrt)
LEGACY_ADAM_SIG = ("params", "lr", "bias_correction", "betas", "eps", "eps_inside_sqrt", "weight_decay",
                   "max_grad_norm", "amsgrad")
LEGACY_WRAPPER_SIG = ("init_optimizer", "static_loss_scale", "dynamic_loss_scale", "dynamic_loss_args", "verbose")
DYNAMIC = ("2.0**16", "1000")  # that wrapper's DynamicLossScaler: init 2**16, window 1000, factor 2
USES = ("backward", "step", "zero_grad", "param_groups")
PORT, PORT_CODE = "port", "A2A306"  # FusedAdam -> the added LegacyFusedAdam (codemods/fused_adam_legacy.py)


def _bind(call: cst.Call, sig) -> Optional[Dict[str, cst.BaseExpression]]:
    out: Dict[str, cst.BaseExpression] = {}
    pos = 0
    for a in call.args:
        if a.star:
            return None
        if a.keyword is None:
            if pos >= len(sig):
                return None
            out[sig[pos]] = a.value
            pos += 1
        elif a.keyword.value in sig and a.keyword.value not in out:
            out[a.keyword.value] = a.value
        else:
            return None
    return out


def _lit_bool(e: Optional[cst.BaseExpression]) -> Optional[bool]:
    if isinstance(e, cst.Name) and e.value in ("True", "False"):
        return e.value == "True"
    return None


def _pure(e: cst.BaseExpression) -> bool:
    """A test the scaler's arguments may repeat: names, attributes, numbers, comparisons and `not` of them."""
    if dotted_name(e) is not None or literal_number(e) is not None:
        return True
    if isinstance(e, cst.UnaryOperation) and isinstance(e.operator, cst.Not):
        return _pure(e.expression)
    if isinstance(e, cst.Comparison):
        return _pure(e.left) and all(_pure(c.comparator) for c in e.comparisons)
    return False


class LegacyFp16Optimizer:
    """Migrates, or reports, the apex < 0.1 FP16_Optimizer + FusedAdam pattern of one module.

    `mig` is the manual-scaling codemod's `_Migration` (module, parents, res, calls, ctx, plan, report)."""

    def __init__(self, mig) -> None:
        self.mig = mig
        self.parents = mig.parents
        self.wrappers = [c for c in mig.calls if mig.res.apex_name(c.func) == FUSED_FP16_OPT]
        self.adams = [c for c in mig.calls if mig.res.apex_name(c.func) == FUSED_ADAM]
        self.label_casts: List[cst.If] = []  # `if FLAG: L = L.half()` of regression labels, removed with the model's

    def run(self) -> Set[int]:
        """Ids of the FP16_Optimizer calls answered here (migrated, or reported with the reason)."""
        m = self.mig
        if not self.wrappers or not m.ok(self.wrappers[0], "A2A501"):
            return set()
        why = self._migrate()
        if why is None:
            return {id(c) for c in self.wrappers}
        for c in self.wrappers:
            static = next((a.value for a in c.args if a.keyword is not None
                           and a.keyword.value == "static_loss_scale"), None)
            scale, interval = (code_of(static), STATIC_INTERVAL) if static is not None else DYNAMIC
            gs = f"{m.gs}(\"{m.device}\", init_scale={scale}, growth_interval={interval}, enabled=<the fp16 flag>)"
            m.report(c, "A2A502", f"apex.optimizers.FP16_Optimizer (apex < 0.1's wrapper of FusedAdam) not rewritten: "
                     f"{why}. Migrate by hand: keep the model fp32 (drop `.half()`), torch.autocast(\"{m.device}\", "
                     f"dtype=torch.float16, enabled=<the fp16 flag>) around forward + loss, scaler = {gs}, "
                     "optimizer.backward(loss) -> scaler.scale(loss).backward(), optimizer.step() -> "
                     "scaler.step(optimizer); scaler.update()" + self._adam_hint())
        for c in self.adams:
            m.report(c, "A2A304", f"FusedAdam here is apex < 0.1's (this module uses apex.optimizers.FP16_Optimizer) "
                     f"and is left with its wrapper: {self._adam_note(c)}")
        return {id(c) for c in self.wrappers}

    @staticmethod
    def _adam_note(call: cst.Call) -> str:
        val = _bind(call, LEGACY_ADAM_SIG) or {}
        notes = []
        legacy = [f"{k}={code_of(val[k])}" for k in ("bias_correction", "eps_inside_sqrt") if k in val
                  and _lit_bool(val[k]) is not (k == "bias_correction")]
        mgn = val.get("max_grad_norm")
        if mgn is not None and literal_number(mgn) != 0:
            legacy.append(f"max_grad_norm={code_of(mgn)}")
        if legacy:
            notes.append(f"{', '.join(legacy)} has no torch.optim equivalent (torch Adam/AdamW always correct the "
                         "bias, and FusedAdam clipped each param group by its own norm): keep the call's arguments and "
                         f"call {HELPER}(...) instead, the plain-PyTorch port of apex < 0.1's FusedAdam that "
                         f"`apex2amp explain {PORT_CODE}` prints (it clips each group itself, after scaler.step has "
                         "unscaled the gradients)")
        if not notes:
            notes.append("otherwise torch.optim.AdamW(params, lr, betas=..., eps=..., weight_decay=<its value, or "
                         "0.0>)")
        return "; ".join(notes)

    def _adam_hint(self) -> str:
        """What the wrapped FusedAdam becomes in the hand migration."""
        legacy = [c for c in self.adams if self._legacy_options(c) != ["arguments passed through"]]
        if legacy:
            return (f"; FusedAdam({', '.join(self._legacy_options(legacy[0]))}, ...) -> {HELPER}(<the same "
                    f"arguments>), the class `apex2amp explain {PORT_CODE}` prints, added to the file")
        return "; FusedAdam(...) -> torch.optim.AdamW(..., weight_decay=<its value, or 0.0>)" if self.adams else ""

    @staticmethod
    def _legacy_options(call: cst.Call) -> List[str]:
        """`name=value` of the options that make FusedAdam apex < 0.1's own (or `*args` when unbound)."""
        val = _bind(call, LEGACY_ADAM_SIG)
        if val is None:
            return ["arguments passed through"]
        return [f"{k}={code_of(val[k])}" for k in ("bias_correction", "eps_inside_sqrt", "max_grad_norm", "amsgrad")
                if k in val] or ["arguments passed through"]

    def _adamw(self, call: cst.Call) -> Tuple[Optional[cst.Call], str]:
        """The torch.optim.AdamW call for apex < 0.1's FusedAdam call, or the same call pointed at the added
        LegacyFusedAdam port (codemods/fused_adam_legacy.py; flag `PORT`) where AdamW would change the update
        (bias_correction=False, eps_inside_sqrt, max_grad_norm, arguments not bound), or (None, reason)."""
        val = _bind(call, LEGACY_ADAM_SIG)
        legacy = val is None or "params" not in val or any(
            name in val and _lit_bool(val[name]) is not ok
            for name, ok in (("bias_correction", True), ("eps_inside_sqrt", False), ("amsgrad", False))) or (
            "max_grad_norm" in val and literal_number(val["max_grad_norm"]) != 0)
        if legacy:
            if not self.mig.ok(call, PORT_CODE):
                return None, f"{PORT_CODE} (the LegacyFusedAdam port) is not selected here: {self._adam_note(call)}"
            if HELPER in self.mig.index.name_values and not any(
                    isinstance(s, cst.ClassDef) and s.name.value == HELPER for s in self.mig.module.body):
                return None, f"the name {HELPER} is taken in this module: {self._adam_note(call)}"
            line = stmt_line(call, self.parents)
            port = call.with_changes(func=cst.Name(HELPER))
            return (realign_call(call, port, code_of(line.body[0]).split("\n", 1)[0]) if line is not None
                    else port), PORT
        flag = "fused" if self.mig.ctx.options.min_torch >= (2, 0) else "foreach"
        extra = [("weight_decay", "0.0"), (flag, "True")]
        args = rebuild_args(call, LEGACY_ADAM_SIG, TORCH_ADAM_SIG, {"bias_correction", "eps_inside_sqrt",
                                                                    "max_grad_norm", "amsgrad"}, extra)
        func = templates.expression("torch.optim.AdamW")
        new = call.with_changes(func=func, args=args)
        line = stmt_line(call, self.parents)
        new = realign_call(call, new, code_of(line.body[0]).split("\n", 1)[0]) if line is not None else new
        return new, flag

    def _block(self, stmt: cst.CSTNode) -> Optional[List[cst.CSTNode]]:
        p = self.parents.get(stmt)
        return list(p.body) if isinstance(p, (cst.IndentedBlock, cst.Module)) else None

    def _scaler_args(self, call: cst.Call) -> Tuple[Optional[Tuple[str, str]], str]:
        val = _bind(call, LEGACY_WRAPPER_SIG)
        if val is None or "init_optimizer" not in val:
            return None, "FP16_Optimizer's arguments are not understood"
        dargs = val.get("dynamic_loss_args")
        if dargs is not None and not (isinstance(dargs, cst.Name) and dargs.value == "None"):
            return None, "dynamic_loss_args is set (that wrapper raised on it)"
        dyn = _lit_bool(val["dynamic_loss_scale"]) if "dynamic_loss_scale" in val else False
        if dyn is None:
            return None, "dynamic_loss_scale is not a literal True/False"
        if dyn:
            return DYNAMIC, "dynamic"
        static = val.get("static_loss_scale")
        s = code_of(static) if static is not None else "1.0"
        if static is not None and not _pure(static):
            return None, "static_loss_scale is not a name or a number"
        return (s, STATIC_INTERVAL), f"static {s}"

    # -- the shape -----------------------------------------------------------------------------
    def _migrate(self) -> Optional[str]:  # noqa: C901 (one pass over the recognised shape)
        m = self.mig
        funcs = {id(next((a for a in ancestors(c, self.parents) if isinstance(a, cst.FunctionDef)), None))
                 for c in self.wrappers + self.adams}
        func = next((a for a in ancestors(self.wrappers[0], self.parents) if isinstance(a, cst.FunctionDef)), None)
        if func is None or len(funcs) != 1:
            return "FP16_Optimizer and FusedAdam are not all in one function"
        if len(self.adams) != 1 or len(self.wrappers) > 2:
            return "the module builds more than one FusedAdam, or more than two FP16_Optimizers"
        # T = FP16_Optimizer(T, ...) once, or in both branches of `if C: ... else: ...`
        lines, target, settings = [], None, []
        for c in self.wrappers:
            line = stmt_line(c, self.parents)
            small = line.body[0] if line is not None and len(line.body) == 1 else None
            if not (isinstance(small, cst.Assign) and small.value is c and len(small.targets) == 1
                    and isinstance(small.targets[0].target, cst.Name)):
                return "FP16_Optimizer(...) is not a plain `optimizer = FP16_Optimizer(optimizer, ...)`"
            t = small.targets[0].target.value
            inner = _bind(c, LEGACY_WRAPPER_SIG) or {}
            if dotted_name(inner.get("init_optimizer")) != t or target not in (None, t):
                return "FP16_Optimizer does not wrap the optimizer it is assigned to (`T = FP16_Optimizer(T, ...)`)"
            target = t
            args, note = self._scaler_args(c)
            if args is None:
                return note
            lines.append(line)
            settings.append((args, note))
        if len(lines) == 1:
            wrap_stmt: cst.CSTNode = lines[0]
            init, interval = settings[0][0]
        else:
            cond = self.parents.get(self.parents.get(lines[0]))
            if not (isinstance(cond, cst.If) and isinstance(cond.orelse, cst.Else) and _pure(cond.test)
                    and isinstance(cond.body, cst.IndentedBlock) and list(cond.body.body) == [lines[0]]
                    and isinstance(cond.orelse.body, cst.IndentedBlock) and list(cond.orelse.body.body) == [lines[1]]):
                return "the two FP16_Optimizer calls are not the two branches of one `if <test>: ... else: ...`"
            wrap_stmt = cond
            test = code_of(cond.test).strip()
            (i1, g1), (i2, g2) = settings[0][0], settings[1][0]
            init = i1 if i1 == i2 else f"{i1} if {test} else {i2}"
            interval = g1 if g1 == g2 else f"{g1} if {test} else {g2}"
        # the branch `if FLAG:` holding the FusedAdam and the wrapper, with an `else:` building T for fp32
        branch = self._block(wrap_stmt)
        flag_if = self.parents.get(self.parents.get(wrap_stmt))
        if branch is None or not isinstance(flag_if, cst.If) or dotted_name(flag_if.test) is None:
            return "FP16_Optimizer is not created under an `if <fp16 flag>:`"
        flag = dotted_name(flag_if.test)
        if not (isinstance(flag_if.orelse, cst.Else) and target in {
                n for s in flag_if.orelse.body.body for n in assigned_names(s)}):
            return f"the `else:` of `if {flag}:` does not build the fp32 optimizer {target}"
        adam = self.adams[0]
        adam_line = stmt_line(adam, self.parents)
        k = branch.index(wrap_stmt)
        before = [s for s in branch[:k] if target in assigned_names(s)]
        if not before or before[-1] is not adam_line or not (
                isinstance(adam_line.body[0], cst.Assign) and adam_line.body[0].value is adam):
            return f"{target} = FusedAdam(...) is not the statement before FP16_Optimizer in `if {flag}:`"
        adamw, flag_kw = self._adamw(adam)
        if adamw is None:
            return flag_kw
        fnodes = walk_all(func)
        if any(isinstance(n, (cst.Assign, cst.AugAssign)) and flag in (
                {dotted_name(t.target) for t in n.targets} if isinstance(n, cst.Assign) else {dotted_name(n.target)})
               for n in fnodes):
            return f"{flag} is assigned in the function"
        # the model cast: `if FLAG: M.half()`, the function's only fp16 cast
        halves = [n for n in fnodes if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)
                  and n.func.attr.value == "half"]
        half_ids = {id(h) for h in halves}
        casts = [i for i in fnodes if isinstance(i, cst.If) and dotted_name(i.test) == flag and i.orelse is None
                 and isinstance(i.body, cst.IndentedBlock) and len(i.body.body) == 1
                 and id(sole_call(i.body.body[0])) in half_ids]
        self.label_casts = [i for i in fnodes if isinstance(i, cst.If) and label_cast(i, flag, self.parents)]
        if not casts or len(halves) != len(casts) + len(self.label_casts):
            others = sorted({code_of(h).strip() for h in halves if not any(
                a in casts or a in self.label_casts for a in ancestors(h, self.parents))})
            return (f"the function casts tensors other than the model to fp16 ({', '.join(others)}), which would "
                    "meet the fp32 model (drop those casts too: autocast casts per op)" if casts and others else
                    f"the function does not cast its model to fp16 alone under `if {flag}:`")
        code = m.index.code
        if "float16" in code or "HalfTensor" in code or "torch.half" in code or "autocast" in code \
                or "GradScaler" in code:
            return "the module casts tensors to fp16 by hand or already uses torch.amp"
        cast_if = casts[0]
        model = dotted_name(sole_call(cast_if.body.body[0]).func.value)
        if model is None:
            return "the fp16 cast is not of a model name"
        # every use of T: backward / step / zero_grad / param_groups (and T's assignments)
        backs, steps = [], []
        wrapper_ids = {id(n) for c in self.wrappers for n in walk_all(c)}
        for n in fnodes:
            if not (isinstance(n, cst.Name) and n.value == target) or id(n) in wrapper_ids:
                continue
            p = self.parents.get(n)
            if isinstance(p, cst.AssignTarget) or (isinstance(p, cst.Arg) and self.parents.get(p) is adam):
                continue
            if isinstance(p, cst.Attribute) and p.value is n and p.attr.value in USES:
                c = self.parents.get(p)
                if p.attr.value == "param_groups":
                    continue
                if not (isinstance(c, cst.Call) and c.func is p):
                    return f"{target}.{p.attr.value} is used as a value"
                if p.attr.value == "backward":
                    backs.append(c)
                elif c.args:
                    return f"{target}.{p.attr.value}(...) is called with arguments"
                elif p.attr.value == "step":
                    steps.append(c)
                continue
            if isinstance(p, cst.Attribute) and p.value is n:
                return f"{target}.{p.attr.value} has no counterpart on the torch optimizer + GradScaler"
            return f"{target} is passed or used beyond backward/step/zero_grad/param_groups (it is the FP16_Optimizer)"
        if len(backs) != 1 or not steps:
            return f"the function does not call {target}.backward(loss) once and {target}.step()"
        back = backs[0]
        back_line = stmt_line(back, self.parents)
        back_if = self.parents.get(self.parents.get(back_line)) if back_line is not None else None
        loss = dotted_name(back.args[0].value) if len(back.args) == 1 and not back.args[0].keyword else None
        other = sole_call(back_if.orelse.body.body[0]) if isinstance(back_if, cst.If) and isinstance(
            back_if.orelse, cst.Else) and len(back_if.orelse.body.body) == 1 else None
        if not (loss and isinstance(back_if, cst.If) and dotted_name(back_if.test) == flag
                and sole_call(back_line) is back and len(back_if.body.body) == 1 and other is not None
                and not other.args and isinstance(other.func, cst.Attribute) and other.func.attr.value == "backward"
                and dotted_name(other.func.value) == loss):
            return f"the backward is not `if {flag}: {target}.backward(loss) else: loss.backward()`"
        loops = [a for a in ancestors(back_if, self.parents) if isinstance(a, (cst.For, cst.While))
                 and any(x is func for x in ancestors(a, self.parents))]
        if not loops:
            return "the backward is not inside a training loop"
        for later in casts[1:]:  # `if FLAG: M.half()` of a model loaded again for evaluation stays
            why = eval_only_cast(later, model, func, loops[-1], self.parents)
            if why is not None:
                return why
        for s in steps:
            if stmt_line(s, self.parents) is None or sole_call(stmt_line(s, self.parents)) is not s \
                    or not any(a is loops[-1] for a in ancestors(s, self.parents)):
                return f"{target}.step() is not a statement of the training loop"
        region = m._region(back_if, back.args[0].value, {model})
        if region is None:
            return "the forward already runs under autocast"
        if isinstance(region, str):
            return region
        anchor = flag_if  # the scaler goes right after the optimizer's `if FLAG: ... else: ...`
        later = back_if
        while later is not None and self.parents.get(later) is not self.parents.get(flag_if):
            later = self.parents.get(later)
        block = self._block(flag_if)
        if later is None or block is None or block.index(later) <= block.index(flag_if):
            return f"the training loop does not follow the optimizer's `if {flag}:` in the same block"
        # -- all recognised: plan the edits -------------------------------------------------------
        self._plan(cast_if, adam, adamw, flag_kw, wrap_stmt, anchor, back_if, loss, steps, region, target, flag,
                   init, interval, settings)
        return None

    def _scaler_line(self, anchor: cst.CSTNode, sc: str, init: str, interval: str, flag: str) -> str:
        """`sc = GradScaler(...)`, its arguments on continuation lines aligned with the parenthesis when the
        line would pass 100 columns at `anchor`'s indentation."""
        m = self.mig
        head = f"{sc} = {m.gs}("
        args = [f"\"{m.device}\"", f"init_scale={init}", f"growth_interval={interval}", f"enabled={flag}"]
        depth = sum(1 for a in ancestors(anchor, self.parents) if isinstance(a, cst.IndentedBlock))
        column = depth * len(m.module.default_indent)
        if column + len(head) + len(", ".join(args)) + 1 <= 100:
            return f"{head}{', '.join(args)})\n"
        lines, cur = [], head
        for i, a in enumerate(args):
            piece = a + ("," if i < len(args) - 1 else ")")
            if cur.strip() and cur != head and column + len(cur) + 1 + len(piece) > 100:
                lines.append(cur.rstrip())
                cur = " " * len(head) + piece  # the block's indentation is added on insertion
            else:
                cur += ("" if cur == head else " ") + piece
        lines.append(cur)
        return "\n".join(lines) + "\n"

    def _plan(self, cast_if, adam, adamw, flag_kw, wrap_stmt, anchor, back_if, loss, steps, region, target, flag,
              init, interval, settings) -> None:
        m = self.mig
        plan = m.plan
        use_scaler = m.ctx.options.use_scaler
        m.needs_torch = True
        sc = m.scaler_base
        plan.remove(cast_if)
        plan.replace_node[adam] = adamw
        plan.remove(wrap_stmt)
        if use_scaler:
            plan.insert_after(anchor, parse_stmts(self._scaler_line(anchor, sc, init, interval, flag)))
            back = f"{sc}.scale({loss}).backward()"
        else:
            back = f"{loss}.backward()"
        new = parse_stmts(back + "\n")
        new[0] = new[0].with_changes(leading_lines=back_if.leading_lines)
        plan.replace_stmt[back_if] = new
        for s in steps:
            line = stmt_line(s, self.parents)
            if not use_scaler:
                continue
            out = parse_stmts(f"{sc}.step({target})\n{sc}.update()\n")
            out[0] = out[0].with_changes(leading_lines=line.leading_lines)
            if line.trailing_whitespace.comment:
                out[0] = out[0].with_changes(trailing_whitespace=line.trailing_whitespace)
            plan.replace_stmt[line] = out
        dtype = "float16" if use_scaler else "bfloat16"
        plan.wrap(region[0], region[1], flag_autocast_maker(m.device, dtype, flag, m.module.default_indent))
        scaler = (f"{m.gs}(init_scale={init}, growth_interval={interval}, enabled={flag})" if use_scaler
                  else "bfloat16 autocast without a scaler")
        for c in self.wrappers:
            m.report(c, "A2A501", f"apex < 0.1 FP16_Optimizer -> fp32 model + torch.autocast(enabled={flag}) + "
                     f"{scaler}: its loss scaler started at 2**16, doubled after 1000 clean steps and halved on an "
                     "overflow, skipping the step, as GradScaler does (GradScaler has no floor of 1 on the scale, and "
                     "checks the fp32 gradients of the fp32 model for inf/NaN). Numerics with "
                     f"{flag}: the fp32 weights are trained directly (before: fp32 master copies of an fp16 model), "
                     "autocast runs fp16 per op (code outside forward + loss, such as an evaluation during training, runs "
                     "the fp32 model), and checkpoints of the model hold fp32 weights", fixed=True)
        if use_scaler and any(note.startswith("static") for _a, note in settings):
            m.report(wrap_stmt, "A2A503", "static loss scale approximated: GradScaler skips an overflowing step as "
                     "FP16_Optimizer did, and also halves the scale (FP16_Optimizer kept it); "
                     f"growth_interval={STATIC_INTERVAL} keeps it from growing", fixed=True)
        if flag_kw == PORT:
            m.needs_legacy_adam = True
            m.report(adam, PORT_CODE, f"apex < 0.1 FusedAdam({', '.join(self._legacy_options(adam))}) -> "
                     f"{HELPER}, a plain-PyTorch port of its update added to this file (torch.optim has no Adam "
                     "without bias correction): each param group clipped to its max_grad_norm by its own norm, "
                     "eps added to sqrt(v), weight decay added to the update; the arguments stay as they were"
                     + (f"; {m.scaler_base}.step({target}) unscales the gradients before its step" if use_scaler else ""),
                     fixed=True)
        else:
            m.report(adam, "A2A301", f"apex < 0.1 FusedAdam -> torch.optim.AdamW with weight_decay explicit and "
                     f"{flag_kw}=True (decoupled decay, as FusedAdam's; not bitwise identical: FusedAdam added eps "
                     "before the bias correction and scaled the decay by the bias-corrected step size)", fixed=True)
        m.report(cast_if, "A2A504", f"{code_of(cast_if.body.body[0]).strip()} under {flag} removed: the model stays "
                 "fp32 and autocast picks fp16 per op", fixed=True)
        for c in self.label_casts:
            plan.remove(c)
            m.report(c, "A2A504", f"{code_of(c.body.body[0]).strip()} under {flag} removed: the labels stay fp32 "
                     "(the loss runs in fp32 under autocast either way; the labels are no longer rounded to fp16, and "
                     "an evaluation compares against the fp32 labels)", fixed=True)
