"""`apex2amp check` on hand-migrated native AMP code: A2A702 (enabled= not a bool) and A2A703 (an apex
choice left without mixed precision), through the real CLI."""
import json
import subprocess
import sys
import textwrap


def _check(tmp_path, name, code, *extra):
    (tmp_path / name).write_text(textwrap.dedent(code).lstrip())
    res = subprocess.run([sys.executable, "-m", "migrate", "check", "--format", "json", *extra, name],
                         capture_output=True, text=True, cwd=tmp_path)
    doc = json.loads(res.stdout)
    return res.returncode, [(f["code"], f["line"]) for fr in doc["files"] for f in fr["findings"]]


STRING_FLAG = '''
import argparse

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fp16", default="", type=str)
    p.add_argument("--bf16", action="store_true")
    args = p.parse_args()
    model = torch.nn.Linear(4, 2)
    scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)
    with torch.autocast("cuda", dtype=torch.float16, enabled=scaler.is_enabled()):
        loss = model(torch.randn(8, 4)).mean()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.bf16):
        loss = loss + model(torch.randn(8, 4)).mean()
    with torch.autocast("cuda", enabled=bool(args.fp16) and args.bf16):
        loss = loss + model(torch.randn(8, 4)).mean()
    scaler.scale(loss).backward()
'''


def test_string_flag_enabled_is_reported_once_where_it_enters(tmp_path):
    rc, found = _check(tmp_path, "train.py", STRING_FLAG)
    assert rc == 1
    assert found == [("A2A702", 12)]


def test_bool_enabled_values_are_clean(tmp_path):
    rc, found = _check(tmp_path, "train.py", '''
        import argparse

        import torch


        def step(model, x, use_amp: bool, fp16_level):
            with torch.autocast("cuda", enabled=use_amp and fp16_level != "O0"):
                return model(x)


        def main():
            p = argparse.ArgumentParser()
            p.add_argument("--fp16", action="store_true")
            args = p.parse_args()
            on = args.fp16 and torch.cuda.is_available()
            scaler = torch.amp.GradScaler("cuda", enabled=on)
            with torch.cuda.amp.autocast(not args.fp16):
                pass
            return scaler
        ''', "--select", "A2A7")
    assert (rc, found) == (0, [])


def test_cuda_amp_positional_enabled(tmp_path):
    rc, found = _check(tmp_path, "t.py", '''
        import torch
        from torch.cuda.amp import autocast


        def run(cfg, model, x):
            with autocast(cfg.mixed_precision):
                return model(x) if cfg.mixed_precision != "no" else model(x).float()
        ''', "--select", "A2A702")
    assert (rc, found) == (1, [("A2A702", 6)])


def test_a_flag_the_module_does_not_show_is_not_reported(tmp_path):
    """Native AMP code fed from a flag parsed elsewhere (a config object, another file's argparse) is
    ordinary: the lint reports only what the module shows may not be a bool."""
    rc, found = _check(tmp_path, "t.py", '''
        import torch


        def run(cfg, model, x, use_amp):
            scaler = torch.amp.GradScaler("cuda", enabled=cfg.amp)
            with torch.autocast("cuda", enabled=use_amp):
                return model(x), scaler
        ''', "--select", "A2A702")
    assert (rc, found) == (0, [])


APEX_OPTION = '''
import argparse

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--amp", default="apex", choices=["apex", "native", "none"])
    args = parser.parse_args()
    model = torch.nn.Linear(4, 4)
    scaler = None
    if args.amp == "native":
        scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda", enabled=args.amp == "native"):
        loss = model(torch.randn(8, 4)).mean()
    return loss, scaler
'''


def test_option_still_offering_apex_is_reported(tmp_path):
    rc, found = _check(tmp_path, "train.py", APEX_OPTION)
    assert (rc, found) == (1, [("A2A703", 8)])


def test_name_selector_set_to_apex_is_reported(tmp_path):
    rc, found = _check(tmp_path, "train.py", '''
        import torch


        def setup(args):
            use_amp = None
            if args.apex_amp:
                use_amp = "apex"
            elif args.native_amp:
                use_amp = "native"
            if use_amp == "native":
                return torch.amp.GradScaler("cuda")
            return None
        ''')
    assert (rc, found) == (1, [("A2A703", 7)])


def test_no_alarm_where_apex_may_still_reach_amp(tmp_path):
    quiet = {
        # `!=` lets apex in
        "ne.py": APEX_OPTION.replace('enabled=args.amp == "native"', 'enabled=args.amp != "none"').replace(
            'if args.amp == "native":', 'if args.amp != "none":'),
        # apex mapped to native after parsing: the option is assigned
        "mapped.py": APEX_OPTION.replace("args = parser.parse_args()\n", 'args = parser.parse_args()\n'
                                         '    if args.amp == "apex":\n        args.amp = "native"\n'),
        # args goes to a function of another module, which may handle "apex"
        "passed.py": "from engine import train\n" + APEX_OPTION.replace("return loss, scaler",
                                                                       "return train(args, loss, scaler)"),
        # the option no longer offers apex
        "clean.py": APEX_OPTION.replace('default="apex", choices=["apex", "native", "none"]',
                                        'default="native", choices=["native", "none"]'),
    }
    for name, code in quiet.items():
        rc, found = _check(tmp_path, name, code, "--select", "A2A703")
        assert (rc, found) == (0, []), name


def test_explain_new_codes():
    for code in ("A2A130", "A2A131", "A2A132", "A2A702", "A2A703"):
        res = subprocess.run([sys.executable, "-m", "migrate", "explain", code], capture_output=True, text=True)
        assert res.returncode == 0 and code in res.stdout and "## Before" in res.stdout, res.stderr
