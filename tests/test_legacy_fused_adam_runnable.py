"""fixtures/runnable_manual/fused_fp16_nobias: the SpanBERT fine-tuning shape, apex < 0.1's FP16_Optimizer around
`FusedAdam(groups, lr=..., bias_correction=False, max_grad_norm=1.0)` under --fp16 and a BertAdam-like optimizer
on the fp32 path, run on the CPU.

The real CLI rewrites the legacy script (A2A501 + A2A306: the call kept, pointed at the LegacyFusedAdam port
added to the file); the result must equal the hand migration byte for byte. The legacy side runs against the
CPU stand-in of apex < 0.1 (fixtures/runnable_manual/fused_fp16_optimizer/apex_stand_in, checked against
apex's source before its 2019-08 rewrite). Against the original:
- fp32 (no flag): the same program, so the per-step losses are equal exactly.
- `--fp16` (dynamic) and `--fp16 --loss_scale 128` (static): fp16 weights from fp32 masters before, fp32
  weights under autocast after; the losses differ by fp16 rounding (about 3e-4 on losses near 4.5 over 24
  micro-batches; tolerance 1e-3 relative), both take 12 steps and skip the same overflowing one (dynamic). The fixture is sensitive to what the
  port keeps: the same run without the per-group clip, or with the bias correction, leaves the tolerance.
- Each run ends by loading the saved model again, `.half()` under --fp16 (kept by the migration: a model
  built afresh for evaluation), and printing the sum of its logits on held-out ids, compared as the losses.
- The port's update against the stand-in FusedAdam's, on the same fp32 gradients (no loss scale, every
  group clipped): equal to 1e-6 over 5 steps, for each of bias_correction / eps_inside_sqrt.
"""
import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable_manual")
ROOT = os.path.join(HERE, "fused_fp16_nobias")
STAND_IN = os.path.join(HERE, "fused_fp16_optimizer", "apex_stand_in")
REPO = os.path.dirname(os.path.dirname(HERE))
FP16_RTOL = 1e-3


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as fh:
        return fh.read()


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    """The legacy script as `apex2amp rewrite` leaves it."""
    dst = tmp_path_factory.mktemp("fused_fp16_nobias") / "legacy"
    shutil.copytree(os.path.join(ROOT, "legacy"), dst)
    proc = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst / "train.py")], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode == 1, proc.stdout + proc.stderr  # 1: a file was changed
    for code in ("A2A501", "A2A503", "A2A504", "A2A306"):
        assert code in proc.stdout, proc.stdout
    for code in ("A2A301", "A2A304", "A2A502", "A2A507", "A2A509"):  # nothing left, nothing said twice
        assert code not in proc.stdout, proc.stdout
    return (dst / "train.py").read_text(encoding="utf-8")


