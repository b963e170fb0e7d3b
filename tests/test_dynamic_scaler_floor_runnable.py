"""The GradScaler an A2A146 finding names for a hand-written dynamic loss scaler, run as the finding writes it
(its floor recipe included), keeps the same scale and takes the same steps as the hand scaler, step by step,
through overflows that reach the floor and clean windows that grow it; a float window (computed) is mapped
to int(window). Through the CLI (`migrate check --format json`), on CPU."""
import json
import os
import re
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(HERE, "fixtures", "dynamic_scaler", "floored_scaler.unchanged.py")
# overflow at these steps: two in a row reach the floor, then clean windows grow the scale again
OVERFLOWS = {1, 2, 3, 4, 9, 10, 11, 12, 13, 20}
STEPS = 30


def _messages():
    res = subprocess.run([sys.executable, "-m", "migrate", "check", "--format", "json", "--no-cache", FIXTURE],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": HERE})
    assert res.returncode == 1, res.stdout + res.stderr
    (report,) = json.loads(res.stdout)["files"]
    found = {f["line"]: f["message"] for f in report["findings"] if f["code"] == "A2A146"}
    return found


def _hand(scaler, lr=0.1):
    w = torch.tensor([1.0, -2.0])
    scales = []
    for t in range(STEPS):
        grad = torch.tensor([0.5, 0.25]) * (t + 1) * scaler.cur_scale
        overflow = t in OVERFLOWS
        if overflow:
            grad = grad * float("inf")
        else:
            w = w - lr * grad / scaler.cur_scale
        scaler.update_scale(overflow)
        scales.append(scaler.cur_scale)
    return w, scales


def _migrated(make, floor_stmt, name, lr=0.1):
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = torch.optim.SGD([w], lr=lr)
    env = {"torch": torch, "window": 8 / 2}
    scaler = eval(make, env)
    env[name] = scaler
    scales = []
    for t in range(STEPS):
        opt.zero_grad()
        loss = (w * torch.tensor([0.5, 0.25]) * (t + 1)).sum()
        scaler.scale(loss).backward()
        if t in OVERFLOWS:
            w.grad.fill_(float("inf"))
        scaler.step(opt)
        scaler.update()
        if floor_stmt:
            exec(floor_stmt, env)
        scales.append(scaler.get_scale())
    return w.detach(), scales


def _mapping(msg, name):
    make = re.search(name + r" = (torch\.amp\.GradScaler\(.*?\)), with", msg).group(1).replace('"cuda"', '"cpu"')
    floor = re.search(r"add `(if " + name + r"\.get_scale\(\) < .*?)`", msg)
    return make, floor.group(1) if floor else None


def test_the_named_gradscaler_and_its_floor_run_like_the_hand_scaler():
    found = _messages()
    assert sorted(found) == [42, 43]
    ns = {}
    with open(FIXTURE, encoding="utf-8") as fh:
        exec(compile(fh.read(), FIXTURE, "exec"), ns)
    for line, name in ((42, "floored"), (43, "literal")):
        make, floor = _mapping(found[line], name)
        assert floor is not None, found[line]
        if name == "floored":
            assert "growth_interval=int(window)" in make and "< 2.0" in floor
        w_hand, s_hand = _hand(ns[name])
        w_amp, s_amp = _migrated(make, floor, name)
        assert min(s_hand) == (2.0 if name == "floored" else 1)  # the floor was reached
        assert s_amp == s_hand
        torch.testing.assert_close(w_amp, w_hand, rtol=1e-6, atol=1e-6)


def test_without_the_floor_recipe_gradscaler_falls_below_the_floor():
    found = _messages()
    make, _ = _mapping(found[43], "literal")
    ns = {}
    with open(FIXTURE, encoding="utf-8") as fh:
        exec(compile(fh.read(), FIXTURE, "exec"), ns)
    _, s_hand = _hand(ns["literal"])
    _, s_amp = _migrated(make, None, "literal")
    assert min(s_amp) < 1 <= min(s_hand)  # why the finding names the floor
