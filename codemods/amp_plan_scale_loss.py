"""`with amp.scale_loss(loss, opt) as s: s.backward()` -> `scaler.scale(loss).backward()`."""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import libcst as cst

from . import amp_rules as R
from .code_layout import as_primary
from .names import arg_by, has_star_args, norm_code, sole_call
from .amp_plan_state import AmpPlanState, AmpSite, code_of, flatten, parse_stmt


class ScaleLossPlanning(AmpPlanState):
    """The `amp.scale_loss` planning step of the amp analysis (codemods/amp.py)."""

    def with_of(self, site: AmpSite) -> Optional[cst.With]:
        p = self.parent(site.call)
        if isinstance(p, cst.WithItem):
            w = self.parent(p)
            if isinstance(w, cst.With) and len(w.items) == 1:
                return w
        return None

    def plan_scale_loss(self, site: AmpSite) -> Optional[Tuple[cst.CSTNode, cst.BaseExpression]]:
        """Plan the backward; returns (anchor statement, loss expression) for the autocast search."""
        w = self.with_of(site)
        call = site.call
        if w is None or has_star_args(call):
            self.report(call, R.UNSUPPORTED, "`amp.scale_loss` outside a single-item `with`: migrate by hand")
            self.abort = True
            return None
        loss = arg_by(call, 0, "loss")
        opt = arg_by(call, 1, "optimizers")
        if loss is None:
            self.report(call, R.UNSUPPORTED, "`amp.scale_loss` without a loss: migrate by hand")
            self.abort = True
            return None
        if opt is not None:
            for e in flatten(opt.value):
                self.optimizers.add(norm_code(e))
        asname = w.items[0].asname
        tname = asname.name.value if asname is not None and isinstance(asname.name, cst.Name) else None
        body: Sequence[cst.CSTNode] = w.body.body if isinstance(w.body, cst.IndentedBlock) else [
            cst.SimpleStatementLine(body=list(w.body.body))]  # type: ignore[union-attr]
        scaled = f"{self.scaler_of_call(call)}.scale({code_of(loss.value)})" if self.use_scaler else code_of(loss.value)
        loss_code = code_of(as_primary(loss.value))
        new_line: Optional[cst.BaseStatement] = None
        bw = _single_backward(body, tname)
        if bw is not None and tname is not None and self._read_outside(tname, w, site.func):
            bw = None  # `scaled_loss` is read after the `with` too: keep binding it
        if bw is not None:
            call_args = ", ".join(code_of(a).rstrip(", ") for a in bw.args)
            prefix = f"{self.scaler_of_call(call)}.scale({code_of(loss.value)})" if self.use_scaler else loss_code
            new_line = parse_stmt(f"{prefix}.backward({call_args})")
            new_stmts: List[cst.BaseStatement] = [new_line]
        else:
            new_stmts = []
            if tname is not None:
                new_stmts.append(parse_stmt(f"{tname} = {scaled}"))
            new_stmts.extend(body)  # type: ignore[arg-type]
        if self.use_scaler:
            self.user_funcs.add(site.func)
        anchor: cst.CSTNode = w
        # collapse `if fp16: <apex> else: loss.backward()`
        p = self.parent(w)
        owner = self.parent(p) if isinstance(p, cst.IndentedBlock) else None
        if isinstance(owner, cst.If) and new_line is not None and len(p.body) == 1 and owner.body is p \
                and isinstance(owner.orelse, cst.Else):
            else_body = owner.orelse.body
            if isinstance(else_body, cst.IndentedBlock) and len(else_body.body) == 1:
                other = _single_backward(else_body.body, None)
                if other is not None and isinstance(other.func, cst.Attribute) and \
                        norm_code(other.func.value) == norm_code(loss.value) and \
                        [norm_code(a) for a in other.args] == [norm_code(a) for a in bw.args]:  # type: ignore[union-attr]
                    self.plan.replace_stmt[owner] = [new_line]
                    self._backwards.append((owner, site.func, {norm_code(e) for e in flatten(opt.value)}
                                            if opt is not None else set()))
                    self.report(call, R.SCALE_LOSS, "`amp.scale_loss` + plain backward branches -> "
                                                    f"`{code_of(new_line).strip()}`", fixed=True)
                    return owner, loss.value
        self.plan.replace_stmt[w] = new_stmts
        self._backwards.append((w, site.func, {norm_code(e) for e in flatten(opt.value)} if opt is not None else set()))
        self.report(call, R.SCALE_LOSS, "`with amp.scale_loss(...)` -> " + (
            f"`{code_of(new_line).strip()}`" if new_line is not None else "scaler.scale"), fixed=True)
        return anchor, loss.value

    def _read_outside(self, name: str, stmt: cst.CSTNode, func: Optional[cst.FunctionDef]) -> bool:
        """Whether `name` is read in `func` (the module when None) outside `stmt` and outside other
        `with ... as name:` blocks, which bind it afresh."""
        scope: cst.CSTNode = func if func is not None else self.module
        rebinding = [w for w in self.index.withs if w is not stmt and any(
            i.asname is not None and isinstance(i.asname.name, cst.Name) and i.asname.name.value == name
            for i in w.items)]
        return any(self.index.names_within({name}, scope, [stmt, *rebinding]))


def _single_backward(body: Sequence[cst.CSTNode], tname: Optional[str]) -> Optional[cst.Call]:
    """The `X.backward(...)` call when `body` is exactly that one statement (X = tname when given)."""
    if len(body) != 1:
        return None
    call = sole_call(body[0])
    if call is None or not isinstance(call.func, cst.Attribute) or call.func.attr.value != "backward":
        return None
    if tname is not None and not (isinstance(call.func.value, cst.Name) and call.func.value.value == tname):
        return None
    return call
