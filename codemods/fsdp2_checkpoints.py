"""The sharded model's later uses: its checkpoint calls through torch.distributed.checkpoint's
state_dict functions with full state dicts (gathered before a rank guard: they are collectives),
`X.module` -> the model (FSDP2 shards in place), and the state dicts it cannot see reported."""
from __future__ import annotations

from typing import Optional, Set

import libcst as cst

from .fsdp2_no_sync import NoSyncPlanning
from .fsdp2_optimizer import OptimizerMoves
from .fsdp2_state import Apply, Hoisted, Refuse, all_nodes
from .names import code_of, dotted_name

RANK_WORDS = ("rank", "main_process", "master", "is_main", "primary")
FULL = "StateDictOptions(full_state_dict=True)"


class CheckpointPlanning(OptimizerMoves, NoSyncPlanning):
    """The checkpoint and `.module` step of the fsdp2 migration (it reads the optimizers' names and
    plans the `no_sync` blocks of the statements it visits)."""

    def _rewrite_uses(self, stmt: cst.CSTNode, names: Set[str], target: str) -> cst.CSTNode:
        """A moved statement, with its checkpoint loads rewritten (it now runs after the sharding)."""
        self._plan_uses(stmt, names, target)
        return stmt.visit(Apply(self.replace))

    def _plan_uses(self, stmt: cst.CSTNode, names: Set[str], target: str) -> None:
        opts = set(getattr(self, "opt_names", [])) or set(self._optimizer_names(self.module))
        self._plan_no_sync(stmt, names)
        for node in all_nodes(stmt, cst.Call):
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
            self.covered |= {id(a) for a in all_nodes(c.func, cst.Attribute)}
            if meth == "state_dict":
                if c.args:
                    raise Refuse(c, "A2A807", "`state_dict(...)` with arguments on the sharded model: migrate by hand")
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
                    raise Refuse(c, "A2A807", "`load_state_dict` of the sharded model or optimizer in a shape the "
                                               "fsdp2 target does not rewrite (under a rank guard, with options, or "
                                               "its result used): use `set_model_state_dict` by hand")
                arg = code_of(c.args[0].value)
                new = (f"set_model_state_dict({target}, {arg}, options={FULL})" if rd in names
                       else f"set_optimizer_state_dict({target}, {rd}, {arg}, options={FULL})")
                self.needs_dcp |= {"StateDictOptions", "set_model_state_dict" if rd in names else "set_optimizer_state_dict"}
                self.replace[id(c)] = cst.parse_expression(new)
                self.fixed.append((c, "A2A806", f"`{rd}.load_state_dict(...)` -> `{new.split('(')[0]}(...)` "
                                                "with full_state_dict=True"))
        for node in all_nodes(stmt, cst.Attribute):
            a: cst.Attribute = node  # type: ignore[assignment]
            if a.attr.value == "module" and isinstance(a.value, cst.Name) and a.value.value in names \
                    and id(a) not in self.replace and id(a) not in self.covered:
                self.replace[id(a)] = cst.Name(target)
                self.fixed.append((a, "A2A809", f"`{a.value.value}.module` -> `{target}` (FSDP2 shards the module in place)"))

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
            raise Refuse(call, "A2A807", "state dict under a rank guard that is not a plain statement: gather it "
                                          "with `get_model_state_dict` on every rank by hand")
        name = self._fresh(self.module, base)
        line = cst.parse_statement(f"{name} = {new}\n")
        self.replace[id(call)] = cst.Name(name)
        self._hoisted = getattr(self, "_hoisted", {})
        self._hoisted.setdefault(id(guard), []).append(line)
        self.replace[id(guard)] = Hoisted(self._hoisted[id(guard)])

    def _lint_other_checkpoints(self, scope: cst.CSTNode, names: Set[str]) -> None:
        """Model or optimizer state dicts outside the sharding function: a finding each."""
        for f in all_nodes(self.module, cst.FunctionDef):
            if f is scope or (isinstance(scope, cst.FunctionDef) and self._inside(f, scope)):
                continue
            params = {p.name.value for p in f.params.params}  # type: ignore[attr-defined]
            for node in all_nodes(f, cst.Call):
                c: cst.Call = node  # type: ignore[assignment]
                if isinstance(c.func, cst.Attribute) and c.func.attr.value in ("state_dict", "load_state_dict"):
                    rd = (dotted_name(c.func.value) or "").split(".")[0]
                    if rd in params and any(w in rd.lower() for w in ("model", "net", "optim", "module")):
                        self.later.append((c, "A2A807", f"`{rd}.{c.func.attr.value}()` may be the sharded model or "
                                                        "its optimizer: use `torch.distributed.checkpoint.state_dict`'s "
                                                        "get_/set_model_state_dict (and the optimizer pair), on every rank"))
