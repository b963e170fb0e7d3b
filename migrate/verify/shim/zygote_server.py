"""A process that has imported torch and forks one child per program run (see migrate/verify/zygote.py).

Requests arrive on stdin, one JSON object per line: {"script", "args", "cwd", "env", "output", "timeout"}.
The child runs the script as `python script args` would (its folder first on sys.path, the request's
PYTHONPATH next, the request's environment, the probe's sitecustomize, `__main__`, the exit code of an
uncaught exception or SystemExit, atexit handlers); the reply is {"rc": int or null, "timed_out": bool}.
"""
import json
import os
import signal
import sys
import time

import torch  # noqa: F401  (what every run imports: paid once here)
import torch._inductor.config  # noqa: F401  (torch.use_deterministic_algorithms, called by the probe, imports it)
import torch.distributed  # noqa: F401
import torch.multiprocessing  # noqa: F401
import torch.utils.data  # noqa: F401
try:
    import numpy  # noqa: F401
except ImportError:
    pass

BASE_PATH = [p for p in sys.path[1:]]  # the interpreter's own entries, without this file's folder


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write("%s\n" % (code,))
    return 1


def _child(req) -> None:
    os.setpgid(0, 0)
    fd = os.open(req["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    script = req["script"]
    extra = [p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [os.path.dirname(script)] + extra + BASE_PATH
    sys.argv = [script] + list(req["args"])
    import runpy
    code = 0
    try:
        sys.modules.pop("sitecustomize", None)
        try:
            import sitecustomize  # noqa: F401  (the probe's, first on PYTHONPATH)
        except ImportError:
            pass
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = _exit_code(e.code)
    except BaseException:
        etype, exc, tb = sys.exc_info()
        while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__, "<frozen runpy>"):
            tb = tb.tb_next  # the traceback a fresh interpreter prints starts at the script
        sys.excepthook(etype, exc.with_traceback(tb), tb)
        code = 1
    try:
        import atexit
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _wait(pid: int, timeout: float):
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), False
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(pid, 0)
            return None, True
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def main() -> None:
    replies = sys.stdout
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(req)
        rc, timed_out = _wait(pid, float(req["timeout"]))
        replies.write(json.dumps({"rc": rc, "timed_out": timed_out}) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
