"""Rules of the hand-written fp16 migration (A2A506-A2A509); the pass is codemods/manual_fp16.py."""
from __future__ import annotations

from .base import FIX, WARNING, rule

rule("A2A506", "manual-fp16", "hand-written fp16 training (.half() model, fp32 master copies, loss scale "
     "halved on NaN) -> fp32 model + autocast + GradScaler", fixes=True, severity=FIX,
     why="""
The 2018-era fine-tuning scripts trained an fp16 model (`model.half()` under `--fp16`), kept fp32 copies
of its parameters for the optimizer, multiplied the loss by `--loss_scale`, divided the gradients back,
and halved the scale and skipped the step when a gradient held a NaN. Native AMP does all of it: the
model stays fp32, forward + loss run under torch.autocast, and one GradScaler scales, unscales, skips
and backs off. The scale never grew in the original, so growth_interval=2**30 keeps it.
What changes numerically: the optimizer now updates the model's own fp32 weights (before, the fp16
weights were rounded copies of fp32 master weights), autocast picks fp16 per op, the skipped-step test
also catches inf (the original tested NaN only), and statements after the step (zero_grad, step
counters) now also run on a skipped step, which the original's `continue` jumped over.""",
     before="""if args.fp16:
    model.half()
...
loss = model(batch)
if args.fp16 and args.loss_scale != 1.0:
    loss = loss * args.loss_scale
loss.backward()
if args.fp16:
    ...divide grads, copy to fp32 masters, halve the scale on NaN and continue...
    optimizer.step()
    copy_optimizer_params_to_model(model.named_parameters(), param_optimizer)
else:
    optimizer.step()""",
     after="""scaler = torch.amp.GradScaler("cuda", init_scale=args.loss_scale, growth_interval=2**30,
                                backoff_factor=0.5, enabled=args.fp16)
...
with torch.autocast("cuda", dtype=torch.float16, enabled=args.fp16):
    loss = model(batch)
scaler.scale(loss).backward()
scaler.step(optimizer)
scaler.update()""")
rule("A2A507", "manual-fp16-model-cast", "model cast to fp16 by hand for training (not migrated)", fixes=False,
     severity=WARNING,
     why="""
`model.half()` trains fp16 weights: small updates round away, and GradScaler refuses fp16 gradients.
The tool found a hand-made fp16 setup it cannot prove it migrates exactly (see the reason in the
message). Keep the model fp32, wrap forward + loss in torch.autocast("cuda", dtype=torch.float16,
enabled=<your fp16 flag>), and let the optimizer update the model's own parameters.""",
     before="if args.fp16:\n    model.half()",
     after="# the model stays fp32\nwith torch.autocast(\"cuda\", dtype=torch.float16, enabled=args.fp16):\n"
           "    loss = model(batch)")
rule("A2A508", "manual-fp16-master-copies", "fp32 master copies of an fp16 model kept by hand (not migrated)",
     fixes=False, severity=WARNING,
     why="""
Parameter copies such as `[p.clone().float() for p in model.parameters()]`, and the helpers copying
gradients onto them and weights back (`set_optimizer_params_grad`, `copy_optimizer_params_to_model`,
zip loops), exist only because the model is fp16. With an fp32 model under autocast, build the
optimizer on the model's own parameters and remove the copies and the helpers.""",
     before="param_copy = [p.clone().float().detach() for p in model.parameters()]\n"
            "optimizer = torch.optim.SGD(param_copy, lr=0.1)",
     after="optimizer = torch.optim.SGD(model.parameters(), lr=0.1)")
rule("A2A509", "manual-fp16-loss-scale", "loss scale kept by hand for an fp16 model (multiply, divide, halve on "
     "NaN; not migrated)", fixes=False, severity=WARNING,
     why="""
The loss multiplied by a scale, the gradients divided by it, and the scale halved when a gradient
holds a NaN (with the step skipped) are what one torch.amp.GradScaler does:
scaler = torch.amp.GradScaler("cuda", init_scale=S, growth_interval=2**30, backoff_factor=0.5),
scaler.scale(loss).backward(), scaler.unscale_(optimizer) where gradients are read, scaler.step(optimizer),
scaler.update(). GradScaler also skips on inf, and the statements after its step still run on a
skipped step.""",
     before="loss = loss * args.loss_scale\nloss.backward()\nfor p in model.parameters():\n"
            "    p.grad.data = p.grad.data / args.loss_scale\nif is_nan:\n    args.loss_scale /= 2\n    continue",
     after="scaler.scale(loss).backward()\nscaler.step(optimizer)\nscaler.update()")

CODES = ("A2A506", "A2A507", "A2A508", "A2A509")
