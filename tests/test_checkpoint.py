"""`apex2amp convert-checkpoint` through the real CLI on checkpoints built with torch.save."""
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "migrate", "convert-checkpoint", *args], capture_output=True,
                          text=True, cwd=REPO)


def _scaler(state):
    s = torch.amp.GradScaler("cpu")
    s.load_state_dict(state)
    return s


def test_apex_amp_checkpoint(tmp_path):
    src, dst = tmp_path / "old.pt", tmp_path / "new.pt"
    torch.save({"model": {"w": torch.ones(2)}, "epoch": 7,
                "amp": {"loss_scaler0": {"loss_scale": 8192.0, "unskipped": 17}}}, src)
    proc = _cli(str(src), str(dst))
    assert proc.returncode == 0, proc.stderr
    assert "'amp'" in proc.stdout
    ckpt = torch.load(dst, weights_only=False)
    assert ckpt["epoch"] == 7 and torch.equal(ckpt["model"]["w"], torch.ones(2))
    s = _scaler(ckpt["amp"])
    assert s.get_scale() == 8192.0
    assert s.get_growth_interval() == 2000 and s.state_dict()["_growth_tracker"] == 17


def test_explicit_key_and_root_state(tmp_path):
    src, dst = tmp_path / "amp.pt", tmp_path / "out.pt"
    torch.save({"loss_scaler0": {"loss_scale": 512.0, "unskipped": 0}}, src)
    assert _cli(str(src), str(dst)).returncode == 0
    assert _scaler(torch.load(dst, weights_only=False)).get_scale() == 512.0
    src2 = tmp_path / "two.pt"
    torch.save({"a": {"loss_scaler0": {"loss_scale": 2.0, "unskipped": 0}},
                "b": {"loss_scaler0": {"loss_scale": 4.0, "unskipped": 0}}}, src2)
    assert _cli(str(src2), str(dst), "--key", "b").returncode == 0
    ckpt = torch.load(dst, weights_only=False)
    assert ckpt["b"]["scale"] == 4.0 and ckpt["a"] == {"loss_scaler0": {"loss_scale": 2.0, "unskipped": 0}}


def test_fp16_optimizer_checkpoint_without_apex(tmp_path):
    """The file pickles apex's DynamicLossScaler object; converting must work without apex installed."""
    fake = tmp_path / "fakeapex" / "apex" / "fp16_utils"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "loss_scaler.py").write_text(textwrap.dedent("""
        class DynamicLossScaler:
            def __init__(self):
                self.cur_scale = 2.0 ** 20
                self.cur_iter = 1500
                self.last_overflow_iter = 1200
                self.scale_factor = 2.0
                self.scale_window = 1000
    """))
    src, dst = tmp_path / "fp16opt.pt", tmp_path / "conv.pt"
    script = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {str(tmp_path / 'fakeapex')!r})
        from apex.fp16_utils.loss_scaler import DynamicLossScaler
        opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1)
        state = {{"loss_scaler": DynamicLossScaler(), "dynamic_loss_scale": True, "overflow": False,
                 "first_closure_call_this_step": True, "optimizer_state_dict": opt.state_dict(),
                 "fp32_from_fp16": [[torch.ones(2)]]}}
        torch.save({{"optimizer": state, "step": 3}}, {str(src)!r})
    """)
    subprocess.run([sys.executable, "-c", script], check=True)
    proc = _cli(str(src), str(dst))
    assert proc.returncode == 0, proc.stderr
    assert "fp32_from_fp16" in proc.stdout
    ckpt = torch.load(dst, weights_only=False)
    assert ckpt["step"] == 3 and "param_groups" in ckpt["optimizer"]
    s = _scaler(ckpt["scaler"])
    assert s.get_scale() == 2.0 ** 20 and s.get_growth_interval() == 1000 and s.state_dict()["_growth_tracker"] == 299


def test_errors(tmp_path):
    src = tmp_path / "plain.pt"
    torch.save({"model": {"w": torch.ones(1)}}, src)
    proc = _cli(str(src), str(tmp_path / "x.pt"))
    assert proc.returncode == 2 and "no apex amp state" in proc.stderr
    proc = _cli(str(src), str(src))
    assert proc.returncode == 2 and "refusing to overwrite" in proc.stderr
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    proc = _cli(str(text), str(tmp_path / "y.pt"))
    assert proc.returncode == 2 and "not a torch.save checkpoint" in proc.stderr
    proc = _cli(str(src), str(tmp_path / "z.pt"), "--key", "amp")
    assert proc.returncode == 2 and "no key 'amp'" in proc.stderr
    assert not (tmp_path / "x.pt").exists()
