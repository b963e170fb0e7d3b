"""`--target fsdp2`: the migrated DDP + autocast training moves to FSDP2's `fully_shard`.

Runs after the default migration's codemods, on their output (torch DDP, autocast, GradScaler), and
only under the target. One `X = DDP(model, ...)` statement per file becomes a MixedPrecisionPolicy,
`fully_shard` on each block of the model's repeated layer list (found in its class), then on the root.
The optimizer built before the wrap moves after it; `with X.no_sync():` becomes
`set_requires_gradient_sync`; the wrap function's checkpoint calls go through
`torch.distributed.checkpoint.state_dict`. Whatever cannot be shown right leaves the file as it is,
with a finding (codes in `fsdp2_rules.py`).

The planning steps, each over the one state (codemods/fsdp2_state.py): the policy's dtype
(fsdp2_policy.py), the optimizer moved after the wrap (fsdp2_optimizer.py), the per-block shards
(fsdp2_blocks.py), checkpoints and `.module` (fsdp2_checkpoints.py), `no_sync` (fsdp2_no_sync.py),
then the imports (fsdp2_imports.py).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import libcst as cst

from .base import Codemod, FileContext
from .fsdp2_blocks import BlockSharding
from .fsdp2_checkpoints import CheckpointPlanning
from .fsdp2_imports import fix_imports
from .fsdp2_policy import PolicyPlanning
from .fsdp2_rules import CODES
from .fsdp2_state import DDP_NAMES, Apply, Refuse, all_nodes
from .names import code_of

# DDP options with no FSDP2 meaning (FSDP2 has no buckets and no unused-parameter search)
DROPPED_DDP_ARGS = ("device_ids", "output_device", "broadcast_buffers", "find_unused_parameters", "gradient_as_bucket_view",
                    "static_graph", "bucket_cap_mb")


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
        except Refuse as r:
            ctx.report(r.node, r.code, r.message)
            return module


class _Site(PolicyPlanning, BlockSharding, CheckpointPlanning):
    """One file's fsdp2 migration, planned on the original tree, then applied at once."""

    # -- the migration ---------------------------------------------------------------------------

    def migrate(self) -> cst.Module:
        wraps = self._calls_to(DDP_NAMES)
        if not wraps:
            self._single_process()
            return self.module
        if self.table.names_under("apex"):
            raise Refuse(wraps[0], "A2A808", "apex is still in use in this file (the default migration left it): "
                                              "the fsdp2 target needs the native amp code first")
        if len(wraps) > 1:
            raise Refuse(wraps[1], "A2A808", "several DDP wraps in one file: shard each model by hand with "
                                              "`fully_shard`")
        call = wraps[0]
        stmt = self._statement_of(call)
        target, model, expr = self._wrap_shape(stmt, call)
        base_name = model
        block = self.parent[id(stmt)]
        if not isinstance(block, (cst.Module, cst.IndentedBlock)):
            raise Refuse(call, "A2A808", "the DDP wrap is not a plain statement")
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
        for f in all_nodes(self.module, cst.FunctionDef):
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
        new = self.module.visit(Apply(self.replace))
        new = fix_imports(new, self.needs_dcp)
        for node, code, msg in self.later + self.fixed:
            self.ctx.report(node, code, msg, fixed=code in ("A2A801", "A2A805", "A2A806", "A2A809"))
        return new

    def _single_process(self) -> None:
        if self._calls_to(("torch.distributed.fsdp.fully_shard", "torch.distributed._composable.fsdp.fully_shard")):
            return  # already on FSDP2 (a second run)
        for w in all_nodes(self.module, cst.With):
            if any(isinstance(i.item, cst.Call) and isinstance(i.item.func, cst.Attribute)
                   and i.item.func.attr.value == "no_sync" for i in w.items):  # type: ignore[attr-defined]
                self.ctx.report(w, "A2A808", "`no_sync()` of a model wrapped in another file: if that model is "
                                             "sharded with `fully_shard`, use `set_requires_gradient_sync(False)` here")
                return
        if self._calls_to(("torch.distributed.init_process_group",)):
            return
        amp = self._calls_to(("torch.autocast", "torch.amp.autocast", "torch.amp.GradScaler",
                              "torch.cuda.amp.GradScaler", "torch.amp.grad_scaler.GradScaler"))
        optims = [c for c in all_nodes(self.module, cst.Call)
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
            raise Refuse(call, "A2A808", "the DDP wrap is not `name = DDP(model, ...)`: shard the model by hand")
        pos = [a for a in call.args if a.keyword is None]
        if len(pos) != 1 or pos[0].star or isinstance(pos[0].value, (cst.Lambda, cst.NamedExpr, cst.Await, cst.Yield)):
            raise Refuse(call, "A2A808", "the DDP wrap's model is not one plain expression")
        for a in call.args:
            if a.keyword is not None and a.keyword.value not in DROPPED_DDP_ARGS:
                raise Refuse(call, "A2A808", f"DDP option `{a.keyword.value}` has no fsdp2 rewrite here: shard by hand")
            if a.keyword is not None and a.keyword.value == "broadcast_buffers" and \
                    not (isinstance(a.value, cst.Name) and a.value.value == "False"):
                raise Refuse(call, "A2A808", "DDP broadcasts buffers from rank 0 here; FSDP2 does not: shard by hand")
        target = stmt.body[0].targets[0].target.value
        value = pos[0].value
        if isinstance(value, cst.Name):
            return target, value.value, None
        base = value
        while isinstance(base, cst.Call) and isinstance(base.func, cst.Attribute) \
                and base.func.attr.value in ("to", "cuda", "cpu"):
            base = base.func.value
        return target, (base.value if isinstance(base, cst.Name) else None), code_of(value)

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
