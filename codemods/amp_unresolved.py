"""apex amp's API reached through a name this module does not import from apex (A2A125, findings only).

`amp.scale_loss(...)` and `amp.master_params(...)` exist only in apex amp. When the receiver is not
an import of apex here (`from .utils import amp` re-exporting it, `self.amp` stored by a trainer, an
`amp` parameter), the amp codemod cannot tell what it is and leaves the call alone; without this
rule the file would keep needing apex at run time with nothing said about it.
"""
from __future__ import annotations

import libcst as cst

from .amp_object import report_amp_objects
from .base import WARNING, Codemod, FileContext, rule
from .index import ModuleIndex
from .names import ImportTable, dotted_name

AMP_ONLY_METHODS = ("scale_loss", "master_params")

UNRESOLVED = rule(
    "A2A125", "apex-amp-api-not-imported", "apex amp's API called through a name not imported from apex",
    fixes=False, severity=WARNING,
    why="""
`scale_loss` and `master_params` are apex amp functions. Here they are called on a name that this
module does not import from apex (a re-export from another module of the project, an attribute such
as `self.amp`, a parameter), so apex2amp cannot know it is apex and does not migrate it. Import amp
from apex in this module (`from apex import amp`) and run apex2amp again, or migrate by hand:
`with amp.scale_loss(loss, opt) as s: s.backward()` becomes `scaler.scale(loss).backward()`, and
`amp.master_params(opt)` becomes the optimizer's own parameters after `scaler.unscale_(opt)`.""",
    before="""
from .utils import amp  # utils does `from apex import amp`
with amp.scale_loss(loss, optimizer) as scaled_loss:
    scaled_loss.backward()""",
    after="""
scaler.scale(loss).backward()  # with a GradScaler made where amp.initialize was""")

# other frameworks' amp with the same method names (MXNet's `mxnet.contrib.amp.scale_loss`)
OTHER_AMP_PACKAGES = ("mxnet", "torch", "tensorflow", "paddle", "jax")

class UnresolvedAmpApi(Codemod):
    """Report `*.amp.scale_loss(...)` / `*.amp.master_params(...)` whose receiver is not apex's, and
    apex amp held under another name (`self.apex.initialize(..., opt_level=...)`, A2A171)."""

    NAME = "amp_unresolved"
    DESCRIPTION = "apex amp calls through names not imported from apex (findings only)"
    CODES = (UNRESOLVED.code, "A2A171")
    TOKENS = (b"scale_loss", b"master_params", b"opt_level")
    REPORTS_ONLY = True

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        index = ModuleIndex.of(module)
        table = ImportTable.of(module, ctx.module_name)
        for call in index.calls:
            func = call.func
            if not isinstance(func, cst.Attribute) or func.attr.value not in AMP_ONLY_METHODS:
                continue
            receiver = dotted_name(func.value)
            if receiver is None or not receiver.rpartition(".")[2].endswith("amp"):
                continue
            if table.refers_under(func.value, "apex"):
                continue  # the amp codemod's own
            imported = sorted(q for q in table.qualify(receiver) if q != receiver)
            if any(q.partition(".")[0] in OTHER_AMP_PACKAGES for q in imported):
                continue
            where = ", ".join(imported) or "no import here"
            ctx.report(call, UNRESOLVED.code,
                       f"`{receiver}.{func.attr.value}(...)` looks like apex amp, but `{receiver}` is not imported "
                       f"from apex in this module ({where}): import amp from apex here and run again, or "
                       "migrate it by hand")
        report_amp_objects(index, table, ctx, OTHER_AMP_PACKAGES)
        return module
