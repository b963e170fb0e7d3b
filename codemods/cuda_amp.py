"""Deprecated `torch.cuda.amp.*` (and `torch.cpu.amp.*`) names -> `torch.amp` / `torch.autocast`.

`torch.cuda.amp.autocast(enabled, dtype, cache_enabled)` takes `enabled` first while
`torch.autocast(device_type, dtype, enabled, cache_enabled)` takes the device first, so positional
arguments become keywords. `GradScaler` gains the device as its first argument. `custom_fwd` and
`custom_bwd` need `device_type=` (torch >= 2.4). Every import style is handled; an `autocast` name
used without being called (e.g. stored and called later without a device) is reported instead.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from . import templates
from .base import FIX, WARNING, Codemod, FileContext, rule
from .edits import EditPlan, apply_plan
from .importing import ensure_imports
from .index import ModuleIndex
from .names import ImportTable, dotted_name, has_star_args

rule("A2A150", "cuda-autocast-to-torch-autocast", "`torch.cuda.amp.autocast(...)` -> `torch.autocast(\"cuda\", ...)`",
     fixes=True, severity=FIX,
     why="""
`torch.cuda.amp.autocast` is deprecated since torch 2.4 (FutureWarning). Its first positional parameter
is `enabled`, while `torch.autocast`'s is the device type, so positional arguments are turned into
keywords: `torch.cuda.amp.autocast(False)` means `torch.autocast("cuda", enabled=False)`.""",
     before="""
from torch.cuda.amp import autocast
with autocast(args.amp):
    out = model(x)""",
     after="""
from torch.amp import autocast
with autocast("cuda", enabled=args.amp):
    out = model(x)""")

rule("A2A151", "cuda-gradscaler-to-torch-amp", "`torch.cuda.amp.GradScaler(...)` -> `torch.amp.GradScaler(\"cuda\", ...)`",
     fixes=True, severity=FIX,
     why="""
`torch.cuda.amp.GradScaler(...)` is exactly `torch.amp.GradScaler("cuda", ...)` (torch >= 2.3) and warns
from torch 2.4 on. With `--min-torch` below 2.3 the old spelling is kept.""",
     before="""
import torch

scaler = torch.cuda.amp.GradScaler(init_scale=1024)""",
     after="""
import torch

scaler = torch.amp.GradScaler("cuda", init_scale=1024)""")

rule("A2A152", "cuda-custom-fwd-to-torch-amp", "`torch.cuda.amp.custom_fwd/custom_bwd` -> `torch.amp.custom_fwd/custom_bwd(device_type=\"cuda\")`",
     fixes=True, severity=FIX,
     why="""
torch 2.4 moved `custom_fwd`/`custom_bwd` to `torch.amp` with a required keyword `device_type`. The
bare decorator form becomes a call with `device_type="cuda"`.""",
     before="""
import torch


class Scale(torch.autograd.Function):
    @staticmethod
    @torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, x):
        return x * 2""",
     after="""
import torch


