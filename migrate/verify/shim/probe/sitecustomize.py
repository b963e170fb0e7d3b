"""apex2amp verify probe loader: active only when APEX2AMP_OUT is set; chains to any other sitecustomize."""
import os
import sys


def _chain_next_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    import importlib.util
    for entry in sys.path:
        try:
            if not entry or os.path.abspath(entry) == here:
                continue
        except Exception:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_apex2amp_chained_sitecustomize", candidate)
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except Exception as e:  # never break the user's program because of the chained file
                sys.stderr.write("apex2amp probe: chained sitecustomize failed: %r\n" % (e,))
            return


_chain_next_sitecustomize()

if os.environ.get("APEX2AMP_OUT"):
    import _apex2amp_probe
    _apex2amp_probe.install()