def _train(source, tmp_path, tag, *args):
    """(per-step losses, optimizer steps, overflows) of `source` run on the CPU; the legacy side imports the
    stand-in, whose FP16_Optimizer prints each overflow it skips; a migrated side prints its final scale."""
    if "scaler.update()" in source:
        source = source.replace('    print(f"optimizer steps {global_step}")',
                                '    print(f"optimizer steps {global_step}")\n    print(f"scale {scaler.get_scale()}")')
    path = tmp_path / f"{tag}.py"
    path.write_text(source.replace('"cuda"', '"cpu"'), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": STAND_IN}
    proc = subprocess.run([sys.executable, str(path), "--do_eval", "--output_dir", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    losses = [float(v) for v in re.findall(r"loss ([-0-9.naninf]+)", proc.stdout)]
    steps = int(re.search(r"optimizer steps (\d+)", proc.stdout).group(1))
    scale = re.search(r"scale ([0-9.]+)", proc.stdout)
    ev = re.search(r"eval logits ([-0-9.]+) dtype (\S+)", proc.stdout)
    losses.append(float(ev.group(1)))  # the evaluation of the saved model, loaded again (fp16 under --fp16)
    assert ev.group(2) == ("torch.float16" if "--fp16" in args else "torch.float32"), proc.stdout
    return losses, steps, proc.stdout.count("Grad overflow"), float(scale.group(1)) if scale else None


def _close(a, b):
    return all(abs(x - y) <= FP16_RTOL * max(1.0, abs(x)) for x, y in zip(a, b)) and len(a) == len(b)


def test_rewrite_equals_the_hand_migration(migrated):
    assert migrated == _read("migrated", "train.py")


def test_fp32_mode_trains_exactly_as_before(migrated, tmp_path):
    legacy = _train(_read("legacy", "train.py"), tmp_path, "legacy")
    assert len(legacy[0]) == 25 and legacy[1] == 12
    assert _train(migrated, tmp_path, "migrated")[:3] == legacy[:3]


@pytest.mark.parametrize("mode,overflows,scale", [((), 1, 2.0 ** 15), (("--loss_scale", "128"), 0, 128.0)],
                         ids=["dynamic", "static"])
def test_fp16_mode_matches_within_fp16_rounding(migrated, tmp_path, mode, overflows, scale):
    """Under the dynamic scale the first scaled gradients overflow fp16 once on both sides: the wrapper skipped
    that step and halved 2**16, GradScaler skips it and ends at 2**15 too."""
    legacy, legacy_steps, legacy_overflows, _ = _train(_read("legacy", "train.py"), tmp_path, "legacy", "--fp16", *mode)
    ours, our_steps, _, our_scale = _train(migrated, tmp_path, "migrated", "--fp16", *mode)
    assert len(legacy) == len(ours) == 25
    assert legacy_steps == our_steps == 12
    assert legacy_overflows == overflows and our_scale == scale
    assert _close(legacy, ours), (legacy, ours)
    # what the port keeps matters here: without the clip, or with the bias correction, the run leaves the tolerance
    for old, new in (("max_grad_norm=1.0)", "max_grad_norm=0.0)"), ("bias_correction=False", "bias_correction=True")):
        assert old in migrated
        changed = _train(migrated.replace(old, new), tmp_path, "changed", "--fp16", *mode)[0]
        assert not _close(legacy, changed), new


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("options", [dict(bias_correction=False, max_grad_norm=1.0),
                                     dict(bias_correction=True, max_grad_norm=0.5, weight_decay=0.01),
                                     dict(bias_correction=False, eps_inside_sqrt=True, max_grad_norm=2.0)],
                         ids=["spanbert", "bias-corrected", "eps-inside-sqrt"])
def test_port_update_equals_apex_fused_adam(options):
    """LegacyFusedAdam (from the migrated fixture) against the stand-in FusedAdam.step(grads=, grad_norms=)
    on the same fp32 gradients, two param groups with their own weight decay, every group over its norm."""
    port = _load(os.path.join(ROOT, "migrated", "train.py"), "nobias_migrated").LegacyFusedAdam
    apex = _load(os.path.join(STAND_IN, "apex", "optimizers.py"), "apex_stand_in_optimizers").FusedAdam
    gen = torch.Generator().manual_seed(0)
    shapes = [(5, 3), (3,), (4, 4)]
    start = [torch.randn(s, generator=gen) for s in shapes]
    grads = [[3 * torch.randn(s, generator=gen) for s in shapes] for _ in range(5)]
    sides = []
    for cls in (port, apex):
        params = [torch.nn.Parameter(t.clone()) for t in start]
        opt = cls([{"params": params[:2], "weight_decay": 0.01}, {"params": params[2:], "weight_decay": 0.0}],
                  lr=1e-2, **{k: v for k, v in options.items() if k != "weight_decay"})
        for step_grads in grads:
            for p, g in zip(params, step_grads):
                p.grad = g.clone()
            if cls is apex:
                groups = [step_grads[:2], step_grads[2:]]
                norms = [float(torch.cat([g.reshape(-1) for g in gs]).norm()) for gs in groups]
                assert all(n > options["max_grad_norm"] for n in norms)  # the clip binds
                opt.step(grads=groups, scale=1.0, grad_norms=norms)
            else:
                opt.step()
        sides.append(params)
    for a, b in zip(*sides):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-7), (a, b)
