"""apex.amp -> torch.amp: initialize, scale_loss, optimizer steps, autocast region, clipping, state dicts.

The sites of one migration change together, so one analysis plans all of them (an `EditPlan`) and
applies them at once. When any `amp.initialize` or `amp.scale_loss` site has a shape that is not
migrated safely, the module's amp code is left alone and every site is reported.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from . import (accum_clip, amp_dead_modes, amp_engine_override, amp_losses, amp_private, amp_regions, amp_reinit,
               amp_threading, apex_flag_state, backward_helpers, checkpoint_pairs, clip_reach, templates,
               unsafe_fixes)
from . import amp_rules as R
from .amp_modes import ModeSwitches
from .bool_exprs import as_bool
from .early_exits import may_exit_early
from .opt_level_notes import opt_level_message
from .base import Codemod, FileContext, RepoFacts, facts_key, module_root
from .edits import EditPlan, apply_plan, as_primary, indent_continuations
from .index import ModuleIndex, parent_mapping
from .signatures import add_keyword, add_param, all_params, param_names
from .guards import apex_flags, apex_locals, fold_condition, is_const
from .importing import add_helper_function, ensure_imports
from .walk import iter_nodes
from .names import (ImportTable, arg_by, assigned_names, dotted_name, has_star_args, literal_number,
                    literal_string, names_read, norm_code, sole_call)

AMP = "apex.amp"
CLIP_FUNCS = ("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm",
              "clip_grads", "clip_gradients")  # mmcv's OptimizerHook, Lightning's LightningModule
DROPPED_INIT_KWARGS = {"keep_batchnorm_fp32", "verbosity", "master_weights", "cast_model_type",
                       "patch_torch_functions", "num_losses", "patch_torch_functions_type"}
REPORTED_INIT_KWARGS = {"min_loss_scale", "max_loss_scale", "cast_model_outputs"}
NATIVE_AMP = ("torch.amp", "torch.cuda.amp", "torch.cpu.amp", "torch.autocast")
_NATIVE_NAMES = ("GradScaler", "autocast")
# a call of one of these on a name that says scaler marks a branch as the native-AMP path
_NATIVE_SCALER_METHODS = ("scale", "unscale_", "step", "update", "state_dict", "load_state_dict", "get_scale")
_REGION_STOPPERS = frozenset({cst.Return, cst.Break, cst.Continue, cst.Yield, cst.FunctionDef, cst.ClassDef,
                              cst.Global, cst.Nonlocal})  # concrete node classes: matched by type
CORE_CODES = ("A2A101", "A2A102", "A2A103")  # initialize, backward and step change together
# RepoFacts.extra key: facts key of a module -> modules keeping their apex amp code that call its functions
CALLERS_KEEP_AMP = "amp.callers_keep_amp"
# facts.extra: the modules whose `amp.initialize` is switched (enabled=...) under --dtype bfloat16
BF16_SWITCHED = "amp.bf16_switched"
FORBIDDEN_IN_REGION = ("backward", "step", "scale_loss", "unscale_", "update")
# `net = DDP(model)`, `net = torch.compile(model)`: the forward pass runs through the wrapper
_MODEL_WRAPPERS = ("DistributedDataParallel", "DDP", "DataParallel", "FullyShardedDataParallel", "FSDP", "compile")
_MODEL_MOVES = ("to", "cuda", "half", "float", "bfloat16", "train", "eval")  # nn.Module methods returning self


def _expr(code: str) -> cst.BaseExpression:
    return templates.expression(code)


def _stmt(code: str) -> cst.BaseStatement:
    return templates.statement(code)


# expressions that bind more loosely than an `and` operand / than the left side of `!=`
_LOOSER_THAN_AND = (cst.BooleanOperation, cst.IfExp, cst.Lambda, cst.NamedExpr)
_LOOSER_THAN_COMPARISON = _LOOSER_THAN_AND + (cst.Comparison, cst.UnaryOperation)


def _paren(e: cst.BaseExpression, looser: Tuple[type, ...] = _LOOSER_THAN_AND) -> cst.BaseExpression:
    """`e` in parentheses when it is one of the `looser` kinds and has none yet (`'O2' if fp16 else 'O0'`
    before `!= "O0"` would otherwise compare only `'O0'`)."""
    if isinstance(e, looser) and not e.lpar:
        return e.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return e


def _and(conds: Sequence[cst.BaseExpression]) -> Optional[cst.BaseExpression]:
    out: Optional[cst.BaseExpression] = None
    seen: Set[str] = set()
    for c in conds:
        key = norm_code(c)
        if key in seen:
            continue
        seen.add(key)
        if isinstance(c, cst.Name) and c.value == "True":
            continue
        c = c.with_changes(lpar=c.lpar, rpar=c.rpar)
        out = _paren(c) if out is None else cst.BooleanOperation(_paren(out), cst.And(), _paren(c))
    return out


FORWARD_HELPER = "autocast_forward"
FORWARD_HELPER_CODE = '''def autocast_forward(forward, device_type, dtype, enabled: bool = True):
    """`forward` run under torch.autocast, its floating-point tensor outputs cast back to fp32 (added by
    apex2amp). apex's `amp.initialize` without optimizers patched the model this way, so the loss and the
    metrics computed from its outputs ran in fp32."""

    def to_fp32(out):
        if isinstance(out, torch.Tensor):
            return out.float() if out.is_floating_point() else out
        if isinstance(out, tuple) and hasattr(out, "_fields"):
            return type(out)(*(to_fp32(o) for o in out))
        if isinstance(out, (list, tuple)):
            return type(out)(to_fp32(o) for o in out)
        if isinstance(out, dict):
            for key, value in out.items():
                out[key] = to_fp32(value)
        return out

    def run(*args, **kwargs):
        with torch.autocast(device_type, dtype=dtype, enabled=enabled):
            out = forward(*args, **kwargs)
        return to_fp32(out)

    return run
'''

def _probes_apex(node: cst.CSTNode) -> bool:
    """`importlib.util.find_spec("apex")`, `pkgutil.find_loader("apex")` and the like."""
    if type(node) is not cst.Call or not node.args:  # type: ignore[attr-defined]
        return False
    name = (dotted_name(node.func) or "").rpartition(".")[2]  # type: ignore[attr-defined]
    first = node.args[0].value  # type: ignore[attr-defined]
    return name in ("find_spec", "find_loader", "find_module") and isinstance(first, cst.SimpleString) \
        and first.evaluated_value.split(".")[0] == "apex"


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


class _Site:
    def __init__(self, kind: str, call: cst.Call, stmt: cst.BaseStatement, func: Optional[cst.FunctionDef]):
        self.kind = kind
        self.call = call
        self.stmt = stmt
        self.func = func


class _Analysis:
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
        self.sites: List[_Site] = []
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

    # -- tree helpers ---------------------------------------------------------------------------
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

    # -- discovery ------------------------------------------------------------------------------
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
            self.sites.append(_Site(head if head in (
                "initialize", "scale_loss", "master_params", "state_dict", "load_state_dict", "disable_casts")
                else member, call, stmt, self.func_of(call)))

    # -- native branches --------------------------------------------------------------------------
    def _has_native(self, node: cst.CSTNode) -> bool:
        """Whether `node` uses native AMP: calls or names torch's autocast / GradScaler (also as a value,
        `amp_autocast = torch.cuda.amp.autocast`), a `NativeScaler` (timm and its forks), or a scaler's
        methods."""
        table = self.table
        for n in iter_nodes(node):
            t = type(n)
            if t is cst.Attribute or t is cst.Name:
                if any(q.startswith(NATIVE_AMP) or q.endswith(_NATIVE_NAMES) for q in table.qualified_names(n)):
                    return True
                continue
            if t is not cst.Call:
                continue
            f = n.func  # type: ignore[attr-defined]
            if (dotted_name(f) or "").rpartition(".")[2].startswith("NativeScaler"):
                return True
            if isinstance(f, cst.Attribute) and f.attr.value in _NATIVE_SCALER_METHODS and \
                    "scaler" in (dotted_name(f.value) or "").lower():
                return True
        return False

    def drop_apex_branches(self) -> None:
        """In `if apex: ... elif native: ...` chains, drop the apex branches (A2A111) where the apex
        choice keeps a mixed-precision path (codemods/amp_modes.py)."""
        handled: Set[int] = set()
        modes = ModeSwitches(self)
        for site in self.sites:
            chain_top, branches = self._if_chain(site.call)
            if chain_top is None or id(chain_top) in handled:
                continue
            apex_branches = [b for b in branches if self._branch_has_apex(b[1])]
            native = [b for b in branches if self._has_native(b[1]) and b not in apex_branches]
            if not apex_branches or not native:
                continue
            handled.add(id(chain_top))
            if not modes.allow(chain_top, apex_branches, native):
                continue
            keep = [b for b in branches if b not in apex_branches]
            self.plan.replace_stmt[chain_top] = self._rebuild_chain(chain_top, keep)
            for b in apex_branches:
                self.dropped.append(b[1])
            tests = [b[0] for b in apex_branches if b[0] is not None]
            if id(chain_top) in modes.rerouted:
                self.report(chain_top, R.APEX_BRANCH, "apex branch removed; the native-AMP branch stays, and the "
                                                      "apex choice now selects it (A2A130)", fixed=True)
            elif any(b[0] is None for b in keep) or not tests:
                self.report(chain_top, R.APEX_BRANCH, "apex branch removed; the native-AMP branch stays (select it "
                                                      "instead of apex)", fixed=True)
            else:
                chosen = self.module.code_for_node(tests[0]).strip()
                self.report(chain_top, R.APEX_BRANCH, f"apex branch removed and no `else` remains: where `{chosen}` "
                                                      "held, none of this chain runs now; select the native setting "
                                                      "instead (make it the default)")

    def _branch_has_apex(self, body: cst.CSTNode) -> bool:
        return any(self.index.contains(body, s.call) for s in self.sites)

    def chain_top(self, node: cst.If) -> cst.If:
        """The `if` that starts the if/elif chain `node` belongs to."""
        p = self.parent(node)
        while isinstance(p, cst.If) and p.orelse is node:
            node, p = p, self.parent(p)
        return node

    def _if_chain(self, node: cst.CSTNode) -> Tuple[Optional[cst.If], List[Tuple[Optional[cst.BaseExpression], cst.CSTNode]]]:
        """The outermost if/elif chain whose branch body holds `node`, with its (test, body) branches."""
        cur = self.parent(node)
        found: Optional[cst.If] = None
        while cur is not None and not isinstance(cur, (cst.FunctionDef, cst.ClassDef, cst.Module)):
            if isinstance(cur, cst.If):
                found = self.chain_top(cur)
                break
            cur = self.parent(cur)
        if found is None:
            return None, []
        branches: List[Tuple[Optional[cst.BaseExpression], cst.CSTNode]] = []
        n: Optional[cst.CSTNode] = found
        while isinstance(n, cst.If):
            branches.append((n.test, n.body))
            n = n.orelse
        if isinstance(n, cst.Else):
            branches.append((None, n.body))
        return found, branches

    def _rebuild_chain(self, top: cst.If, keep: List[Tuple[Optional[cst.BaseExpression], cst.CSTNode]]
                       ) -> List[cst.BaseStatement]:
        conds = [b for b in keep if b[0] is not None]
        els = [b for b in keep if b[0] is None]
        if not conds:
            if not els:
                return []
            body = els[0][1]
            stmts = list(body.body) if isinstance(body, cst.IndentedBlock) else [
                cst.SimpleStatementLine(body=list(body.body))]  # type: ignore[attr-defined]
            return stmts  # type: ignore[return-value]
        orelse: Optional[cst.CSTNode] = cst.Else(body=els[0][1]) if els else None  # type: ignore[arg-type]
        for test, body in reversed(conds[1:]):
            orelse = cst.If(test=test, body=body, orelse=orelse)  # type: ignore[arg-type]
        return [top.with_changes(test=conds[0][0], body=conds[0][1], orelse=orelse)]

    def in_dropped(self, node: cst.CSTNode) -> bool:
        return any(self.index.contains(d, node) for d in self.dropped)

    # -- conditions -----------------------------------------------------------------------------
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

    # -- initialize -----------------------------------------------------------------------------
    def plan_initialize(self, site: _Site) -> None:
        call = site.call
        stmt = site.stmt
        if has_star_args(call) or any(a.keyword is None for a in call.args[2:]):
            self.report(call, R.UNSUPPORTED, "`amp.initialize` with *args or extra positional arguments: migrate by hand")
            self.abort = True
            return
        models = arg_by(call, 0, "models")
        opts = arg_by(call, 1, "optimizers")
        if models is None:
            self.report(call, R.UNSUPPORTED, "`amp.initialize` without models: migrate by hand")
            self.abort = True
            return
        target: Optional[cst.BaseExpression] = None
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        if isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1:
            target = small.targets[0].target
        elif isinstance(small, cst.Expr) and small.value is call:
            target = None
        else:
            self.report(call, R.UNSUPPORTED, "`amp.initialize` result used in an expression: migrate by hand")
            self.abort = True
            return
        if opts is not None and target is not None and _empty_sequence(opts.value):
            tparts = _tuple_parts(target)
            if tparts is not None and len(tparts) == 2 and isinstance(tparts[1], cst.Name) and tparts[1].value == "_":
                # `model, _ = amp.initialize(model, [], ...)`: the inference form, apex's empty optimizer list dropped
                opts, target = None, tparts[0]
        source = models.value if opts is None else cst.Tuple(
            [cst.Element(models.value, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
             cst.Element(opts.value)], lpar=[], rpar=[])
        if target is not None:
            tparts = _tuple_parts(target)
            if opts is not None and (tparts is None or len(tparts) != 2):
                self.report(call, R.UNSUPPORTED, "`amp.initialize` with optimizers assigned to one name: migrate by hand")
                self.abort = True
                return
        # managed models / optimizers
        for e in _flatten(models.value):
            self.models.add(norm_code(e))
        if target is not None:
            parts = _tuple_parts(target) if opts is not None else [target]
            for e in _flatten(parts[0]):  # type: ignore[index]
                self.models.add(norm_code(e))
            if opts is not None:
                for e in _flatten(parts[1]):  # type: ignore[index]
                    self.optimizers.add(norm_code(e))
        if opts is not None:
            for e in _flatten(opts.value):
                self.optimizers.add(norm_code(e))
        # where the scaler lives
        func = site.func
        self.init_func = func
        if func is None:
            self.scaler_global = True
        elif target is not None and all(dotted_name(t) and dotted_name(t).startswith("self.")  # type: ignore[union-attr]
                                        for t in _flatten(target)) and self.class_of(func) is not None:
            self.scaler_is_attr = True
        # enabled condition
        conds, outer = self.gate_of(stmt)
        probe = next((c for c in conds for n in iter_nodes(c) if _probes_apex(n)), None)
        if probe is not None:
            self.report(probe, R.LEFTOVER, f"`{_code(probe)}` still tests whether apex is installed: "
                                           "without apex the migrated code under it never runs; drop that test")
        flags, locals_ = apex_flags(self.module, self.table), apex_locals(self.table)
        conds = [fold_condition(c, flags, locals_) for c in conds]
        conds = [c for c in conds if not is_const(c, True)]
        opt_level = arg_by(call, 99, "opt_level")
        enabled = arg_by(call, 99, "enabled")
        level = (literal_string(opt_level.value) or self._literal_set_before(stmt, opt_level.value)) \
            if opt_level else "O1"
        cond_list = list(conds)
        if enabled is not None:
            cond_list.append(enabled.value)
        if opt_level is not None and level is None:
            cond_list.append(cst.Comparison(_paren(opt_level.value, _LOOSER_THAN_COMPARISON), [cst.ComparisonTarget(
                cst.NotEqual(), cst.SimpleString('"O0"'))]))
        disabled = level == "O0"
        if disabled:
            cond_list = [_expr("False")]
        self.cond = as_bool(_and(cond_list), self.module)
        if conds and outer is not stmt and self.cond is not None:
            late = names_read(self.cond) & assigned_names(outer)
            if late:
                self.report(call, R.UNSUPPORTED, f"the scaler must exist before `{_code(conds[0])}` is tested, but "
                                                 f"its enabled= would read `{min(late)}`, assigned only inside that "
                                                 "block: migrate this `amp.initialize` by hand")
                self.abort = True
                return
        # what the call itself says (its gates hold already where the call stood)
        own_cond = as_bool(_and(cond_list[len(conds):]), self.module)
        if opts is None and level == "O3":
            # apex cast the weights to fp16: every method ran fp16 (waveglow's `infer` on `mel.half()`), which
            # an autocast forward cannot stand for (spec: O3 is report-only)
            self.report(call, R.UNSUPPORTED, "`amp.initialize` without optimizers at O3 cast the model to fp16 "
                                             "(all its methods, not only forward): replace it with `model.half()` "
                                             "(apex also cast forward's inputs to fp16 and outputs to fp32), or "
                                             "run the model fp32 under `torch.autocast(...)` (the O1 recipe)")
            self.abort = True
            return
        if level in ("O2", "O3"):
            self.report(call, R.OPT_LEVEL, opt_level_message(level, self.ctx.options.target))
        elif level in ("O4", "O5"):
            self.use_scaler = False
            self.dtype = "torch.bfloat16"
        # scaler arguments
        legacy_scaler = self.ctx.options.grad_scaler_callee.startswith("torch.cuda.")
        scaler_args: List[str] = [] if legacy_scaler else [f'"{self.device}"']
        ls = arg_by(call, 99, "loss_scale")
        scaler_off = False
        if ls is not None:
            num = literal_number(ls.value)
            s = literal_string(ls.value)
            if s is not None and s != "dynamic":
                try:
                    num = float(s)
                except ValueError:
                    num = None
            if s == "dynamic":
                pass
            elif num is not None:
                if num == 1.0:
                    scaler_off = True  # apex scaled by 1.0: casting on, no loss scaling
                else:
                    scaler_args.append(f"init_scale={_code(ls.value) if s is None else repr(num)}")
                    scaler_args.append("growth_interval=2**30")
                self.report(ls, R.STATIC_SCALE, f"static loss_scale {_code(ls.value)}: apex never skipped a step with "
                                                "a static scale; GradScaler skips steps with inf/NaN gradients")
            else:
                self.report(ls, R.STATIC_SCALE, f"loss_scale={_code(ls.value)} is read from configuration: GradScaler "
                                                "keeps dynamic scaling (apex's defaults); for a static value S use "
                                                "init_scale=S, growth_interval=2**30")
        for a in call.args:
            if a.keyword is not None and a.keyword.value in REPORTED_INIT_KWARGS:
                self.report(a, R.OPTIONS, f"`{a.keyword.value}` has no GradScaler equivalent and was dropped")
        self.scaler_off = scaler_off
        if scaler_off:
            scaler_args.append("enabled=False")
        elif self.cond is not None:
            scaler_args.append(f"enabled={_code(self.cond)}")
        self.has_init = True
        new_stmts: List[cst.BaseStatement] = []
        same = target is None or [norm_code(e) for e in _flatten(target)] == [norm_code(e) for e in _flatten(source)]
        if not same and target is not None:
            new_stmts.append(cst.SimpleStatementLine(body=[cst.Assign(
                targets=[cst.AssignTarget(target)], value=source)]))
        scaler_stmt: Optional[cst.BaseStatement] = None
        if opts is None:
            # inference form: no optimizer, no scaler; autocast the model's forward (spec 2.6 b)
            m = target if target is not None else models.value
            if dotted_name(m) is None:
                self.report(call, R.UNSUPPORTED, "`amp.initialize` of a model list without optimizers: wrap the "
                                                 "forward passes in `torch.autocast(...)` by hand")
                self.abort = True
                return
            enabled = f", enabled={_code(own_cond)}" if own_cond is not None else ""
            mc = _code(m)
            new_stmts.append(_stmt(f'{mc}.forward = {FORWARD_HELPER}({mc}.forward, "{self.device}", '
                                   f'{self.dtype}{enabled})'))
            self.needs_torch = self.needs_forward_helper = True
            self.use_scaler = False
            self.plan.replace_stmt[stmt] = new_stmts
            self.report(call, R.INITIALIZE, "`amp.initialize` without optimizers -> the model's forward runs under "
                                            f"autocast, outputs cast to fp32 (`{FORWARD_HELPER}`, added to this file; "
                                            "no scaler)", fixed=True)
            return
        if self.use_scaler:
            made = f"{self.ctx.options.grad_scaler_callee}({', '.join(scaler_args)})"
            if self.loss_scalers is not None:  # apex's num_losses scalers, one per loss_id
                made = f"[{made} for _ in range({self.loss_scalers.count})]"
            scaler_stmt = _stmt(f"{self.scaler_target()} = {made}")
            self.needs_torch = True
        self.scaler_anchor = stmt if outer is stmt or not conds else outer
        if outer is stmt or not conds:
            self.plan.replace_stmt[stmt] = new_stmts + ([scaler_stmt] if scaler_stmt else [])
        else:
            self.plan.replace_stmt[stmt] = new_stmts
            if scaler_stmt:
                self.plan.insert_before(outer, [scaler_stmt])
        what = "GradScaler" if self.use_scaler else "bf16 autocast (no scaler)"
        self.report(call, R.INITIALIZE, f"`amp.initialize` -> {what}" + (
            f" (enabled={_code(self.cond)})" if self.cond is not None else ""), fixed=True)

    def _literal_set_before(self, stmt: cst.CSTNode, value: cst.BaseExpression) -> Optional[str]:
        """The string a plain name holds at `stmt` when the statement just before it in the same block
        set it (`opt_level = 'O2'` above `amp.initialize(..., opt_level=opt_level)`)."""
        if not isinstance(value, cst.Name):
            return None
        block, idx = self.block_of(stmt)
        body = list(getattr(block, "body", []))
        for prev in reversed(body[:idx]):
            if value.value not in assigned_names(prev):
                continue
            small = prev.body[0] if isinstance(prev, cst.SimpleStatementLine) and len(prev.body) == 1 else None
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and \
                    isinstance(small.targets[0].target, cst.Name) and small.targets[0].target.value == value.value:
                return literal_string(small.value)
            return None
        return None

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
        k = self.loss_scalers.of_opt.get(norm_code(_expr(opt)))
        return None if k is None else f"{self.scaler_target()}[{k}]"

    # -- scale_loss -----------------------------------------------------------------------------
    def with_of(self, site: _Site) -> Optional[cst.With]:
        p = self.parent(site.call)
        if isinstance(p, cst.WithItem):
            w = self.parent(p)
            if isinstance(w, cst.With) and len(w.items) == 1:
                return w
        return None

    def plan_scale_loss(self, site: _Site) -> Optional[Tuple[cst.CSTNode, cst.BaseExpression]]:
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
            for e in _flatten(opt.value):
                self.optimizers.add(norm_code(e))
        asname = w.items[0].asname
        tname = asname.name.value if asname is not None and isinstance(asname.name, cst.Name) else None
        body: Sequence[cst.CSTNode] = w.body.body if isinstance(w.body, cst.IndentedBlock) else [
            cst.SimpleStatementLine(body=list(w.body.body))]  # type: ignore[union-attr]
        scaled = f"{self.scaler_of_call(call)}.scale({_code(loss.value)})" if self.use_scaler else _code(loss.value)
        loss_code = _code(as_primary(loss.value))
        new_line: Optional[cst.BaseStatement] = None
        bw = _single_backward(body, tname)
        if bw is not None and tname is not None and self._read_outside(tname, w, site.func):
            bw = None  # `scaled_loss` is read after the `with` too: keep binding it
        if bw is not None:
            call_args = ", ".join(_code(a).rstrip(", ") for a in bw.args)
            prefix = f"{self.scaler_of_call(call)}.scale({_code(loss.value)})" if self.use_scaler else loss_code
            new_line = _stmt(f"{prefix}.backward({call_args})")
            new_stmts: List[cst.BaseStatement] = [new_line]
        else:
            new_stmts = []
            if tname is not None:
                new_stmts.append(_stmt(f"{tname} = {scaled}"))
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
                    self._backwards.append((owner, site.func, {norm_code(e) for e in _flatten(opt.value)}
                                            if opt is not None else set()))
                    self.report(call, R.SCALE_LOSS, "`amp.scale_loss` + plain backward branches -> "
                                                    f"`{_code(new_line).strip()}`", fixed=True)
                    return owner, loss.value
        self.plan.replace_stmt[w] = new_stmts
        self._backwards.append((w, site.func, {norm_code(e) for e in _flatten(opt.value)} if opt is not None else set()))
        self.report(call, R.SCALE_LOSS, "`with amp.scale_loss(...)` -> " + (
            f"`{_code(new_line).strip()}`" if new_line is not None else "scaler.scale"), fixed=True)
        return anchor, loss.value

    # -- autocast region ------------------------------------------------------------------------
    def plan_region(self, anchor: cst.CSTNode, loss: cst.BaseExpression, func: Optional[cst.FunctionDef]) -> None:
        wanted = names_read(loss) | ({dotted_name(loss)} if dotted_name(loss) else set())
        cur: cst.CSTNode = anchor
        while True:
            block, idx = self.block_of(cur)
            if block is None:
                if not self._region_at_callers(anchor, loss, func):
                    self._refuse_region(anchor, loss, func)
                return
            body = block.body  # type: ignore[attr-defined]
            end = -1
            for j in range(idx - 1, -1, -1):
                if assigned_names(body[j]) & wanted and not isinstance(body[j], (cst.FunctionDef, cst.ClassDef)):
                    end = j
                    break
            if end >= 0:
                break
            owner = self.owner_stmt(block)
            if isinstance(owner, (cst.Else, cst.ExceptHandler, cst.Finally)):
                owner = self.parent(owner)
            while isinstance(owner, cst.If) and isinstance(self.parent(owner), cst.If):
                owner = self.parent(owner)
            if owner is None or isinstance(owner, (cst.FunctionDef, cst.ClassDef, cst.Module)) or \
                    not isinstance(owner, cst.BaseCompoundStatement):
                if not self._region_at_callers(anchor, loss, func):
                    self._refuse_region(anchor, loss, func)
                return
            cur = owner
        # backward slice within the block, not crossing backward/step code
        needed = set(names_read(body[end])) | assigned_names(body[end])
        model_start = None
        stop, traced = -1, []
        for j in range(end, -1, -1):
            s = body[j]
            if j != end and self._forbidden(s):
                stop = j
                break
            if j != end and not (assigned_names(s) & needed):
                continue
            if j != end:
                needed |= names_read(s)
            traced.append(s)
            if self._calls_model(s, func):
                model_start = j
        if model_start is None:
            elsewhere = amp_regions.forward_elsewhere(self, body, stop, traced, needed, func)
            if elsewhere is not None:
                self.report(elsewhere[0], R.REGION_OUTSIDE_FORWARD, f"{elsewhere[1]}; put the forward and the "
                                                                    "loss in one block (or add the autocast region "
                                                                    "by hand)")
                self._unsafe = "no autocast region can cover the forward pass the loss comes from"
                return
        start = model_start if model_start is not None else end
        rng = body[start:end + 1]
        if not self.ctx.enabled(R.AUTOCAST.code) or any(self.ctx.suppressed(s, R.AUTOCAST.code) for s in rng):
            return
        if any(self._forbidden(s) for s in rng):
            self.report(anchor, R.NO_REGION, "the loss statement itself holds backward/step code: wrap the forward "
                                             "pass and loss in `torch.autocast(...)` by hand")
            self._unsafe = "no autocast region can cover the forward pass the loss comes from"
            return
        if any(self._inside_autocast(s) for s in (rng[0],)):
            return
        for s in rng:
            if any(self.index.contains(d, s) for d in self.dropped):
                return
        if model_start is None:
            # a region around the loss alone would leave the forward, wherever it runs, in fp32
            self.report(anchor, R.NO_REGION, f"{self._model_not_called()} among the statements the loss is computed "
                                             "from: an autocast region around the loss alone would train in fp32; "
                                             "if the forward pass runs elsewhere or under another name, put it next "
                                             "to the loss (or add `torch.autocast` around it by hand)")
            self._no_region = "no autocast region can be placed at the forward pass the loss comes from"
            return
        for (b, f, l) in self._regions:
            if b is block and not (end < f or start > l):
                return  # overlapping region already planned
        enabled = self.enabled_for(func)
        switched = self.ctx.facts.extra.get(BF16_SWITCHED, [])
        if enabled is None and not self.has_init and not self.use_scaler and switched:
            self.report(rng[0], R.BF16_SWITCH_NOT_REACHED, f"`amp.initialize` in `{switched[0]}` is switched on and "
                                                           "off, and under bf16 no scaler carries that switch to "
                                                           "this region: pass it in (`amp_enabled`) and wrap the "
                                                           "forward pass and loss in `torch.autocast(..., "
                                                           "enabled=amp_enabled)` by hand, or migrate with float16")
            self._unsafe = "an autocast region that cannot follow another module's amp on/off switch"
            return
        if enabled is None and self.cond is not None and not self.use_scaler:
            # bf16: no scaler carries the switch here, and an autocast without it would run the mode
            # that turned amp off (O0, the fp32 flag) in bf16
            self.report(rng[0], R.NO_REGION, f"the switch that turned amp on (`{_code(self.cond)}`) cannot be read "
                                             "here and bf16 has no scaler to carry it: pass it in and wrap the "
                                             "forward pass and loss in `torch.autocast(..., enabled=...)` by hand")
            self._unsafe = "an autocast region that cannot follow amp's on/off switch"
            return
        self._regions.append((block, start, end))
        args = [f'"{self.device}"', f"dtype={self.dtype}"]
        if enabled is not None:
            args.append(f"enabled={enabled}")
        head = _expr(f"torch.autocast({', '.join(args)})")
        self.needs_torch = True

        indent = self.module.default_indent

        def make(stmts: List[cst.BaseStatement], head: cst.BaseExpression = head) -> cst.BaseStatement:
            return cst.With(items=[cst.WithItem(head)], body=cst.IndentedBlock(body=indent_continuations(stmts, indent)))

        self.plan.wrap(rng[0], rng[-1], make)
        self.report(rng[0], R.AUTOCAST, f"forward and loss wrapped in `torch.autocast({', '.join(args)})`", fixed=True)

    def _refuse_region(self, anchor: cst.CSTNode, loss: cst.BaseExpression, func: Optional[cst.FunctionDef]) -> None:
        """No statement before the backward computes the loss and no caller in this module passes it in:
        without a region at the forward the mode would train in fp32, so the module is refused (A2A116)."""
        if not self.ctx.enabled(R.AUTOCAST.code) or self.ctx.suppressed(anchor, R.AUTOCAST.code) or \
                self._inside_autocast(anchor):
            return
        passed_in = func is not None and isinstance(loss, cst.Name) and loss.value in param_names(func)
        where = ("it is a parameter, and no caller in this module passes it in: the callers are in other files or "
                 "outside the run") if passed_in else "it is computed elsewhere"
        self.report(anchor, R.NO_REGION, f"the loss is not computed next to the backward ({where}), so no autocast "
                                         "region can be placed at the forward pass: wrap the forward pass and the "
                                         "loss in `torch.autocast(...)` by hand, then rerun")
        self._no_region = "no autocast region can be placed at the forward pass the loss comes from"

    def _region_at_callers(self, anchor: cst.CSTNode, loss: cst.BaseExpression,
                           func: Optional[cst.FunctionDef]) -> bool:
        """The loss is a parameter of a backward helper: plan the region at each of its callers in this
        module, around the forward and the loss they pass in. False when there is none to plan."""
        seen = getattr(self, "_helper_regions", set())
        self._helper_regions = seen
        if func is None or id(func) in seen:
            return False
        callers = amp_regions.loss_at_callers(self, loss, func)
        if not callers:
            # a backward helper of other modules: its callers there wrap the loss (backward_helpers.py)
            return id(func) in self._helper_funcs()
        seen.add(id(func))
        for stmt, arg, caller in callers:
            self.plan_region(stmt, arg, caller)
            if self.use_scaler and "is_enabled()" in (self.enabled_for(caller) or ""):
                self.user_funcs.add(caller)
        return True

    def enabled_for(self, func: Optional[cst.FunctionDef]) -> Optional[str]:
        if self.cond is None:
            if not self.has_init and self.use_scaler:
                # the scaler comes from elsewhere: follow its switch
                return f"{self.scaler_expr()}.is_enabled()"
            return None
        if func is self.init_func:
            return _code(self.cond)
        free = names_read(self.cond)
        params = param_names(func) if func is not None else set()
        if free <= (params | self.module_globals()):
            return _code(self.cond)
        if self.use_scaler and not self.scaler_off:
            return f"{self.scaler_expr()}.is_enabled()"
        return None

    def module_globals(self) -> Set[str]:
        out: Set[str] = set(self.table.bindings)
        for s in self.module.body:
            out |= {n for n in assigned_names(s) if "." not in n}
        return out

    def _model_not_called(self) -> str:
        """What `_calls_model` looked for and did not find, for a finding's text."""
        if not self.models:
            return "no call of a parameter or `self.<attr>` (the model passed in)"
        names = ", ".join(f"`{m}`" for m in sorted(self.models))
        return f"no call of {names} (the model `amp.initialize` returned)"

    def _read_outside(self, name: str, stmt: cst.CSTNode, func: Optional[cst.FunctionDef]) -> bool:
        """Whether `name` is read in `func` (the module when None) outside `stmt` and outside other
        `with ... as name:` blocks, which bind it afresh."""
        scope: cst.CSTNode = func if func is not None else self.module
        rebinding = [w for w in self.index.withs if w is not stmt and any(
            i.asname is not None and isinstance(i.asname.name, cst.Name) and i.asname.name.value == name
            for i in w.items)]
        return any(self.index.names_within({name}, scope, [stmt, *rebinding]))

    def _model_names(self) -> Set[str]:
        """The amp models and the names they are assigned to, as they are, wrapped or moved (`model =
        self.model`, `net = DDP(model)`, `m = model.cuda()`), gathered once the models are known."""
        if self._called_models is None or not self.models <= self._called_models:
            names = set(self.models)
            assigns = [n for n in self.index.nodes if type(n) is cst.Assign and len(n.targets) == 1]  # type: ignore
            grew = bool(names)
            while grew:
                grew = False
                for stmt in assigns:
                    target = norm_code(stmt.targets[0].target)
                    value = stmt.value
                    if target in names:
                        continue
                    if (isinstance(value, cst.Call) and self._wraps_model(value, names)) or \
                            (isinstance(value, (cst.Name, cst.Attribute)) and norm_code(value) in names):
                        names.add(target)
                        grew = True
            self._called_models = names
        return self._called_models

    @staticmethod
    def _wraps_model(call: cst.Call, names: Set[str]) -> bool:
        f = call.func
        if isinstance(f, cst.Attribute) and f.attr.value in _MODEL_MOVES and norm_code(f.value) in names:
            return True
        last = (dotted_name(f) or "").rpartition(".")[2]
        return last in _MODEL_WRAPPERS and bool(call.args) and call.args[0].keyword is None and \
            norm_code(call.args[0].value) in names

    def _calls_model(self, stmt: cst.CSTNode, func: Optional[cst.FunctionDef] = None) -> bool:
        """Whether `stmt` calls an amp model (or a wrapper of it); without an `initialize` in this
        module, any callable parameter or `self.<attr>` counts (the model arrives as an argument)."""
        models = self._model_names() if self.models else self.models
        callables: Set[str] = set()
        if not models:
            callables = param_names(func) - {"self", "cls"} if func is not None else set()
        for n in iter_nodes(stmt):
            if type(n) is not cst.Call:
                continue
            f = n.func  # type: ignore[attr-defined]
            if norm_code(f) in models:
                return True
            if isinstance(f, cst.Attribute) and f.attr.value == "forward" and norm_code(f.value) in models:
                return True
            if models and _unwrapped(f) in models:
                return True  # `model.module(x)`, `model.module.forward(x)`: the model inside a DDP wrapper
            if not models and isinstance(f, cst.Name) and f.value in callables:
                return True
            if not models and isinstance(f, cst.Attribute) and f.attr.value == "forward" and (
                    (isinstance(f.value, cst.Name) and f.value.value in callables) or (
                        isinstance(f.value, cst.Attribute) and isinstance(f.value.value, cst.Name) and
                        f.value.value.value == "self")):
                return True  # `self.model.forward(**batch)`, `model.forward(x)`
            if not models and isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and \
                    f.value.value == "self" and f.attr.value not in ("forward",):
                return True
        return False

    def _forbidden(self, stmt: cst.CSTNode) -> bool:
        """Whether `stmt` holds code that must stay outside an autocast region (backward, step,
        control flow that leaves the block, nested definitions)."""
        return any(type(n) in _REGION_STOPPERS or (
            type(n) is cst.Call and type(n.func) is cst.Attribute and n.func.attr.value in FORBIDDEN_IN_REGION)
            for n in iter_nodes(stmt))

    def _inside_autocast(self, stmt: cst.CSTNode) -> bool:
        cur = self.parent(stmt)
        while cur is not None and not isinstance(cur, (cst.FunctionDef, cst.Module)):
            if isinstance(cur, cst.With):
                for item in cur.items:
                    if isinstance(item.item, cst.Call) and any(
                            q.endswith("autocast") for q in self.table.qualified_names(item.item.func)):
                        return True
            cur = self.parent(cur)
        return False

    # -- steps, clipping -----------------------------------------------------------------------
    def plan_steps(self) -> None:
        if not self.optimizers:
            return
        steps: List[Tuple[cst.Call, cst.BaseStatement, Optional[cst.FunctionDef], str]] = []
        optimizers = self.optimizers

        outer = self

        anchors = self._step_anchors  # step call -> the loop over the optimizers it sits in

        def visit_Call(n: cst.Call) -> None:
            f = n.func
            if not (isinstance(f, cst.Attribute) and f.attr.value == "step"):
                return
            if norm_code(f.value) in optimizers:
                steps.append((n, outer.stmt_of(n), outer.func_of(n), _code(f.value)))
                return
            loop = outer._optimizer_loop(n, f.value)
            if loop is not None:
                steps.append((n, outer.stmt_of(n), outer.func_of(n), _code(f.value)))
                anchors[id(n)] = loop

        self._replay(calls=visit_Call)
        steps = [s for s in steps if not self.in_dropped(s[0]) and not self._before_initialize(s[1], s[2])
                 and not self._before_any_backward(s[1], s[2])]
        self._steps = steps
        if not steps and self.has_scale_loss and self._helper_funcs():
            self._publish_helpers()
            return
        if not steps and self.has_scale_loss and self.ctx.module_name and self.ctx.facts.extra.get(
                backward_helpers.HELD + facts_key(self.ctx.path, self.ctx.module_name)):
            node = next(s.call for s in self.sites if s.kind == "scale_loss")
            self.ctx.report(node, R.BACKWARD_HELPER.code, "a backward helper for other modules, held back: no file of "
                            "this run calls it, or one that does keeps its amp code (see its findings); the helper "
                            "and its callers migrate together", severity="warning")
        if not steps:
            if self.has_scale_loss:
                node = next(s.call for s in self.sites if s.kind == "scale_loss")
                self.report(node, R.STEP_MISSING, "the amp optimizer's `step()` is not in this module: call "
                                                  "`scaler.step(optimizer)` and `scaler.update()` there")
                self._unsafe = "the optimizer would step on scaled gradients"
            return
        if not self.use_scaler:
            return
        by_block: Dict[Tuple[int, int], List[Tuple[cst.Call, cst.BaseStatement, Optional[cst.FunctionDef], str]]] = {}
        for s in steps:
            call, stmt, func, opt = s
            small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
            if not (isinstance(small, cst.Expr) and small.value is call) or call.args:
                self.report(call, R.UNSUPPORTED, f"`{opt}.step(...)` used in an expression or with arguments: use "
                                                 f"`scaler.step({opt})` and `scaler.update()` by hand")
                continue
            sc = self.scaler_of_opt(opt)
            if sc is None:
                self.report(call, R.PER_LOSS_UNSUPPORTED, f"`{opt}.step()`: no `amp.scale_loss` of this module "
                                                          "names this optimizer, so which loss scaler steps it is "
                                                          "unknown")
                self._unsafe = "an optimizer step without a loss scaler"
                continue
            self.plan.replace_node[call] = _expr(f"{sc}.step({opt})")
            self.user_funcs.add(func)
            anchor = anchors.get(id(call), stmt)  # a loop over the optimizers updates once, after the loop
            loop = self._loop_of(anchor)
            by_block.setdefault((id(func), id(loop), sc), []).append((call, anchor, func, opt))
            self.report(call, R.STEP, f"`{opt}.step()` -> `{sc}.step({opt})`", fixed=True)
        for (_, _, sc), group in by_block.items():
            blocks = {id(self.block_of(s[1])[0]) for s in group}
            stepped = [norm_code(_expr(s[3])) for s in group]
            # one update after the iteration's last step; an optimizer that steps again in the same
            # block (iterations written out one after another) needs an update before its next step
            if len(blocks) == 1 and len(stepped) == len(set(stepped)):
                last = max(group, key=lambda s: self.block_of(s[1])[1])
                self.plan.insert_after(last[1], [_stmt(f"{sc}.update()")])
            elif self.loss_scalers is not None and len(set(stepped)) > 1:
                # apex updated a loss's scaler once per scale_loss: its optimizers stepping apart cannot say when
                self.report(group[0][0], R.PER_LOSS_UNSUPPORTED, f"the optimizers of one loss ({', '.join(sorted(set(s[3] for s in group)))}) "
                                                                 "step in different places: when its scaler "
                                                                 "must update is not clear")
                self._unsafe = "the optimizers of one loss step apart"
            else:
                for s in group:
                    self.plan.insert_after(s[1], [_stmt(f"{sc}.update()")])

    def _optimizer_loop(self, call: cst.Call, receiver: cst.BaseExpression) -> Optional[cst.For]:
        """The `for o in optimizers:` around `o.step()` when `optimizers` holds the amp optimizers
        (`amp.scale_loss(loss, optimizers)`, or the list `amp.initialize` was given), `o` is that loop's
        own plain target and the loop body does not rebind it."""
        if not isinstance(receiver, cst.Name):
            return None
        for node in self.index.ancestors(call):
            if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return None
            if isinstance(node, cst.For) and isinstance(node.target, cst.Name) and \
                    node.target.value == receiver.value:
                rebound = receiver.value in assigned_names(node.body)
                return node if norm_code(node.iter) in self.optimizers and not rebound else None
        return None

    def _before_any_backward(self, stmt: cst.CSTNode, func: Optional[cst.FunctionDef]) -> bool:
        """Whether no scaled backward of `func` can run before `stmt`: every one comes later in the
        function and none shares a loop with it. Such a step (UNITER's "quick hack for amp
        delay_unscale bug", a dummy `optimizer.step()` before the training loop) steps no scaled
        gradient, and `scaler.step` would fail there (no `scaler.scale` yet this iteration)."""
        pos = self.ctx._positions
        if pos is None or stmt not in pos:
            return False
        mine = [w for w, f, _ in self._backwards if f is func]
        if not mine or any(w not in pos for w in mine):
            return False
        line = pos[stmt].start.line
        if any(pos[w].start.line < line for w in mine):
            return False
        loops = [a for a in self.index.ancestors(stmt) if isinstance(a, (cst.For, cst.While))]
        return not any(self.index.contains(loop, w) for loop in loops for w in mine)

    def _before_initialize(self, stmt: cst.CSTNode, func: Optional[cst.FunctionDef]) -> bool:
        """Whether `stmt` comes before the scaler's creation in the function that calls `amp.initialize`:
        a plain fp32 step (a reference run, say) that runs, at least the first time, with no scaler."""
        anchor = getattr(self, "scaler_anchor", None)
        if anchor is None or func is not self.init_func or self.scaler_global or self.scaler_is_attr:
            return False
        pos = self.ctx._positions
        if pos is None or stmt not in pos or anchor not in pos:
            return False
        return pos[stmt].start.line < pos[anchor].start.line

    def _loop_of(self, stmt: cst.CSTNode) -> Optional[cst.CSTNode]:
        cur = self.parent(stmt)
        while cur is not None and not isinstance(cur, (cst.FunctionDef, cst.Module)):
            if isinstance(cur, (cst.For, cst.While)):
                return cur
            cur = self.parent(cur)
        return None

    def plan_clipping(self) -> None:
        funcs = {id(s.func) for s in self.sites if s.kind == "scale_loss"} | {id(s[2]) for s in self._steps}
        clips: List[cst.Call] = []
        outer = self

        def visit_Call(n: cst.Call) -> None:
            d = dotted_name(n.func) or ""
            reads_master = any(isinstance(a.value, cst.Call) and outer.is_amp(a.value.func, "master_params")
                               for a in n.args)
            if (d.split(".")[-1] in CLIP_FUNCS or reads_master) and id(outer.func_of(n)) in funcs:
                clips.append(n)

        self._replay(calls=visit_Call)
        if self.use_scaler:
            for clip in clip_reach.unseen_clips(self, CLIP_FUNCS, funcs):
                if self.ctx.enabled(R.UNSCALE.code) and not self.ctx.suppressed(clip, R.UNSCALE.code):
                    self.report(clip, R.CLIP_ELSEWHERE, "gradients are still scaled here (this function clips but "
                                                        "steps no optimizer): call `scaler.unscale_(optimizer)` "
                                                        "before clipping")
                    self._unsafe = "a gradient clip outside the functions holding the backward and the step"
        unscaled: Set[Tuple[int, str]] = set()
        collapsed: List[cst.CSTNode] = []
        for clip in clips:
            if self.in_dropped(clip) or any(self.index.contains(c, clip) for c in collapsed):
                continue
            if not self.ctx.enabled(R.UNSCALE.code) or self.ctx.suppressed(clip, R.UNSCALE.code):
                continue
            params = arg_by(clip, 0, "parameters")
            for a in clip.args:
                if isinstance(a.value, cst.Call) and self.is_amp(a.value.func, "master_params"):
                    params = a
            mp_opt: Optional[str] = None
            if params is not None and isinstance(params.value, cst.Call) and self.is_amp(params.value.func, "master_params"):
                self._mp_done.add(id(params.value))
                o = arg_by(params.value, 0, "optimizer")
                mp_opt = _code(o.value) if o is not None else None
            stmt = self.stmt_of(clip)
            func = self.func_of(clip)
            step = self._next_step(stmt, func, mp_opt)
            opt = mp_opt or (step[3] if step else None)
            if opt is None:
                self.report(clip, R.CLIP_ELSEWHERE, "gradients are still scaled here: call `scaler.unscale_(optimizer)` "
                                                    "before clipping")
                self._unsafe = "a gradient read whose optimizer step is not found"
                continue
            # collapse `if fp16: clip(amp.master_params(o)) else: clip(model.parameters())`
            target_stmt: cst.CSTNode = stmt
            replacement: Optional[cst.BaseStatement] = None
            p = self.parent(stmt)
            owner = self.parent(p) if isinstance(p, cst.IndentedBlock) else None
            if mp_opt is not None and isinstance(owner, cst.If) and owner.body is p and len(p.body) == 1 and \
                    isinstance(owner.orelse, cst.Else) and isinstance(owner.orelse.body, cst.IndentedBlock) and \
                    len(owner.orelse.body.body) == 1:
                other_stmt = owner.orelse.body.body[0]
                if _differs_only_in(stmt, other_stmt, params.value):  # type: ignore[union-attr]
                    target_stmt, replacement = owner, other_stmt  # type: ignore[assignment]
                    collapsed.append(owner)
            # a step in a loop over the optimizers: the window is that loop's block, and a clip in a loop
            # over the same optimizers (`for o in optimizers: clip(amp.master_params(o))`) unscales there
            loop = self._step_anchors.get(id(step[0])) if step is not None else None
            if loop is not None and self.index.contains(loop, target_stmt):
                loop = None  # the clip sits in the step's own loop: the window is that loop's body
            anchor = loop if loop is not None else (step[1] if step is not None else None)
            window = self._window_child(target_stmt, anchor) if anchor is not None else None
            in_loop = loop is not None and opt is not None and window is not None and \
                self._optimizer_loop(clip, _expr(opt)) is not None
            if loop is not None and not in_loop:
                self.report(clip, R.CLIP_ELSEWHERE, f"gradients are still scaled here, and `{opt}` steps in a loop "
                                                    "over several optimizers: unscale each of them "
                                                    "(`scaler.unscale_(o)`) before this clip, by hand")
                self._unsafe = "a gradient clip before a loop of optimizer steps would clip scaled gradients"
                continue
            if step is not None and window is None and self._clip_to_boundary(clip, stmt, target_stmt, replacement,
                                                                      params, mp_opt, opt, step, func, unscaled,
                                                                      collapsed):
                continue
            if step is not None and window is None or \
                    step is not None and window is not None and self._exits_before_step(window, target_stmt, step[1]):
                gate = self._step_gate_after(target_stmt, step[1]) if window is None else None
                if gate is not None:
                    self.report(clip, R.CLIP_ELSEWHERE, f"`{opt}.step()` runs only under `if {gate}:` after this "
                                "clip: `scaler.unscale_` before the clip, `scaler.step` and `scaler.update()` must "
                                "run on the same path (GradScaler already skips non-finite steps: a finite-norm test "
                                "can go; an accumulation boundary must hold the clip too)")
                else:
                    self.report(clip, R.CLIP_ELSEWHERE, f"clip runs on every micro-batch but `{opt}.step()` only at "
                                f"the boundary: move it next to the step after `scaler.unscale_({opt})`")
                self._unsafe = "a gradient clip the step does not follow on every path would clip scaled gradients"
                continue
            if replacement is not None:
                self.plan.replace_stmt[target_stmt] = [replacement]
            elif mp_opt is not None:
                gen = _expr(f'(p for g in {mp_opt}.param_groups for p in g["params"])')
                if len(clip.args) == 1:
                    gen = gen.with_changes(lpar=[], rpar=[])  # `list(p for ...)`: the call's parentheses do
                self.plan.replace_node[params.value] = gen  # type: ignore[union-attr]
            # a read of the parameters after the last step of the function (`torch.save(list(
            # amp.master_params(opt)))` at the end of training) reads no scaled gradient
            reads_grads = step is not None or (dotted_name(clip.func) or "").split(".")[-1] in CLIP_FUNCS
            key = (id(func), norm_code(_expr(opt)), id(step[1]) if step is not None else 0)
            inserted = False
            if self.use_scaler and reads_grads and key not in unscaled:
                unscaled.add(key)
                unscale = [_stmt(f"{self.scaler_of_opt(opt) or self.scaler_expr()}.unscale_({opt})")]
                bw = self._backward_before(target_stmt, func, opt)
                if in_loop:
                    self.plan.insert_before(target_stmt, unscale)
                elif bw is not None and step is not None and window is not None and \
                        self._window_child(bw, step[1]) is not None and \
                        self._index_in(self._window_child(bw, step[1])) <= self._index_in(window) and \
                        not self._exits_between(self._window_child(bw, step[1]), bw, window):
                    # apex unscaled when scale_loss exited: do the same, right after the backward
                    self.plan.insert_after(bw, unscale)
                else:
                    self.plan.insert_before(window if window is not None else target_stmt, unscale)
                self.user_funcs.add(func)
                inserted = True
            if not inserted and mp_opt is None:
                continue
            if inserted:
                self.report(clip, R.UNSCALE, f"`scaler.unscale_({opt})` before reading gradients" + (
                    "; `amp.master_params` -> the optimizer's parameters" if mp_opt else ""), fixed=True)
            else:
                self.report(clip, R.UNSCALE, "`amp.master_params` -> the optimizer's parameters", fixed=True)

    def _clip_to_boundary(self, clip, stmt, target_stmt, replacement, params, mp_opt, opt, step, func,
                          unscaled, collapsed) -> bool:
        """A clip on every micro-batch, the step at the accumulation boundary: offer the unsafe fix that moves
        the clip after `scaler.unscale_(opt)` before the step (codemods/accum_clip.py). True: handled."""
        code = R.CLIP_AT_BOUNDARY.code
        if not self.use_scaler or not self.ctx.enabled(code) or self.ctx.suppressed(clip, code):
            return False
        moved = replacement if replacement is not None else stmt
        removed = [target_stmt]
        pair = accum_clip.branch_pair(stmt, self.parent) if mp_opt is not None and replacement is None else None
        if pair is not None and _differs_only_in(stmt, pair[1], params.value):
            # `if fp16: <backward>; clip(amp.master_params(o)) else: <backward>; clip(model.parameters())`:
            # both clips go, the plain one runs at the boundary
            target_stmt, moved, removed = pair[0], pair[1], [stmt, pair[1]]
        elif replacement is None and mp_opt is not None:
            gen = _expr(f'(p for g in {mp_opt}.param_groups for p in g["params"])')
            if len(clip.args) == 1:
                gen = gen.with_changes(lpar=[], rpar=[])
            moved = stmt.deep_replace(params.value, gen)
        if accum_clip.boundary_of(target_stmt, moved, step[1], self.parent, self.block_of) is None:
            return False
        if not unsafe_fixes.offer(self.ctx, clip, code, accum_clip.change_message(opt)):
            self._unsafe = "a gradient clip on every micro-batch (unsafe fix available: --unsafe-fixes)"
            return True
        unscaled.add((id(func), norm_code(_expr(opt)), id(step[1])))
        collapsed.extend(removed)
        sc = self.scaler_of_opt(opt) or self.scaler_expr()
        for r in removed:
            self.plan.remove(r)
        self.plan.insert_before(step[1], [_stmt(f"{sc}.unscale_({opt})"),
                                          moved.with_changes(leading_lines=[])])  # type: ignore[union-attr]
        self.user_funcs.add(func)
        return True

    def _index_in(self, stmt: cst.CSTNode) -> int:
        return self.block_of(stmt)[1]

    def _step_gate_after(self, clip_stmt: cst.CSTNode, step_stmt: cst.CSTNode) -> Optional[str]:
        """The test of the `if` that holds the step and follows the clip (or a statement holding the
        clip) in one block; None if there is none."""
        here: Optional[cst.CSTNode] = clip_stmt
        while here is not None and not isinstance(here, (cst.FunctionDef, cst.Module)):
            block, idx = self.block_of(here)
            cur: Optional[cst.CSTNode] = step_stmt
            while block is not None and cur is not None:
                if isinstance(cur, cst.If):
                    b, i = self.block_of(cur)
                    if b is block and i > idx:
                        return _code(cur.test)
                cur = self.parent(cur)
            here = self.parent(here)
        return None

    def _exits_before_step(self, window: cst.CSTNode, clip_stmt: cst.CSTNode, step_stmt: cst.CSTNode) -> bool:
        """Whether a path from the clip can leave the step's block before the step (`continue` on
        micro-batches that do not step): the clip then runs where no step and no update follow."""
        block, start = self.block_of(window)
        end = self._index_in(step_stmt)
        if block is None:
            return True
        between = list(block.body[start + 1:end])
        if window is not clip_stmt:
            between.append(window)
        return may_exit_early(between)

    def _exits_between(self, bw_child: cst.CSTNode, bw: cst.CSTNode, window: cst.CSTNode) -> bool:
        """Whether a path from the backward can leave the step's block before `window` (the clip)."""
        block, start = self.block_of(bw_child)
        end = self._index_in(window)
        if block is None:
            return True
        between = list(block.body[start + 1:end])
        if bw_child is not bw:
            between.append(bw_child)  # the exit may sit beside the backward inside this statement
        return may_exit_early(between)

    def _window_child(self, node: cst.CSTNode, step_stmt: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The statement of the step's block that holds `node`, when it comes before the step."""
        block, idx = self.block_of(step_stmt)
        cur: Optional[cst.CSTNode] = node
        while cur is not None:
            if isinstance(cur, cst.BaseStatement):
                b, i = self.block_of(cur)
                if b is block:
                    return cur if i < idx else None
            cur = self.parent(cur)
        return None

    def _backward_before(self, stmt: cst.CSTNode, func: Optional[cst.FunctionDef], opt: str) -> Optional[cst.CSTNode]:
        """The migrated backward (scale_loss statement) of `opt` nearest before `stmt` in `func`."""
        pos = self.ctx._positions
        line = pos[stmt].start.line if pos is not None and stmt in pos else 0
        best = None
        for anchor, f, opts in self._backwards:
            if f is not func or (opts and norm_code(_expr(opt)) not in opts):
                continue
            al = pos[anchor].start.line if pos is not None and anchor in pos else 0
            if al < line and (best is None or al > best[0]):
                best = (al, anchor)
        return best[1] if best else None

    def _next_step(self, stmt: cst.CSTNode, func: Optional[cst.FunctionDef], opt: Optional[str]):
        pos = self.ctx._positions
        line = pos[stmt].start.line if pos is not None and stmt in pos else 0
        best = None
        for s in self._steps:
            if s[2] is not func or (opt is not None and norm_code(_expr(s[3])) != norm_code(_expr(opt))):
                continue
            sl = pos[s[1]].start.line if pos is not None and s[1] in pos else 0
            if sl > line and (best is None or sl < best[0]):
                best = (sl, s)
        return best[1] if best else None

    def _report_apex_flag_guard(self, call: cst.CSTNode, sc: str, what: str) -> None:
        """A2A173 at an `if APEX_FOUND:` (a flag that still says "apex is installed") around the state call."""
        if not self.use_scaler:
            return
        guard = apex_flag_state.flag_guard(self, call)
        if guard is not None:
            self.report(guard[0], R.SCALER_STATE_UNDER_APEX_FLAG, f"the scaler's state is {what} here only when "
                        f"`{guard[1]}` (apex is installed): without apex a resumed fp16 run loses its loss scale; "
                        f"guard it with `{sc}.is_enabled()` or drop the guard")

    # -- other members --------------------------------------------------------------------------
    def plan_others(self) -> None:
        codes = {"master_params": R.UNSCALE.code, "state_dict": R.STATE_DICT.code, "load_state_dict": R.STATE_DICT.code,
                 "disable_casts": R.DISABLE_CASTS.code}
        for site in self.sites:
            if self.in_dropped(site.call):
                continue
            k, call = site.kind, site.call
            code = codes.get(k, R.GET_SCALE.code if k.startswith("_amp_state") else "")
            if code and (not self.ctx.enabled(code) or self.ctx.suppressed(call, code)):
                continue
            sc = self.scaler_expr()
            if k == "master_params":
                if id(call) in self._mp_done:
                    continue
                o = arg_by(call, 0, "optimizer")
                if o is None:
                    self.report(call, R.UNSUPPORTED, "`amp.master_params()` without an optimizer")
                    continue
                self.plan.replace_node[call] = _expr(f'(p for g in {_code(o.value)}.param_groups for p in g["params"])')
                self.report(call, R.UNSCALE, "`amp.master_params(opt)` -> the optimizer's parameters", fixed=True)
            elif k == "state_dict":
                if self.use_scaler:
                    self.plan.replace_node[call] = _expr(f"{sc}.state_dict()")
                    self.user_funcs.add(site.func)
                else:
                    self.plan.replace_node[call] = _expr("{}")
                self.report(call, R.STATE_DICT, f"`amp.state_dict()` -> `{sc}.state_dict()`", fixed=True)
                self._report_apex_flag_guard(call, sc, "saved")
            elif k == "load_state_dict":
                if self.use_scaler:
                    self.plan.replace_node[call.func] = _expr(f"{sc}.load_state_dict")
                    self.user_funcs.add(site.func)
                    self.report(call, R.STATE_DICT, f"`amp.load_state_dict(...)` -> `{sc}.load_state_dict(...)`", fixed=True)
                    self.report(call, R.OLD_CHECKPOINT, "checkpoints written by apex hold `loss_scaler0` state that "
                                                        "GradScaler rejects: convert them with `apex2amp "
                                                        "convert-checkpoint` (or convert at load time)")
                    self._report_apex_flag_guard(call, sc, "restored")
                else:
                    if isinstance(site.stmt, cst.SimpleStatementLine) and len(site.stmt.body) == 1:
                        self.plan.remove(site.stmt)
                        self.report(call, R.STATE_DICT, "bf16 has no scaler state: `amp.load_state_dict` removed",
                                    fixed=True)
                    else:
                        self.report(call, R.UNSUPPORTED, "`amp.load_state_dict` in an expression: remove it by hand")
            elif k == "disable_casts":
                self.plan.replace_node[call] = _expr(f'torch.autocast("{self.device}", enabled=False)')
                self.needs_torch = True
                self.report(call, R.DISABLE_CASTS, "`amp.disable_casts()` -> autocast disabled (add `.float()` to "
                                                   "inputs that must be fp32)", fixed=True)
            elif k.startswith("_amp_state"):
                if self._plan_get_scale(call):
                    continue
                self.report(call, R.INTERNALS, f"apex internal `{k}`: no native equivalent")
            elif k.startswith(("register_", "half_function", "float_function", "promote_function", "bfloat16_function")):
                self.report(call, R.REGISTER, f"`amp.{k}`: autocast has no function registry")
            elif k in ("initialize", "scale_loss"):
                continue
            else:
                self.report(call, R.INTERNALS, f"`amp.{k}` has no native equivalent")

    def _plan_get_scale(self, call: cst.Call) -> bool:
        f = call.func
        if isinstance(f, cst.Attribute) and f.attr.value == "loss_scale" and isinstance(f.value, cst.Subscript):
            base = f.value.value
            if isinstance(base, cst.Attribute) and base.attr.value == "loss_scalers" and self.use_scaler:
                sc = self.scaler_expr() if self.loss_scalers is None else \
                    f"{self.scaler_target()}[{_code(f.value.slice[0].slice.value)}]"  # the same index
                self.plan.replace_node[call] = _expr(f"{sc}.get_scale()")
                self.user_funcs.add(self.func_of(call))
                index = _code(f.value.slice[0].slice.value)
                self.report(call, R.GET_SCALE, f"`_amp_state.loss_scalers[{index}].loss_scale()` -> `{sc}.get_scale()`",
                            fixed=True)
                return True
        return False

    def report_decorators(self) -> None:
        table = self.table
        outer = self

        def visit_Decorator(n: cst.Decorator) -> None:
            d = n.decorator.func if isinstance(n.decorator, cst.Call) else n.decorator
            for q in table.qualified_names(d):
                if q.startswith(AMP + "."):
                    outer.report(n, R.REGISTER, f"`@{q.replace('apex.amp.', 'amp.')}`: autocast has no "
                                                f"function registry; use `torch.amp.custom_fwd` or a disabled "
                                                f"autocast region")

        self._replay(decorators=visit_Decorator)

    # -- scaler threading ---------------------------------------------------------------------------
    def plan_threading(self) -> None:
        if not self.use_scaler:
            return
        if self.scaler_is_attr and not self.scaler_global:
            amp_engine_override.override_base_steps(self, R.ENGINE_OVERRIDE)  # a base's step: override it
            self._refusal = amp_threading.check_holder_reach(self)
            if self._refusal:
                return
        if self.scaler_global or self.scaler_is_attr:
            # the scaler is reachable everywhere in this module: only calls into other modules need it
            for call in self._cross_module_calls():
                self.plan.transforms[call] = add_keyword(self._cross_params[id(call)], self.scaler_expr())
                self.report(call, R.THREADED, "the scaler is passed to a function that now takes it", fixed=True)
            return
        have: Set[Optional[cst.FunctionDef]] = {self.init_func} if self.has_init else set()
        funcs = self._functions()
        # call sites in this module of functions from other modules that take the scaler
        cross = self._cross_module_calls()
        needing: List[cst.FunctionDef] = []
        work = [f for f in self.user_funcs if f not in have]
        for call in cross:
            f = self.func_of(call)
            if f not in have and f not in work:
                work.append(f)  # type: ignore[arg-type]
        seen: Set[int] = set()
        while work:
            f = work.pop()
            if f is None:
                if not self.has_init:  # module-level code scales or steps, and no initialize here makes a scaler
                    self._threading_failed = ("the scaler is needed at module level, but this module has no "
                                              "`amp.initialize` to create it (it runs elsewhere)")
                    self._threading_failed_at = next((s.call for s in self.sites if s.func is None), None)
                    break
                self._threading_failed = "the scaler is needed at module level but created in a function"
                break
            if id(f) in seen or f in have:
                continue
            seen.add(id(f))
            outer = self.func_of(f)
            if outer is not None:
                # a nested function sees the scaler of the function around it: its signature stays
                self._closures.append(f)
                if outer not in have and id(outer) not in seen:
                    work.append(outer)
                continue
            needing.append(f)
            base = self._framework_base(f)
            if base is not None and not self._call_sites(f, funcs):
                self._threading_failed = (f"`{f.name.value}` needs the scaler, but it is a method of a subclass of "
                                          f"`{base}`, which may call it with its own fixed arguments (a framework "
                                          "hook), and nothing in this run calls it")
                self._threading_failed_at = f
                break
            self._refusal = amp_threading.value_use(self, f)
            if self._refusal is None and self.class_of(f) is not None:
                self._sites_of[id(f)], self._refusal = amp_threading.method_call_sites(self, f)
            if self._refusal is not None:
                break
            for call in self._sites_of.get(id(f)) or self._call_sites(f, funcs):
                caller = self.func_of(call)
                if id(call) in self._threaded_calls:
                    continue
                self._threaded_calls.add(id(call))
                self.plan.transforms[call] = add_keyword(self.scaler_ref, self.scaler_ref)
                if caller is None and self.has_init:
                    self._threading_failed = (f"`{f.name.value}` needs the scaler created in "
                                              f"`{self.init_func.name.value if self.init_func else 'the module'}`, "
                                              "but it is called from module level where the scaler does not exist")
                    break
                if caller is None:
                    self._threading_failed = (f"`{f.name.value}` needs a GradScaler, but it is called from module "
                                              "level and no scaler is created in this module")
                    self._threading_failed_at = call
                    break
                if caller not in have and caller is not None and id(caller) not in seen:
                    work.append(caller)
            if self._threading_failed:
                break
        if self._threading_failed or self._refusal:
            return
        for f in self._closures:
            self.report(f, R.SCALER_CLOSURE, f"`{f.name.value}` reads `{self.scaler_ref}` of the enclosing "
                                             "function; its signature is unchanged", fixed=True)
        for call in cross:
            if id(call) not in self._threaded_calls:
                self._threaded_calls.add(id(call))
                self.plan.transforms[call] = add_keyword(self._cross_params[id(call)], self.scaler_ref)
                self.report(call, R.THREADED, "`scaler=scaler` passed to a function that now takes the scaler",
                            fixed=True)
        for f in needing:
            if any(p.name.value == self.scaler_ref for p in all_params(f)):
                continue
            self.plan.transforms[f] = add_param(self.scaler_ref)
            module_level = isinstance(self.parent(f), cst.Module)
            if module_level:
                self.exported_funcs.append(f.name.value)
            elif self.class_of(f) is not None:
                self.exported_methods.append(f.name.value)
            if self._sites_of.get(id(f)) or self._call_sites(f, funcs):
                self.report(f, R.THREADED, f"`{f.name.value}` now takes the `{self.scaler_ref}` parameter; call sites "
                                           "in this run pass it", fixed=True)
            elif module_level:
                self.report(f, R.THREADED, f"`{f.name.value}` now takes the `{self.scaler_ref}` parameter; calls from "
                                           "other files of this run pass it, calls from code outside the run must "
                                           "pass the GradScaler too", fixed=True)
            else:
                self.report(f, R.THREADED, f"method `{f.name.value}` now takes a `{self.scaler_ref}` parameter but no "
                                           f"caller was found in this run: pass the GradScaler "
                                           f"(`{self.scaler_ref}={self.scaler_ref}`) where it is called")

    def _framework_base(self, f: cst.FunctionDef) -> Optional[str]:
        """The imported base class from another package (mmcv's `OptimizerHook`, torch's `Optimizer`,
        Lightning's `LightningModule`) of the class `f` is a method of, or None."""
        cls = self.class_of(f)
        if cls is None:
            return None
        mine = self.ctx.module_name.split(".")[0]
        for b in cls.bases:
            if b.keyword is not None:
                continue
            for q in sorted(self.table.qualified_names(b.value)):
                if q.split(".")[0] != mine:
                    return q
        return None

    def _functions(self) -> Dict[str, List[cst.FunctionDef]]:
        out: Dict[str, List[cst.FunctionDef]] = {}

        def visit_FunctionDef(n: cst.FunctionDef) -> None:
            out.setdefault(n.name.value, []).append(n)

        self._replay(functions=visit_FunctionDef)
        return out

    def _call_sites(self, f: cst.FunctionDef, funcs: Dict[str, List[cst.FunctionDef]]) -> List[cst.Call]:
        name = f.name.value
        is_method = self.class_of(f) is not None
        sites: List[cst.Call] = []

        def visit_Call(n: cst.Call) -> None:
            fn = n.func
            if not is_method and isinstance(fn, cst.Name) and fn.value == name:
                sites.append(n)
            elif is_method and isinstance(fn, cst.Attribute) and fn.attr.value == name and \
                    isinstance(fn.value, cst.Name) and fn.value.value == "self":
                sites.append(n)

        self._replay(calls=visit_Call)
        return sites

    def _helper_funcs(self) -> Dict[int, Tuple[int, int]]:
        """id(function) -> (loss slot, optimizer slot) of this module's backward helpers for other modules:
        no `amp.initialize` here, and every `scale_loss` in a module-level function taking both the loss
        and the optimizer, which it does not step (codemods/backward_helpers.py)."""
        cached = getattr(self, "_helpers_cache", None)
        if cached is not None:
            return cached
        out: Dict[int, Tuple[int, int]] = {}
        scales = [x for x in self.sites if x.kind == "scale_loss" and not self.in_dropped(x.call)]
        kinds = {x.kind for x in self.sites if not self.in_dropped(x.call)}
        key = facts_key(self.ctx.path, self.ctx.module_name) if self.ctx.module_name else ""
        if key and scales and kinds == {"scale_loss"} and self.use_scaler and \
                not self.ctx.facts.extra.get(backward_helpers.HELD + key):
            for x in scales:
                loss, opt = arg_by(x.call, 0, "loss"), arg_by(x.call, 1, "optimizers")
                slots = backward_helpers.helper_slots(x.func, loss.value if loss else None,
                                                      opt.value if opt else None)
                # any `.step` in the module: it steps here, not a helper for other modules
                if slots is None or not isinstance(self.parent(x.func), cst.Module) or \
                        "step" in self.index.attr_values:
                    out = {}
                    break
                out[id(x.func)] = slots
        self._helpers_cache = out
        return out

    def _publish_helpers(self) -> None:
        helpers = self._helper_funcs()
        funcs = {id(x.func): x.func for x in self.sites if x.kind == "scale_loss"}
        named = {funcs[i].name.value: slots for i, slots in helpers.items()}
        backward_helpers.publish(self.ctx.exported, facts_key(self.ctx.path, self.ctx.module_name), named)
        for i in helpers:
            self.user_funcs.add(funcs[i])
            self.report(funcs[i], R.BACKWARD_HELPER, f"`{funcs[i].name.value}` is a backward helper: the modules of "
                                                     "this run that call it pass the scaler, run the loss they pass "
                                                     "under autocast and step with `scaler.step` + `scaler.update`",
                        fixed=True)

    def plan_helper_calls(self) -> None:
        """Calls of other modules' backward helpers: the loss passed in gets its autocast region here, and the
        call counts as the backward of the optimizer passed in (its step and clip migrate here)."""
        if not self.use_scaler or not self.ctx.facts.extra:
            return
        helpers = backward_helpers.known(self.ctx.facts, _visible_modules(self.ctx.facts, self.ctx))
        if not helpers:
            return
        table = self.table
        found: List[Tuple[cst.Call, Tuple[int, int]]] = []

        def visit_Call(n: cst.Call) -> None:
            hit = sorted(table.qualified_names(n.func) & set(helpers))
            if hit:
                found.append((n, helpers[hit[0]]))

        self._replay(calls=visit_Call)
        for call, (loss_slot, opt_slot) in found:
            loss = backward_helpers.call_arg(call, loss_slot, "loss")
            opt = backward_helpers.call_arg(call, opt_slot, "optimizer")
            stmt, func = self.stmt_of(call), self.func_of(call)
            if loss is None or opt is None or self.in_dropped(call):
                continue
            self.plan_region(stmt, loss, func)
            self._backwards.append((stmt, func, {norm_code(opt)}))
            self.user_funcs.add(func)

    def _cross_module_calls(self) -> List[cst.Call]:
        facts: RepoFacts = self.ctx.facts
        if not facts.scaler_functions:
            return []
        targets = {f"{m}.{fn}": (facts.scaler_params.get(key, "scaler"), facts.scaler_slots.get(key, {}).get(fn))
                   for key, (m, fns) in _visible_modules(facts, self.ctx).items() for fn in fns}
        out: List[cst.Call] = []
        table = self.table
        params = self._cross_params

        def visit_Call(n: cst.Call) -> None:
            hit = table.qualified_names(n.func) & set(targets)
            if hit:
                param, slot = targets[sorted(hit)[0]]
                if not any(a.keyword is not None and a.keyword.value == param for a in n.args) \
                        and not _fills_slot(n, slot):
                    params[id(n)] = param
                    out.append(n)

        self._replay(calls=visit_Call)
        return out

    # -- driver ---------------------------------------------------------------------------------
    def run(self) -> None:
        self._regions: List[Tuple[cst.CSTNode, int, int]] = []
        self._steps: List = []
        self.loss_scalers: Optional[amp_losses.LossScalers] = None
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
        self.collect()
        self.has_scale_loss = any(s.kind == "scale_loss" for s in self.sites)
        if not self.sites:
            if self.ctx.facts.scaler_functions and self.use_scaler:
                # a module without amp that calls helpers which now take the scaler
                self.plan_threading_only()
            self.report_decorators()  # `@amp.float_function` may be the module's only apex use
            return
        self._pick_scaler_name()
        self._take_scaler_from_subclass()
        if not all(self.ctx.enabled(c) for c in CORE_CODES):
            self._abort_all(leftovers=False)  # the sites are left to rules this run's selection leaves out
            return
        held = self._held_back()
        if held:
            self.report(held, R.LEFTOVER, "the amp migration of this module is held back: a core site is "
                                          "suppressed (`# apex2amp: ignore`) or its rule is not selected")
            self._abort_all()
            return
        keeping = self.ctx.facts.extra.get(CALLERS_KEEP_AMP, {}).get(facts_key(self.ctx.path, self.ctx.module_name)) \
            if self.ctx.module_name else None
        if keeping:
            self.report(self.sites[0].call, R.LEFTOVER, f"`{keeping[0]}` calls this module's functions and keeps its "
                                                        "apex amp code: these functions cannot take the scaler alone; "
                                                        f"fix `{keeping[0]}`'s findings, then rerun")
            self._abort_all()
            return
        self.drop_apex_branches()
        amp_dead_modes.drop_unselectable_apex_branches(self, R.UNSELECTABLE_APEX_MODE)  # `self.backend == "apex"`
        live = [s for s in self.sites if not self.in_dropped(s.call)]
        inits = [s for s in live if s.kind == "initialize"]
        kept = self._imported_unmigrated_amp() if inits else None
        if kept:
            for s in inits:
                self.report(s.call, R.UNSUPPORTED, f"`{kept}` keeps apex amp code this run could not migrate (see "
                                                   "its findings) and relies on the state `amp.initialize` sets up: "
                                                   "migrate the two together by hand, then rerun")
            self.abort = True
        reinits = amp_reinit.removable_reinitializations(self, inits) if len(inits) > 1 and not self.abort else []
        for s in reinits:  # a restore that re-runs initialize before amp.load_state_dict (codemods/amp_reinit.py)
            inits.remove(s)
            live.remove(s)
            self.plan.remove(s.stmt)
            self.report(s.call, R.REINITIALIZE, "second `amp.initialize` (before `amp.load_state_dict`) removed: "
                                                "the GradScaler made at the first one is the one the load restores",
                        fixed=True)
        private = amp_private.private_state_use(self) if inits and not self.abort else None
        if private is not None:
            self.report(private[0], R.INTERNALS, f"apex internal `{private[1]}` exists only after `amp.initialize`: "
                                                 "no native equivalent")
            for s in inits:
                self.report(s.call, R.UNSUPPORTED, f"this module reads apex state `{private[1]}` that only "
                                                   "`amp.initialize` sets up: migrate the two together by hand "
                                                   "(e.g. `GradScaler(init_scale=...)`), then rerun")
            self.abort = True
        if len(inits) > 1 and not self.abort:
            for s in inits:
                self.report(s.call, R.UNSUPPORTED, "several `amp.initialize` calls in one module: migrate by hand")
            self.abort = True
        for s in inits:
            scope = next((a for a in self.index.ancestors(s.call) if isinstance(a, (cst.FunctionDef, cst.ClassDef))),
                         None)
            if isinstance(scope, cst.ClassDef) and not self.abort:
                # a scaler made there would be a class attribute, which the methods cannot read by its name
                self.report(s.call, R.UNSUPPORTED, "`amp.initialize` in a class body: migrate by hand")
                self.abort = True
        self.loss_scalers = amp_losses.plan(self, live) if not self.abort else None
        for s in inits:
            if not self.abort:
                self.plan_initialize(s)
        if inits and not self.use_scaler and self.cond is not None and self.ctx.module_name:
            # bf16: no scaler carries this switch to the regions of other modules (A2A174)
            self.ctx.exported.extra.setdefault(BF16_SWITCHED, []).append(self.ctx.module_name)
        regions: List[Tuple[cst.CSTNode, cst.BaseExpression, Optional[cst.FunctionDef]]] = []
        for s in live:
            if s.kind == "scale_loss" and not self.abort:
                r = self.plan_scale_loss(s)
                if r is not None:
                    regions.append((r[0], r[1], s.func))
        if self.abort:
            self._abort_all()
            return
        if not self.has_init and self.has_scale_loss:
            self.cond = None
        for anchor, loss, func in regions:
            self.plan_region(anchor, loss, func)
        self.plan_helper_calls()
        self.plan_steps()
        self.plan_clipping()
        self.plan_others()
        self.report_decorators()
        if not checkpoint_pairs.plan_pairs(self):
            return
        if self._unsafe:
            self.report(self.sites[0].call, R.UNSUPPORTED, f"{self._unsafe}: this module's amp code is left as it "
                                                           "is; fix the findings above by hand (or restructure) "
                                                           "and rerun")
            self._abort_all()
            return
        self.plan_threading()
        if self._refusal is not None:
            self.report(self._refusal[0], R.SIGNATURE_KEPT, f"{self._refusal[1]}; this module's amp code is left "
                                                            "as it is")
            self._abort_all()
            candidates = amp_threading.candidate_classes(self) if not self._no_region else []
            if candidates:
                self.ctx.exported.attr_candidates[self.ctx.module_name] = candidates
            return
        if self._threading_failed:
            node = self._threading_failed_at or self.init_func or self.module
            self.report(node, R.UNSUPPORTED, f"{self._threading_failed}: return the scaler from the function that "
                                             "creates it and pass it along (or create it where it is used), then "
                                             "rerun; this module's amp code is left as it is")
            self._abort_all()
            return
        if self._no_region:
            self.report(self.sites[0].call, R.UNSUPPORTED, f"{self._no_region}: this module's amp code is left as it "
                                                           "is; fix the findings above by hand (or restructure) "
                                                           "and rerun")
            self._abort_all()
            return
        init = next((s for s in live if s.kind == "initialize"), None)
        if init is not None and self.use_scaler and not self.scaler_global and not self.scaler_is_attr and \
                all(s.kind == "initialize" for s in live) and not self._steps and not self._threaded_calls:
            # nothing here scales, steps or passes the scaler on: the backward and the step are in code
            # this run does not rewrite, which still needs the amp state
            self.report(init.call, R.STEP_MISSING, "no backward or step of the amp optimizer in this module and no "
                                                   "function of this run takes the scaler: the training step lives "
                                                   "elsewhere (another module or a library) and still needs "
                                                   "`amp.initialize`; migrate the two together")
            self._abort_all(publish=False)  # pass 2 may find the function that takes the scaler

    def plan_threading_only(self) -> None:
        cross = self._cross_module_calls()
        for call in cross:
            self.report(call, R.THREADED, "this call now needs `scaler=...`: pass the GradScaler of this run")

    def _take_scaler_from_subclass(self) -> None:
        """A mixin or base (no `amp.initialize` here) of classes of the run that keep the scaler on `self`:
        its methods read `self.<attr>` (A2A128)."""
        attr = amp_threading.rescued(self.ctx.facts, self.ctx.module_name)
        if attr is None or amp_threading.candidate_classes(self) != self.ctx.facts.attr_candidates[
                self.ctx.module_name]:
            return
        self.scaler_is_attr, self.scaler_ref = True, attr
        for c in self.index.classes:
            if c.name.value in self.ctx.facts.attr_candidates[self.ctx.module_name]:
                self.report(c, R.SCALER_ON_OBJECT, f"`{c.name.value}` is a base of classes that keep the scaler on "
                                                   f"`self`: its methods read `self.{attr}` (every class using it "
                                                   "must hold the scaler too)", fixed=True)

    def _imported_unmigrated_amp(self) -> Optional[str]:
        """A module this one imports whose amp code pass 1 left unmigrated (matched by its last name
        component, so an import spelled from another root still counts); a mixin module whose classes
        read the scaler of this run's subclasses in pass 2 (`amp_threading.rescued`) does not count."""
        mine = self.ctx.module_name
        # a helper held back because this very module keeps its amp code: this module's own findings say why
        held_for_me = {k.rpartition("::")[2] for k, callers in self.ctx.facts.extra.get(CALLERS_KEEP_AMP, {}).items()
                       if mine in callers}
        kept = [m for m in self.ctx.facts.unmigrated_amp if m != mine and m not in held_for_me
                and amp_threading.rescued(self.ctx.facts, m) is None]
        if not kept:
            return None
        # a name under `apex` is NVIDIA apex's here (a module whose `apex` is a local file never gets
        # this far: migrate/apex_shadow.py), not a module of the run that happens to be called apex
        imported = {part for qs in self.table.bindings.values() for q in qs
                    if q != "apex" and not q.startswith("apex.") for part in q.split(".")}
        for m in kept:
            if m.rpartition(".")[2] in imported:
                return m
        return None

    def _held_back(self) -> Optional[cst.CSTNode]:
        """A reason to leave the whole module alone: the coordinated rewrite cannot be done in part."""
        ctx = self.ctx
        if not all(ctx.enabled(c) for c in CORE_CODES):
            return self.sites[0].call
        for s in self.sites:
            code = {"initialize": R.INITIALIZE.code, "scale_loss": R.SCALE_LOSS.code}.get(s.kind)
            if code and (ctx.suppressed(s.stmt, code) or ctx.suppressed(s.call, code)):
                return s.call
        return None

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


class ApexAmpToTorchAmp(Codemod):
    """apex.amp -> torch.amp autocast + GradScaler."""

    NAME = "amp"
    DESCRIPTION = "apex.amp (initialize, scale_loss, steps, master_params, state dicts) -> torch.amp"
    CODES = tuple(f"A2A1{i:02d}" for i in range(1, 25)) + ("A2A126", "A2A127", "A2A128", "A2A130", "A2A131",
                                                           "A2A135", "A2A136", "A2A137", "A2A140", "A2A141",
                                                           "A2A142", "A2A145", "A2A147", "A2A173", "A2A174",
                                                           "A2A416", "A2A417", "A2A418")
    TOKENS, WORDS = (b"scaler",), (b"apex",)  # the word: not the apex of `# apex2amp: ignore`
    PUBLISHES_FACTS = True  # the functions that now take the scaler, for call sites in other files

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        a = _Analysis(wrapper, ctx)
        a.run()
        if a.exported_funcs and ctx.module_name:
            key = facts_key(ctx.path, ctx.module_name)
            ctx.exported.scaler_functions.setdefault(key, []).extend(a.exported_funcs)
            ctx.exported.scaler_params[key] = a.scaler_ref
        if a.plan and ctx.module_name:
            if a.exported_methods:  # the engine checks no other file references them (engine._foreign_refs)
                ctx.exported.scaler_methods[facts_key(ctx.path, ctx.module_name)] = list(a.exported_methods)
            if a.scaler_is_attr and a.has_init:
                ctx.exported.scaler_bases.update(amp_threading.published_bases(a))
        if not a.plan:
            return wrapper.module
        new = apply_plan(wrapper.module, a.plan)
        if a.needs_torch:
            new = ensure_imports(new, ["torch"])
        if a.needs_forward_helper:
            new = add_helper_function(new, FORWARD_HELPER, FORWARD_HELPER_CODE)
        return new


# -- small helpers -------------------------------------------------------------------------------

def _unwrapped(f: cst.BaseExpression) -> Optional[str]:
    """`model` for `model.module` / `model.module.forward` (a DDP or DataParallel's wrapped model)."""
    if isinstance(f, cst.Attribute) and f.attr.value == "forward":
        f = f.value
    if not (isinstance(f, cst.Attribute) and f.attr.value == "module"):
        return None
    while isinstance(f, cst.Attribute) and f.attr.value == "module":
        f = f.value
    return norm_code(f)


def _is_main_guard(test: cst.BaseExpression) -> bool:
    return "__name__" in names_read(test)


def _empty_sequence(node: cst.BaseExpression) -> bool:
    """`[]` or `()`."""
    return isinstance(node, (cst.List, cst.Tuple)) and not node.elements


def _tuple_parts(t: cst.BaseExpression) -> Optional[List[cst.BaseExpression]]:
    if isinstance(t, (cst.Tuple, cst.List)):
        return [e.value for e in t.elements]
    return None


def _flatten(e: cst.BaseExpression) -> List[cst.BaseExpression]:
    if isinstance(e, (cst.Tuple, cst.List)):
        out: List[cst.BaseExpression] = []
        for el in e.elements:
            out.extend(_flatten(el.value))
        return out
    return [e]


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



def _differs_only_in(stmt: cst.CSTNode, other: cst.CSTNode, node: cst.CSTNode) -> bool:
    """Whether `other` is `stmt` with `node` replaced by some other expression (e.g. master params vs
    `model.parameters()`), compared without whitespace."""
    a, b, n = norm_code(stmt), norm_code(other), norm_code(node)
    i = a.find(n)
    if i < 0:
        return False
    prefix, suffix = a[:i], a[i + len(n):]
    return b.startswith(prefix) and b.endswith(suffix) and len(b) > len(prefix) + len(suffix) - 1 \
        and "amp." not in b


def _fills_slot(call: cst.Call, slot: Optional[int]) -> bool:
    """Whether `call` may already pass a helper's scaler parameter by position (`slot`, from
    `RepoFacts.scaler_slots`; None for the functions this run changes, which take it last)."""
    if slot is None:
        return False
    if any(a.star for a in call.args):
        return True  # *args or **kwargs may hold it
    return slot >= 0 and sum(1 for a in call.args if a.keyword is None) > slot


def _visible_modules(facts: RepoFacts, ctx: FileContext) -> Dict[str, Tuple[str, List[str]]]:
    """Modules of other files whose functions now take the scaler, as this file can import them:
    same import root first; another root only when no other root has a module of that name."""
    mine = module_root(ctx.path, ctx.module_name)
    by_name: Dict[str, List[Tuple[str, str, List[str]]]] = {}
    for key, fns in facts.scaler_functions.items():
        root, _, name = key.rpartition("::")
        by_name.setdefault(name, []).append((key, root, fns))
    out: Dict[str, Tuple[str, List[str]]] = {}
    for name, entries in by_name.items():
        if name == ctx.module_name and any(root == mine for _, root, _ in entries):
            continue  # this very file
        same = [e for e in entries if e[1] == mine]
        pick = same or (entries if len(entries) == 1 else [])
        for key, _, fns in pick:
            out[key] = (name, fns)
    return out
