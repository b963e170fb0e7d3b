"""apex guards, extension imports and switches that reach across a `try` or a module (fixtures/cross_module_guards/
and the golden pairs parallel/ddp_import_beside_apex_extension, checkpoint_pairs/scaler_state_under_apex_flag),
through a real `apex2amp rewrite`: no torch name left unbound without apex, no bf16 region that loses the
fp32 mode's switch, no install check dropped while apex is still needed."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from test_cli_helpers import REPO, cli, finding_lines, tree_digest

CASES = os.path.join(REPO, "fixtures", "cross_module_guards")


def _copy(case: str, tmp_path) -> str:
    work = tmp_path / case
    shutil.copytree(os.path.join(CASES, case), work)
    return str(work)


def _line_of(path: str, text: str) -> int:
    with open(path, encoding="utf-8") as fh:
        return next(i for i, ln in enumerate(fh, 1) if text in ln)


def test_torch_ddp_import_is_bound_without_apex_when_its_try_imports_amp_c(tmp_path):
    src = os.path.join(REPO, "fixtures", "parallel", "ddp_import_beside_apex_extension.before.py")
    shutil.copy(src, tmp_path / "dist.py")
    r = cli(["rewrite", "dist.py"], cwd=str(tmp_path))
    assert r.returncode == 1
    found = finding_lines(r.stdout)
    # after a write, the findings left to review point at the written file's lines
    assert any(f["code"] == "A2A172" and int(f["line"]) == _line_of(str(tmp_path / "dist.py"), "import amp_C")
               for f in found)
    # this machine has no apex: the `try` fails at `import amp_C`, and DDP must still be torch's
    probe = subprocess.run([sys.executable, "-c", "import dist, torch; "
                            "assert dist.DDP is torch.nn.parallel.DistributedDataParallel; print(dist.HAVE_APEX)"],
                           cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "False"


def test_scaler_state_saved_under_the_kept_apex_flag_is_reported(tmp_path):
    src = os.path.join(REPO, "fixtures", "checkpoint_pairs", "scaler_state_under_apex_flag.before.py")
    shutil.copy(src, tmp_path / "trainer.py")
    r = cli(["rewrite", "trainer.py"], cwd=str(tmp_path))
    assert r.returncode == 1
    found = finding_lines(r.stdout)
    guard = [f for f in found if f["code"] == "A2A173"]
    assert [int(f["line"]) for f in guard] == [_line_of(str(tmp_path / "trainer.py"), "if APEX_FOUND:")]
    assert "self.scaler.is_enabled()" in guard[0]["msg"]


def test_bf16_region_in_another_module_than_the_switched_initialize_refuses_the_pair(tmp_path):
    work = _copy("bf16_switch_in_caller", tmp_path)
    before = tree_digest(work)
    r = cli(["rewrite", "--dtype", "bfloat16", "."], cwd=work)
    assert r.returncode == 1
    assert tree_digest(work) == before  # no unconditional bf16 autocast for the O0 (fp32) mode
    found = finding_lines(r.stdout)
    trainer = os.path.join(CASES, "bf16_switch_in_caller", "engine", "trainer.py")
    main = os.path.join(CASES, "bf16_switch_in_caller", "train_net.py")
    assert any(f["code"] == "A2A174" and f["path"].endswith("trainer.py")
               and int(f["line"]) == _line_of(trainer, "pred = model(") for f in found)
    assert any(f["code"] == "A2A117" and f["path"].endswith("train_net.py")
               and int(f["line"]) == _line_of(main, "amp.initialize(") for f in found)


def test_the_same_pair_migrates_with_float16_and_with_an_unswitched_bf16_initialize(tmp_path):
    work = _copy("bf16_switch_in_caller", tmp_path)
    r = cli(["rewrite", "."], cwd=work)
    assert r.returncode == 1
    trainer = open(os.path.join(work, "engine", "trainer.py"), encoding="utf-8").read()
    assert "enabled=scaler.is_enabled()" in trainer and "apex" not in trainer
    work2 = _copy("bf16_switch_in_caller", tmp_path / "fixed")
    main = os.path.join(work2, "train_net.py")
    with open(main, encoding="utf-8") as fh:
        text = fh.read().replace("opt_level=amp_opt_level", 'opt_level="O1"')
    with open(main, "w", encoding="utf-8") as fh:
        fh.write(text)
    r = cli(["rewrite", "--dtype", "bfloat16", "."], cwd=work2)
    assert r.returncode == 1
    assert not any(f["code"] in ("A2A174", "A2A117") for f in finding_lines(r.stdout))
    trainer = open(os.path.join(work2, "engine", "trainer.py"), encoding="utf-8").read()
    assert 'torch.autocast("cuda", dtype=torch.bfloat16)' in trainer and "apex" not in trainer


def test_install_check_stays_while_another_module_keeps_apex(tmp_path):
    work = _copy("install_check_kept", tmp_path)
    with open(os.path.join(work, "main.py"), "rb") as fh:
        main_before = fh.read()
    r = cli(["rewrite", "."], cwd=work)
    assert r.returncode == 1
    with open(os.path.join(work, "main.py"), "rb") as fh:
        assert fh.read() == main_before
    found = finding_lines(r.stdout)
    check_line = _line_of(os.path.join(CASES, "install_check_kept", "main.py"), "if args.fp16 and not APEX_FOUND")
    kept = [f for f in found if f["code"] == "A2A175"]
    assert [(f["path"], int(f["line"])) for f in kept] == [("main.py", check_line)]
    assert "training" in kept[0]["msg"]


def test_install_check_goes_when_nothing_else_keeps_apex(tmp_path):
    work = _copy("install_check_kept", tmp_path)
    os.remove(os.path.join(work, "training.py"))
    with open(os.path.join(work, "training.py"), "w", encoding="utf-8") as fh:
        fh.write("class Trainer:\n    def __init__(self, *args):\n        self.args = args\n")
    r = cli(["rewrite", "."], cwd=work)
    assert r.returncode == 1
    main = open(os.path.join(work, "main.py"), encoding="utf-8").read()
    assert "apex" not in main and "APEX_FOUND" not in main
    assert not any(f["code"] == "A2A175" for f in finding_lines(r.stdout))
