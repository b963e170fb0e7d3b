"""Shapes met on real repositories (fixtures/review_found/): a real `apex2amp rewrite` leaves each file
byte-identical and reports the site to fix by hand, instead of a migration that clips scaled gradients,
leaves the forward pass in fp32, or says nothing about a decorator."""
from __future__ import annotations

import os
import shutil

from test_cli_helpers import REPO, cli, finding_lines, tree_digest

FOUND = os.path.join(REPO, "fixtures", "review_found")


def _rewrite(case: str, tmp_path):
    work = tmp_path / case
    shutil.copytree(os.path.join(FOUND, case), work, ignore=shutil.ignore_patterns("*.md"))
    before = tree_digest(str(work))
    r = cli(["rewrite", "."], cwd=str(work))
    return r, before, tree_digest(str(work)), finding_lines(r.stdout + r.stderr)


def _line_of(path: str, text: str) -> int:
    with open(path, encoding="utf-8") as fh:
        return next(i for i, ln in enumerate(fh, 1) if text in ln)


def test_clip_in_a_method_that_calls_the_step_helper_refuses_the_module(tmp_path):
    r, before, after, found = _rewrite("clip_in_step_helper_method", tmp_path)
    assert r.returncode == 1
    assert after == before  # no GradScaler whose gradients reach the clip still scaled
    clip_line = _line_of(os.path.join(FOUND, "clip_in_step_helper_method", "runner.py"), "clip_grad_norm_")
    assert any(f["code"] == "A2A122" and int(f["line"]) == clip_line and "unscale_" in f["msg"] for f in found)
    assert any(f["code"] == "A2A117" for f in found)


def test_early_exit_between_loss_and_backward_goes_inside_the_whole_region(tmp_path):
    """The early `return` sits inside the region with the forward and the loss (no step or scaler
    state comes before it in the iteration); never a region around `loss *= k` alone."""
    r, before, after, found = _rewrite("early_exit_between_loss_and_scale", tmp_path)
    assert r.returncode == 1
    text = (tmp_path / "early_exit_between_loss_and_scale" / "train.py").read_text()
    region = text[text.index("with torch.autocast("):text.index("scaler.scale(loss).backward()")]
    for stmt in ("pred = model(images)", "loss = torch.nn.functional.cross_entropy(pred, targets)",
                 "return", "loss *= batch_size / 64"):
        assert stmt in region
    assert text.count("with torch.autocast(") == 1
    assert "scaler.step(optimizer)" in text and "scaler.update()" in text
    assert any(f["code"] == "A2A104" for f in found) and not any(f["code"] in ("A2A116", "A2A142") for f in found)


def test_float_function_decorator_as_the_only_apex_use_migrates_to_the_added_helper(tmp_path):
    r, before, after, found = _rewrite("decorator_float_function_no_finding", tmp_path)
    assert r.returncode == 1
    text = (tmp_path / "decorator_float_function_no_finding" / "layers.py").read_text(encoding="utf-8")
    assert "import amp" not in text and "@autocast_float_function\ndef upsample" in text
    assert "def autocast_float_function(fn):" in text
    assert any(f["code"] == "A2A182" for f in found) and not any(f["code"] == "A2A118" for f in found)


def test_a_clip_wrapper_method_still_migrates_with_unscale_before_its_call(tmp_path):
    # the wrapper's body clips outside the step's function; its call site is the clip that gets `unscale_`
    src = os.path.join(REPO, "fixtures", "amp", "clip_through_hook_method.before.py")
    shutil.copy(src, tmp_path / "trainer.py")
    r = cli(["rewrite", "trainer.py"], cwd=str(tmp_path))
    assert r.returncode == 1
    text = (tmp_path / "trainer.py").read_text(encoding="utf-8")
    assert "apex" not in text
    assert text.index("self.scaler.unscale_(self.optimizer)") < text.index("self.clip_grads(self.model.parameters())")


def test_apex_private_state_after_initialize_holds_the_module_back(tmp_path):
    r, before, after, found = _rewrite("amp_private_state_after_initialize", tmp_path)
    assert r.returncode == 1
    assert after == before  # no GradScaler beside `_amp_state.loss_scalers[0]._loss_scale = ...`
    src = os.path.join(FOUND, "amp_private_state_after_initialize", "runner.py")
    assert any(f["code"] == "A2A115" and int(f["line"]) == _line_of(src, "_loss_scale = ") for f in found)
    assert any(f["code"] == "A2A117" and int(f["line"]) == _line_of(src, "amp.initialize(") for f in found)


