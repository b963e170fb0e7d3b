import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tempfile  # noqa: E402

# CLI runs (in-process and subprocess) share one result cache per test session, outside the
# repository, so the suite exercises the cache the way users get it without leaving files behind.
os.environ.setdefault("APEX2AMP_CACHE_DIR", os.path.join(tempfile.mkdtemp(prefix="apex2amp-test-cache-"), "c"))
