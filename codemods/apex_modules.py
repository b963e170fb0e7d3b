"""apex.optimizers, apex.normalization, apex.contrib and apex.fp16_utils helpers -> torch equivalents.

Fused optimizers become `torch.optim` classes with their arguments normalised by the *apex*
signature (positional orders differ), fused norms become `torch.nn` modules or functionals with the
eps apex used, `to_python_float(x)` becomes `x.item()`, and apex modules with no native twin get a
finding naming the nearest option. Names are resolved through imports (star imports included).
FP16_Optimizer and the fp16_utils model casts belong to `manual_scaling` (one pattern, one codemod).

This module runs the rewrites over the calls and class bases that name apex; each lives with its
rules: fused optimizers (codemods/fused_optimizers.py), fused norms (fused_norms.py), layer-norm type
checks (layer_norm_checks.py), clip_grad / to_python_float / modules without a twin (apex_helpers.py),
over the names apex_names.py resolves.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import libcst as cst

from .apex_helpers import CLIP_FUNCS, HelperRewrites
from .apex_names import Resolver
from .base import WARNING, Codemod, FileContext, rule
from .code_layout import realign_call
from .edits import EditPlan, apply_plan
from .fused_norms import FUNCTIONAL, LAYER_NORMS, RMS_NORMS, NormRewrites
from .fused_lamb import add_lamb_helper
from .fused_optimizers import NO_TWIN_OPTIMIZERS, OptimizerRewrites
from .index import ModuleIndex
from .layer_norm_checks import TYPE_CHECKS, TypeCheckRewrites, apex_norms_left
from .names import code_of
from . import optimizer_resume
from .importing import add_helper_function
from .torch_import import ensure_torch

rule("A2A323", "apex-subclass-manual", "class derived from an apex optimizer or norm that is not rewritten",
     fixes=False, severity=WARNING,
     why="""
A subclass of an apex fused optimizer (or of FusedRMSNorm) inherits apex's defaults; giving it the
torch base would silently change them (weight_decay, eps). Change the base by hand and pass the apex
defaults explicitly in super().__init__().""",
     before="""
from apex.optimizers import FusedAdam


