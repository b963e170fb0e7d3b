"""apex FusedLAMB end to end (A2A307): fixtures/runnable/lamb/legacy (a Swin-shaped optimizer factory picking
FusedLAMB by its config name from a `try` import, apex amp at --opt-level, a checkpoint) is rewritten with the
real CLI (a LAMB class added to optim_factory.py); the output agrees with the hand migration (a LAMB written
by hand in lamb.py, torch.amp) and with the legacy script on the apex emulation, in fp32, O1 and O2, with
adam_w_mode on and off, use_nvlamb and a tight max_grad_norm, through save + resume. The added LAMB and
the emulation's separately written FusedLAMB are also run side by side over several steps and must agree
within fp32 rounding (parameters, moments, gradients, step counts)."""
import ast
import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

torch = pytest.importorskip("torch")

from migrate.verify.runner import run_side  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.join(HERE, "fixtures", "runnable", "lamb")
EMULATION = os.path.join(HERE, "migrate", "verify", "shim", "apex_emulation", "apex", "optimizers", "__init__.py")
LINE = re.compile(r"^step (\d+) loss (\S+) wsum (\S+)$")
STEPS = 6
MODES = [(), ("--opt-level", "O1"), ("--opt-level", "O2")]
VARIANTS = [(), ("--l2", "--nvlamb", "--max-norm", "0.05"), ("--weight-decay", "0", "--lr", "0.05")]


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    dst = tmp_path_factory.mktemp("lamb")
    shutil.copytree(os.path.join(ROOT, "legacy"), dst, dirs_exist_ok=True)
    res = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True)
    assert "A2A307" in res.stdout and "A2A305" not in res.stdout and "A2A118" not in res.stdout, res.stdout
    for name in ("train.py", "optim_factory.py"):
        tree = ast.parse((dst / name).read_text())
        assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                    and "apex" in ast.dump(n)], name
    tree = ast.parse((dst / "optim_factory.py").read_text())
    assert [n.name for n in tree.body if isinstance(n, ast.ClassDef)] == ["LAMB"]
    again = subprocess.run([sys.executable, "-m", "migrate", "rewrite", "--diff", str(dst)], capture_output=True,
                           text=True)
    assert again.stdout.count("+++") == 0, again.stdout
    return str(dst)


@functools.lru_cache(maxsize=None)
def _run(folder, args, cwd=None):
    side = run_side(folder, "train.py", ["--steps", str(STEPS), *args], steps=100, device="cpu",
                    apex="emulated", cwd=cwd)
    assert side.returncode == 0, side.output
    steps = [LINE.match(ln).groups() for ln in side.output.splitlines() if LINE.match(ln)]
    return [(int(i), float(loss), float(w)) for i, loss, w in steps]


def _resumed(folder, args):
    work = tempfile.mkdtemp()
    ckpt = os.path.join(work, "ckpt.pt")
    first = _run(folder, args + ("--save-at", "3", "--ckpt", ckpt), cwd=work)
    second = _run(folder, args + ("--resume", ckpt), cwd=work)
    return first[:3] + second


def _close(a, b, rel):
    assert len(a) == len(b) == STEPS
    for (i, la, wa), (j, lb, wb) in zip(a, b):
        assert i == j
        assert la == pytest.approx(lb, rel=rel) and wa == pytest.approx(wb, rel=rel), (i, a, b)


@pytest.mark.parametrize("variant", VARIANTS, ids=["adamw", "l2-nvlamb-clip", "no-decay"])
@pytest.mark.parametrize("mode", MODES, ids=["fp32", "O1", "O2"])
def test_rewritten_matches_hand_migration(rewritten, mode, variant):
    """The hand LAMB takes 1 - beta ** t in double where apex (and the added class) rounds beta to fp32 first:
    a relative 1e-5 at t=1 in the second moment's correction."""
    _close(_run(rewritten, mode + variant), _run(os.path.join(ROOT, "migrated"), mode + variant), 2e-5)


