"""How much the apex2amp verify probe adds to step time (not a timed test; prints the figures).

Runs a CPU-native training loop (no CUDA simulation needed) three ways in fresh interpreters:
plain, with the probe's loss capture, and with capture plus CUDA-on-CPU simulation, and compares
the median in-loop step time. The target: capture adds no more than 5%.

    python benchmarks/probe_overhead.py [--steps 300] [--repeats 3]
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
import sys, time, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
steps = int(sys.argv[1])
model = nn.Sequential(nn.Linear(64, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
scaler = torch.amp.GradScaler("cpu")
x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
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


def run(script, steps, env_extra):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("APEX2AMP_OUT", None)
    env.update(env_extra)
    out = subprocess.run([sys.executable, script, str(steps)], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.split("MEDIAN")[1].split()[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "loop.py")
        with open(script, "w") as f:
            f.write(LOOP)
        probe = {"PYTHONPATH": PROBE_DIR, "APEX2AMP_OUT": tmp, "APEX2AMP_STEPS": "0"}
        configs = [("plain", {}), ("probe (capture)", probe), ("probe + CUDA simulation", dict(probe, APEX2AMP_DEVICE="cpu"))]
        results = {}
        for _ in range(a.repeats):  # interleave the configurations so machine load hits them alike
            for name, env in configs:
                results.setdefault(name, []).append(run(script, a.steps, env))
    base = statistics.median(results["plain"])
    print("%-26s %12s %10s" % ("configuration", "step (ms)", "overhead"))
    for name, _ in configs:
        t = statistics.median(results[name])
        print("%-26s %12.3f %9.1f%%" % (name, t * 1e3, (t / base - 1) * 100))


if __name__ == "__main__":
    main()
