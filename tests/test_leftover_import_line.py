"""The "apex name is still used" finding sits on the import that binds the name from apex, not on a
fallback import of the same name from another library that comes first (found by
tests/audit_leftovers.py: the apex import itself was left without a finding)."""
import textwrap

from migrate.engine import rewrite_source

SOURCE = textwrap.dedent('''
    import torch

    try:
        from transformer_engine.pytorch.optimizers import FusedSGD as SGD
    except ImportError:
        try:
            from apex.optimizers import FusedSGD as SGD
        except ImportError:
            from torch.optim import SGD


    def build(params, lr):
        return SGD(params, lr=lr, momentum=0.9)
''').lstrip()


def test_still_used_finding_is_on_the_apex_import():
    res = rewrite_source(SOURCE, path="build.py", module_name="build")
    assert res.new_text == SOURCE
    lines = {f.line for f in res.findings if f.code == "A2A118" and "is still used" in f.message}
    assert lines == {7}, [(f.line, f.code, f.message) for f in res.findings]