@pytest.mark.parametrize("variant", VARIANTS, ids=["adamw", "l2-nvlamb-clip", "no-decay"])
@pytest.mark.parametrize("mode", MODES, ids=["fp32", "O1", "O2"])
def test_legacy_on_apex_emulation_agrees(rewritten, mode, variant):
    """fp32: fp32 rounding; O1: close; O2 (apex: fp16 model, fp32 master weights): close."""
    _close(_run(os.path.join(ROOT, "legacy"), mode + variant), _run(rewritten, mode + variant),
           1e-6 if not mode else 2e-3)


@pytest.mark.parametrize("mode", MODES, ids=["fp32", "O1", "O2"])
def test_save_and_resume(rewritten, mode):
    full = _run(rewritten, mode)
    assert _resumed(rewritten, mode) == full
    assert _resumed(os.path.join(ROOT, "migrated"), mode) == _run(os.path.join(ROOT, "migrated"), mode)


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """The LAMB class the CLI adds (from a file rewritten here) and the emulation's FusedLAMB."""
    dst = tmp_path_factory.mktemp("lamb_unit") / "opt.py"
    dst.write_text("from apex.optimizers import FusedLAMB\n\n\ndef make(params, **kw):\n"
                   "    return FusedLAMB(params, **kw)\n")
    subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True)
    assert "class LAMB" in dst.read_text()
    return _load(str(dst), "lamb_tool").make, _load(EMULATION, "apex_opt_emulated").FusedLAMB


CONFIGS = [dict(lr=1e-2, weight_decay=0.01),
           dict(lr=5e-3, weight_decay=0.1, adam_w_mode=False, max_grad_norm=0.1),
           dict(lr=1e-2, weight_decay=0.0, use_nvlamb=True, max_grad_norm=100.0),
           dict(lr=1e-2, weight_decay=0.05, bias_correction=False, grad_averaging=False, betas=(0.8, 0.99)),
           dict(lr=2e-2, weight_decay=0.02, max_grad_norm=0.0)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=["default", "l2-clip", "nvlamb", "no-bias-corr", "max-norm-0"])
def test_added_lamb_equals_emulated_fused_lamb(pair, cfg, dtype):
    make, Fused = pair
    torch.manual_seed(0)
    init = [torch.randn(8, 5), torch.randn(5), torch.zeros(3), torch.randn(4, 4)]
    sides = []
    for build in (make, Fused):
        ps = [torch.nn.Parameter(t.clone().to(dtype)) for t in init]
        groups = [{"params": ps[:2]}, {"params": ps[2:3], "weight_decay": 0.0}, {"params": ps[3:], "lr": 3e-3}]
        sides.append((ps, build(groups, **cfg)))
    g = torch.Generator().manual_seed(3)
    for step in range(7):
        grads = [torch.randn(t.shape, generator=g) * (5.0 if step % 2 else 0.2) for t in init]
        for ps, opt in sides:
            for p, gr in zip(ps, grads):
                p.grad = None if (step == 2 and p is ps[3]) else gr.to(dtype).clone()  # each side's own: both write the update into it
            opt.step()
        (pa, oa), (pb, ob) = sides
        tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=2e-3, atol=2e-3)
        for a, b in zip(pa, pb):
            torch.testing.assert_close(a.detach().float(), b.detach().float(), **tol)
            if a.grad is not None:
                torch.testing.assert_close(a.grad.float(), b.grad.float(), **tol)
            for key in ("exp_avg", "exp_avg_sq"):
                torch.testing.assert_close(oa.state[a][key].float(), ob.state[b][key].float(), **tol)
        assert [grp["step"] for grp in oa.param_groups] == [grp["step"] for grp in ob.param_groups] == [step + 1] * 3
    sa, sb = oa.state_dict(), ob.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert {k: sorted(v) for k, v in sa["state"].items()} == {k: sorted(v) for k, v in sb["state"].items()}


def test_amsgrad_raises_as_apex_did(pair):
    make, Fused = pair
    for build in (make, Fused):
        with pytest.raises(RuntimeError):
            build([torch.nn.Parameter(torch.ones(2))], amsgrad=True)
