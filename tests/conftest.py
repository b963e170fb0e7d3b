import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

# CLI runs (in-process and subprocess) share one result cache per test session, outside the
# repository, so the suite exercises the cache the way users get it without leaving files behind.
if "APEX2AMP_CACHE_DIR" not in os.environ:
    _cache_root = tempfile.mkdtemp(prefix="apex2amp-test-cache-")
    atexit.register(shutil.rmtree, _cache_root, ignore_errors=True)
    os.environ["APEX2AMP_CACHE_DIR"] = os.path.join(_cache_root, "c")

# Temporary files of the code under test (verify's migrated copies, subprocess runs) go to one
# folder per session, removed at exit, so the suite leaves nothing in the system temp folder.
os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())  # tmp_path stays where pytest keeps it
_tmp_root = tempfile.mkdtemp(prefix="apex2amp-test-tmp-")
atexit.register(shutil.rmtree, _tmp_root, ignore_errors=True)
os.environ["TMPDIR"] = _tmp_root
tempfile.tempdir = _tmp_root

# Speed only (docs/performance.md, "Suite time"); no test's outcome depends on either setting.
# Each `python -m apex2amp` / fixture-script subprocess would otherwise compile the package again when
# the environment says not to write bytecode: let the first run write __pycache__ (ignored by git) and
# the later ones read it, as in a default Python setup.
# Bytecode goes to one folder outside the tree (PYTHONPYCACHEPREFIX), so fixture folders that tests copy
# and compare never gain a __pycache__.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ.setdefault("PYTHONPYCACHEPREFIX", os.path.join(tempfile.gettempdir(), "apex2amp-test-pycache"))
sys.dont_write_bytecode = False
sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]
# In-process torch and the subprocesses that do not set it themselves run single-threaded: the suite
# runs as 2 xdist workers on 2 cores, where intra-op threads only oversubscribe the cores (verify's
# runs and torchrun's workers already use OMP_NUM_THREADS=1).
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Long modules first: xdist's `load` scheduling hands out tests in collection order, so a long module
# collected last keeps one worker busy after the other ran out of tests. Modules listed in
# tests/slow_modules.txt (summed seconds per module from a `--durations=0` run, made by
# benchmarks/slow_modules.py) run first, longest first; the order inside a module is kept, and the same
# static order on every worker keeps xdist's collections equal.
_SLOW = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slow_modules.txt")


def _module_weights():
    weights = {}
    if os.path.exists(_SLOW):
        with open(_SLOW, encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and not line.startswith("#"):
                    weights[parts[1]] = float(parts[0])
    return weights


def pytest_collection_modifyitems(config, items):
    weights = _module_weights()
    if not weights:
        return
    first = {}
    for i, item in enumerate(items):
        first.setdefault(item.nodeid.split("::")[0], i)
    items.sort(key=lambda item: (-weights.get(item.nodeid.split("::")[0], 0.0),
                                 first[item.nodeid.split("::")[0]]))


def pytest_cmdline_main(config):
    """`-n N` without `--dist` hands out whole modules (xdist's `loadscope`), in the order above.

    Speed only: under `load` the tests of one module are spread over both workers, so every module-scoped
    fixture (a rewrite CLI run, a set of training curves) and every per-process cache of a runnable module
    (a twin's torchrun losses) was computed once per worker. `--no-loadscope-reorder` keeps the
    longest-first order instead of xdist's most-tests-first. An explicit `--dist` is left as given."""
    if getattr(config.option, "dist", "no") != "load" or any(
            str(a).startswith(("--dist", "-d")) for a in config.invocation_params.args):
        return None
    config.option.dist = "loadscope"
    config.option.loadscopereorder = False
    return None
