"""`apex2amp convert-checkpoint IN OUT [--key K]`: apex loss-scaler state -> GradScaler state.

Handles the two apex formats found in `torch.save` files:

- apex amp: `amp.state_dict()` = `{"loss_scaler0": {"loss_scale": float, "unskipped": int}, ...}`
  becomes `{"scale", "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
  "_growth_tracker"}` (apex's LossScaler constants) under the same key.
- FP16_Optimizer: `optimizer.state_dict()` = `{"loss_scaler": <apex LossScaler object>,
  "dynamic_loss_scale", "overflow", "first_closure_call_this_step", "optimizer_state_dict",
  "fp32_from_fp16"}` becomes the inner optimizer's state under the same key, plus the GradScaler state
  under a new "scaler" key. apex classes pickled in the file are read without apex installed.
- apex FusedAdam / FusedAdagrad: `optimizer.state_dict()` with the step count in each param group
  (`param_groups[i]["step"]`) and per parameter only `exp_avg`/`exp_avg_sq` (or `sum`) gets, as torch
  Adam/AdamW/Adagrad need, `state[i]["step"] = tensor(float(group step))` for each parameter of the group
  (0.0 where apex kept none: FusedAdagrad, whose lr has no decay: its groups get `lr_decay=0.0`) and no
  group step. Found at the root or inside dicts up to three levels down. As with any torch optimizer,
  the loaded groups' hyperparameters are the saved ones (torch-only flags such as fused= take torch's
  defaults).

Everything else in the checkpoint is kept. torch is imported lazily (the rewriter does not need it).
"""
from __future__ import annotations

import os
import pickle
import types
from typing import Any, Dict, List, Optional, Tuple

AMP_GROWTH_INTERVAL = 2000  # apex amp LossScaler scale_window (fixed by amp.initialize)
STATIC_INTERVAL = 2 ** 30  # "never grow" for static scales (GradScaler has no static mode)


class CheckpointError(Exception):
    """A checkpoint that cannot be converted; the message says why."""


class _ApexStub:
    """Stand-in for apex classes pickled in a checkpoint (apex need not be installed)."""

    _apex_class = ""

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self.__dict__["_state"] = state


def _stub_class(module: str, name: str) -> type:
    return type(name, (_ApexStub,), {"_apex_class": f"{module}.{name}", "__module__": __name__})


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "apex" or module.startswith("apex."):
            return _stub_class(module, name)
        return super().find_class(module, name)


_pickle_module = types.ModuleType("apex2amp_pickle")
_pickle_module.Unpickler = _Unpickler  # type: ignore[attr-defined]
_pickle_module.load = lambda f, **kw: _Unpickler(f, **kw).load()  # type: ignore[attr-defined]
_pickle_module.__name__ = "pickle"


def _torch():
    try:
        import torch
    except ImportError:
        raise CheckpointError("convert-checkpoint needs PyTorch: pip install 'apex2amp[verify]' (or torch)") from None
    return torch


def is_amp_state(v: Any) -> bool:
    """apex amp.state_dict(): every key contains 'loss_scaler', every value has loss_scale."""
    return isinstance(v, dict) and bool(v) and all(
        isinstance(k, str) and k.startswith("loss_scaler") and isinstance(s, dict) and "loss_scale" in s
        for k, s in v.items())


def is_fp16_optimizer_state(v: Any) -> bool:
    return isinstance(v, dict) and "loss_scaler" in v and "optimizer_state_dict" in v


_FUSED_PER_PARAM = ({"exp_avg", "exp_avg_sq"}, {"sum"})  # FusedAdam's, FusedAdagrad's
FUSED_DEPTH = 3


def is_fused_optimizer_state(v: Any) -> bool:
    """An optimizer state_dict in apex FusedAdam/FusedAdagrad's layout: per-parameter state without
    'step' holding exactly apex's keys."""
    if not (isinstance(v, dict) and isinstance(v.get("state"), dict) and isinstance(v.get("param_groups"), list)):
        return False
    entries = list(v["state"].values())
    return bool(entries) and all(isinstance(e, dict) and "step" not in e and set(e) in _FUSED_PER_PARAM
                                 for e in entries) and all(isinstance(g, dict) for g in v["param_groups"])


