"""The shape of a setup helper in another module (issue 24 item 3): `prepare(model, optimizer, ..., fp16,
opt_level)` in setup_utils.py amp-initializes under the fp16 switch and returns model and optimizer; the
trainer class in train.py calls it in `__init__`, scales, clips (every micro-batch, apex's master params)
and steps at the accumulation boundary; the entry point is called by a decorator with the config alone.

The hand migrations (amp.initialize and the einsum registration dropped from the helper, the GradScaler made
in the trainer right after the helper's call with enabled=fp16 and opt_level != "O0", autocast over forward
and loss; migrated/ clips once after `scaler.unscale_` at the boundary, migrated_exact/ keeps the clip per
micro-batch on the scaled gradient) are compared step by step with the legacy program under the apex
emulation, and the CLI's rewrite (A2A186) with them."""
import os

import pytest

pytest.importorskip("torch")

from migrate.verify import collect_losses, compare  # noqa: E402

CASE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable",
                    "init_helper")
MODES = {"fp32": [], "O1": ["--fp16", "--opt-level", "O1"], "O2": ["--fp16", "--opt-level", "O2"],
         "O0": ["--fp16", "--opt-level", "O0"]}


def _both(mode, max_norm, steps=6):
    args = MODES[mode] + ["--max-grad-norm", max_norm]
    legacy = collect_losses(os.path.join(CASE, "legacy"), "train.py", args, steps=steps, device="cpu")
    hand = collect_losses(os.path.join(CASE, "migrated"), "train.py", args, steps=steps, device="cpu")
    return legacy[0], hand[0]


@pytest.mark.parametrize("mode", ["fp32", "O1", "O0"])
@pytest.mark.parametrize("max_norm", ["0", "5.0"])  # clip off / on but never binding
def test_hand_migration_equals_apex_step_by_step(mode, max_norm):
    legacy, hand = _both(mode, max_norm)
    assert len(hand) == 6 and all(len(r["losses"]) == 3 for r in hand)  # three micro-batches per step
    assert [r["losses"] for r in legacy] == [r["losses"] for r in hand]
    assert not any(r["skipped"] for r in hand)
    assert all((r["scale"] is None) == (mode in ("fp32", "O0")) for r in hand)  # a scaler only when enabled


def test_o2_runs_under_autocast_with_a_scaler():
    """apex O2 (fp16 model, fp32 master weights) becomes autocast fp16 with fp32 weights: the first
    step's losses agree, later ones follow apex only within the mode change (A2A1xx opt-level note)."""
    legacy, hand = _both("O2", "0")
    assert legacy[0]["losses"] == hand[0]["losses"]
    assert all(r["scale"] == 65536.0 and not r["skipped"] for r in hand)


def test_binding_per_micro_batch_clip_is_the_a2a145_move():
    """With max_norm below the partial sums' norms apex clips each partial sum; the migration clips the
    accumulated gradient once (A2A145's unsafe fix): the first step's forward agrees, the curves then
    differ, within the fidelity tolerance's order but not equal."""
    legacy, hand = _both("O1", "0.3")
    assert legacy[0]["losses"] == hand[0]["losses"]
    assert [r["losses"] for r in legacy] != [r["losses"] for r in hand]
    verdict = compare({0: legacy}, {0: hand}, steps=6, mode="fidelity")
    assert verdict["max_rel_diff"] < 0.1


def _cli(*args):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "apex2amp", *args, "--no-cache"], capture_output=True, text=True)


@pytest.fixture(scope="module")
def tool(tmp_path_factory):
    """The CLI's rewrite of legacy/ (the default run, and with --unsafe-fixes), and its stdout."""
    import shutil
    out = {}
    for name, flags in (("default", []), ("unsafe", ["--unsafe-fixes"])):
        dst = tmp_path_factory.mktemp(name) / "legacy"
        shutil.copytree(os.path.join(CASE, "legacy"), dst)
        r = _cli("rewrite", *flags, str(dst))
        out[name] = (str(dst), r.stdout + r.stderr)
    return out


def test_both_modules_migrate_together(tool):
    """A2A186: the helper's amp.initialize (and the einsum registration, A2A183) dropped, the trainer
    makes `self.scaler` right after the helper's call, enabled= from the call's fp16 / opt_level
    arguments, and migrates its amp code on it; no apex left in either file."""
    root, out = tool["default"]
    assert "A2A186" in out and "A2A183" in out and "A2A148" in out and "A2A124" not in out, out
    with open(os.path.join(root, "setup_utils.py"), encoding="utf-8") as fh:
        helper = fh.read()
    with open(os.path.join(root, "train.py"), encoding="utf-8") as fh:
        train = fh.read()
    assert "import apex" not in helper and "from apex" not in helper and "register_half_function" not in helper
    assert "amp.initialize" not in helper and "return net, opt" in helper
    assert "from apex" not in train and "amp.scale_loss" not in train and "amp.master_params" not in train
    call = 'model, optimizer = prepare(model, optimizer, "cuda", 1, cfg.fp16, cfg.opt_level)\n'
    assert call + '        self.scaler = torch.amp.GradScaler("cuda", enabled=cfg.fp16 and cfg.opt_level != "O0")\n' \
        in train
    assert "cfg.max_grad_norm * self.scaler.get_scale()" in train  # A2A148: the clip stays per micro-batch


