"""ensure_imports places `import NAME` exactly where libcst's AddImportsVisitor would, except in an
isort-sorted import block, which it keeps sorted (tests/test_import_order.py runs ruff on those)."""
from __future__ import annotations

import glob
import os

import libcst as cst
import pytest
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from codemods.import_order import sorted_position
from codemods.importing import ensure_imports, module_binds_top_level

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CASES = {
    "empty": "",
    "only_code": "x = 1\n",
    "docstring": '"""Doc."""\nx = 1\n',
    "docstring_imports": '"""Doc."""\nimport os\nfrom a import b\n\n# c\ny = 2\n',
    "strict_flag": "__strict__ = True\nimport sys\nz = 3\n",
    "comment_first": "# header\nimport sys\n# about x\nx = 1\n",
    "import_later": "import os\nx = 1\nimport torch as th\n",
    "multi_import_line": "import os; import sys\nx = 1\n",
    "future": "from __future__ import annotations\nimport os\nx = 1\n",
    "crlf": "import os\r\nx = 1\r\n",
    "already": "import torch\nx = 1\n",
    "dotted_present": "import torch.nn\nx = 1\n",
}


def _libcst(module: cst.Module, names) -> cst.Module:
    missing = [n for n in names if not module_binds_top_level(module, n)]
    if not missing:
        return module
    ctx = CodemodContext()
    for n in missing:
        AddImportsVisitor.add_needed_import(ctx, n)
    return AddImportsVisitor(ctx).transform_module(module)


def _sources():
    yield from CASES.items()
    for p in sorted(glob.glob(os.path.join(ROOT, "fixtures", "**", "*.before.py"), recursive=True))[:60]:
        data = open(p, encoding="utf-8").read()
        try:
            cst.parse_module(data)
        except Exception:
            continue
        yield os.path.relpath(p, ROOT), data


@pytest.mark.parametrize("name,source", list(_sources()), ids=[n for n, _ in _sources()])
@pytest.mark.parametrize("names", [["torch"], ["os"], ["torch", "os"]])
def test_same_placement_as_add_imports_visitor(name, source, names):
    module = cst.parse_module(source)
    block = _leading_imports(module)
    if block and sorted_position(block, names[0]) is not None:
        out = cst.parse_module(ensure_imports(module, names).code)
        assert sorted_position(_leading_imports(out), "zzz_probe") is not None, out.code  # still sorted
        for n in names:
            assert module_binds_top_level(out, n)
        return
    assert ensure_imports(module, names).code == _libcst(module, names).code


def _leading_imports(module: cst.Module):
    body = list(module.body)
    first = body[0] if body else None
    start = 1 if (isinstance(first, cst.SimpleStatementLine)
                  and (isinstance(first.body[0], cst.Expr) or "__strict__" in cst.Module([first]).code)) else 0
    end = start
    while end < len(body) and isinstance(body[end], cst.SimpleStatementLine) and len(body[end].body) == 1 \
            and isinstance(body[end].body[0], (cst.Import, cst.ImportFrom)):
        end += 1
    return body[start:end]


def test_import_of_a_submodule_already_binds_the_package():
    source = ('import os\n\nos.environ["KMP_AFFINITY"] = "disabled"  # before anything else\n\n'
              'import torch.nn.parallel\nimport torch.backends.cudnn as cudnn\n')
    module = cst.parse_module(source)
    assert ensure_imports(module, ["torch"]).code == source
    aliased_only = cst.parse_module("import os\nimport torch.backends.cudnn as cudnn\n")
    assert "import torch\n" in ensure_imports(aliased_only, ["torch"]).code
