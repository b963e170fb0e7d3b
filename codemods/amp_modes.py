"""Mode switches (`use_amp = 'apex' | 'native' | None`): the apex choice must keep mixed precision.

When the apex branch of `if use_amp == 'apex': <apex> elif use_amp == 'native': <native> else: <fp32>`
goes, the apex choice would fall through to the fp32 `else`. So the branch goes only where the apex
choice is shown to reach the native path:

- the selector is a plain name that its function binds only to literals (`use_amp = None`, `use_amp =
  'apex'`): each `use_amp = 'apex'` becomes `use_amp = 'native'` (the value the native branch tests),
  so every later test, call and argument sees the native choice (A2A130);
- the selector is an argparse option of this module (`args.amp`) whose `choices` and `default` no
  longer offer the apex value, and nothing assigns it: the apex choice cannot be made (A2A130);
- the apex test, once apex availability flags are folded (`has_apex` -> True), is the native branch's
  test or always true.

Anything else (a selector passed in as a parameter, an option that still offers `apex`) keeps the
module's amp code as it is, with A2A131 saying what to change.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from . import mode_rules as M
from .guards import apex_flags, apex_locals, fold_condition, is_const
from .names import dotted_name, literal_string, norm_code
from .version_gates import fold_version_gates

Branch = Tuple[Optional[cst.BaseExpression], cst.CSTNode]


def _selector_test(test: Optional[cst.BaseExpression]) -> Optional[Tuple[str, str]]:
    """(selector, value) for `S == 'value'` / `'value' == S` (S a name or dotted attribute)."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    ct = test.comparisons[0]
    if not isinstance(ct.operator, cst.Equal):
        return None
    for sel, lit in ((test.left, ct.comparator), (ct.comparator, test.left)):
        value = literal_string(lit) if isinstance(lit, cst.SimpleString) else None
        name = dotted_name(sel)
        if value is not None and name:
            return name, value
    return None


def _argparse_choice(module_calls: Sequence[cst.Call], dest: str) -> Optional[Tuple[str, List[str], Optional[str]]]:
    """(option string, choices, default) of the add_argument call whose dest is `dest`, when its
    `choices` is a literal list of strings; None otherwise."""
    found = None
    for call in module_calls:
        if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "add_argument"):
            continue
        options = [literal_string(a.value) for a in call.args if a.keyword is None]
        options = [o for o in options if o]
        if not options:
            continue
        longs = [o for o in options if o.startswith("--")]
        name = (longs or options)[0].lstrip("-").replace("-", "_")
        kw = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        if "dest" in kw:
            name = literal_string(kw["dest"]) or name
        if name != dest:
            continue
        if found is not None:
            return None  # declared twice: which one parses is not known here
        choices = kw.get("choices")
        if not isinstance(choices, (cst.List, cst.Tuple, cst.Set)):
            return None
        values = [literal_string(e.value) for e in choices.elements]
        if any(v is None for v in values):
            return None
        default = kw.get("default")
        found = ((longs or options)[0], [v for v in values if v is not None],
                 literal_string(default) if default is not None else None)
    return found


def _argparse_flags(module_calls: Sequence[cst.Call]) -> Dict[str, str]:
    """dest -> option string of every add_argument call with a literal option."""
    out: Dict[str, str] = {}
    for call in module_calls:
        if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "add_argument"):
            continue
        options = [o for o in (literal_string(a.value) for a in call.args if a.keyword is None) if o]
        if not options:
            continue
        longs = [o for o in options if o.startswith("--")]
        dest = (longs or options)[0].lstrip("-").replace("-", "_")
        for a in call.args:
            if a.keyword is not None and a.keyword.value == "dest":
                dest = literal_string(a.value) or dest
        out.setdefault(dest, (longs or options)[0])
    return out


def _literal_bindings(a, name: str, scope: Optional[cst.CSTNode]) -> Optional[List[cst.Assign]]:
    """The `name = <literal>` statements that are the only bindings of `name` in the module, all in
    `scope` (a function, or None for module level); None when `name` is bound any other way."""
    out: List[cst.Assign] = []
    if name in a.table.bindings:
        return None
    for node in a.index.nodes:
        t = type(node)
        if t is cst.Assign:
            for target in node.targets:
                tt = target.target
                if isinstance(tt, cst.Name) and tt.value == name:
                    value = node.value
                    if len(node.targets) != 1 or not (isinstance(value, cst.SimpleString) or (
                            isinstance(value, cst.Name) and value.value == "None")):
                        return None
                    if a.func_of(node) is not scope:
                        return None
                    out.append(node)
                elif name in _names_in_target(tt):
                    return None
        elif t in (cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor, cst.NamedExpr):
            if name in _names_in_target(node.target):
                return None
        elif t is cst.AsName:
            if name in _names_in_target(node.name):
                return None
        elif t is cst.Param:
            if node.name.value == name:
                return None
        elif t in (cst.Global, cst.Nonlocal):
            if any(n.name.value == name for n in node.names):
                return None
        elif t in (cst.FunctionDef, cst.ClassDef):
            if node.name.value == name:
                return None
    return out


def _names_in_target(t: cst.CSTNode) -> Set[str]:
    if isinstance(t, cst.Name):
        return {t.value}
    if isinstance(t, (cst.Tuple, cst.List)):
        return set().union(*(_names_in_target(e.value) for e in t.elements)) if t.elements else set()
    if isinstance(t, cst.StarredElement):
        return _names_in_target(t.value)
    return set()


def _quoted_like(original: cst.SimpleString, value: str) -> cst.SimpleString:
    q = original.value[-1]
    return cst.SimpleString(f"{q}{value}{q}")


