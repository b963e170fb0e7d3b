"""Generate large, real-shaped source trees for scale, robustness and benchmark runs.

`generate(root, files=N, legacy_ratio=R)` writes N Python files in nested packages: a share R of
them are legacy training code (the fixtures' `.before.py` files, the runnable legacy scripts and
this module's own templates, each with renamed variables, extra helper functions and shuffled
surroundings); the rest are plain model/data/util modules of the kind a monorepo is full of,
seeded with the words that fool a naive prefilter (`example`, `clamp`, `float16`, `spawn` in prose).

Run as a script: `python tests/treegen.py OUT [--files N] [--legacy-ratio R] [--seed S]`.
"""
from __future__ import annotations

import argparse
import glob
import os
import random
import re
from typing import List

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(os.path.dirname(HERE), "fixtures")

# Legacy shapes written for these tests (apex amp, apex DDP, fused optimizers, spawn, deprecated cuda amp).
TEMPLATES = [
    '''"""Train a classifier with apex mixed precision."""
import argparse
import os

import torch
import torch.nn as nn
try:
    from apex import amp
    from apex.parallel import DistributedDataParallel as DDP
    has_apex = True
except ImportError:
    amp = None
    has_apex = False


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    parser.add_argument("--opt-level", default="O1")
    parser.add_argument("--lr", type=float, default=0.1)
    return parser.parse_args()


def train_one_epoch(model, loader, optimizer, criterion, args):
    model.train()
    for images, target in loader:
        output = model(images)
        loss = criterion(output, target)
        optimizer.zero_grad()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()


def main():
    args = parse_args()
    torch.cuda.set_device(args.local_rank)
    torch.distributed.init_process_group(backend="nccl", init_method="env://")
    model = nn.Linear(10, 2).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    model, optimizer = amp.initialize(model, optimizer, opt_level=args.opt_level)
    model = DDP(model)
    criterion = nn.CrossEntropyLoss()
    train_one_epoch(model, [], optimizer, criterion, args)


if __name__ == "__main__":
    main()
''',
    '''import torch
from torch.cuda.amp import autocast, GradScaler


def fit(model, loader, optimizer, use_amp=True):
    scaler = GradScaler(enabled=use_amp)
    for inputs, labels in loader:
        optimizer.zero_grad()
        with autocast(enabled=use_amp):
            preds = model(inputs)
            loss = torch.nn.functional.cross_entropy(preds, labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    return scaler.get_scale()
''',
    '''import torch
import torch.nn.functional as F


@torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)
def project(ctx, x):
    return x


def evaluate(model, loader):
    model.eval()
    total = 0.0
    with torch.no_grad(), torch.cuda.amp.autocast():
        for batch, labels in loader:
            total += F.cross_entropy(model(batch), labels).item()
    return total
''',
    '''import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from apex.optimizers import FusedAdam


def worker(gpu, ngpus_per_node, args):
    rank = args.rank * ngpus_per_node + gpu
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29500"
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:23456", world_size=args.world_size, rank=rank)
    model = torch.nn.Linear(4, 4).cuda(gpu)
    optimizer = FusedAdam(model.parameters(), lr=1e-3)
    return model, optimizer


def launch(args):
    ngpus_per_node = torch.cuda.device_count()
    args.world_size = ngpus_per_node * args.world_size
    mp.spawn(worker, nprocs=ngpus_per_node, args=(ngpus_per_node, args))
''',
]