def fused_optimizer_to_torch(state: Dict[str, Any]) -> int:
    """Move each param group's step into its parameters' state, in place; returns the entries changed."""
    torch = _torch()
    changed = 0
    for group in state["param_groups"]:
        step = group.pop("step", 0)
        value = float(step.reshape(-1)[0].item() if torch.is_tensor(step) else step)
        for i in group.get("params", []):
            entry = state["state"].get(i)
            if isinstance(entry, dict) and "sum" in entry:
                group.setdefault("lr_decay", 0.0)  # torch Adagrad reads it; apex's has no lr decay
                group.setdefault("initial_accumulator_value", 0.0)
            if isinstance(entry, dict) and "step" not in entry:
                entry["step"] = torch.tensor(value)
                changed += 1
    return changed


def _convert_fused(node: Any, where: str, depth: int, msgs: List[str]) -> Any:
    if is_fused_optimizer_state(node):
        n = fused_optimizer_to_torch(node)
        msgs.append(f"{where}: apex FusedAdam/FusedAdagrad optimizer state -> torch layout (group step moved "
                    f"into {n} parameter state(s))")
    elif isinstance(node, dict) and depth < FUSED_DEPTH:
        for k, v in node.items():
            _convert_fused(v, f"key {k!r}" if where == "the checkpoint root" else f"{where}[{k!r}]", depth + 1, msgs)
    return node


def amp_to_grad_scaler(state: Dict[str, Any]) -> Tuple[Dict[str, Any], List[str]]:
    """GradScaler state for apex amp scaler state (the first scaler; more are reported)."""
    notes = []
    keys = sorted(state, key=lambda k: (len(k), k))
    first = state[keys[0]]
    if len(keys) > 1:
        notes.append(f"{len(keys)} apex loss scalers (num_losses>1): GradScaler has one; used {keys[0]}")
    return ({"scale": float(first["loss_scale"]), "growth_factor": 2.0, "backoff_factor": 0.5,
             "growth_interval": AMP_GROWTH_INTERVAL, "_growth_tracker": int(first.get("unskipped", 0))}, notes)


def fp16_optimizer_to_grad_scaler(state: Dict[str, Any]) -> Tuple[Dict[str, Any], List[str]]:
    """GradScaler state for FP16_Optimizer's LossScaler / DynamicLossScaler object."""
    ls = state["loss_scaler"]
    attrs = ls.__dict__ if hasattr(ls, "__dict__") else (ls if isinstance(ls, dict) else {})
    notes = []
    scale = attrs.get("cur_scale", attrs.get("loss_scale"))
    if scale is None:
        raise CheckpointError("FP16_Optimizer state has a loss_scaler without cur_scale")
    if state.get("dynamic_loss_scale", "scale_window" in attrs):
        factor = float(attrs.get("scale_factor", 2.0))
        tracker = int(attrs.get("cur_iter", 0)) - int(attrs.get("last_overflow_iter", -1)) - 1
        out = {"scale": float(scale), "growth_factor": factor, "backoff_factor": 1.0 / factor,
               "growth_interval": int(attrs.get("scale_window", 1000)), "_growth_tracker": max(tracker, 0)}
    else:
        out = {"scale": float(scale), "growth_factor": 2.0, "backoff_factor": 0.5,
               "growth_interval": STATIC_INTERVAL, "_growth_tracker": 0}
        notes.append("static loss scale: growth_interval=2**30 keeps it (GradScaler still backs off on overflow)")
    if state.get("fp32_from_fp16"):
        notes.append("fp32 master weights (fp32_from_fp16) dropped: the migrated model is fp32; load its fp16 "
                     "weights with model.float() after load_state_dict")
    return out, notes


def _find(ckpt: Any, key: Optional[str]) -> List[Tuple[Optional[str], str]]:
    """(key or None for the root, kind) of every apex state found."""
    if key is not None:
        if not isinstance(ckpt, dict) or key not in ckpt:
            raise CheckpointError(f"no key {key!r} in the checkpoint"
                                  + (f" (keys: {', '.join(map(str, list(ckpt)[:12]))})" if isinstance(ckpt, dict) else ""))
        v = ckpt[key]
        if is_amp_state(v):
            return [(key, "amp")]
        if is_fp16_optimizer_state(v):
            return [(key, "fp16_optimizer")]
        raise CheckpointError(f"key {key!r} holds no apex amp or FP16_Optimizer state")
    if is_amp_state(ckpt):
        return [(None, "amp")]
    if is_fp16_optimizer_state(ckpt):
        return [(None, "fp16_optimizer")]
    found = []
    if isinstance(ckpt, dict):
        for k, v in ckpt.items():
            if is_amp_state(v):
                found.append((k, "amp"))
            elif is_fp16_optimizer_state(v):
                found.append((k, "fp16_optimizer"))
    return found