class ModeSwitches:
    """Decides, per if/elif chain whose apex branch goes, whether the apex choice keeps mixed
    precision, and plans the selector rewrites that make it so."""

    def __init__(self, analysis) -> None:
        self.a = analysis
        self.flags = apex_flags(analysis.module, analysis.table)
        self.locals = apex_locals(analysis.table)
        self.rewritten: Set[int] = set()  # ids of `S = 'apex'` assignments already planned
        self.reported: Set[str] = set()

    def fold(self, test: Optional[cst.BaseExpression]) -> Optional[cst.BaseExpression]:
        if test is None:
            return None
        test = fold_version_gates(test, self.a.table, self.a.ctx.options.min_torch)  # torch >= min_torch here
        return fold_condition(test, self.flags, self.locals)

    def allow(self, top: cst.If, apex: List[Branch], native: List[Branch]) -> bool:
        """Whether the apex branches of the chain at `top` may go: True after planning what keeps the
        apex choice on a native path; False after reporting A2A131 (the module's amp code then stays)."""
        native_tests = [self.fold(t) for t, _ in native]
        native_sel = [s for s in (_selector_test(t) for t in native_tests) if s is not None]
        plans = []
        for test, _ in apex:
            folded = self.fold(test)
            if folded is None:
                return self.refuse(top, "the apex branch is the chain's `else`: every choice the other branches "
                                        "do not test would run without mixed precision once it goes")
            if is_const(folded, True) or any(t is not None and norm_code(t) == norm_code(folded)
                                             for t in native_tests):
                continue
            sel = _selector_test(folded)
            if sel is None:
                return self.refuse(top, f"`{self.a.module.code_for_node(test).strip()}` selects apex, and no "
                                        "native-AMP branch of this chain is shown to run in its place")
            target = next((v for s, v in native_sel if s == sel[0]), None)
            if target is None:
                return self.refuse(top, f"`{sel[0]}` selects apex with {sel[1]!r}, but no native-AMP branch of "
                                        f"this chain tests `{sel[0]}`")
            plan = self._plan_selector(top, sel[0], sel[1], target)
            if plan is None:
                return False
            plans.append(plan)
        for p in plans:
            p()
        return True

    def _plan_selector(self, top: cst.If, selector: str, apex_value: str, native_value: str):
        a = self.a
        if "." not in selector:
            binds = _literal_bindings(a, selector, a.func_of(top))
            if binds is None:
                self.refuse(top, f"`{selector}` selects apex with {apex_value!r} but is set outside this function "
                                 "or from a non-literal value (a parameter, another module): once the apex branch "
                                 f"goes, that choice runs in fp32; make the code that sets `{selector}` choose "
                                 f"{native_value!r} instead of {apex_value!r}, then rerun")
                return None
            apex_sets = [b for b in binds if literal_string(b.value) == apex_value]
            if not apex_sets:
                self.refuse(top, f"`{selector}` is never set to {apex_value!r} here: migrate this switch by hand")
                return None

            def apply() -> None:
                for b in apex_sets:
                    if id(b) in self.rewritten:
                        continue
                    self.rewritten.add(id(b))
                    a.plan.replace_node[b.value] = _quoted_like(b.value, native_value)
                    flags = self._flags_gating(b)
                    chosen = " / ".join(f"`{f}`" for f in flags) if flags else f"`{selector} = {apex_value!r}`"
                    a.report(b, M.APEX_CHOICE_NATIVE, f"{chosen} selected apex AMP; it now runs native AMP "
                                                      f"(`{selector}` is set to {native_value!r})", fixed=True)
            return apply
        receiver, _, dest = selector.rpartition(".")
        decl = _argparse_choice(a.index.calls, dest)
        assigned = any(type(n) is cst.Assign and any(
            isinstance(t.target, cst.Attribute) and t.target.attr.value == dest for t in n.targets)
            for n in a.index.nodes)
        if decl is None or assigned or apex_value in decl[1] or decl[2] == apex_value:
            flag = decl[0] if decl else selector
            self.refuse(top, f"`{selector} == {apex_value!r}` selects apex and `{flag}` still accepts {apex_value!r}: "
                             "once the apex branch goes, that choice runs in fp32; drop "
                             f"{apex_value!r} from the option's choices and default (native AMP is "
                             f"{native_value!r}), then rerun")
            return None

        def apply_choice() -> None:
            key = f"choice:{selector}"
            if key not in self.reported:
                self.reported.add(key)
                a.report(top, M.APEX_CHOICE_NATIVE, f"`{decl[0]}` no longer offers {apex_value!r}: the apex "
                                                    "branches of this switch are unreachable and go", fixed=True)
        return apply_choice

    def _flags_gating(self, stmt: cst.CSTNode) -> List[str]:
        """The argparse options (`--apex-amp`) read by the `if` tests above `stmt`."""
        conds, _ = self.a.gate_of(self.a.stmt_of(stmt))
        options = _argparse_flags(self.a.index.calls)
        out: List[str] = []
        for c in conds:
            for n in _attributes(c):
                opt = options.get(n)
                if opt and opt not in out:
                    out.append(opt)
        return out

    def refuse(self, top: cst.If, why: str) -> bool:
        self.a.report(top, M.APEX_CHOICE_FP32, f"apex branch kept: {why}")
        self.a.abort = True
        return False


def _attributes(e: cst.CSTNode) -> List[str]:
    out: List[str] = []
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Attribute):
            out.append(n.attr.value)
        stack.extend(n.children)
    return out