@pytest.mark.parametrize("mode", ["fp32", "O1", "O2", "O0"])
@pytest.mark.parametrize("max_norm", ["0", "5.0", "0.3"])  # clip off / never binding / binding
def test_tool_equals_the_exact_hand_migration_step_by_step(tool, mode, max_norm):
    """The default run's output trains exactly as migrated_exact/ (the hand migration keeping the
    per-micro-batch clip on the scaled gradient), and in fp32 / O1 / O0 exactly as apex."""
    args = MODES[mode] + ["--max-grad-norm", max_norm]
    out = collect_losses(tool["default"][0], "train.py", args, steps=6, device="cpu")[0]
    exact = collect_losses(os.path.join(CASE, "migrated_exact"), "train.py", args, steps=6, device="cpu")[0]
    assert len(out) == 6 and all(len(r["losses"]) == 3 for r in out)
    assert [(r["losses"], r["scale"], r["skipped"]) for r in out] == \
        [(r["losses"], r["scale"], r["skipped"]) for r in exact]
    assert all((r["scale"] is None) == (mode in ("fp32", "O0")) for r in out)  # a scaler only when enabled
    if mode != "O2":
        legacy = collect_losses(os.path.join(CASE, "legacy"), "train.py", args, steps=6, device="cpu")[0]
        assert [r["losses"] for r in legacy] == [r["losses"] for r in out]


@pytest.mark.parametrize("mode", ["fp32", "O1", "O2"])
def test_unsafe_fixes_run_equals_the_hand_migration_step_by_step(tool, mode):
    """With --unsafe-fixes the clip moves to the boundary (A2A145): as migrated/ does, step by step."""
    root, out = tool["unsafe"]
    assert "A2A186" in out and "A2A145" in out and "A2A126" not in out, out
    args = MODES[mode] + ["--max-grad-norm", "0.3"]
    got = collect_losses(root, "train.py", args, steps=6, device="cpu")[0]
    hand = collect_losses(os.path.join(CASE, "migrated"), "train.py", args, steps=6, device="cpu")[0]
    assert len(got) == 6 and [r["losses"] for r in got] == [r["losses"] for r in hand]


def test_a_caller_without_optimizer_gets_a_finding_and_stays(tmp_path):
    """`prepare(model, None, ...)` (DPR's dense_retriever.py): reported at the call, left as it is; the
    helper and the trainer still migrate."""
    import json
    import shutil
    dst = tmp_path / "legacy"
    shutil.copytree(os.path.join(CASE, "legacy"), dst)
    embed = ("from setup_utils import prepare\n\n\ndef embed(model, batch, fp16):\n"
             "    model, _ = prepare(model, None, \"cuda\", 1, fp16)\n    return model(batch)\n")
    (dst / "embed.py").write_text(embed, encoding="utf-8")
    r = _cli("check", "--format", "json", str(dst))
    report = json.loads(r.stdout)
    by_name = {os.path.basename(fr["path"]): fr for fr in report["files"]}
    found = [(f["line"], f["code"], f["fixed"]) for f in by_name["embed.py"]["findings"]]
    assert found == [(5, "A2A186", False)], r.stdout
    assert by_name["setup_utils.py"]["changed"] and by_name["train.py"]["changed"]
    _cli("rewrite", str(dst))
    assert (dst / "embed.py").read_text(encoding="utf-8") == embed
    assert "amp.initialize" not in (dst / "setup_utils.py").read_text(encoding="utf-8")


def test_the_helper_alone_keeps_its_amp_initialize(tmp_path):
    """Rewritten without its callers, the helper is held back (A2A124, A2A186 as a warning)."""
    import shutil
    shutil.copy(os.path.join(CASE, "legacy", "setup_utils.py"), tmp_path / "setup_utils.py")
    r = _cli("rewrite", str(tmp_path / "setup_utils.py"))
    assert "A2A124" in r.stdout and "A2A186" in r.stdout and "held back" in r.stdout, r.stdout
    with open(os.path.join(CASE, "legacy", "setup_utils.py"), encoding="utf-8") as fh:
        assert (tmp_path / "setup_utils.py").read_text(encoding="utf-8") == fh.read()


