"""How `check` time grows with the tree: cold and warm runs at 1x and at Kx the files.

    python benchmarks/scale.py [--files 2900 58000] [--jobs 2] [--runs 1] [--root /tmp/a2a-scale] [--keep] [--repo DIR]
                               [--edit]

Each tree is made of copies of one legacy training package and many plain modules. A copy
(`projK/`) holds the shapes cross-module migration works on: `train.py` (amp.initialize, calls
`train_one_epoch` of `engine.py` and the `backward` helper of `losses.py`, saves `amp.state_dict()`),
`engine.py` (scale_loss in a helper that gains a scaler parameter), `losses.py` (a backward helper),
`optim.py` (a fused optimizer), `launch.py` (mp.spawn), and plain model / data / util modules beside
them, some of which import `engine` and `losses` without calling the helpers. Every copy uses the
same module and function names, as the packages of a monorepo do.

For each size: the tree is written under --root, then `apex2amp check --format json` runs as a
whole process, cold (an empty cache folder) and then warm (the same cache, nothing changed), and
the floor "read every Python file from a Python with libcst imported" (benchmarks/bench.py's) is
timed; each --runs times, keeping the least wall time and, apart, the least CPU time (user + system
of the process and its workers: what a busy shared machine inflates least). Prints seconds, files/s,
the ratio of the warm run to the read floor, and the large/small ratio of each column. Nothing in the trees is
written by apex2amp (`check` writes nothing); the trees are removed unless --keep. --repo runs the
apex2amp of another checkout on the same trees (to compare two branches). --edit also times a warm
run after one published fact changed (a second scaler function added to `proj0/engine.py`, put back
afterwards): what re-running after an edit to a helper costs.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ENGINE = '''"""Training and evaluation loops of project {k}."""
import time

import torch
from apex import amp


def train_one_epoch(model, loader, optimizer, epoch, log_every=50):
    model.train()
    start = time.time()
    for step, (images, target) in enumerate(loader):
        output = model(images)
        loss = torch.nn.functional.cross_entropy(output, target)
        optimizer.zero_grad()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
        if step % log_every == 0:
            print(f"epoch {{epoch}} step {{step}} loss {{loss.item():.4f}} {{time.time() - start:.1f}}s")


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    correct = total = 0
    for images, target in loader:
        correct += (model(images).argmax(1) == target).sum().item()
        total += target.numel()
    return correct / max(total, 1)
'''

LOSSES = '''import torch
from apex import amp


def backward(loss, optimizer, args):
    if args.fp16:
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
    else:
        loss.backward()


def smooth_ce(logits, target, eps=0.1):
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.gather(1, target[:, None]).squeeze(1) * (1 - eps) + logp.mean(-1) * eps).mean()
'''

TRAIN = '''"""Entry point of project {k}: python -m proj{k}.train --opt-level O1"""
import argparse

import torch
from apex import amp

from proj{k}.engine import evaluate, train_one_epoch
from proj{k}.nets.net_0 import build_0


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--opt-level", default="O1")
    parser.add_argument("--epochs", type=int, default={epochs})
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--out", default="checkpoint_{k}.pt")
    return parser.parse_args()


def main():
    args = parse_args()
    model = build_0().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    model, optimizer = amp.initialize(model, optimizer, opt_level=args.opt_level)
    loader = []
    for epoch in range(args.epochs):
        train_one_epoch(model, loader, optimizer, epoch)
        print("accuracy", evaluate(model, loader))
        torch.save({{"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "amp": amp.state_dict()}}, args.out)


if __name__ == "__main__":
    main()
'''

FINETUNE = '''import argparse

import torch
import torch.nn.functional as F
from apex import amp

from proj{k}.losses import backward


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp16", action="store_true")
    parser.add_argument("--opt-level", default="O2")
    args = parser.parse_args()
    model = torch.nn.Linear(16, {width}).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    if args.fp16:
        model, optimizer = amp.initialize(model, optimizer, opt_level=args.opt_level)
    for step in range(100):
        x = torch.randn(8, 16).cuda()
        loss = F.mse_loss(model(x), torch.zeros(8, {width}).cuda())
        optimizer.zero_grad()
        backward(loss, optimizer, args)
        optimizer.step()


if __name__ == "__main__":
    main()
'''

OPTIM = '''from apex.optimizers import FusedAdam


def build_optimizer(model, lr={lr}, weight_decay=0.05):
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (no_decay if name.endswith(".bias") or param.ndim == 1 else decay).append(param)
    groups = [{{"params": decay, "weight_decay": weight_decay}}, {{"params": no_decay, "weight_decay": 0.0}}]
    return FusedAdam(groups, lr=lr)
'''

LAUNCH = '''import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(gpu, ngpus, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("nccl", world_size=ngpus, rank=gpu)
    torch.cuda.set_device(gpu)


if __name__ == "__main__":
    mp.spawn(worker, nprocs=torch.cuda.device_count(), args=(torch.cuda.device_count(), {port}))
'''

NET = '''"""A block of project {k}. For example, `clamp` values before export; no mixed precision here."""
import math

import torch
import torch.nn as nn


class Block{n}(nn.Module):
    def __init__(self, dim={dim}):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.scale = math.sqrt(dim)

    def forward(self, x):
        # keep activations in range (clamp); processes spawn elsewhere
        return self.norm(self.proj(x)).clamp(min=-self.scale, max=self.scale)


def build_{n}(pretrained=False, **kwargs):
    model = Block{n}(**kwargs)
    if pretrained:
        raise ValueError("no weights for example model {n}")
    return model
'''

DATA = '''import json
import os
from typing import Dict, List


def load_split_{n}(root: str, name: str = "train") -> List[Dict[str, str]]:
    """Read a split file of project {k} (one JSON object per line)."""
    path = os.path.join(root, f"{{name}}.jsonl")
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def summarize_{n}(rows):
    counts = {{}}
    for row in rows:
        counts[row["label"]] = counts.get(row["label"], 0) + 1
    return dict(sorted(counts.items()))
'''

TOOL = '''"""Evaluate a saved checkpoint of project {k} (reads the engine's loop, trains nothing)."""
import torch

from proj{k} import engine
from proj{k}.losses import smooth_ce


def report_{n}(model, loader, path="checkpoint_{k}.pt"):
    state = torch.load(path, map_location="cpu")
    model.load_state_dict(state["model"])
    accuracy = engine.evaluate(model, loader)
    print(f"{{path}}: accuracy {{accuracy:.3f}}")
    return accuracy, smooth_ce
'''

UTIL = '''import torch


def cast_weights_{n}(state, dtype=torch.float32):
    """Checkpoints often store reduced-precision weights; cast them for inference."""
    return {{k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}}


def attention_mask_{n}(scores, mask):
    return scores.masked_fill(mask == 0, float("-inf"))
'''

LEGACY = {"engine.py": ENGINE, "losses.py": LOSSES, "train.py": TRAIN, "finetune.py": FINETUNE,
          "optim.py": OPTIM, "launch.py": LAUNCH}
PLAIN: List[Tuple[str, str]] = [("nets", NET), ("data", DATA), ("tools", TOOL), ("utils", UTIL)]
PER_COPY = 58  # files of one copy: its __init__.py files, legacy modules and plain modules


def write_copy(root: str, k: int) -> int:
    """Write project k (PER_COPY files); returns how many files it wrote."""
    base = os.path.join(root, f"proj{k}")
    values = {"k": k, "epochs": 10 + k % 7, "width": 4 + k % 5, "lr": f"{1e-3 * (1 + k % 3):g}",
              "port": 29500 + k % 400}
    files: Dict[str, str] = {"__init__.py": ""}
    for name, text in LEGACY.items():
        files[name] = text.format(**values)
    folders = sorted({f for f, _ in PLAIN})
    for folder in folders:
        files[os.path.join(folder, "__init__.py")] = ""
    n = 0
    while len(files) < PER_COPY:
        folder, text = PLAIN[n % len(PLAIN)]
        files[os.path.join(folder, f"{folder[:-1]}_{n}.py")] = text.format(n=n, k=k, dim=8 + (n + k) % 24)
        n += 1
    for rel, text in files.items():
        path = os.path.join(base, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
    return len(files)


def generate(root: str, files: int) -> int:
    """A tree of about `files` Python files under `root` (whole copies); returns the count."""
    os.makedirs(root, exist_ok=True)
    return sum(write_copy(root, k) for k in range(max(1, round(files / PER_COPY))))


READ_FLOOR = """
import os, sys, libcst, libcst.metadata
for folder, _, names in os.walk(sys.argv[1]):
    for n in names:
        if n.endswith('.py'):
            with open(os.path.join(folder, n), 'rb') as fh:
                fh.read()
"""  # the floor of benchmarks/bench.py: every file read, from a Python that has imported libcst


def timed(cmd: List[str], cwd: str, repo: str = ROOT) -> Tuple[float, float, int, bytes]:
    """(wall seconds, CPU seconds of the process and its workers, exit status, stdout) of `cmd`."""
    env = dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""), NO_COLOR="1")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, p.returncode, p.stdout


def compile_sources(repo: str) -> None:
    """apex2amp's bytecode, as an installed tool has it (benchmarks/bench.py does the same)."""
    import compileall
    for package in ("migrate", "codemods", "apex2amp"):
        compileall.compile_dir(os.path.join(repo, package), quiet=1)


EDIT = '''

def train_more(model, loader, optimizer):
    for images, target in loader:
        loss = model(images).sum()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
'''  # appended to proj0/engine.py by --edit: the module publishes a second scaler function


def measure(tree: str, jobs: int, repo: str = ROOT, runs: int = 1, edit: bool = False) -> Dict[str, float]:
    """Seconds of each command, the least of `runs` runs (wall and CPU apart): cold runs each start
    from an empty cache folder, warm runs re-run over the cache the first cold run filled; with
    `edit`, one warm run more after a published fact changed ("edit")."""
    out: Dict[str, float] = {}

    def keep(name: str, wall: float, cpu: float) -> None:
        out[name] = min(out.get(name, wall), wall)
        out[name + " cpu"] = min(out.get(name + " cpu", cpu), cpu)

    reference = None
    warm_cache = tempfile.mkdtemp(prefix="a2a-scale-cache-")
    try:
        for r in range(runs):
            cache = warm_cache if r == 0 else tempfile.mkdtemp(prefix="a2a-scale-cache-")
            check = [sys.executable, "-m", "apex2amp", "check", "--format", "json", "-j", str(jobs), "--cache-dir"]
            wall, cpu, rc, stdout = timed(check + [cache, "."], tree, repo)
            if cache != warm_cache:
                shutil.rmtree(cache, ignore_errors=True)
            keep("cold", wall, cpu)
            reference = (rc, stdout) if reference is None else reference
            wall, cpu, rc_w, out_w = timed(check + [warm_cache, "."], tree, repo)
            keep("warm", wall, cpu)
            if rc not in (0, 1) or (rc, stdout) != reference or (rc_w, out_w) != reference:
                raise SystemExit(f"{tree}: cold and warm runs disagree (rc {rc} / {rc_w})")
            wall, cpu, _, _ = timed([sys.executable, "-c", READ_FLOOR, tree], tree)
            keep("read", wall, cpu)
        if edit:
            engine = os.path.join(tree, "proj0", "engine.py")
            with open(engine, encoding="utf-8") as fh:
                before = fh.read()
            try:
                with open(engine, "a", encoding="utf-8") as fh:
                    fh.write(EDIT)
                wall, cpu, rc, _ = timed(check + [warm_cache, "."], tree, repo)
                if rc not in (0, 1):
                    raise SystemExit(f"{tree}: the run after the edit failed (rc {rc})")
                keep("edit", wall, cpu)
            finally:
                with open(engine, "w", encoding="utf-8", newline="") as fh:
                    fh.write(before)
        return out
    finally:
        shutil.rmtree(warm_cache, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, nargs="+", default=[2900, 58000])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--runs", type=int, default=1, help="runs of each command; the least time is kept")
    ap.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "a2a-scale"))
    ap.add_argument("--keep", action="store_true", help="keep the generated trees")
    ap.add_argument("--repo", default=ROOT, help="the apex2amp checkout to run (default: this one)")
    ap.add_argument("--edit", action="store_true", help="also time a warm run after a published fact changed")
    a = ap.parse_args()
    repo = os.path.abspath(a.repo)
    compile_sources(repo)
    rows = []
    for n in a.files:
        tree = os.path.join(a.root, str(n))
        if not os.path.isdir(tree):
            generate(tree, n)
        count = sum(1 for _, _, names in os.walk(tree) for x in names if x.endswith(".py"))
        load = os.getloadavg()[0]
        m = measure(tree, a.jobs, repo, a.runs, a.edit)
        rows.append((count, m))
        print(f"{count:>7} files (load {load:.1f}): cold {m['cold']:7.1f}s ({count / m['cold']:6.0f} files/s, "
              f"cpu {m['cold cpu']:6.1f}s)  warm {m['warm']:6.2f}s (cpu {m['warm cpu']:6.2f}s)  "
              f"read {m['read']:5.2f}s (cpu {m['read cpu']:5.2f}s)  warm/read {m['warm'] / m['read']:4.1f}x "
              f"(cpu {m['warm cpu'] / m['read cpu']:4.1f}x)"
              + (f"  edit {m['edit']:6.2f}s (cpu {m['edit cpu']:6.2f}s)" if "edit" in m else ""), flush=True)
        if not a.keep:
            shutil.rmtree(tree, ignore_errors=True)
    if len(rows) > 1:
        (n0, m0), (n1, m1) = rows[0], rows[-1]
        print(f"{n1 / n0:.1f}x the files: cold {m1['cold'] / m0['cold']:.1f}x the time "
              f"(cpu {m1['cold cpu'] / m0['cold cpu']:.1f}x), warm {m1['warm'] / m0['warm']:.1f}x "
              f"(cpu {m1['warm cpu'] / m0['warm cpu']:.1f}x), read {m1['read'] / m0['read']:.1f}x "
              f"(cpu {m1['read cpu'] / m0['read cpu']:.1f}x)")


if __name__ == "__main__":
    main()
