"""FP16_Optimizer beside an fp32 path, as 2019-era language-model scripts wrote it:

    if args.cuda and args.fp16:
        optimizer = FP16_Optimizer(optimizer, ...)
    ...
    if args.fp16:
        optimizer.backward(loss)
    else:
        loss.backward()

- `gate`: the `if` that alone holds the `FP16_Optimizer(...)` assignment (no `else`, not in a loop). The
  scaler is made before it with `enabled=<its test>`, so the lines both paths run (`optimizer.step()`
  -> `scaler.step(optimizer)`) find one; a disabled scaler scales nothing and steps plainly.
- `branch_anchor`: `optimizer.backward(loss)` as the only statement of an `if T:` whose `else:` is only
  `loss.backward()`. The autocast region is found from the `if` (the loss is computed in its block); the
  `if` stays, its fp16 line becomes `scaler.scale(loss).backward()`. That is right when the gate implies
  T (T is the gate's test or one of its `and` operands) and nothing assigns what T reads after the gate
  or inside a function: wherever the scaler is enabled the fp16 branch runs, and where the plain branch
  runs the scaler is disabled.
- `aliases`: names bound to an expression reading a model name (`para_model = model.to(device)`,
  `para_model = nn.DataParallel(model, dim=1)`): the forward pass runs through them.
"""
from __future__ import annotations

from typing import List, Optional, Set

import libcst as cst

from .names import dotted_name, names_read, norm_code
from .walk import iter_nodes


def gate(stmt: cst.CSTNode, parents) -> Optional[cst.If]:
    """The `if` whose body is only `stmt` (no else, at module level or directly in a function body)."""
    block = parents.get(stmt)
    top = parents.get(block)
    if not (isinstance(block, cst.IndentedBlock) and isinstance(top, cst.If) and top.body is block and
            top.orelse is None and len(block.body) == 1):
        return None
    holder = parents.get(top)
    owner = parents.get(holder)
    if isinstance(holder, cst.Module) or (isinstance(holder, cst.IndentedBlock) and
                                          isinstance(owner, cst.FunctionDef)):
        return top
    return None


def _conjuncts(e: cst.BaseExpression) -> List[cst.BaseExpression]:
    if isinstance(e, cst.BooleanOperation) and isinstance(e.operator, cst.And):
        return _conjuncts(e.left) + _conjuncts(e.right)
    return [e]


def branch_anchor(line: cst.CSTNode, loss: cst.BaseExpression, parents, module: cst.Module,
                  gate_if: Optional[cst.If], positions) -> Optional[cst.If]:
    """The `if T: optimizer.backward(loss) else: loss.backward()` holding `line`, when T follows the
    gate (see the module doc); None otherwise."""
    block = parents.get(line)
    top = parents.get(block)
    if not (isinstance(block, cst.IndentedBlock) and isinstance(top, cst.If) and top.body is block and
            len(block.body) == 1 and isinstance(top.orelse, cst.Else) and
            isinstance(top.orelse.body, cst.IndentedBlock) and len(top.orelse.body.body) == 1):
        return None
    other = top.orelse.body.body[0]
    if not (isinstance(other, cst.SimpleStatementLine) and len(other.body) == 1 and
            isinstance(other.body[0], cst.Expr) and isinstance(other.body[0].value, cst.Call)):
        return None
    call = other.body[0].value
    if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward" and not call.args and
            norm_code(call.func.value) == norm_code(loss)):
        return None
    return top if follows_gate(top.test, gate_if, module, parents, positions) else None


