"""Odd and hostile files: each bad file gets one message naming it and the reason, the others proceed,
the exit code is 2, and the bad file is never touched. Real CLI subprocesses and real files."""
from __future__ import annotations

import codecs
import glob
import os
import stat
import subprocess
import sys
import time

import pytest

from migrate.engine import RunConfig, run

import golden

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _legacy_pair():
    """A fixture whose rewrite changes the file (before != after), without special options."""
    for before in sorted(glob.glob(os.path.join(golden.ROOT, "*", "*.before.py"))):
        after = before[: -len(".before.py")] + ".after.py"
        if os.path.exists(before[: -len(".before.py")] + ".options.json") or not os.path.exists(after):
            continue
        with open(before, "rb") as a, open(after, "rb") as b:
            old, new = a.read(), b.read()
        if old != new and old.isascii() and b"\r" not in old:
            return old, new
    pytest.skip("no changing fixture pair yet")


LEGACY, MIGRATED = _legacy_pair()


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "migrate", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": ROOT})


def _write(path, data: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


BAD = {
    "syntax.py": (b"from apex import amp\ndef f(:\n    pass\n", "syntax error"),
    "py2.py": (b"from apex import amp\nprint 'hello'\n", "syntax error"),
    "undecodable.py": (b"from apex import amp\nx = '\xff\xfe'\n", "cannot decode"),
    "binary.py": (b"\x7fELF\x02\x01\x01\x00\x00\x00apex", "binary"),
    "badcookie.py": (b"# -*- coding: no-such-codec -*-\nfrom apex import amp\n", "encoding"),
}


def test_bad_files_reported_others_proceed(tmp_path):
    good = _write(tmp_path / "good.py", LEGACY)
    for name, (data, _) in BAD.items():
        _write(tmp_path / name, data)
    os.symlink(tmp_path / "missing.py", tmp_path / "dangling.py")
    os.symlink(tmp_path / "loop_b.py", tmp_path / "loop_a.py")
    os.symlink(tmp_path / "loop_a.py", tmp_path / "loop_b.py")
    before = {p: (p.read_bytes() if p.exists() else None) for p in tmp_path.iterdir()}
    r = cli("rewrite", str(tmp_path))
    assert r.returncode == 2, r.stderr
    for name, (_, reason) in BAD.items():
        lines = [ln for ln in r.stderr.splitlines() if name in ln]
        assert len(lines) == 1 and reason in lines[0].lower(), (name, r.stderr)
    assert "dangling symbolic link" in r.stderr and "symbolic link loop" in r.stderr
    assert good.read_bytes() == MIGRATED  # the good file was rewritten
    for p, data in before.items():
        if p != good and data is not None:
            assert p.read_bytes() == data, p  # bad files untouched


def test_empty_tabs_and_plain_files_pass(tmp_path):
    _write(tmp_path / "empty.py", b"")
    _write(tmp_path / "tabs.py", b"import torch\nif True:\n\tx = torch.ones(1)\n\ty = x.half()\n")
    _write(tmp_path / "only_comment.py", b"# apex2amp: ignore\n")
    r = cli("check", str(tmp_path))
    assert r.returncode in (0, 1), r.stderr
    assert "error" not in r.stderr


def test_unreadable_file(tmp_path):
    if os.geteuid() == 0:
        # root reads mode-000 files; a FIFO named .py is the unreadable file root cannot read either
        p = tmp_path / "fifo.py"
        os.mkfifo(p)
        r = cli("check", str(p))
        assert r.returncode == 2 and "not a regular file" in r.stderr
        return
    p = _write(tmp_path / "secret.py", LEGACY)
    p.chmod(0)
    try:
        r = cli("check", str(tmp_path))
        assert r.returncode == 2 and "permission denied" in r.stderr
    finally:
        p.chmod(0o644)


def test_read_only_file_not_overwritten(tmp_path):
    p = _write(tmp_path / "ro.py", LEGACY)
    p.chmod(0o444)
    r = cli("rewrite", str(p))
    assert r.returncode == 2 and "read-only" in r.stderr
    assert p.read_bytes() == LEGACY
    p.chmod(0o644)


def test_file_changed_between_read_and_write(tmp_path):
    """A real `rewrite` pauses after each file it writes (the test-only APEX2AMP_TEST_WRITE_PAUSE); once
    the first file is written the test edits the second: it is not overwritten, and the run says so."""
    edited = LEGACY + b"# edited by the user meanwhile\n"
    for attempt, pause in enumerate((1.0, 3.0, 8.0)):
        tree = tmp_path / f"t{attempt}"
        first, race = _write(tree / "a.py", LEGACY), _write(tree / "b.py", LEGACY)
        proc = subprocess.Popen([sys.executable, "-m", "migrate", "rewrite", "--no-cache", "-j", "1", "."],
                                cwd=str(tree), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": ROOT, "APEX2AMP_TEST_WRITE_PAUSE": str(pause)})
        deadline = time.time() + 60
        while first.read_bytes() == LEGACY and proc.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        in_time = race.read_bytes() == LEGACY
        race.write_bytes(edited)
        _, err = proc.communicate(timeout=120)
        if not in_time:  # written before the test saw the first write (a loaded machine): a longer pause
            continue
        assert first.read_bytes() == MIGRATED
        assert race.read_bytes() == edited
        assert proc.returncode == 2 and "b.py" in err and "changed on disk" in err, err
        return
    pytest.fail("the test never edited the file before the run wrote it")


def _limit_file_size():
    """In the child: files may not grow past 64 bytes (as on a full disk); SIGXFSZ is ignored, so the
    write fails with EFBIG instead of killing the process."""
    import resource
    import signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))


