"""The state one amp migration plans over: the module, its index and edit plan, the sites found, the scaler.

Every planning step (codemods/amp_plan_*.py) reads and extends this one object; codemods/amp.py runs
the steps in order.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Set, Tuple

import libcst as cst

from . import templates
from . import amp_rules as R
from .base import FileContext
from .edits import EditPlan
from .index import ModuleIndex, parent_mapping
from .names import ImportTable, names_read, norm_code

if TYPE_CHECKING:
    from .amp_losses import LossScalers

AMP = "apex.amp"
CORE_CODES = ("A2A101", "A2A102", "A2A103")  # initialize, backward and step change together
# RepoFacts.extra key: facts key of a module -> modules keeping their apex amp code that call its functions
CALLERS_KEEP_AMP = "amp.callers_keep_amp"
# facts.extra: the modules whose `amp.initialize` is switched (enabled=...) under --dtype bfloat16
BF16_SWITCHED = "amp.bf16_switched"


def parse_expr(code: str) -> cst.BaseExpression:
    return templates.expression(code)


def parse_stmt(code: str) -> cst.BaseStatement:
    return templates.statement(code)


def optimizer_params(opt: str, sole_arg: bool = False) -> cst.BaseExpression:
    """`amp.master_params(opt)` as plain PyTorch: the parameters of `opt`'s groups, a generator (without its
    own parentheses when it is a call's sole argument: `list(p for ...)`)."""
    gen = parse_expr(f'(p for g in {opt}.param_groups for p in g["params"])')
    return gen.with_changes(lpar=[], rpar=[]) if sole_arg else gen


