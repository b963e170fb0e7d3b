"""Walk and screen a tree in a child process while this one imports libcst.

A cold `check` of a big tree spends its first quarter second importing libcst, on one core. The
scout is forked before that import (the command line builds the run's settings without libcst,
`migrate.settings`) and uses the idle core meanwhile: it walks the paths, reads every file, reports
the ones it cannot read or decode, and screens each Python file with the codemods' own byte screens
(`codemods.screens`, read through `prefilter.wanted_by_some`: their tokens and exact second stages,
which import no libcst) under every selection: a file no codemod can want is dropped. The engine
takes the walk from it. Under a selection that takes every rule (the default) the scout's screen
is the engine's own, and the files it wanted (`Scouted.wanted`) go straight to their passes; under a
narrower one the engine screens them again. It leaves the Python files' bytes in memory shared
with the engine (`SharedBytes`).

The scout is a shortcut, never a second opinion: the engine uses its answer only when it was made
for the same paths, excludes and cache setting, and does the whole job itself when the scout is not
there, failed, or did not finish before `collect` (the files it did not reach are screened as usual).
"""
from __future__ import annotations

import mmap
import os
import pickle
import select
import signal
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import discovery
from .fileio import SourceError, decode_error, read_bytes

_STOP_EVERY = 32  # files read between two looks for the stop signal
_STOP_EVERY_SECOND = 4  # files screened by the codemods' screens between two looks
# The run reads Python files' bytes again after pass 1 when pass 1 published facts (call sites in
# files no codemod wanted, imports of what it removed): the scout leaves them in shared memory, as
# the engine's own screen keeps them.
DATA_LIMIT = 32_000_000


@dataclass
class Scouted:
    """What the scout found: the run's files and, by position, the screen of those it reached."""

    files: List[discovery.Discovered]
    errors: Dict[int, str] = field(default_factory=dict)  # a read or decode error's message
    skipped: List[int] = field(default_factory=list)  # files no codemod can want
    wanted: List[int] = field(default_factory=list)  # files the codemods' screens want, under every rule
    kept: List[int] = field(default_factory=list)  # Python files with a token, not screened further
    digests: Dict[int, bytes] = field(default_factory=dict)  # cache.digest of the bytes screened, with a cache
    spans: Dict[int, Tuple[int, int]] = field(default_factory=dict)  # Python files' bytes in the shared memory
    data: Any = field(default_factory=dict)  # their bytes by position (`get`): a SharedBytes once collected

    @property
    def reached(self) -> int:
        """How many files (from the first) the scout screened."""
        return len(self.errors) + len(self.skipped) + len(self.wanted) + len(self.kept)


def first_look(d: discovery.Discovered, data: bytes) -> Tuple[str, Optional[str]]:
    """("error", message), ("skip", None), ("want", None) or, for a Python file that holds a codemod
    token, ("keep", None): its second look (`second_look`) decides."""
    why = decode_error(d.path, data, d.kind == discovery.PYTHON)
    if why is not None:
        return "error", why
    from . import prefilter  # imported by `Scout` before the fork
    if d.kind != discovery.PYTHON:  # launch scripts and notebooks: the registry's regex, as the engine asks
        return ("want" if prefilter.coarse(data) else "skip"), None
    return ("keep" if prefilter.holds_a_screen_token(data) else "skip"), None


def second_look(d: discovery.Discovered, data: bytes) -> bool:
    """Whether some codemod's screen wants a Python file `first_look` kept, under every rule."""
    from . import prefilter
    return prefilter.wanted_by_some(data, discovery.module_name_for(d.path)[0])


def screen(d: discovery.Discovered, data: bytes) -> Tuple[str, Optional[str]]:
    """The scout's whole screen of one file: ("error", message), ("skip", None) or ("keep", None)."""
    verdict, message = first_look(d, data)
    if verdict == "want" or verdict == "keep" and second_look(d, data):
        return "keep", None
    return ("error", message) if verdict == "error" else ("skip", None)


class SharedBytes:
    """The bytes of the files the scout read, by position, from the memory it shares with this
    process: each file's bytes are copied out only when asked for."""

    def __init__(self, shared: mmap.mmap, spans: Dict[int, Tuple[int, int]]):
        self.shared, self.spans = shared, spans

    def get(self, i: int, default: Optional[bytes] = None) -> Optional[bytes]:
        span = self.spans.get(i)
        return default if span is None else self.shared[span[0]:span[1]]