@pytest.mark.parametrize("mode", ["fp32", "O1"])
@pytest.mark.parametrize("max_norm", ["0.3", "0.05"])  # binding on most micro-batches
def test_per_micro_batch_clip_on_the_scaled_gradient_is_exact(mode, max_norm):
    """A possible safe form of A2A145's fix (a finding for its owner, not what the tool writes): keep the
    clip on every micro-batch, on the still-scaled gradient with `max_norm * scaler.get_scale()` (the norm
    scales with the gradient; 1.0 when the scaler is off): equal to apex step by step, clip binding."""
    args = MODES[mode] + ["--max-grad-norm", max_norm]
    legacy = collect_losses(os.path.join(CASE, "legacy"), "train.py", args, steps=6, device="cpu")[0]
    exact = collect_losses(os.path.join(CASE, "migrated_exact"), "train.py", args, steps=6, device="cpu")[0]
    assert len(exact) == 6 and [r["losses"] for r in legacy] == [r["losses"] for r in exact]


def test_keyword_call_takes_the_helpers_default_opt_level(tmp_path):
    """`prepare(model, opt=optimizer, device="cuda", fp16=cfg.fp16)`: fp16 by keyword, opt_level left to
    the helper's default "O1" (so no `!= "O0"` test), the optimizer by keyword."""
    import shutil
    dst = tmp_path / "legacy"
    shutil.copytree(os.path.join(CASE, "legacy"), dst)
    train = (dst / "train.py").read_text(encoding="utf-8")
    old = 'model, optimizer = prepare(model, optimizer, "cuda", 1, cfg.fp16, cfg.opt_level)'
    new = 'model, optimizer = prepare(model, opt=optimizer, device="cuda", fp16=cfg.fp16)'
    assert old in train
    (dst / "train.py").write_text(train.replace(old, new), encoding="utf-8")
    r = _cli("rewrite", str(dst))
    assert "A2A186" in r.stdout, r.stdout
    assert new + '\n        self.scaler = torch.amp.GradScaler("cuda", enabled=cfg.fp16)\n' in \
        (dst / "train.py").read_text(encoding="utf-8")
    assert "amp.initialize" not in (dst / "setup_utils.py").read_text(encoding="utf-8")


def test_a_caller_training_without_amp_code_holds_the_helper_back(tmp_path):
    """A caller passing an optimizer but with no apex amp code of its own (its backward and step plain)
    cannot get a scaler: reported (A2A117), and the helper and the trainer keep their apex code."""
    import shutil
    dst = tmp_path / "legacy"
    shutil.copytree(os.path.join(CASE, "legacy"), dst)
    (dst / "plain.py").write_text(
        "from setup_utils import prepare\n\n\ndef fit(model, optimizer, loader, fp16):\n"
        "    model, optimizer = prepare(model, optimizer, \"cuda\", fp16=fp16)\n    for x in loader:\n"
        "        model(x).sum().backward()\n        optimizer.step()\n", encoding="utf-8")
    r = _cli("rewrite", str(dst))
    assert "plain.py:5:24: A2A117" in r.stdout and "held back" in r.stdout, r.stdout
    for name in ("setup_utils.py", "train.py"):
        with open(os.path.join(CASE, "legacy", name), encoding="utf-8") as fh:
            assert (dst / name).read_text(encoding="utf-8") == fh.read()


def test_deselecting_a2a186_leaves_both_modules_as_they_are(tmp_path):
    """`--ignore A2A186` stops the edit: the helper is not published, the trainer keeps its apex code."""
    import shutil
    dst = tmp_path / "legacy"
    shutil.copytree(os.path.join(CASE, "legacy"), dst)
    r = _cli("rewrite", "--ignore", "A2A186", str(dst))
    assert "0 changed" in r.stdout + r.stderr, r.stdout + r.stderr
    for name in ("setup_utils.py", "train.py"):
        with open(os.path.join(CASE, "legacy", name), encoding="utf-8") as fh:
            assert (dst / name).read_text(encoding="utf-8") == fh.read()


def test_an_enabled_switch_the_call_rebinds_is_refused(tmp_path):
    """`prepare(model, optimizer, ..., model.fp16, ...)` assigning `model`: the scaler after the call would
    read the new `model`: refused (A2A117 at the call), both modules as they are."""
    import shutil
    dst = tmp_path / "legacy"
    shutil.copytree(os.path.join(CASE, "legacy"), dst)
    train = (dst / "train.py").read_text(encoding="utf-8")
    old = 'prepare(model, optimizer, "cuda", 1, cfg.fp16, cfg.opt_level)'
    (dst / "train.py").write_text(train.replace(old, old.replace("cfg.fp16", "model.fp16")), encoding="utf-8")
    r = _cli("rewrite", str(dst))
    assert "train.py:41:28: A2A117" in r.stdout, r.stdout
    with open(os.path.join(CASE, "legacy", "setup_utils.py"), encoding="utf-8") as fh:
        assert (dst / "setup_utils.py").read_text(encoding="utf-8") == fh.read()
