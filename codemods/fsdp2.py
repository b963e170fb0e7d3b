"""`--target fsdp2`: the migrated DDP + autocast training moves to FSDP2's `fully_shard`.

Runs after the default migration's codemods, on their output (torch DDP, autocast, GradScaler), and
only under the target. One `X = DDP(model, ...)` statement per file becomes a MixedPrecisionPolicy,
`fully_shard` on each block of the model's repeated layer list (found in its class), then on the root.
The optimizer built before the wrap moves after it; `with X.no_sync():` becomes
`set_requires_gradient_sync`; the wrap function's checkpoint calls go through
`torch.distributed.checkpoint.state_dict`. Whatever cannot be shown right leaves the file as it is,
with a finding (codes in `fsdp2_rules.py`).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from .base import Codemod, FileContext
from .fsdp2_rules import CODES
from .names import ImportTable, assigned_names, code_of, dotted_name, names_read

DDP_NAMES = ("torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel",
             "torch.nn.DistributedDataParallel")
# DDP options with no FSDP2 meaning (FSDP2 has no buckets and no unused-parameter search)
DROPPED_DDP_ARGS = ("device_ids", "output_device", "broadcast_buffers", "find_unused_parameters", "gradient_as_bucket_view",
                    "static_graph", "bucket_cap_mb")
CONTAINERS = ("torch.nn.ModuleList", "torch.nn.Sequential", "torch.nn.modules.container.ModuleList",
              "torch.nn.modules.container.Sequential")
RANK_WORDS = ("rank", "main_process", "master", "is_main", "primary")
FULL = "StateDictOptions(full_state_dict=True)"

Block = Union[cst.Module, cst.IndentedBlock]


class _Refuse(Exception):
    """The site cannot be migrated: (node, code, message) for the finding."""

    def __init__(self, node: Optional[cst.CSTNode], code: str, message: str):
        super().__init__(message)
        self.node, self.code, self.message = node, code, message


class _Parents(cst.CSTVisitor):
    """Parent of every node, and the statement blocks."""

    def __init__(self) -> None:
        self.parent: Dict[int, cst.CSTNode] = {}
        self.stack: List[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.stack:
            self.parent[id(node)] = self.stack[-1]
        self.stack.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()


def _all_nodes(root: cst.CSTNode, kind: type) -> List[cst.CSTNode]:
    out: List[cst.CSTNode] = []

    class V(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, kind):
                out.append(node)
            return True

    root.visit(V())
    return out


class FullyShardTarget(Codemod):
    """DDP + autocast (+ GradScaler) -> FSDP2 `fully_shard` with a MixedPrecisionPolicy (`--target fsdp2`)."""

    NAME = "fsdp2"
    DESCRIPTION = "DDP + autocast -> FSDP2 fully_shard with a MixedPrecisionPolicy (--target fsdp2)"
    CODES = CODES
    TOKENS = (b"DistributedDataParallel", b"autocast", b"GradScaler")
    WORDS = (b"DDP", b"apex")

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        if getattr(ctx.options, "target", "ddp") != "fsdp2":
            return module
        try:
            return _Site(module, ctx).migrate()
        except _Refuse as r:
            ctx.report(r.node, r.code, r.message)
            return module


class _Site:
    """One file's fsdp2 migration, planned on the original tree, then applied at once."""

    def __init__(self, module: cst.Module, ctx: FileContext):
        self.module, self.ctx = module, ctx
        self.table = ImportTable.of(module, ctx.module_name)
        p = _Parents()
        module.visit(p)
        self.parent = p.parent
        self.replace: Dict[int, Union[cst.CSTNode, cst.FlattenSentinel, cst.RemovalSentinel]] = {}
        self.fixed: List[Tuple[cst.CSTNode, str, str]] = []
        self.later: List[Tuple[cst.CSTNode, str, str]] = []  # warnings reported when the rewrite is made
        self.needs_dcp: Set[str] = set()
        self.notes: List[str] = []  # added to the A2A801 message
        self.covered: Set[int] = set()  # `.module` attributes inside a rewritten checkpoint call

    # -- finding things --------------------------------------------------------------------------

    def _refers(self, node: cst.BaseExpression, names: Sequence[str]) -> bool:
        return self.table.refers_to(node, *names)

    def _calls_to(self, names: Sequence[str]) -> List[cst.Call]:
        return [c for c in _all_nodes(self.module, cst.Call) if self._refers(c.func, names)]  # type: ignore

    def _under(self, node: cst.BaseExpression, prefix: str) -> bool:
        return self.table.refers_under(node, prefix)

    def _enclosing(self, node: cst.CSTNode, kind: type) -> Optional[cst.CSTNode]:
        cur = self.parent.get(id(node))
        while cur is not None and not isinstance(cur, kind):
            cur = self.parent.get(id(cur))
        return cur

    def _statement_of(self, node: cst.CSTNode) -> cst.CSTNode:
        cur = node
        while not isinstance(cur, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            cur = self.parent[id(cur)]
        return cur

    # -- the migration ---------------------------------------------------------------------------

    def migrate(self) -> cst.Module:
        wraps = self._calls_to(DDP_NAMES)
        if not wraps:
            self._single_process()
            return self.module
        if self.table.names_under("apex"):
            raise _Refuse(wraps[0], "A2A808", "apex is still in use in this file (the default migration left it): "
                                              "the fsdp2 target needs the native amp code first")
        if len(wraps) > 1:
            raise _Refuse(wraps[1], "A2A808", "several DDP wraps in one file: shard each model by hand with "
                                              "`fully_shard`")
        call = wraps[0]
        stmt = self._statement_of(call)
        target, model, expr = self._wrap_shape(stmt, call)
        base_name = model
        block = self.parent[id(stmt)]
        if not isinstance(block, (cst.Module, cst.IndentedBlock)):
            raise _Refuse(call, "A2A808", "the DDP wrap is not a plain statement")
        scope = self._enclosing(stmt, cst.FunctionDef) or self.module
        body = list(block.body)
        at = body.index(stmt)
        policy_name = self._fresh(scope, "mp_policy")
        param_dtype = self._param_dtype(call, scope, body[:at])
        moved = self._optimizer_moves(scope, body, at, model, call)
        shard_lines = [f"{policy_name} = MixedPrecisionPolicy(param_dtype={param_dtype}, reduce_dtype=torch.float32)"]
        blocks_attr = self._repeated_blocks(body[:at], model) if model else None
        if expr is not None:  # `ddp = DDP(model.to(rank))`: the module first (`.to` returns it), then its shards
            shard_lines.append(f"{target} = {expr}")
            model = target
        if blocks_attr:
            var = self._fresh(scope, "block")
            shard_lines.append(f"for {var} in {model}.{blocks_attr}:\n    fully_shard({var}, mp_policy={policy_name})")
        else:
            self.later.append((call, "A2A803", f"no repeated block of `{model}` found statically: only the root is "
                                               f"sharded; add `fully_shard(block, mp_policy={policy_name})` for each "
                                               f"block before this line"))
        root = f"fully_shard({model}, mp_policy={policy_name})"
        shard_lines.append(root if target == model else f"{target} = {root}")
        new_stmts = [cst.parse_statement(s + "\n", config=self.module.config_for_parsing) for s in shard_lines]
        new_stmts[0] = new_stmts[0].with_changes(leading_lines=stmt.leading_lines)
        names = {target, model} | ({base_name} if base_name else set())
        after = body[at + 1:]
        moved_stmts = [self._rewrite_uses(s, names, target) for s in moved]
        self.replace[id(stmt)] = cst.FlattenSentinel([*new_stmts, *moved_stmts])
        for s in moved:
            self.replace[id(s)] = cst.RemovalSentinel.REMOVE
        opt_names = self._optimizer_names(scope)
        self.opt_names = opt_names
        # every later statement of the sharding scope: `.module`, no_sync, checkpoints
        later_roots = after + self._later_in_enclosing(block, scope)
        for f in _all_nodes(self.module, cst.FunctionDef):
            if f is not scope and not self._inside(stmt, f) and (scope is self.module or not self._inside(f, scope)):
                self._plan_no_sync(f, None)  # a helper of this file's training loop (the model it gets is sharded)
        for s in later_roots:
            self._plan_uses(s, names, target)
        dropped = [a.keyword.value for a in call.args if a.keyword is not None]
        note = f" ({', '.join(dropped)} dropped)" if dropped else ""
        note += "".join(f"; {n}" for n in self.notes)
        self.fixed.append((call, "A2A801", f"DDP -> `fully_shard` {'per block of `' + model + '.' + blocks_attr + '`, then ' if blocks_attr else ''}"
                                           f"the root, with MixedPrecisionPolicy(param_dtype={param_dtype}){note}"))
        if moved:
            self.fixed.append((moved[0], "A2A801", "optimizer construction moved after `fully_shard` (it must see the "
                                                   "sharded parameters)"))
        self._lint_other_checkpoints(scope, names | set(opt_names))
        new = self.module.visit(_Apply(self.replace))
        new = self._fix_imports(new)
        for node, code, msg in self.later + self.fixed:
            self.ctx.report(node, code, msg, fixed=code in ("A2A801", "A2A805", "A2A806", "A2A809"))
        return new

    def _single_process(self) -> None:
        if self._calls_to(("torch.distributed.fsdp.fully_shard", "torch.distributed._composable.fsdp.fully_shard")):
            return  # already on FSDP2 (a second run)
        for w in _all_nodes(self.module, cst.With):
            if any(isinstance(i.item, cst.Call) and isinstance(i.item.func, cst.Attribute)
                   and i.item.func.attr.value == "no_sync" for i in w.items):  # type: ignore[attr-defined]
                self.ctx.report(w, "A2A808", "`no_sync()` of a model wrapped in another file: if that model is "
                                             "sharded with `fully_shard`, use `set_requires_gradient_sync(False)` here")
                return
        if self._calls_to(("torch.distributed.init_process_group",)):
            return
        amp = self._calls_to(("torch.autocast", "torch.amp.autocast", "torch.amp.GradScaler",
                              "torch.cuda.amp.GradScaler", "torch.amp.grad_scaler.GradScaler"))
        optims = [c for c in _all_nodes(self.module, cst.Call)
                  if self._under(c.func, "torch.optim") and not self._under(c.func, "torch.optim.lr_scheduler")]
        if amp and optims:
            self.ctx.report(optims[0], "A2A802", "single-process training (no DDP wrap, no process group): FSDP needs "
                                                 "a process group; left on the default target")

    def _wrap_shape(self, stmt: cst.CSTNode, call: cst.Call) -> Tuple[str, Optional[str], Optional[str]]:
        """(the wrap's target name, the wrapped model's name, the wrapped expression's code when it is not a
        plain name: `model.to(rank)` names `model`; a constructor call names none)."""
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)
                and stmt.body[0].value is call and len(stmt.body[0].targets) == 1
                and isinstance(stmt.body[0].targets[0].target, cst.Name)):
            raise _Refuse(call, "A2A808", "the DDP wrap is not `name = DDP(model, ...)`: shard the model by hand")
        pos = [a for a in call.args if a.keyword is None]
        if len(pos) != 1 or pos[0].star or isinstance(pos[0].value, (cst.Lambda, cst.NamedExpr, cst.Await, cst.Yield)):
            raise _Refuse(call, "A2A808", "the DDP wrap's model is not one plain expression")
        for a in call.args:
            if a.keyword is not None and a.keyword.value not in DROPPED_DDP_ARGS:
                raise _Refuse(call, "A2A808", f"DDP option `{a.keyword.value}` has no fsdp2 rewrite here: shard by hand")
            if a.keyword is not None and a.keyword.value == "broadcast_buffers" and \
                    not (isinstance(a.value, cst.Name) and a.value.value == "False"):
                raise _Refuse(call, "A2A808", "DDP broadcasts buffers from rank 0 here; FSDP2 does not: shard by hand")
        target = stmt.body[0].targets[0].target.value
        value = pos[0].value
        if isinstance(value, cst.Name):
            return target, value.value, None
        base = value
        while isinstance(base, cst.Call) and isinstance(base.func, cst.Attribute) \
                and base.func.attr.value in ("to", "cuda", "cpu"):
            base = base.func.value
        return target, (base.value if isinstance(base, cst.Name) else None), code_of(value)

    def _fresh(self, scope: cst.CSTNode, base: str) -> str:
        used = names_read(scope) | {n for s in _all_nodes(scope, cst.Name) for n in [s.value]}  # type: ignore
        used |= names_read(self.module)
        name, i = base, 1
        while name in used:
            i += 1
            name = f"{base}{i}"
        return name

    def _param_dtype(self, call: cst.Call, scope: cst.CSTNode, before: List[cst.CSTNode]) -> str:
        dtypes: Set[str] = set()
        flags: Set[str] = set()
        flag_nodes: List[cst.BaseExpression] = []
        self._autocasts = self._calls_to(("torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast"))
        for ac in self._autocasts:
            for a in ac.args:
                if a.keyword is not None and a.keyword.value == "dtype":
                    dtypes.add(code_of(a.value))
                elif a.keyword is not None and a.keyword.value == "enabled":
                    if not (isinstance(a.value, cst.Name) and a.value.value == "True"):
                        flags.add(code_of(a.value))
                        flag_nodes.append(a.value)
                elif a.keyword is None and a is not ac.args[0]:
                    raise _Refuse(ac, "A2A808", "autocast with positional options: the fsdp2 policy cannot be read")
        if not dtypes and not self._autocasts:
            # no autocast here: the forward may run under one elsewhere; full-precision parameters are right either way
            self.notes.append("no autocast in this file, so float32 parameters: set `param_dtype` to the autocast "
                              "dtype if the forward runs under one elsewhere")
            return "torch.float32"
        if not dtypes:
            dtypes.add("torch.bfloat16" if self.ctx.options.dtype == "bfloat16" else "torch.float16")
        if len(dtypes) > 1 or len(flags) > 1:
            raise _Refuse(call, "A2A808", "several autocast dtypes or switches in this file: choose the "
                                          "MixedPrecisionPolicy by hand")
        dt = next(iter(dtypes))
        known = {"torch.float16", "torch.bfloat16", "torch.half"}
        if dt not in known:
            raise _Refuse(call, "A2A808", f"autocast dtype `{dt}` is not a literal torch dtype: choose the policy by hand")
        if not flags:
            return dt
        flag = flag_nodes[0]
        bound = set()
        if isinstance(scope, cst.FunctionDef):
            bound |= {p.name.value for p in scope.params.params + scope.params.kwonly_params + scope.params.posonly_params}
        for s in before:
            bound |= assigned_names(s)
        for line in _all_nodes(scope, cst.SimpleStatementLine):  # assigned anywhere in the scope before the wrap
            if self._before(line, call) and not self._inside_def(line, scope):
                bound |= {n.split(".")[0] for n in assigned_names(line)}
        bound |= {n for s in self.module.body for n in assigned_names(s)}
        if not names_read(flag) <= bound or any(isinstance(n, cst.Call) for n in _all_nodes(flag, cst.Call)):
            raise _Refuse(call, "A2A808", f"autocast is switched by `{code_of(flag)}`, which is not known at the wrap: "
                                          "choose the policy's param_dtype by hand")
        return f"{dt} if {code_of(flag)} else torch.float32"

    def _optimizer_names(self, scope: cst.CSTNode) -> List[str]:
        out = []
        for c in _all_nodes(scope, cst.Call):
            if self._under(c.func, "torch.optim") and not self._under(c.func, "torch.optim.lr_scheduler"):  # type: ignore
                s = self._statement_of(c)
                if isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], cst.Assign):
                    out.extend(n for n in assigned_names(s) if "." not in n)
        return out

    def _optimizer_moves(self, scope: cst.CSTNode, body: List[cst.CSTNode], at: int, model: str,
                         call: cst.Call) -> List[cst.CSTNode]:
        """The statements before the wrap that build (or use) the optimizer, moved after the sharding."""
        optim_calls = [c for c in _all_nodes(scope, cst.Call)
                       if self._under(c.func, "torch.optim") and not self._under(c.func, "torch.optim.lr_scheduler")]  # type: ignore
        before_wrap = [c for c in optim_calls if self._before(c, call)]
        if not before_wrap:
            return []
        first: Optional[int] = None
        for c in before_wrap:
            s = self._statement_of(c)
            if s not in body[:at] or not (isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1
                                          and isinstance(s.body[0], cst.Assign)):
                raise _Refuse(c, "A2A804", "optimizer built before the DDP wrap, not in the wrap's block: build it "
                                           "after `fully_shard` by hand")
            i = body.index(s)
            first = i if first is None else min(first, i)
        assert first is not None
        moving: List[cst.CSTNode] = []
        deps: Set[str] = set()
        for s in body[first:at]:
            is_opt = any(self._statement_of(c) is s for c in before_wrap)
            if is_opt or names_read(s) & deps:
                if not isinstance(s, (cst.SimpleStatementLine, cst.If)):  # a restore under `if args.resume:` moves too
                    raise _Refuse(s, "A2A804", "the optimizer is used in a loop or other compound statement before "
                                               "the DDP wrap: build it after `fully_shard` by hand")
                moving.append(s)
                deps |= {n.split(".")[0] for n in assigned_names(s)}
        span = body[first:at]
        for i, s in enumerate(span):
            if s not in moving:
                continue
            # a statement that stays and comes after a moved one must not assign what the moved one reads or assigns
            later_assigned = {n.split(".")[0] for t in span[i + 1:] if t not in moving for n in assigned_names(t)}
            clash = (names_read(s) | {n.split(".")[0] for n in assigned_names(s)}) & later_assigned
            if clash:
                raise _Refuse(s, "A2A804", f"moving the optimizer after the wrap would change `{sorted(clash)[0]}`, "
                                           "which the statements in between assign: build it after `fully_shard` "
                                           "by hand")
        return moving

    def _before(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        pa, pb = self.ctx._positions.get(a), self.ctx._positions.get(b)  # noqa: SLF001
        if pa is None or pb is None:
            return False
        return (pa.start.line, pa.start.column) < (pb.start.line, pb.start.column)

    def _later_in_enclosing(self, block: cst.CSTNode, scope: cst.CSTNode) -> List[cst.CSTNode]:
        """Statements after the wrap's enclosing compound statements, up to the scope."""
        out: List[cst.CSTNode] = []
        cur = block
        while cur is not scope and cur is not None:
            owner = self.parent.get(id(cur))
            if owner is None:
                break
            holder = self.parent.get(id(owner))
            if isinstance(holder, (cst.IndentedBlock, cst.Module)) and owner in holder.body:
                out.extend(holder.body[list(holder.body).index(owner) + 1:])
            cur = holder
        return out

    def _repeated_blocks(self, before: List[cst.CSTNode], model: str) -> Optional[str]:
        cls_name = None
        for s in before:
            if isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], cst.Assign) and model in assigned_names(s):
                value = s.body[0].value
                while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
                        and value.func.attr.value in ("to", "cuda", "cpu", "half", "float", "bfloat16"):
                    value = value.func.value
                cls_name = value.func.value if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) else None
        if cls_name is None:
            return None
        classes = [s for s in self.module.body if isinstance(s, cst.ClassDef) and s.name.value == cls_name]
        if len(classes) != 1:
            return None
        found = []
        for f in classes[0].body.body:
            if isinstance(f, cst.FunctionDef) and f.name.value == "__init__":
                for a in _all_nodes(f, cst.Assign):
                    t = a.targets[0].target  # type: ignore[attr-defined]
                    v = a.value  # type: ignore[attr-defined]
                    if len(a.targets) == 1 and isinstance(t, cst.Attribute) and dotted_name(t.value) == "self" \
                            and isinstance(v, cst.Call) and self._refers(v.func, CONTAINERS) and _repeats(v):
                        found.append(t.attr.value)
        return found[0] if len(found) == 1 else None

    # -- later uses --------------------------------------------------------------------------------

    def _rewrite_uses(self, stmt: cst.CSTNode, names: Set[str], target: str) -> cst.CSTNode:
        """A moved statement, with its checkpoint loads rewritten (it now runs after the sharding)."""
        self._plan_uses(stmt, names, target)
        return stmt.visit(_Apply(self.replace))

    def _plan_uses(self, stmt: cst.CSTNode, names: Set[str], target: str) -> None:
        opts = set(getattr(self, "opt_names", [])) or set(self._optimizer_names(self.module))
        self._plan_no_sync(stmt, names)
        for node in _all_nodes(stmt, cst.Call):
            c: cst.Call = node  # type: ignore[assignment]
            if isinstance(c.func, cst.Name) and c.func.value == "no_sync":
                continue
            if not isinstance(c.func, cst.Attribute):
                continue
            meth = c.func.attr.value
            recv = c.func.value
            rd = dotted_name(recv) or ""
            if rd.endswith(".module") and rd[:-7] in names:
                rd = rd[:-7]
            if meth not in ("state_dict", "load_state_dict") or (rd not in names and rd not in opts):
                continue
            guard = self._rank_guard(c)
            self.covered |= {id(a) for a in _all_nodes(c.func, cst.Attribute)}
            if meth == "state_dict":
                if c.args:
                    raise _Refuse(c, "A2A807", "`state_dict(...)` with arguments on the sharded model: migrate by hand")
                new = (f"get_model_state_dict({target}, options={FULL})" if rd in names
                       else f"get_optimizer_state_dict({target}, {rd}, options={FULL})")
                self.needs_dcp |= {"StateDictOptions", "get_model_state_dict" if rd in names else "get_optimizer_state_dict"}
                if guard is not None:
                    self._hoist(guard, c, new, "model_state" if rd in names else f"{rd}_state")
                else:
                    self.replace[id(c)] = cst.parse_expression(new)
                self.fixed.append((c, "A2A806", f"`{rd}.state_dict()` -> "
                                                f"`{new.split('(')[0]}(...)` with full_state_dict=True"
                                                + (" (gathered before the rank guard: it is a collective)" if guard else "")))
            else:
                stmt_of = self._statement_of(c)
                if guard is not None or len(c.args) != 1 or c.args[0].keyword is not None or \
                        not (isinstance(stmt_of, cst.SimpleStatementLine) and isinstance(stmt_of.body[0], cst.Expr)
                             and stmt_of.body[0].value is c):
                    raise _Refuse(c, "A2A807", "`load_state_dict` of the sharded model or optimizer in a shape the "
                                               "fsdp2 target does not rewrite (under a rank guard, with options, or "
                                               "its result used): use `set_model_state_dict` by hand")
                arg = code_of(c.args[0].value)
                new = (f"set_model_state_dict({target}, {arg}, options={FULL})" if rd in names
                       else f"set_optimizer_state_dict({target}, {rd}, {arg}, options={FULL})")
                self.needs_dcp |= {"StateDictOptions", "set_model_state_dict" if rd in names else "set_optimizer_state_dict"}
                self.replace[id(c)] = cst.parse_expression(new)
                self.fixed.append((c, "A2A806", f"`{rd}.load_state_dict(...)` -> `{new.split('(')[0]}(...)` "
                                                "with full_state_dict=True"))
        for node in _all_nodes(stmt, cst.Attribute):
            a: cst.Attribute = node  # type: ignore[assignment]
            if a.attr.value == "module" and isinstance(a.value, cst.Name) and a.value.value in names \
                    and id(a) not in self.replace and id(a) not in self.covered:
                self.replace[id(a)] = cst.Name(target)
                self.fixed.append((a, "A2A809", f"`{a.value.value}.module` -> `{target}` (FSDP2 shards the module in place)"))

    def _plan_no_sync(self, root: cst.CSTNode, names: Optional[Set[str]]) -> None:
        """`with X.no_sync():` -> gradient sync off for the body, on after it. `names`: the receivers
        allowed (the sharded model's names); None: any (another function of the file with the one wrap)."""
        for w in _all_nodes(root, cst.With):
            for item in w.items:  # type: ignore[attr-defined]
                c = item.item
                if isinstance(c, cst.Call) and isinstance(c.func, cst.Attribute) and c.func.attr.value == "no_sync":
                    if id(w) in self.replace:
                        continue
                    obj = dotted_name(c.func.value)
                    if len(w.items) != 1 or item.asname is not None or c.args or obj is None or \
                            (names is not None and obj not in names):
                        raise _Refuse(w, "A2A808", "`no_sync()` in a shape the fsdp2 target does not rewrite: use "
                                                   "`model.set_requires_gradient_sync(False)` by hand")
                    off = cst.parse_statement(f"{obj}.set_requires_gradient_sync(False)\n")
                    on = cst.parse_statement(f"{obj}.set_requires_gradient_sync(True)\n")
                    inner = list(w.body.body)  # type: ignore[attr-defined]
                    self.replace[id(w)] = cst.FlattenSentinel([off.with_changes(leading_lines=w.leading_lines),  # type: ignore
                                                               *inner, on])
                    self.fixed.append((w, "A2A805", f"`{obj}.no_sync()` -> `{obj}.set_requires_gradient_sync(False)` "
                                                    "for the accumulation backward, True after it"))

    def _rank_guard(self, node: cst.CSTNode) -> Optional[cst.If]:
        """The outermost `if` around `node` (in its function) whose test reads a rank."""
        found = None
        cur = self.parent.get(id(node))
        while cur is not None and not isinstance(cur, (cst.FunctionDef, cst.Module)):
            if isinstance(cur, cst.If) and any(w in code_of(cur.test).lower() for w in RANK_WORDS):
                found = cur
            cur = self.parent.get(id(cur))
        return found

    def _hoist(self, guard: cst.If, call: cst.Call, new: str, base: str) -> None:
        holder = self.parent.get(id(guard))
        if not isinstance(holder, (cst.IndentedBlock, cst.Module)) or guard not in holder.body:
            raise _Refuse(call, "A2A807", "state dict under a rank guard that is not a plain statement: gather it "
                                          "with `get_model_state_dict` on every rank by hand")
        name = self._fresh(self.module, base)
        line = cst.parse_statement(f"{name} = {new}\n")
        self.replace[id(call)] = cst.Name(name)
        self._hoisted = getattr(self, "_hoisted", {})
        self._hoisted.setdefault(id(guard), []).append(line)
        self.replace[id(guard)] = _Hoisted(self._hoisted[id(guard)])

    def _lint_other_checkpoints(self, scope: cst.CSTNode, names: Set[str]) -> None:
        """Model or optimizer state dicts outside the sharding function: a finding each."""
        for f in _all_nodes(self.module, cst.FunctionDef):
            if f is scope or (isinstance(scope, cst.FunctionDef) and self._inside(f, scope)):
                continue
            params = {p.name.value for p in f.params.params}  # type: ignore[attr-defined]
            for node in _all_nodes(f, cst.Call):
                c: cst.Call = node  # type: ignore[assignment]
                if isinstance(c.func, cst.Attribute) and c.func.attr.value in ("state_dict", "load_state_dict"):
                    rd = (dotted_name(c.func.value) or "").split(".")[0]
                    if rd in params and any(w in rd.lower() for w in ("model", "net", "optim", "module")):
                        self.later.append((c, "A2A807", f"`{rd}.{c.func.attr.value}()` may be the sharded model or "
                                                        "its optimizer: use `torch.distributed.checkpoint.state_dict`'s "
                                                        "get_/set_model_state_dict (and the optimizer pair), on every rank"))

    def _inside_def(self, node: cst.CSTNode, scope: cst.CSTNode) -> bool:
        """`node` sits in a function or class nested in `scope`."""
        cur = self.parent.get(id(node))
        while cur is not None and cur is not scope:
            if isinstance(cur, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return True
            cur = self.parent.get(id(cur))
        return False

    def _inside(self, node: cst.CSTNode, outer: cst.CSTNode) -> bool:
        cur = self.parent.get(id(node))
        while cur is not None:
            if cur is outer:
                return True
            cur = self.parent.get(id(cur))
        return False

    def _fix_imports(self, module: cst.Module) -> cst.Module:
        body = list(module.body)
        # the DDP import the wrap used, when nothing else reads it
        read = names_read(module)
        for i, s in enumerate(body):
            if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 and isinstance(s.body[0], cst.ImportFrom) \
                    and not isinstance(s.body[0].names, cst.ImportStar) and len(s.body[0].names) == 1:
                alias = s.body[0].names[0]
                local = alias.asname.name.value if alias.asname else dotted_name(alias.name)  # type: ignore[union-attr]
                mod = dotted_name(s.body[0].module) if s.body[0].module else ""
                if f"{mod}.{dotted_name(alias.name)}" in DDP_NAMES and local not in read:
                    body[i] = cst.RemovalSentinel.REMOVE  # type: ignore[assignment]
        body = [s for s in body if s is not cst.RemovalSentinel.REMOVE]
        lines = ["from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard"]
        if self.needs_dcp:
            lines.insert(0, _wrapped_import("torch.distributed.checkpoint.state_dict",
                                            sorted(self.needs_dcp, key=lambda n: (n != "StateDictOptions", n))))
        last = last_torch = -1  # after the leading imports' last torch import (else their last import)
        for i, s in enumerate(body):
            if isinstance(s, cst.SimpleStatementLine) and all(isinstance(b, (cst.Import, cst.ImportFrom)) for b in s.body):
                last = i
                if "torch" in code_of(s).split("import")[0 if isinstance(s.body[0], cst.ImportFrom) else 1]:
                    last_torch = i
            elif i > 0 or not (isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], cst.Expr)):
                break
        last = last_torch if last_torch >= 0 else last
        new = [cst.parse_statement(l + "\n") for l in lines]
        return module.with_changes(body=[*body[:last + 1], *new, *body[last + 1:]])