def test_optimizer_amp_stash_alone_holds_the_module_back(tmp_path):
    src = os.path.join(REPO, "fixtures", "amp", "amp_stash_after_initialize.unchanged.py")
    shutil.copy(src, tmp_path / "runner.py")
    r = cli(["rewrite", "runner.py"], cwd=str(tmp_path))
    assert r.returncode == 1
    with open(src, encoding="utf-8") as fh:
        assert (tmp_path / "runner.py").read_text(encoding="utf-8") == fh.read()
    found = finding_lines(r.stdout + r.stderr)
    assert any(f["code"] == "A2A115" and "_lazy_init_maybe_master_weights" in f["msg"] for f in found)


def test_loss_scale_reads_through_amp_state_still_migrate(tmp_path):
    # `amp._amp_state.loss_scalers[0].loss_scale()` is the read the migration rewrites: no hold-back
    shutil.copy(os.path.join(REPO, "fixtures", "amp", "internals.before.py"), tmp_path / "train.py")
    r = cli(["rewrite", "train.py"], cwd=str(tmp_path))
    text = (tmp_path / "train.py").read_text(encoding="utf-8")
    assert "scaler.get_scale()" in text and "amp.initialize" not in text
    assert not any(f["code"] == "A2A117" for f in finding_lines(r.stdout + r.stderr))


def test_bf16_region_that_cannot_read_amps_switch_refuses(tmp_path):
    # the O0 (fp32) mode must not become bf16: no scaler carries the switch into `do_train`
    src = os.path.join(REPO, "fixtures", "amp_modes", "bf16_switch_out_of_reach.unchanged.py")
    shutil.copy(src, tmp_path / "train.py")
    r = cli(["rewrite", "--dtype", "bfloat16", "train.py"], cwd=str(tmp_path))
    assert r.returncode == 1
    with open(src, encoding="utf-8") as fh:
        assert (tmp_path / "train.py").read_text(encoding="utf-8") == fh.read()
    found = finding_lines(r.stdout + r.stderr)
    assert any(f["code"] == "A2A116" and int(f["line"]) == _line_of(src, "loss = model(images, targets)")
               for f in found)
    # float16 keeps migrating: the scaler carries the switch
    r16 = cli(["rewrite", "train.py"], cwd=str(tmp_path))
    assert r16.returncode == 1
    assert "enabled=scaler.is_enabled()" in (tmp_path / "train.py").read_text(encoding="utf-8")


def test_helpers_called_by_a_module_that_keeps_apex_stay_on_apex_with_it(tmp_path):
    # Swin's shape: main.py refuses (clip on every micro-batch); utils.py's save/load_checkpoint would
    # have gained a `scaler` parameter that nothing passes
    r, before, after, found = _rewrite("helper_signature_refused_caller", tmp_path)
    assert r.returncode == 1
    assert after == before
    assert any(f["path"].endswith("ckpt.py") and f["code"] == "A2A118" and "`train` calls this module" in f["msg"]
               for f in found)
    # the caller still says why it is held (not only "ckpt keeps apex amp code")
    assert any(f["path"].endswith("train.py") and f["code"] == "A2A122" for f in found)


def test_helpers_migrate_with_their_caller_once_it_can_migrate(tmp_path):
    work = tmp_path / "ok"
    shutil.copytree(os.path.join(FOUND, "helper_signature_refused_caller"), work,
                    ignore=shutil.ignore_patterns("*.md"))
    train = work / "train.py"
    text = train.read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines(keepends=True) if "clip_grad_norm_" not in ln and "clipped on every" not in ln]
    train.write_text("".join(lines), encoding="utf-8")
    r = cli(["rewrite", "."], cwd=str(work))
    assert r.returncode == 1
    ckpt = (work / "ckpt.py").read_text(encoding="utf-8")
    migrated = train.read_text(encoding="utf-8")
    assert "def save_checkpoint(model, optimizer, path, use_amp, scaler):" in ckpt and "apex" not in ckpt
    assert "save_checkpoint(model, optimizer, \"last.pth\", use_amp, scaler=scaler)" in migrated
    assert "load_checkpoint(model, optimizer, args.resume, use_amp, scaler=scaler)" in migrated