def code_of(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


class AmpSite:
    """One apex amp call: its member (`initialize`, `scale_loss`, ...), the call, its statement and function."""

    def __init__(self, kind: str, call: cst.Call, stmt: cst.BaseStatement, func: Optional[cst.FunctionDef]):
        self.kind = kind
        self.call = call
        self.stmt = stmt
        self.func = func


class AmpPlanState:
    """Everything the migration of one module needs, computed on the original tree."""

    def __init__(self, wrapper: cst.MetadataWrapper, ctx: FileContext):
        self.module = wrapper.module
        self.ctx = ctx
        self.index = ModuleIndex.of(self.module)
        self.parents = parent_mapping(self.module)
        self.table = ImportTable.of(self.module, ctx.module_name)
        self.plan = EditPlan()
        self.use_scaler = ctx.options.use_scaler
        self.dtype = "torch.float16" if self.use_scaler else "torch.bfloat16"
        self.device = ctx.options.device
        self.sites: List[AmpSite] = []
        self.dropped: List[cst.CSTNode] = []  # apex branches removed beside native branches
        self.needs_torch = False
        self.needs_forward_helper = False
        self.abort = False
        self.user_funcs: Set[Optional[cst.FunctionDef]] = set()  # functions that reference the scaler
        self.param_funcs: List[cst.FunctionDef] = []
        self.exported_funcs: List[str] = []
        self.models: Set[str] = set()
        self._called_models: Optional[Set[str]] = None
        self.optimizers: Set[str] = set()
        self.init_func: Optional[cst.FunctionDef] = None
        self.scaler_ref = "scaler"
        self.scaler_is_attr = False
        self.scaler_global = False
        self.cond: Optional[cst.BaseExpression] = None
        self.has_init = False
        self.scaler_off = False
        self._regions: List[Tuple[cst.CSTNode, int, int]] = []
        self._steps: List = []
        self.loss_scalers: Optional[LossScalers] = None
        self._threaded_calls: Set[int] = set()
        self._mp_done: Set[int] = set()
        self._backwards: List[Tuple[cst.CSTNode, Optional[cst.FunctionDef], Set[str]]] = []
        self._cross_params: Dict[int, str] = {}
        self._step_anchors: Dict[int, cst.BaseStatement] = {}
        self._threading_failed: Optional[str] = None
        self._threading_failed_at: Optional[cst.CSTNode] = None
        self._refusal: Optional[Tuple[cst.CSTNode, str]] = None
        self._closures: List[cst.FunctionDef] = []
        self._sites_of: Dict[int, List[cst.Call]] = {}
        self.exported_methods: List[str] = []
        self._unsafe: Optional[str] = None
        self._no_region: Optional[str] = None  # refuses after the threading checks, whose findings say more

    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.parents.get(node)

    def stmt_of(self, node: cst.CSTNode) -> cst.BaseStatement:
        cur: Optional[cst.CSTNode] = node
        while cur is not None and not isinstance(cur, cst.BaseStatement):
            cur = self.parent(cur)
        assert cur is not None
        return cur

    def func_of(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        cur = self.parent(node)
        while cur is not None:
            if isinstance(cur, cst.FunctionDef):
                return cur
            cur = self.parent(cur)
        return None

    def class_of(self, func: Optional[cst.FunctionDef]) -> Optional[cst.ClassDef]:
        if func is None:
            return None
        p = self.parent(func)
        if isinstance(p, cst.IndentedBlock):
            p = self.parent(p)
        return p if isinstance(p, cst.ClassDef) else None

    def block_of(self, stmt: cst.CSTNode) -> Tuple[Optional[cst.CSTNode], int]:
        """(IndentedBlock or Module holding `stmt` in its body, index)."""
        p = self.parent(stmt)
        if isinstance(p, (cst.IndentedBlock, cst.Module)):
            for i, s in enumerate(p.body):
                if s is stmt:
                    return p, i
        return None, -1

    def owner_stmt(self, block: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The compound statement (If, For, With, ...) or Else/Except whose body `block` is."""
        return self.parent(block)

    def is_amp(self, func: cst.BaseExpression, member: str) -> bool:
        return f"{AMP}.{member}" in self.table.qualified_names(func)

    def amp_member(self, func: cst.BaseExpression) -> Optional[str]:
        for q in self.table.qualified_names(func):
            if q.startswith(AMP + "."):
                return q[len(AMP) + 1:]
        return None

    def _replay(self, calls: Optional[Callable[[cst.Call], None]] = None,
                decorators: Optional[Callable[[cst.Decorator], None]] = None,
                functions: Optional[Callable[[cst.FunctionDef], None]] = None) -> None:
        """Feed the shared index's calls, decorators and function definitions, each in tree order, to
        the functions given, instead of walking the module again."""
        for fn, nodes in ((calls, self.index.calls), (decorators, self.index.decorators),
                          (functions, self.index.functions)):
            if fn is not None:
                for n in nodes:
                    fn(n)

    def report(self, node: cst.CSTNode, rule_: object, msg: str, fixed: bool = False) -> None:
        self.ctx.report(node, rule_.code, msg, fixed=fixed)  # type: ignore[attr-defined]

    def collect(self) -> None:
        table = self.table
        amp_locals = set(table.names_under(AMP)) | set(table.locals_for("apex"))
        if not amp_locals:
            return
        calls = self.index.calls
        for call in calls:
            member = self.amp_member(call.func)
            if member is None and isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Subscript):
                inner = call.func.value.value
                if any(q.startswith(AMP + "._amp_state") for q in self.table.qualified_names(inner)):
                    member = "_amp_state." + call.func.attr.value
            if member is None:
                continue
            head = member.split(".")[0]
            stmt = self.stmt_of(call)
            self.sites.append(AmpSite(head if head in (
                "initialize", "scale_loss", "master_params", "state_dict", "load_state_dict", "disable_casts")
                else member, call, stmt, self.func_of(call)))

    def in_dropped(self, node: cst.CSTNode) -> bool:
        return any(self.index.contains(d, node) for d in self.dropped)

    def chain_top(self, node: cst.If) -> cst.If:
        """The `if` that starts the if/elif chain `node` belongs to."""
        p = self.parent(node)
        while isinstance(p, cst.If) and p.orelse is node:
            node, p = p, self.parent(p)
        return node

    def gate_of(self, stmt: cst.CSTNode) -> Tuple[List[cst.BaseExpression], cst.CSTNode]:
        """Conditions of the `if`s enclosing `stmt` in its function, and the outermost gated statement."""
        conds: List[cst.BaseExpression] = []
        outer: cst.CSTNode = stmt
        cur = self.parent(stmt)
        while cur is not None and not isinstance(cur, (cst.FunctionDef, cst.ClassDef, cst.Module)):
            if isinstance(cur, (cst.For, cst.While)):
                break
            if isinstance(cur, cst.If):
                if _is_main_guard(cur.test):
                    break
                # body vs orelse
                if self.index.contains(cur.body, stmt):
                    conds.insert(0, cur.test)
                    outer = self.chain_top(cur)
                else:
                    break
            cur = self.parent(cur)
        return conds, outer

    def scaler_target(self) -> str:
        return f"self.{self.scaler_ref}" if self.scaler_is_attr else self.scaler_ref

    def scaler_expr(self) -> str:
        """The scaler; with one per loss (`num_losses`), the first, which shares their enabled switch."""
        return self.scaler_target() if self.loss_scalers is None else f"{self.scaler_target()}[0]"

    def scaler_of_call(self, call: cst.Call) -> str:
        """The scaler of a `scale_loss` call: its `loss_id`'s with one scaler per loss."""
        if self.loss_scalers is None:
            return self.scaler_expr()
        return f"{self.scaler_target()}[{self.loss_scalers.of_call[id(call)]}]"

    def scaler_of_opt(self, opt: str) -> Optional[str]:
        """The scaler that steps and unscales `opt`: the one of the loss whose gradients it takes; None
        with one scaler per loss when no `scale_loss` names `opt`."""
        if self.loss_scalers is None:
            return self.scaler_expr()
        k = self.loss_scalers.of_opt.get(norm_code(parse_expr(opt)))
        return None if k is None else f"{self.scaler_target()}[{k}]"

    def _pick_scaler_name(self) -> None:
        used = set(self.table.bindings) | self.index.name_values | self.index.attr_values
        for cand in ("scaler", "grad_scaler", "amp_scaler"):
            if cand not in used:
                self.scaler_ref = cand
                return
        self.scaler_ref = "amp_grad_scaler"

    def _abort_all(self, publish: bool = True, leftovers: bool = True) -> None:
        self.plan = EditPlan()
        if publish and self.ctx.module_name and self.ctx.module_name not in self.ctx.exported.unmigrated_amp:
            self.ctx.exported.unmigrated_amp.append(self.ctx.module_name)
        # nothing is rewritten after all: drop the "fixed" findings planned so far
        self.ctx._stage_findings = [f for f in self.ctx._stage_findings if not f.fixed]
        for s in self.sites if leftovers else ():
            self.report(s.call, R.LEFTOVER, f"apex `amp.{s.kind}` left unmigrated (see the other findings)")


def _is_main_guard(test: cst.BaseExpression) -> bool:
    return "__name__" in names_read(test)


def flatten(e: cst.BaseExpression) -> List[cst.BaseExpression]:
    if isinstance(e, (cst.Tuple, cst.List)):
        out: List[cst.BaseExpression] = []
        for el in e.elements:
            out.extend(flatten(el.value))
        return out
    return [e]
