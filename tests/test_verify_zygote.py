"""A side forked from the torch-importing zygote runs as `python script args` would in a fresh interpreter."""
import os
import textwrap

import pytest

from migrate.verify.runner import run_side

SCRIPT = textwrap.dedent('''
    import atexit, json, os, sys
    import helper_mod  # found in the script's own folder, as sys.path[0] gives it
    atexit.register(lambda: print("atexit ran"))
    print(json.dumps({"argv": sys.argv[1:], "cwd_is_tmp": os.getcwd() != os.path.dirname(__file__),
                      "name": __name__, "steps": os.environ.get("APEX2AMP_STEPS"), "extra": os.environ.get("EXTRA"),
                      "helper": helper_mod.VALUE, "main_file": os.path.basename(sys.modules["__main__"].__file__)}))
    sys.stderr.write("to stderr\\n")
    mode = sys.argv[1]
    if mode == "raise":
        raise ValueError("boom")
    if mode == "exit3":
        sys.exit(3)
    if mode == "exit_msg":
        sys.exit("bad config")
''')


@pytest.fixture
def program(tmp_path):
    (tmp_path / "prog.py").write_text(SCRIPT, encoding="utf-8")
    (tmp_path / "helper_mod.py").write_text("VALUE = 7\n", encoding="utf-8")
    return str(tmp_path)


def _side(program, mode, fresh, monkeypatch):
    monkeypatch.setenv("APEX2AMP_VERIFY_FRESH", "1" if fresh else "0")
    side = run_side(program, "prog.py", [mode, "--flag"], steps=4, extra_env={"EXTRA": "x"})
    return side.returncode, sorted(side.output.splitlines()), side.timed_out


@pytest.mark.parametrize("mode", ["ok", "raise", "exit3", "exit_msg"])
def test_forked_side_equals_a_fresh_interpreter(program, mode, monkeypatch):
    forked = _side(program, mode, False, monkeypatch)
    fresh = _side(program, mode, True, monkeypatch)
    assert forked[0] == fresh[0] == {"ok": 0, "raise": 1, "exit3": 3, "exit_msg": 1}[mode]
    # the traceback names the same frames; compare the lines that do not carry file paths
    assert [l for l in forked[1] if "File " not in l] == [l for l in fresh[1] if "File " not in l]
    assert any('"helper": 7' in l and '"name": "__main__"' in l and '"main_file": "prog.py"' in l for l in forked[1])
    assert "atexit ran" in forked[1] and "to stderr" in forked[1]


def test_a_run_past_its_timeout_is_killed_and_reported(tmp_path, monkeypatch):
    (tmp_path / "slow.py").write_text("import time\nprint('started', flush=True)\ntime.sleep(60)\n", encoding="utf-8")
    monkeypatch.setenv("APEX2AMP_VERIFY_FRESH", "0")
    side = run_side(str(tmp_path), "slow.py", [], steps=1, timeout=3)
    assert side.timed_out and side.returncode is None


def test_runs_under_many_environments_keep_few_torch_processes_alive(program, monkeypatch):
    # each zygote holds an imported torch: a long test session must not pile them up
    import subprocess as sp
    monkeypatch.setenv("APEX2AMP_VERIFY_FRESH", "0")
    for k in range(4):
        monkeypatch.setenv("SOME_SETTING", str(k))
        assert run_side(program, "prog.py", ["ok"], steps=1).returncode == 0
    alive = sp.run(["pgrep", "-P", str(os.getpid()), "-f", "zygote_server"], capture_output=True, text=True).stdout.split()
    assert len(alive) <= 2, alive