class Scout:
    """A forked child that walks `paths` and screens the files it finds (see the module docstring)."""

    def __init__(self, paths: Sequence[str], excludes: Sequence[str], with_digests: bool):
        self.key = (list(paths), list(excludes), with_digests)
        self._pid = 0
        # what the child needs is imported here: it then imports nothing (a fork may copy a held
        # import lock), and this process needs both modules later anyway
        from . import prefilter  # noqa: F401 - for `screen`
        discovery.forget_packages()  # the module names of its second looks: from the tree as it is now
        digest = None
        if with_digests:
            from .cache import digest
        try:  # where the child leaves the bytes it read (pages are taken only as they are written)
            self._shared: Optional[mmap.mmap] = mmap.mmap(-1, DATA_LIMIT)
        except (OSError, ValueError):
            self._shared = None
        fds: List[int] = []
        try:
            fds.extend(os.pipe())
            fds.extend(os.pipe())
            result_r, result_w, stop_r, stop_w = fds
            pid = os.fork()
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        if pid == 0:  # the child: never returns
            try:
                os.close(result_r)
                os.close(stop_w)
                _child(paths, excludes, digest, result_w, stop_r, self._shared)
            finally:
                os._exit(1)
        os.close(result_w)
        os.close(stop_r)
        self._pid, self._result, self._stop = pid, result_r, stop_w

    def collect(self, paths: Sequence[str], excludes: Sequence[str], with_digests: bool,
                stop: bool = True) -> Optional[Scouted]:
        """The scout's findings, if they were made for these settings; None otherwise or on any
        failure. With `stop`, tells the scout to stop screening first (what it has not reached the
        engine screens); else waits for it to finish."""
        if not self._pid:
            return None
        try:
            if stop:
                try:
                    os.write(self._stop, b"x")
                except OSError:  # the scout is done and gone
                    pass
            chunks = []
            while True:
                chunk = os.read(self._result, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
            found = pickle.loads(b"".join(chunks)) if chunks else None
        except Exception:  # noqa: BLE001 - a failed shortcut: the engine walks and screens itself
            found = None
        finally:
            self.close()
        if not isinstance(found, Scouted) or self.key != (list(paths), list(excludes), with_digests):
            return None
        if self._shared is not None:
            found.data = SharedBytes(self._shared, found.spans)
        return found

    def close(self) -> None:
        """End the scout, whatever it is doing (its answer is not wanted, or was read), and reap it."""
        if not self._pid:
            return
        pid, self._pid = self._pid, 0
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        for fd in (self._result, self._stop):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _child(paths: Sequence[str], excludes: Sequence[str], digest: Optional[Callable[[bytes], bytes]], out: int,
           stop: int, shared: Optional[mmap.mmap] = None) -> None:
    """The scout's whole life: walk, screen until told to stop (hashing with `digest`, when given),
    send the findings, exit."""
    status = 0
    try:
        found = Scouted(list(discovery.discover(paths, excludes)))
        kept_bytes = 0
        told = select.poll()
        told.register(stop, select.POLLIN)
        # the first look at every file (a read, a decode check, the tokens) comes before any second
        # look (the codemods' own screens, a stdlib parse here and there), which is the costly part:
        # stopped early, the scout has then answered most files, and the engine screens the rest
        second: List[Tuple[int, bytes]] = []
        for i, d in enumerate(found.files):
            if i % _STOP_EVERY == 0 and told.poll(0):
                second = []
                break
            try:
                data = read_bytes(d.path)
            except SourceError as e:
                found.errors[i] = str(e)
                continue
            verdict, message = first_look(d, data)
            if verdict == "error":
                found.errors[i] = message or ""
                continue
            {"skip": found.skipped, "want": found.wanted, "keep": found.kept}[verdict].append(i)
            if verdict == "keep":
                second.append((i, data))
            if shared is not None and d.kind == discovery.PYTHON and kept_bytes + len(data) <= DATA_LIMIT:
                shared[kept_bytes:kept_bytes + len(data)] = data
                found.spans[i] = (kept_bytes, kept_bytes + len(data))
                kept_bytes += len(data)
            if digest is not None:
                found.digests[i] = digest(data)
        looked = set()
        for n, (i, data) in enumerate(second):
            if n % _STOP_EVERY_SECOND == 0 and told.poll(0):
                break
            (found.wanted if second_look(found.files[i], data) else found.skipped).append(i)
            looked.add(i)
        found.kept = [i for i in found.kept if i not in looked]
        payload = memoryview(pickle.dumps(found, protocol=pickle.HIGHEST_PROTOCOL))
        while payload:
            payload = payload[os.write(out, payload):]
    except BaseException:  # noqa: BLE001 - the parent sees no answer and does the work itself
        status = 1
    finally:
        os._exit(status)


def start(paths: Sequence[str], excludes: Sequence[str], jobs: int, with_digests: bool,
          prefilter: bool = True) -> Optional[Scout]:
    """A scout for a run over `paths`, or None where it cannot pay: one job, no fork, the prefilter
    off, or only files named (pre-commit's handful of staged files: nothing to walk)."""
    if jobs < 2 or not prefilter or not hasattr(os, "fork"):
        return None
    if not any(os.path.isdir(p) for p in paths):
        return None
    try:
        return Scout(paths, excludes, with_digests)
    except OSError:  # no fork or no pipe left: the engine does it all
        return None