def convert_checkpoint(ckpt: Any, key: Optional[str] = None) -> Tuple[Any, List[str]]:
    """Convert the apex state inside a loaded checkpoint (scalers, then fused-optimizer states);
    returns (new checkpoint, messages)."""
    try:
        found = _find(ckpt, key)
    except CheckpointError:
        if not (isinstance(ckpt, dict) and key in ckpt and _has_fused(ckpt[key], 0)):
            raise
        found = []
    if not found and not _has_fused(ckpt if key is None else ckpt[key], 0):
        raise CheckpointError("no apex amp state (loss_scaler0/loss_scale), FP16_Optimizer state (loss_scaler/"
                              "optimizer_state_dict) or FusedAdam optimizer state (param_groups step) found; "
                              "nothing to convert")
    msgs: List[str] = []
    for k, kind in found:
        state = ckpt if k is None else ckpt[k]
        where = "the checkpoint root" if k is None else f"key {k!r}"
        if kind == "amp":
            new, notes = amp_to_grad_scaler(state)
            if k is None:
                ckpt = new
            else:
                ckpt[k] = new
            msgs.append(f"{where}: apex amp state -> GradScaler state (scale {new['scale']:g})")
        else:
            new, notes = fp16_optimizer_to_grad_scaler(state)
            inner = state["optimizer_state_dict"]
            if k is None:
                ckpt = {"optimizer": inner, "scaler": new}
                msgs.append(f"{where}: FP16_Optimizer state -> {{'optimizer': ..., 'scaler': GradScaler state}} "
                            f"(scale {new['scale']:g})")
            else:
                skey = "scaler" if "scaler" not in ckpt else "grad_scaler"
                ckpt[k] = inner
                ckpt[skey] = new
                msgs.append(f"{where}: FP16_Optimizer state -> optimizer state; GradScaler state under {skey!r} "
                            f"(scale {new['scale']:g})")
        msgs.extend(f"  note: {n}" for n in notes)
    # after the scalers: an FP16_Optimizer's inner state may itself be a FusedAdam's
    _convert_fused(ckpt if key is None else ckpt[key], "the checkpoint root" if key is None else f"key {key!r}",
                   0, msgs)
    return ckpt, msgs


def _has_fused(node: Any, depth: int) -> bool:
    if is_fused_optimizer_state(node):
        return True
    return isinstance(node, dict) and depth < FUSED_DEPTH and any(_has_fused(v, depth + 1) for v in node.values())


def convert_checkpoint_file(src: str, dst: str, key: Optional[str] = None) -> str:
    """Read `src` (a torch.save file), convert its apex scaler state, write `dst`; returns a summary."""
    if not os.path.isfile(src):
        raise CheckpointError("no such file")
    if os.path.exists(dst) and os.path.samefile(src, dst) or os.path.abspath(src) == os.path.abspath(dst):
        raise CheckpointError("refusing to overwrite the input checkpoint; give a different OUT path")
    torch = _torch()
    try:
        try:
            ckpt = torch.load(src, map_location="cpu", weights_only=False, pickle_module=_pickle_module)
        except TypeError:  # torch without weights_only
            ckpt = torch.load(src, map_location="cpu", pickle_module=_pickle_module)
    except Exception as e:  # pickle, zip and torch errors alike: not something we can read
        raise CheckpointError(f"not a torch.save checkpoint ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    new, msgs = convert_checkpoint(ckpt, key)
    tmp = dst + ".apex2amp-tmp"
    try:
        torch.save(new, tmp)
        os.replace(tmp, dst)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise CheckpointError(f"cannot write {dst}: {e.strerror or e}") from None
    return "\n".join([f"{src} -> {dst}"] + msgs)
