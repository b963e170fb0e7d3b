"""Several `amp.initialize` pairs in one block (codemods/amp_multi_init.py) across modules: the function
that initializes both pairs passes the one scaler to the training loop of another module; vid2vid's shape
(the pairs initialized in a `create_optimizer` that returns to the training loop of another module, which
has no scaler) stays as it is, both modules reported."""
import os
import subprocess
import sys
import textwrap


def _write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(textwrap.dedent(text).lstrip())


def _run(root, *extra):
    return subprocess.run([sys.executable, "-m", "migrate", *extra, str(root)], capture_output=True, text=True)


LOOP = '''
    from apex import amp


    def loss_backward(fp16, loss, optimizer):
        optimizer.zero_grad()
        if fp16:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        optimizer.step()


    def train(fp16, netG, netD, optG, optD, loader):
        for x, z in loader:
            fake = netG(z)
            loss_G = -netD(fake).mean()
            loss_D = netD(fake.detach()).mean() - netD(x).mean()
            loss_backward(fp16, loss_G, optG)
            loss_backward(fp16, loss_D, optD)
'''


def test_pairs_pass_one_scaler_to_another_module(tmp_path):
    _write(tmp_path, "loop.py", LOOP)
    _write(tmp_path, "main.py", '''
        import torch
        from apex import amp
        from loop import train


        def main(args, netG, netD, optG, optD, loader):
            if args.fp16:
                netG, optG = amp.initialize(netG, optG, opt_level="O1")
                netD, optD = amp.initialize(netD, optD, opt_level="O1")
            train(args.fp16, netG, netD, optG, optD, loader)
    ''')
    res = _run(tmp_path, "rewrite")
    assert res.returncode == 1, res.stdout + res.stderr
    loop, main = (tmp_path / "loop.py").read_text(), (tmp_path / "main.py").read_text()
    assert "apex" not in loop + main
    assert main.count("torch.amp.GradScaler(") == 1 and "amp.initialize" not in main, main
    assert "train(args.fp16, netG, netD, optG, optD, loader, scaler=scaler)" in main, main
    assert "def loss_backward(fp16, loss, optimizer, scaler):" in loop and "scaler.update()" in loop, loop
    assert loop.count("with torch.autocast(") == 1, loop  # the forward and both losses
    assert _run(tmp_path, "rewrite", "--diff").stdout.count("+++") == 0


def test_vid2vid_shape_stays_reported(tmp_path):
    _write(tmp_path, "models.py", '''
        def create_optimizer(opt, netG, netD):
            if opt.fp16:
                from apex import amp
                netG, optimizer_G = amp.initialize(netG, netG.optimizer_G, opt_level="O1")
                netD, optimizer_D = amp.initialize(netD, netD.optimizer_D, opt_level="O1")
            else:
                optimizer_G, optimizer_D = netG.optimizer_G, netD.optimizer_D
            return netG, netD, optimizer_G, optimizer_D
    ''')
    _write(tmp_path, "train.py", '''
        from models import create_optimizer


        def train(opt, netG, netD, loader):
            netG, netD, optimizer_G, optimizer_D = create_optimizer(opt, netG, netD)
            for x, z in loader:
                fake = netG(z)
                loss_G = -netD(fake).mean()
                loss_D = netD(fake.detach()).mean() - netD(x).mean()
                loss_backward(opt, loss_G, optimizer_G)
                loss_backward(opt, loss_D, optimizer_D)


        def loss_backward(opt, loss, optimizer):
            optimizer.zero_grad()
            if opt.fp16:
                from apex import amp
                with amp.scale_loss(loss, optimizer) as scaled_loss:
                    scaled_loss.backward()
            else:
                loss.backward()
            optimizer.step()


        if __name__ == "__main__":
            train(None, None, None, [])
    ''')
    before = {p: (tmp_path / p).read_text() for p in ("models.py", "train.py")}
    res = _run(tmp_path, "check")
    out = res.stdout + res.stderr
    assert "models.py:4:" in out and "A2A124" in out, out  # the step lives in train.py
    assert "train.py:26:" in out and "A2A117" in out and "return the scaler" in out, out
    assert "several `amp.initialize` calls" not in out, out
    _run(tmp_path, "rewrite")
    assert {p: (tmp_path / p).read_text() for p in before} == before