def test_failed_write_leaves_no_partial_file(tmp_path):
    p = _write(tmp_path / "crash.py", LEGACY)
    assert len(MIGRATED) > 64
    res = subprocess.run([sys.executable, "-m", "migrate", "rewrite", "--no-cache", "-j", "1", "crash.py"],
                         cwd=str(tmp_path), capture_output=True, text=True, preexec_fn=_limit_file_size,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert res.returncode == 2 and "crash.py" in res.stderr and "too large" in res.stderr.lower(), res.stderr
    assert p.read_bytes() == LEGACY
    assert sorted(os.listdir(tmp_path)) == ["crash.py"]  # no temporary file left behind


def test_killed_run_never_leaves_a_partial_file(tmp_path):
    import signal
    files = [_write(tmp_path / f"pkg/m{i:03d}.py", LEGACY) for i in range(40)]
    proc = subprocess.Popen([sys.executable, "-m", "migrate", "rewrite", "-j", "1", "-q", str(tmp_path)],
                            env={**os.environ, "PYTHONPATH": ROOT}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        if any(f.read_bytes() == MIGRATED for f in files):
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for f in files:
        assert f.read_bytes() in (LEGACY, MIGRATED)  # whole old or whole new, never half


def test_latin1_cookie_keeps_encoding(tmp_path):
    body = LEGACY.decode("ascii")
    text = "# -*- coding: latin-1 -*-\n# caf\xe9 \xa9 auteur\n" + body
    p = _write(tmp_path / "latin.py", text.encode("latin-1"))
    r = cli("rewrite", str(p))
    assert r.returncode == 1, r.stderr
    out = p.read_bytes()
    assert out.decode("latin-1").startswith("# -*- coding: latin-1 -*-\n# caf\xe9 \xa9 auteur\n")
    assert out == ("# -*- coding: latin-1 -*-\n# caf\xe9 \xa9 auteur\n").encode("latin-1") + MIGRATED


def test_bom_and_crlf_kept_byte_for_byte(tmp_path):
    crlf = LEGACY.replace(b"\n", b"\r\n")
    p = _write(tmp_path / "bom.py", codecs.BOM_UTF8 + crlf)
    r = cli("rewrite", str(p))
    assert r.returncode == 1, r.stderr
    assert p.read_bytes() == codecs.BOM_UTF8 + MIGRATED.replace(b"\n", b"\r\n")


def test_mixed_line_endings_outside_edits_kept(tmp_path):
    head = b"import os\r\nX = 1\nY = 2\r\n"
    p = _write(tmp_path / "mixed.py", head + LEGACY)
    r = cli("rewrite", str(p))
    assert r.returncode in (1, 2)
    out = p.read_bytes()
    if r.returncode == 1:  # an import the rewrite adds goes after `import os`; the other lines keep their ends
        assert out.startswith(b"import os\r\n") and b"\nX = 1\nY = 2\r\n" in out
    else:
        assert out == head + LEGACY


def test_five_megabyte_file(tmp_path):
    line = b"value_%d = [i * 2 for i in range(10)]  # an example that clamps nothing\n"
    data = b"".join(line % i for i in range(5 * 1024 * 1024 // len(line) + 1))
    p = _write(tmp_path / "big.py", data)
    r = cli("check", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert p.read_bytes() == data


def test_mode_is_kept(tmp_path):
    p = _write(tmp_path / "exe.py", LEGACY)
    p.chmod(0o755)
    assert cli("rewrite", str(p)).returncode == 1
    assert stat.S_IMODE(p.stat().st_mode) == 0o755 and p.read_bytes() == MIGRATED


def test_unchanged_results_drop_their_text(tmp_path):
    _write(tmp_path / "plain.py", b"def clamp(x):\n    return x\n")
    _write(tmp_path / "legacy.py", LEGACY)
    res = run([str(tmp_path)], RunConfig(jobs=1))
    by = {os.path.basename(f.path): f for f in res.files}
    assert by["plain.py"].old_text == by["plain.py"].new_text == ""
    assert by["legacy.py"].changed and by["legacy.py"].new_text.encode() == MIGRATED
