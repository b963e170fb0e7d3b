"""How much the apex2amp verify probe adds to step time (not a timed test; prints the figures).

Runs a CPU-native training loop (no CUDA simulation needed) three ways in fresh interpreters:
plain, plain with the deterministic settings the probe turns on, with the probe's loss capture, and
with capture plus CUDA-on-CPU simulation; it prints the median in-loop step time of each. The target:
the capture adds no more than 5% (compare "probe" with "plain + deterministic": determinism is a
deliberate harness setting and its cost belongs to torch's kernels, not to the probe).

    python benchmarks/probe_overhead.py [--steps 300] [--repeats 3] [--width 128] [--batch 32]

The probe's cost is a constant per step (about 0.15 ms here), so its share shrinks as steps grow:
the default toy step (~1 ms) shows the worst case; `--width 1024 --batch 256` gives a step closer to
a real model's.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from migrate.verify.runner import PROBE_DIR  # noqa: E402

LOOP = r'''
import os, sys, time, torch, torch.nn as nn, torch.nn.functional as F
if os.environ.get("BENCH_DETERMINISTIC"):  # what the probe's seeding turns on, without the capture
    import torch.utils.deterministic
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = False
torch.manual_seed(0)
steps = int(sys.argv[1])
width, batch = int(sys.argv[2]), int(sys.argv[3])
model = nn.Sequential(nn.Linear(64, width), nn.BatchNorm1d(width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                      nn.Linear(width, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
scaler = torch.amp.GradScaler("cpu")
x, y = torch.randn(batch, 64), torch.randint(0, 10, (batch,))
times = []
for i in range(steps):
    t = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    times.append(time.perf_counter() - t)
times = sorted(times[20:])
print("MEDIAN", times[len(times) // 2])
'''


def run(script, steps, env_extra, width=128, batch=32):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("APEX2AMP_OUT", None)
    env.update(env_extra)
    out = subprocess.run([sys.executable, script, str(steps), str(width), str(batch)], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.split("MEDIAN")[1].split()[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--width", type=int, default=128, help="hidden width (step time grows with it)")
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "loop.py")
        with open(script, "w") as f:
            f.write(LOOP)
        probe = {"PYTHONPATH": PROBE_DIR, "APEX2AMP_OUT": tmp, "APEX2AMP_STEPS": "0"}
        configs = [("plain", {}), ("plain + deterministic", {"BENCH_DETERMINISTIC": "1"}),
                   ("probe (capture)", probe), ("probe + CUDA simulation", dict(probe, APEX2AMP_DEVICE="cpu"))]
        results = {}
        for _ in range(a.repeats):  # interleave the configurations so machine load hits them alike
            for name, env in configs:
                results.setdefault(name, []).append(run(script, a.steps, env, a.width, a.batch))
    base = statistics.median(results["plain"])
    det = statistics.median(results["plain + deterministic"])
    print("%-26s %12s %14s %18s" % ("configuration", "step (ms)", "vs plain", "vs deterministic"))
    for name, _ in configs:
        t = statistics.median(results[name])
        print("%-26s %12.3f %13.1f%% %17.1f%%" % (name, t * 1e3, (t / base - 1) * 100, (t / det - 1) * 100))
    print("spread of plain runs: %.3f-%.3f ms (a busy machine cannot resolve a few %%)" % (
        min(results["plain"]) * 1e3, max(results["plain"]) * 1e3))


if __name__ == "__main__":
    main()