class MyAdam(FusedAdam):
    pass""",
     after="class MyAdam(torch.optim.AdamW):  # pass weight_decay=0.0 explicitly")


def tree_order(index: ModuleIndex, nodes: Sequence[cst.CSTNode]) -> List[cst.CSTNode]:
    """`nodes` (distinct nodes of `index`'s module) sorted into the order a visitor meets them (pre-order)."""
    child_pos: Dict[int, int] = {}

    def path(node: cst.CSTNode) -> Tuple[int, ...]:
        steps: List[int] = []
        cur = node
        parent = index.parent(cur)
        while parent is not None:
            if id(cur) not in child_pos:
                for i, ch in enumerate(parent.children):
                    child_pos[id(ch)] = i
            steps.append(child_pos[id(cur)])
            cur, parent = parent, index.parent(parent)
        return tuple(reversed(steps))

    return sorted(nodes, key=path)


class ApexModulesToTorch(Codemod):
    """apex.optimizers, apex.normalization, apex.contrib and apex.fp16_utils helpers -> torch equivalents."""

    NAME = "apex_modules"
    DESCRIPTION = "apex.optimizers, apex.normalization, apex.contrib and apex.fp16_utils helpers -> torch equivalents"
    CODES = ("A2A301", "A2A302", "A2A303", "A2A304", "A2A305", "A2A307", "A2A310", "A2A311", "A2A312", "A2A313",
             "A2A320", "A2A321", "A2A322", "A2A323", "A2A324")
    WORDS = (b"apex",)

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        res = Resolver.of(module, ctx.module_name)
        if not res.has_apex:  # nothing resolves to apex: no call or base can need work
            return module
        run = _Run(res, ctx)
        index = ModuleIndex.of(module)
        run.parent_of = index.parent
        # the visitor's work, fed in tree order with the calls and classes that name something in apex
        calls = [c for c in index.calls if res.apex_name(c.func) is not None]
        # apex.optimizers.FP16_Optimizer exists only in apex < 0.1, whose FusedAdam is another optimizer
        # (another positional order, eps before the bias correction): manual_scaling migrates it with its wrapper
        run.legacy_adam = any(res.apex_name(c.func) == "apex.optimizers.FP16_Optimizer" for c in calls)
        classes = [k for k in index.classes if any(res.apex_name(b.value) is not None for b in k.bases)]
        for node in tree_order(index, classes + calls) if classes and calls else classes or calls:
            if isinstance(node, cst.ClassDef):
                run.visit_ClassDef(node)
            else:
                run.visit_Call(node)
        checks = [c for c in index.calls if isinstance(c.func, cst.Name) and c.func.value in TYPE_CHECKS]
        # after every call and base is planned: a check may change only once no apex norm is left
        if checks and not apex_norms_left(index, res, run.plan, checks):
            for node in checks:
                run.layer_norm_type_check(node, index)
        resume_helper = optimizer_resume.plan_resume_sites(index, run.migrated_optimizers, ctx, run.plan)
        if not run.plan:
            return module
        _realign_calls(index, run.plan)
        new = apply_plan(module, run.plan)
        if resume_helper:
            new = add_helper_function(new, optimizer_resume.HELPER, optimizer_resume.HELPER_CODE)
            run.needs_torch = True
        if run.needs_lamb:
            new = add_lamb_helper(new)
        if run.needs_torch:
            new = ensure_torch(new, res)
        return new


def _realign_calls(index: ModuleIndex, plan: EditPlan) -> None:
    """Calls given a callee of another length keep their continuation lines aligned (see realign_call)."""
    for old, new in list(plan.replace_node.items()):
        if not (isinstance(old, cst.Call) and isinstance(new, cst.Call)):
            continue
        stmt = index.parent(old)
        while stmt is not None and not isinstance(stmt, cst.BaseSmallStatement):
            stmt = index.parent(stmt)
        line = index.parent(stmt) if stmt is not None else None
        if not isinstance(line, cst.SimpleStatementLine) or line.body[0] is not stmt:
            continue
        plan.replace_node[old] = realign_call(old, new, code_of(stmt).split("\n", 1)[0])


class _Run(OptimizerRewrites, NormRewrites, TypeCheckRewrites, HelperRewrites):
    """Walks calls and class bases once, planning rewrites and reporting findings."""

    # visitors
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        for base in node.bases:
            q = self.res.apex_name(base.value)
            if q is None:
                continue
            if q in LAYER_NORMS and self._ok(base, "A2A310"):
                self.plan.replace_node[base.value] = self._callee("torch.nn.LayerNorm", "torch.nn.LayerNorm")
                self.ctx.report(base, "A2A310", f"base class {q.rsplit('.', 1)[1]} -> torch.nn.LayerNorm; check that "
                                "super().__init__() passes no apex-only arguments (memory_efficient)", fixed=True)
            elif (q.startswith("apex.optimizers.") or q in RMS_NORMS) and self._ok(base, "A2A323"):
                self.ctx.report(base, "A2A323", f"{node.name.value} derives from apex's {q.rsplit('.', 1)[1]}: change "
                                "the base to the torch class by hand and pass apex's defaults explicitly "
                                "(FusedAdam: weight_decay=0.0; FusedRMSNorm: eps=1e-5)")

    def visit_Call(self, node: cst.Call) -> None:
        q = self.res.apex_name(node.func)
        if q is None:
            return
        short = q.rsplit(".", 1)[-1]
        other = self.res.other_binding(node.func)
        if other is not None:
            code = "A2A304" if q.startswith("apex.optimizers.") else "A2A322"
            if self._ok(node, code):
                self.ctx.report(node, code, f"`{code_of(node.func)}` is apex's {short} on one import path and "
                                            f"{other} on another: a torch rewrite would replace both; migrate by hand")
            return
        if q == "apex.optimizers.FusedAdam":
            self._adam(node)
        elif q == "apex.optimizers.FusedSGD":
            self._sgd(node)
        elif q == "apex.optimizers.FusedAdagrad":
            self._adagrad(node)
        elif q in NO_TWIN_OPTIMIZERS:
            self._no_twin_optimizer(node, q, short)
        elif q in LAYER_NORMS:
            self._norm(node, q, LAYER_NORMS[q], "torch.nn.LayerNorm", rms=False)
        elif q in RMS_NORMS:
            self._norm(node, q, RMS_NORMS[q], "torch.nn.RMSNorm", rms=True)
        elif q in FUNCTIONAL:
            self._functional(node, q)
        elif q in CLIP_FUNCS:
            self._clip_grad(node, short)
        elif q == "apex.fp16_utils.to_python_float":
            self._to_python_float(node)
        else:
            self._no_twin_module(node, q)
