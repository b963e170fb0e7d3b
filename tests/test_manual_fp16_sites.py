"""Hand-written fp16 training: migrated as a whole (A2A506) or left byte-identical with a finding at each
site (A2A507 casts, A2A508 master copies and their helpers, A2A509 loss multiply / grad divide / halving)."""
import os

import pytest

from codemods.base import Options
from migrate.engine import Selection, rewrite_source

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "manual_fp16")


def _read(name):
    with open(os.path.join(HERE, name), encoding="utf-8") as fh:
        return fh.read()


def _run(src, select=None, **opts):
    sel = Selection(select=tuple(select)) if select else Selection()
    return rewrite_source(src, path="train.py", module_name="train", options=Options(**opts), select=sel)


def _line(src, text, nth=0):
    """1-based line of the nth line holding `text`."""
    hits = [i + 1 for i, ln in enumerate(src.splitlines()) if text in ln]
    return hits[nth]


def _sites(res):
    return sorted((f.line, f.code) for f in res.findings if not f.fixed and f.code in
                  ("A2A506", "A2A507", "A2A508", "A2A509", "A2A511"))


def test_optimize_on_cpu_variant_reports_every_site():
    src = _read("bert_optimize_on_cpu.unchanged.py")
    res = _run(src)
    assert res.new_text == src
    want = sorted([
        (_line(src, "model.half()"), "A2A507"),
        (_line(src, "param_optimizer = [(n, param.clone().detach().to('cpu').float()"), "A2A508"),
        (_line(src, "loss = loss * args.loss_scale"), "A2A509"),
        (_line(src, "for param in model.parameters():"), "A2A509"),
        (_line(src, "is_nan = set_optimizer_params_grad("), "A2A508"),
        (_line(src, "if is_nan:"), "A2A509"),
        (_line(src, "copy_optimizer_params_to_model(model.named_parameters()"), "A2A508"),
    ])
    assert _sites(res) == want
    cast = next(f for f in res.findings if f.code == "A2A507")
    assert "optimize_on_cpu" in cast.message and "rounded to fp16" in cast.message


def test_half_model_with_param_copies_reports_every_site():
    src = _read("half_master_copies.unchanged.py")
    res = _run(src)
    assert res.new_text == src
    want = sorted([
        (_line(src, "return model.cuda().half()"), "A2A507"),
        (_line(src, "param_copy = [param.clone()"), "A2A508"),
        (_line(src, "images.cuda().half()"), "A2A507"),
        (_line(src, "(loss * loss_scale).backward()"), "A2A509"),
        (_line(src, "for param, param_w_grad in zip(param_copy", 0), "A2A508"),
        (_line(src, "for param in param_copy:", 1), "A2A509"),
        (_line(src, "for param, param_w_grad in zip(param_copy", 1), "A2A508"),
    ])
    assert _sites(res) == want


def test_bert_shape_migrates_with_numerics_notes():
    src = _read("bert_fp16.before.py")
    res = _run(src)
    assert res.new_text == _read("bert_fp16.after.py")
    fixed = [f for f in res.findings if f.fixed and f.code == "A2A506"]
    assert [f.line for f in fixed] == [_line(src, "loss.backward()"), _line(src, "if args.fp16:", 2)]
    numerics, step = fixed[0].message, fixed[1].message
    assert "fp32 weights" in numerics and "tr_loss += loss.item()" in numerics
    assert "NaN only" in step and "global_step += 1" in step and "FP16 TRAINING" in step
    assert not [f for f in res.findings if not f.fixed and f.code.startswith("A2A5")]


VARIANTS = {
    # the copy helpers come from another module: the tool cannot see that they only copy
    "helpers imported": ("def copy_optimizer_params_to_model(", "def _copy_back("),
    # the scale is read (logged) outside the recognised sites: it no longer changes after the migration
    "scale read elsewhere": ('logger.info("epoch loss %f over %d steps", tr_loss / max(nb_tr_steps, 1), nb_tr_steps)',
                             'logger.info("epoch loss %f scale %f", tr_loss, args.loss_scale)'),
    # halving by 4 is not GradScaler's backoff
    "quartered": ("args.loss_scale = args.loss_scale / 2", "args.loss_scale = args.loss_scale / 4"),
    # the skipped step does something besides logging, halving and zeroing the gradients
    "extra work on skip": ("                        model.zero_grad()\n                        continue",
                           "                        skipped += 1\n                        continue"),
    # an input cast to fp16 would meet the fp32 model
    "input cast": ("input_ids, input_mask, segment_ids, label_ids = batch",
                   "input_ids, input_mask, segment_ids, label_ids = batch\n            input_mask = input_mask.half()"),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_bert_shape_not_fully_recognised_stays_byte_identical(variant):
    old, new = VARIANTS[variant]
    src = _read("bert_fp16.before.py")
    assert old in src
    src = src.replace(old, new, 1)
    res = _run(src)
    assert res.error is None
    assert res.new_text == src
    codes = [c for _l, c in _sites(res)]
    assert codes.count("A2A507") >= 1 and "A2A508" in codes and "A2A509" in codes
    assert not any(f.fixed for f in res.findings if f.code == "A2A506")


def test_selecting_only_reports_leaves_code_alone():
    src = _read("bert_fp16.before.py")
    res = _run(src, select=["A2A507", "A2A508", "A2A509"])
    assert res.new_text == src
    assert {c for _l, c in _sites(res)} == {"A2A507", "A2A508", "A2A509"}


def test_bfloat16_keeps_the_plain_backward_and_step():
    res = _run(_read("bert_fp16.before.py"), dtype="bfloat16")
    out = res.new_text
    assert 'with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.fp16):' in out
    assert "GradScaler" not in out and "scaler" not in out
    assert "            loss.backward()\n" in out and "                optimizer.step()\n                model.zero_grad()" in out
    assert "model.half()" not in out and "set_optimizer_params_grad" not in out
