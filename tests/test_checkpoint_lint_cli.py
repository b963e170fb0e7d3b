"""A2A704 through the real CLI on code already on torch.amp: saved GradScaler state that nothing in
the run restores, restored under another key, or an `amp` name that dangles at a restore."""
import os
import subprocess
import sys
import textwrap


def _write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(textwrap.dedent(text).lstrip())


def _check(*paths):
    return subprocess.run([sys.executable, "-m", "migrate", "check", *map(str, paths)], capture_output=True, text=True)


TRAIN = '''
    import torch

    from utils import {restore}


    def train(args, model, optimizer, loader):
        scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)
        {call}
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16, enabled=args.fp16):
                loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        torch.save({{"model": model.state_dict(), "{key}": scaler.state_dict()}}, args.out)
'''


def _train(root, restore="load_model", call="load_model(args.resume, model)", key="amp"):
    _write(root, "train.py", TRAIN.format(restore=restore, call=call, key=key))


def test_saved_scaler_state_never_restored_is_reported_at_the_save(tmp_path):
    _train(tmp_path)
    _write(tmp_path, "utils.py", '''
        import torch


        def load_model(path, model):
            model.load_state_dict(torch.load(path)["model"])
    ''')
    res = _check(tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    hits = [ln for ln in res.stdout.splitlines() if "A2A704" in ln]
    assert len(hits) == 1 and "train.py:16:" in hits[0] and "'amp'" in hits[0], res.stdout


def test_restore_in_another_module_of_the_run_is_found(tmp_path):
    _train(tmp_path, restore="load_checkpoint", call="load_checkpoint(args.resume, model, grad_scaler=scaler)")
    _write(tmp_path, "utils.py", '''
        import torch


        def load_checkpoint(path, model, grad_scaler):
            ckpt = torch.load(path)
            model.load_state_dict(ckpt["model"])
            grad_scaler.load_state_dict(ckpt["amp"])
    ''')
    res = _check(tmp_path)
    # restored: no A2A704; only the reminder that apex checkpoints under "amp" need converting (A2A107)
    codes = {ln.split(" ")[1] for ln in res.stdout.splitlines() if ": A2A" in ln}
    assert "A2A704" not in res.stdout and codes == {"A2A107"}, res.stdout


def test_restore_by_a_plain_scaler_call_in_another_module(tmp_path):
    # train.py never hands the scaler to the loader by a telling name: utils.py's own restore counts
    _train(tmp_path, restore="Engine", call="Engine(model).setup(args)")
    _write(tmp_path, "utils.py", '''
        import torch


        class Engine:
            def __init__(self, model):
                self.model = model
                self.scaler = torch.amp.GradScaler("cuda")

            def setup(self, args):
                self.scaler.load_state_dict(torch.load(args.resume)["amp"])
    ''')
    assert "A2A704" not in _check(tmp_path).stdout


def test_generic_kwargs_helper_given_the_scaler_is_no_false_alarm(tmp_path):
    _train(tmp_path, restore="restart_from_checkpoint",
           call="restart_from_checkpoint(args.resume, state_dict=model, amp=scaler)")
    _write(tmp_path, "utils.py", '''
        import torch


        def restart_from_checkpoint(ckp_path, run_variables=None, **kwargs):
            checkpoint = torch.load(ckp_path, map_location="cpu")
            for key, value in kwargs.items():
                if key in checkpoint and value is not None:
                    value.load_state_dict(checkpoint[key])
    ''')
    res = _check(tmp_path)
    assert res.returncode == 0 and "A2A704" not in res.stdout, res.stdout
    # alone in the run, the helper's name tells it restores
    assert "A2A704" not in _check(tmp_path / "train.py").stdout


def test_restored_under_another_key_is_reported(tmp_path):
    _train(tmp_path, restore="Engine", call="Engine(model).setup(args)", key="scaler")
    _write(tmp_path, "utils.py", '''
        import torch


        class Engine:
            def __init__(self, model):
                self.scaler = torch.amp.GradScaler("cuda")

            def setup(self, args):
                self.scaler.load_state_dict(torch.load(args.resume)["amp"])
    ''')
    res = _check(tmp_path)
    hits = [ln for ln in res.stdout.splitlines() if "A2A704" in ln]
    assert res.returncode == 1 and len(hits) == 1, res.stdout
    assert "train.py:16:" in hits[0] and "saved under 'scaler' but restored only from 'amp'" in hits[0]


def test_amp_name_passed_to_a_restore_without_apex_is_reported(tmp_path):
    _train(tmp_path, restore="restart_from_checkpoint",
           call="restart_from_checkpoint(args.resume, state_dict=model, amp=amp)")
    res = _check(tmp_path / "train.py")
    hits = [ln for ln in res.stdout.splitlines() if "A2A704" in ln]
    assert res.returncode == 1, res.stdout
    assert any("train.py:8:" in h and "NameError" in h for h in hits), res.stdout


def test_ignore_and_explain(tmp_path):
    _train(tmp_path)
    _write(tmp_path, "utils.py", "def load_model(path, model):\n    pass\n")
    res = subprocess.run([sys.executable, "-m", "migrate", "check", "--ignore", "A2A704", str(tmp_path)],
                         capture_output=True, text=True)
    assert res.returncode == 0 and "A2A704" not in res.stdout, res.stdout
    for code in ("A2A704", "A2A135", "A2A136", "A2A137"):
        ex = subprocess.run([sys.executable, "-m", "migrate", "explain", code], capture_output=True, text=True)
        assert ex.returncode == 0 and ex.stdout.startswith(code), ex.stdout + ex.stderr