class Scale(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(ctx, x):
        return x * 2""")

rule("A2A153", "cuda-amp-name-not-called", "deprecated `torch.cuda.amp` name used without a call: migrate by hand",
     fixes=False, severity=WARNING,
     why="""
An `autocast` class stored in a variable or passed around is later called without a device type;
`torch.amp.autocast` needs one, so the name cannot be swapped mechanically.""",
     before="ctx = torch.cuda.amp.autocast if use_amp else contextlib.nullcontext",
     after='ctx = functools.partial(torch.autocast, "cuda") if use_amp else contextlib.nullcontext')

_KINDS = {"autocast": "A2A150", "GradScaler": "A2A151", "custom_fwd": "A2A152", "custom_bwd": "A2A152"}
_AUTOCAST_POS = ("enabled", "dtype", "cache_enabled")


def _device_of(qualified: str) -> Optional[Tuple[str, str]]:
    """('cuda'|'cpu', member) for a deprecated device-specific amp name."""
    for dev in ("cuda", "cpu"):
        prefix = f"torch.{dev}.amp."
        if qualified.startswith(prefix):
            member = qualified[len(prefix):]
            if member in _KINDS:
                return dev, member
    return None


class DeprecatedCudaAmpToTorchAmp(Codemod):
    """Rewrite deprecated device-specific amp names to `torch.amp` / `torch.autocast`."""

    NAME = "cuda_amp"
    DESCRIPTION = "deprecated torch.cuda.amp names -> torch.amp"
    CODES = ("A2A150", "A2A151", "A2A152", "A2A153")
    TOKENS = (b"cuda.amp", b"cpu.amp", b"torch.cuda import amp", b"torch.cpu import amp")

    def _allowed(self, member: str, ctx: FileContext) -> bool:
        if member == "autocast":
            return True
        if member == "GradScaler":
            return ctx.options.min_torch >= (2, 3)
        return ctx.options.min_torch >= (2, 4)

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        table = ImportTable.of(module, ctx.module_name)
        index = ModuleIndex.of(module)
        deprecated_locals = [n for n in table.bindings if any(_device_of(q + ".autocast") or q in (
            "torch.cuda.amp", "torch.cpu.amp") or _device_of(q) for q in table.bindings[n])]
        if "amp" not in index.attr_values and not deprecated_locals:
            return module  # no `torch.cuda.amp.X` chain and no deprecated name imported
        plan = EditPlan()
        blocked_locals: Set[str] = set()
        uses: List[Tuple[cst.CSTNode, str, str, Optional[cst.Call], bool]] = []

        decorator_targets = {id(d.decorator) for d in index.decorators}
        calls: Dict[int, cst.Call] = {id(c.func): c for c in index.calls}

        def find(node: cst.CSTNode) -> Tuple[cst.CSTNode, ...]:
            """Outermost attribute chains and names outside imports (a chain is checked whole)."""
            t = type(node)
            if t is cst.Import or t is cst.ImportFrom:
                return (node,)
            if t is cst.Attribute or t is cst.Name:
                for q in table.qualified_names(node):  # type: ignore[arg-type]
                    dm = _device_of(q)
                    if dm:
                        uses.append((node, dm[0], dm[1], None, id(node) in decorator_targets))
                        break
                return (node,) if t is cst.Attribute else ()
            return ()

        index.walk_pruned(find)
        need_torch = False

        def head_local(node: cst.CSTNode) -> Optional[str]:
            head = (dotted_name(node) or "").split(".")[0]  # type: ignore[arg-type]
            return None if table.qualify(head) == {"torch"} else head

        def problem(node: cst.CSTNode, dev: str, member: str, is_decorator: bool) -> Optional[str]:
            code = _KINDS[member]
            if not self._allowed(member, ctx):
                return ""
            if not ctx.enabled(code) or ctx.suppressed(node, code):
                local = head_local(node)
                if local:
                    kept_by_user.add(local)  # its import may split from the names that do move
                return ""
            call = calls.get(id(node))
            head = dotted_name(node) or ""
            if call is None:
                if member in ("custom_fwd", "custom_bwd") and is_decorator:
                    return None
                if member == "autocast":
                    return (f"`{head}` is used without a call; torch.amp's autocast needs a device type: "
                            f"pass `\"{dev}\"` where it is called")
                return None if head_local(node) else ""
            if has_star_args(call):
                return f"`{head}(*args)`: positional order differs in torch.amp; migrate by hand"
            if member in ("custom_fwd", "custom_bwd") and call.args and call.args[0].keyword is None:
                return "positional argument to custom_fwd/custom_bwd: migrate by hand"
            return None

        kept_by_user: Set[str] = set()
        problems = {id(u[0]): problem(u[0], u[1], u[2], u[4]) for u in uses}
        for node, dev, member, _, _ in uses:
            msg = problems[id(node)]
            if msg is not None:
                local = head_local(node)
                if local:
                    blocked_locals.add(local)
                if msg:
                    ctx.report(node, "A2A153", msg)
        splittable = [g for g in _import_groups(index) if g not in _import_groups(index, splittable=False)]
        for group in _import_groups(index):
            # an import moves as a whole, unless only names a comment or the selection keeps stay behind
            # and it can be split in two
            if blocked_locals & group and (group not in splittable or blocked_locals & group - kept_by_user):
                blocked_locals |= group
        for node, dev, member, _, is_decorator in uses:
            code = _KINDS[member]
            local = head_local(node)
            if problems[id(node)] is not None or (local and local in blocked_locals):
                continue
            call = calls.get(id(node))
            head = dotted_name(node) or ""
            new_func: cst.BaseExpression = node  # type: ignore[assignment]
            if local is None:
                new_func = templates.expression("torch.autocast" if member == "autocast" else f"torch.amp.{member}")
                need_torch = True
            if call is None and member not in ("custom_fwd", "custom_bwd"):
                continue  # an imported GradScaler name used as a value: the import change covers it
            if member in ("custom_fwd", "custom_bwd"):
                kw = cst.Arg(cst.SimpleString(f'"{dev}"'), keyword=cst.Name("device_type"),
                             equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
                if call is None:
                    plan.replace_node[node] = cst.Call(func=new_func, args=[kw])
                else:
                    args = list(call.args)
                    if any(a.keyword and a.keyword.value == "device_type" for a in args):
                        continue
                    plan.replace_node[call] = call.with_changes(func=new_func, args=[_with_comma(kw, bool(args))] + args)
                ctx.report(node, code, f"`{head}` -> `torch.amp.{member}(device_type=\"{dev}\")`", fixed=True)
                continue
            assert call is not None
            dev_arg = cst.Arg(cst.SimpleString(f'"{dev}"'))
            args = list(call.args)
            if member == "autocast":
                new_args: List[cst.Arg] = []
                pos = 0
                for a in args:
                    if a.keyword is None and pos < len(_AUTOCAST_POS):
                        a = a.with_changes(keyword=cst.Name(_AUTOCAST_POS[pos]),
                                           equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
                        pos += 1
                    new_args.append(a)
                args = new_args
            plan.replace_node[call] = call.with_changes(func=new_func, args=[_with_comma(dev_arg, bool(args))] + args)
            target = f'torch.autocast("{dev}", ...)' if member == "autocast" else f'torch.amp.GradScaler("{dev}", ...)'
            ctx.report(node, code, f"`{head}(...)` -> `{target}`", fixed=True)
        # imports that bring deprecated names in by name
        self._plan_imports(index, plan, blocked_locals)
        if not plan:
            return module
        new = apply_plan(module, plan)
        if need_torch:
            new = ensure_imports(new, ["torch"])
        return new

    def _plan_imports(self, index: ModuleIndex, plan: EditPlan, blocked: Set[str]) -> None:
        """Imports that bring deprecated names in by name now import them from torch.amp."""
        for node in index.imports:
            if isinstance(node, cst.ImportFrom):
                _plan_import_from(node, plan, blocked, _own_line(node, index))
            else:
                _plan_import(node, plan, blocked)


def _own_line(node: cst.ImportFrom, index: ModuleIndex) -> Optional[cst.SimpleStatementLine]:
    """The statement line that holds only `node` (None when it shares its line)."""
    line = index.parent(node)
    if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
        return line
    return None


def _split_import_from(node: cst.ImportFrom, line: cst.SimpleStatementLine, blocked: Set[str],
                       plan: EditPlan) -> None:
    """`from torch.cuda.amp import a, b` where `b` stays (suppressed or deselected): `a` moves to
    torch.amp on a line of its own, `b` keeps its import (and the line's comment)."""
    def local(a: cst.ImportAlias) -> str:
        return a.asname.name.value if a.asname else dotted_name(a.name)  # type: ignore[union-attr,return-value]

    def names(aliases: List[cst.ImportAlias]) -> List[cst.ImportAlias]:
        if node.lpar:  # in parentheses each name keeps its comma, and the comment after it
            last = aliases[-1]
            if isinstance(last.comma, cst.MaybeSentinel):
                return aliases[:-1] + [last.with_changes(comma=cst.Comma())]
            return aliases
        return [a.with_changes(comma=cst.MaybeSentinel.DEFAULT) if k == len(aliases) - 1 else a
                for k, a in enumerate(aliases)]

    aliases = list(node.names)  # type: ignore[arg-type]
    moved = [a for a in aliases if local(a) not in blocked]
    stays = [a for a in aliases if local(a) in blocked]
    new_import = node.with_changes(module=templates.expression("torch.amp"), names=names(moved))
    old_import = node.with_changes(names=names(stays))
    plan.replace_stmt[line] = [
        line.with_changes(body=[new_import], trailing_whitespace=cst.TrailingWhitespace()),
        line.with_changes(body=[old_import], leading_lines=[]),
    ]


def _plan_import_from(node: cst.ImportFrom, plan: EditPlan, blocked: Set[str],
                      line: Optional[cst.SimpleStatementLine] = None) -> None:
    if isinstance(node.names, cst.ImportStar) or node.relative:
        return
    mod = dotted_name(node.module) if node.module else ""
    if mod in ("torch.cuda", "torch.cpu"):
        names = [a for a in node.names if dotted_name(a.name) == "amp"]
        if names and len(names) == len(node.names):
            local = (names[0].asname.name.value if names[0].asname else "amp")  # type: ignore[union-attr]
            if local not in blocked:
                plan.replace_node[node] = node.with_changes(module=cst.Name("torch"))
        return
    if mod not in ("torch.cuda.amp", "torch.cpu.amp"):
        return
    locals_ = [(a.asname.name.value if a.asname else dotted_name(a.name)) for a in node.names]  # type: ignore[union-attr]
    if any(l in blocked for l in locals_):
        if line is not None and not all(l in blocked for l in locals_):
            _split_import_from(node, line, blocked, plan)
        return
    plan.replace_node[node] = node.with_changes(module=templates.expression("torch.amp"))


def _plan_import(node: cst.Import, plan: EditPlan, blocked: Set[str]) -> None:
    new_names = []
    changed = False
    for a in node.names:
        full = dotted_name(a.name)
        if full in ("torch.cuda.amp", "torch.cpu.amp") and a.asname is not None:
            local = a.asname.name.value  # type: ignore[union-attr]
            if local not in blocked:
                a = a.with_changes(name=templates.expression("torch.amp"))
                changed = True
        new_names.append(a)
    if changed:
        plan.replace_node[node] = node.with_changes(names=new_names)


def _with_comma(arg: cst.Arg, more: bool) -> cst.Arg:
    if more:
        return arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return arg


def _import_groups(index: ModuleIndex, splittable: bool = True) -> List[Set[str]]:
    """Local names bound together by one deprecated-amp import statement (they move together);
    `splittable=False`: only those of statements that cannot be split in two (`_split_import_from`)."""
    groups: List[Set[str]] = []
    for node in index.imports:
        if not isinstance(node, cst.ImportFrom) or isinstance(node.names, cst.ImportStar):
            continue
        if not splittable and _own_line(node, index) is not None and not node.relative:
            continue
        mod = dotted_name(node.module) if node.module else ""
        if mod in ("torch.cuda.amp", "torch.cpu.amp", "torch.cuda", "torch.cpu"):
            groups.append({(a.asname.name.value if a.asname else dotted_name(a.name))  # type: ignore[union-attr,misc]
                           for a in node.names})
    return groups