def _wrapped_import(module: str, names: List[str], width: int = 120) -> str:
    """`from module import a, b`, parenthesized and wrapped under its first name when longer than `width`."""
    line = f"from {module} import {', '.join(names)}"
    if len(line) <= width:
        return line
    head = f"from {module} import ("
    rows, row = [], ""
    for n in names:
        piece = f"{row}, {n}" if row else n
        if row and len(" " * len(head) + piece) + 2 > width:
            rows.append(row + ",")
            row = n
        else:
            row = piece
    rows.append(row + ")")
    return head + ("\n" + " " * len(head)).join(rows)


class _Hoisted:
    """Marker: statements to put before a rank guard."""

    def __init__(self, lines: List[cst.CSTNode]):
        self.lines = lines


def _repeats(call: cst.Call) -> bool:
    """A container call of repeated layers: a comprehension, or a list of calls to one callee."""
    if len(call.args) >= 2 and not any(a.star or a.keyword for a in call.args):  # nn.Sequential(Block(), Block())
        return all(isinstance(a.value, cst.Call) for a in call.args) and \
            len({code_of(a.value.func) for a in call.args}) == 1  # type: ignore[attr-defined]
    if len(call.args) != 1:
        return False
    v = call.args[0].value
    if isinstance(v, (cst.ListComp, cst.GeneratorExp)):
        return True
    if call.args[0].star and isinstance(v, (cst.ListComp, cst.GeneratorExp)):
        return True
    if isinstance(v, cst.List) and len(v.elements) >= 2 and all(isinstance(e.value, cst.Call) for e in v.elements):
        return len({code_of(e.value.func) for e in v.elements}) == 1  # type: ignore[attr-defined]
    return False


class _Apply(cst.CSTTransformer):
    """Replace planned nodes (by identity of the original) with their new nodes."""

    def __init__(self, replace: Dict[int, object]):
        super().__init__()
        self.replace = replace

    def on_leave(self, original_node, updated_node):  # type: ignore[override]
        r = self.replace.get(id(original_node))
        if r is None:
            return updated_node
        if isinstance(r, _Hoisted):
            first = r.lines[0].with_changes(leading_lines=updated_node.leading_lines)
            return cst.FlattenSentinel([first, *r.lines[1:], updated_node.with_changes(leading_lines=())])
        if isinstance(r, cst.FlattenSentinel):
            nodes = list(r.nodes)
            inner_ids = {id(original_node.body)} if isinstance(original_node, cst.With) else set()
            if inner_ids:  # a no_sync block: keep the body's own (already updated) statements
                nodes = [nodes[0], *updated_node.body.body, nodes[-1]]
            return cst.FlattenSentinel(nodes)
        return r
