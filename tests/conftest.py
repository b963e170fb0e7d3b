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
