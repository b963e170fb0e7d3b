"""A checkpoint save and its restore through a helper of another module migrate together (the real CLI,
several files): `amp=apex.amp` handed to a generic `**kwargs` loader in `src/utils.py` becomes
`amp=scaler`; a helper that cannot be proven leaves the whole module as it is, with findings."""
import os
import subprocess
import sys
import textwrap


def _write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(textwrap.dedent(text).lstrip())


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "migrate", *map(str, args)], capture_output=True, text=True)


MAIN = '''
    import os

    import apex
    import torch

    from src.utils import restart_from_checkpoint


    def main(args, model, optimizer, loader):
        if args.use_fp16:
            model, optimizer = apex.amp.initialize(model, optimizer, opt_level="O1")
        to_restore = {"epoch": 0}
        restart_from_checkpoint(
            os.path.join(args.dump_path, "checkpoint.pth.tar"),
            run_variables=to_restore,
            state_dict=model,
            optimizer=optimizer,
            amp=apex.amp,
        )
        for epoch in range(to_restore["epoch"], args.epochs):
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                optimizer.zero_grad()
                if args.use_fp16:
                    with apex.amp.scale_loss(loss, optimizer) as scaled_loss:
                        scaled_loss.backward()
                else:
                    loss.backward()
                optimizer.step()
            save_dict = {"epoch": epoch + 1, "state_dict": model.state_dict(), "optimizer": optimizer.state_dict()}
            if args.use_fp16:
                save_dict["amp"] = apex.amp.state_dict()
            torch.save(save_dict, os.path.join(args.dump_path, "checkpoint.pth.tar"))
'''

GENERIC_UTILS = '''
    import os

    import torch


    def restart_from_checkpoint(ckp_path, run_variables=None, **kwargs):
        """Re-start from checkpoint."""
        if not os.path.isfile(ckp_path):
            return
        checkpoint = torch.load(ckp_path, map_location="cpu")
        for key, value in kwargs.items():
            if key in checkpoint and value is not None:
                try:
                    msg = value.load_state_dict(checkpoint[key], strict=False)
                    print(msg)
                except TypeError:
                    msg = value.load_state_dict(checkpoint[key])
        if run_variables is not None:
            for var_name in run_variables:
                if var_name in checkpoint:
                    run_variables[var_name] = checkpoint[var_name]
'''


def _project(root, utils=GENERIC_UTILS, main=MAIN):
    _write(root, "main_swav.py", main)
    _write(root, "src/__init__.py", "")
    _write(root, "src/utils.py", utils)


def test_generic_kwargs_loader_in_another_module_gets_the_scaler(tmp_path):
    _project(tmp_path)
    utils_before = (tmp_path / "src" / "utils.py").read_text()
    res = _cli("rewrite", tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    main = (tmp_path / "main_swav.py").read_text()
    assert "        amp=scaler,\n" in main
    assert 'save_dict["amp"] = scaler.state_dict()' in main
    assert "apex" not in main
    assert (tmp_path / "src" / "utils.py").read_text() == utils_before
    assert "A2A135" in res.stdout and "A2A107" in res.stdout and "A2A136" not in res.stdout
    again = _cli("rewrite", "--diff", tmp_path)
    assert again.returncode == 0 and "+++" not in again.stdout, again.stdout
    # the migrated run is clean for the checkpoint lint too
    check = _cli("check", tmp_path)
    assert check.returncode == 0 and "A2A704" not in check.stdout, check.stdout


def test_only_the_caller_in_the_run_still_reads_the_helper_it_imports(tmp_path):
    _project(tmp_path)
    res = _cli("rewrite", tmp_path / "main_swav.py")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "amp=scaler," in (tmp_path / "main_swav.py").read_text()


def test_dedicated_helper_parameter_gets_the_scaler(tmp_path):
    _project(tmp_path, utils='''
        import torch


        def restart_from_checkpoint(ckp_path, run_variables=None, state_dict=None, optimizer=None, amp=None):
            checkpoint = torch.load(ckp_path, map_location="cpu")
            state_dict.load_state_dict(checkpoint["state_dict"])
            optimizer.load_state_dict(checkpoint["optimizer"])
            if amp is not None and "amp" in checkpoint:
                amp.load_state_dict(checkpoint["amp"])
            run_variables["epoch"] = checkpoint["epoch"]
    ''')
    res = _cli("rewrite", tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    main = (tmp_path / "main_swav.py").read_text()
    assert "amp=scaler," in main and "apex" not in main


def test_helper_that_uses_more_of_amp_leaves_save_and_restore_as_they_are(tmp_path):
    _project(tmp_path, utils='''
        import torch


        def restart_from_checkpoint(ckp_path, run_variables=None, **kwargs):
            checkpoint = torch.load(ckp_path, map_location="cpu")
            for key, value in kwargs.items():
                value.load_state_dict(checkpoint[key])
                if key == "amp":
                    value.init()
    ''')
    before = (tmp_path / "main_swav.py").read_text()
    res = _cli("rewrite", tmp_path)
    assert (tmp_path / "main_swav.py").read_text() == before
    lines = [ln for ln in res.stdout.splitlines() if "main_swav.py:" in ln]
    assert any(":18:" in ln and "A2A137" in ln for ln in lines), res.stdout  # the amp argument
    assert any(":32:" in ln and "A2A136" in ln for ln in lines), res.stdout  # the save
    assert res.returncode == 1


def test_missing_helper_module_leaves_both_sites_and_reports_them(tmp_path):
    _write(tmp_path, "main_swav.py", MAIN)  # src/utils.py is not there
    before = (tmp_path / "main_swav.py").read_text()
    res = _cli("rewrite", tmp_path)
    assert (tmp_path / "main_swav.py").read_text() == before
    assert res.stdout.count("A2A136") >= 2, res.stdout
    assert "A2A135" not in res.stdout and "A2A106" not in res.stdout