def follows_gate(test: cst.BaseExpression, gate_if: Optional[cst.If], module: cst.Module, parents,
                 positions) -> bool:
    """Whether `test` is true wherever the gate was (it is the gate's test or one of its `and` operands),
    and nothing rebinds what it reads after the gate or inside a function. No gate: the FP16_Optimizer
    exists on every path, and the plain branch would run with an enabled scaler, so False."""
    if gate_if is None:
        return False
    if norm_code(test) not in {norm_code(c) for c in _conjuncts(gate_if.test)}:
        return False
    read = {dotted_name(n) for n in iter_nodes(test) if isinstance(n, (cst.Name, cst.Attribute))} - {None}
    if any(isinstance(n, cst.Call) for n in iter_nodes(test)):
        return False
    gate_line = positions[gate_if].start.line if gate_if in positions else None
    if gate_line is None:
        return False
    for n in iter_nodes(module):
        targets: List[cst.CSTNode] = []
        if isinstance(n, cst.Assign):
            targets = [t.target for t in n.targets]
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign)):
            targets = [n.target]
        elif isinstance(n, (cst.For, cst.CompFor)):
            targets = [n.target]
        for t in targets:
            hit = {dotted_name(m) for m in iter_nodes(t) if isinstance(m, (cst.Name, cst.Attribute))} & read
            if not hit:
                continue
            line = positions[n].start.line if n in positions else None
            in_func = any(isinstance(a, cst.FunctionDef) for a in _ancestors(n, parents))
            if line is None or in_func or line > gate_line:
                return False
    return True


def _ancestors(node: cst.CSTNode, parents):
    cur = parents.get(node)
    while cur is not None:
        yield cur
        cur = parents.get(cur)


def aliases(module: cst.Module, models: Set[str]) -> Set[str]:
    """Names bound (anywhere in the module) to a call or attribute chain that reads a model name."""
    out: Set[str] = set()
    grew = True
    known = set(models)
    while grew:
        grew = False
        for n in iter_nodes(module):
            if not (isinstance(n, cst.Assign) and len(n.targets) == 1 and isinstance(n.value, (cst.Call, cst.Attribute))):
                continue
            target = dotted_name(n.targets[0].target)
            if target is None or target in known:
                continue
            if names_read(n.value) & known or any(dotted_name(m) in known for m in iter_nodes(n.value)
                                                  if isinstance(m, cst.Attribute)):
                known.add(target)
                out.add(target)
                grew = True
    return out


def autocast_maker(device: str, dtype: str, indent: str, enabled: str):
    """`with torch.autocast(device, dtype=..., enabled=<enabled>):` around the statements given."""
    from . import templates
    from .code_layout import indent_continuations

    def make(stmts: List[cst.BaseStatement]) -> cst.BaseStatement:
        head = templates.statement(f"with torch.autocast(\"{device}\", dtype=torch.{dtype}, enabled={enabled}):\n"
                                   "    pass\n")
        assert isinstance(head, cst.With)
        return head.with_changes(body=head.body.with_changes(body=indent_continuations(stmts, indent)))
    return make


def float_only_off_fp16(module: cst.Module, models: Set[str], flags: Set[str]) -> List[cst.If]:
    """`if not args.fp16: model = model.float()` (a model restored from a checkpoint of the fp16 run is half):
    the model is fp32 in every mode now, so the cast runs in every mode. `flags`: the codes of the fp16
    tests (the gate's `and` operands)."""
    out: List[cst.If] = []
    for n in iter_nodes(module):
        if not (isinstance(n, cst.If) and n.orelse is None and isinstance(n.test, cst.UnaryOperation) and
                isinstance(n.test.operator, cst.Not) and norm_code(n.test.expression) in flags and
                isinstance(n.body, cst.IndentedBlock) and len(n.body.body) == 1):
            continue
        line = n.body.body[0]
        if not (isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 and
                isinstance(line.body[0], cst.Assign) and len(line.body[0].targets) == 1):
            continue
        a = line.body[0]
        target = dotted_name(a.targets[0].target)
        v = a.value
        if target in models and isinstance(v, cst.Call) and not v.args and isinstance(v.func, cst.Attribute) and \
                v.func.attr.value == "float" and dotted_name(v.func.value) == target:
            out.append(n)
    return out


def gate_flags(gate_if: Optional[cst.If]) -> Set[str]:
    return {norm_code(c) for c in _conjuncts(gate_if.test)} if gate_if is not None else set()