PLAIN = [
    '''"""Model zoo helpers. For example, `clamp` values before export; no mixed precision here."""
import math

import torch
import torch.nn as nn


class Block{n}(nn.Module):
    def __init__(self, dim={n}):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.scale = math.sqrt(dim)

    def forward(self, x):
        # example: keep activations in range (clamp), processes spawn elsewhere
        return self.proj(x).clamp(min=-self.scale, max=self.scale)


def build_{n}(pretrained=False, **kwargs):
    model = Block{n}(**kwargs)
    if pretrained:
        raise ValueError("no weights for example model {n}")
    return model
''',
    '''import json
import os
from typing import Dict, List


def load_split_{n}(root: str, name: str = "train") -> List[Dict[str, str]]:
    """Read an example split file (one JSON object per line)."""
    path = os.path.join(root, f"{{name}}.jsonl")
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def summarize_{n}(rows):
    counts = {{}}
    for row in rows:
        counts[row["label"]] = counts.get(row["label"], 0) + 1
    return dict(sorted(counts.items()))
''',
    '''import torch


def cast_weights_{n}(state, dtype=torch.float32):
    """Examples often store reduced-precision weights; cast them for inference."""
    return {{k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}}


def attention_mask_{n}(scores, mask):
    return scores.masked_fill(mask == 0, float("-inf"))
''',
]

_RENAMES = [("model", "net"), ("optimizer", "opt"), ("loader", "data_iter"), ("loss", "objective"),
            ("args", "cfg"), ("images", "inputs_"), ("criterion", "loss_fn")]


def legacy_sources() -> List[str]:
    """The legacy texts to draw from: fixture inputs, runnable legacy scripts and the templates above."""
    out = []
    pats = [os.path.join(FIXTURES, "*", "*.before.py"), os.path.join(FIXTURES, "*", "*.unchanged.py"),
            os.path.join(FIXTURES, "runnable", "*", "legacy", "**", "*.py")]
    for pat in pats:
        for p in sorted(glob.glob(pat, recursive=True)):
            with open(p, "rb") as fh:
                try:
                    out.append(fh.read().decode("utf-8"))
                except UnicodeDecodeError:
                    continue
    return out + TEMPLATES


def vary(text: str, rng: random.Random) -> str:
    """A real-shaped variation: renamed variables (whole words, outside strings' meaning) and extra code."""
    for old, new in rng.sample(_RENAMES, k=rng.randint(0, 3)):
        if re.search(rf"\b{new}\b", text):
            continue
        text = re.sub(rf"(?<![\.\w\"']){old}\b(?![\"'=])", new, text)
    extra = rng.randint(0, 2)
    for i in range(extra):
        text += f"\n\ndef helper_{i}_{rng.randint(0, 9999)}(value, factor=2):\n    return value * factor\n"
    return text


def generate(root: str, files: int = 400, legacy_ratio: float = 0.05, seed: int = 0) -> List[str]:
    """Write `files` Python files under `root` in nested packages; returns their paths."""
    rng = random.Random(seed)
    legacy = legacy_sources()
    paths = []
    n_legacy = int(round(files * legacy_ratio))
    kinds = ["legacy"] * n_legacy + ["plain"] * (files - n_legacy)
    rng.shuffle(kinds)
    for i, kind in enumerate(kinds):
        depth = rng.randint(0, 3)
        parts = [f"pkg{rng.randint(0, 5)}"] + [f"sub{rng.randint(0, 3)}" for _ in range(depth)]
        folder = os.path.join(root, *parts)
        os.makedirs(folder, exist_ok=True)
        for j in range(len(parts)):
            init = os.path.join(root, *parts[: j + 1], "__init__.py")
            if not os.path.exists(init):
                with open(init, "w", encoding="utf-8") as fh:
                    fh.write("")
        if kind == "legacy":
            text = vary(legacy[i % len(legacy)], rng)
            name = f"train_{i}.py"
        else:
            text = PLAIN[i % len(PLAIN)].format(n=i)
            text = text * rng.randint(1, 4)  # bigger modules, still valid
            name = f"mod_{i}.py"
        path = os.path.join(folder, name)
        with open(path, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        paths.append(path)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--legacy-ratio", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    paths = generate(a.out, a.files, a.legacy_ratio, a.seed)
    print(f"wrote {len(paths)} files under {a.out}")


if __name__ == "__main__":
    main()
