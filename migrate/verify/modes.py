"""Which configurations `verify` runs, and how a program saves and resumes: read from its argparse flags.

The entry script is parsed with `ast` (never run) and its `add_argument(...)` calls are read:

- Precision flags. A store_true flag named --fp16, --amp, --apex, --apex-amp, --native-amp, --half,
  --mixed-precision, --use-amp, --use-fp16 (dashes or underscores) gives the modes "" and "--flag"; a
  store_false one (--no-amp, --no-fp16) gives "" and "--no-amp". Without such a switch, an opt-level flag
  (--opt-level, --opt_level, --amp-opt-level) gives "--opt-level O0" and "--opt-level O1" (those of its
  `choices` when it has them); a --precision / --mixed-precision flag with `choices` gives one mode per
  choice. The first rule that matches wins. Nothing found, or the common arguments already set one of
  these flags: the single given configuration runs. `--mode` on the command line or `modes` in
  `[tool.apex2amp.verify]` replace the detection.
- Checkpoint flags (for the resume check). Resume: exactly one flag that takes a value among --resume,
  --resume-from, --checkpoint, --ckpt, --load, --load-checkpoint, --restore, --init-checkpoint. Save: a
  path flag among --save, --save-path, --save-to, --checkpoint-path, --ckpt-path, --save-checkpoint,
  and/or a step flag among --save-at, --save-step, --save-every, --save-freq, --save-interval,
  --checkpoint-every, --ckpt-every. {ckpt} is the checkpoint file and {k} the step it is written at. When
  no resume flag, or more than one, is found, the resume check needs --resume-args (and --save-args).
"""
from __future__ import annotations

import ast
from typing import List, Optional, Sequence, Tuple

SWITCHES = {"fp16", "amp", "apex", "apex-amp", "native-amp", "half", "mixed-precision", "use-amp", "use-fp16",
            "no-amp", "no-fp16"}
OPT_LEVELS = {"opt-level", "amp-opt-level"}
PRECISION_CHOICES = {"precision", "mixed-precision"}
RESUME = {"resume", "resume-from", "checkpoint", "ckpt", "load", "load-checkpoint", "restore", "init-checkpoint"}
SAVE_PATH = {"save", "save-path", "save-to", "checkpoint-path", "ckpt-path", "save-checkpoint"}
SAVE_STEP = {"save-at", "save-step", "save-every", "save-freq", "save-interval", "checkpoint-every", "ckpt-every"}


class Flag:
    """One `add_argument` call: its long option, action, choices and default (literals only)."""

    def __init__(self, option: str, action: Optional[str], choices: Optional[list], default, has_type: bool):
        self.option = option
        self.key = option.lstrip("-").replace("_", "-").lower()
        self.action = action
        self.choices = choices
        self.default = default
        self.has_type = has_type

    @property
    def takes_value(self) -> bool:
        return self.action in (None, "store")


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def read_flags(entry_path: str) -> List[Flag]:
    """The long options the entry script declares with `add_argument` (empty when it does not parse)."""
    try:
        with open(entry_path, encoding="utf-8", errors="replace") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return []
    flags = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        longs = [n for n in names if n.startswith("--")]
        if not longs:
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        action = _literal(kw["action"]) if "action" in kw else None
        choices = _literal(kw["choices"]) if "choices" in kw else None
        default = _literal(kw["default"]) if "default" in kw else None
        flags.append(Flag(longs[0], action if isinstance(action, str) else None,
                          list(choices) if isinstance(choices, (list, tuple)) else None, default, "type" in kw))
    return flags


def _sets(args: Sequence[str], flag: Flag) -> bool:
    return any(a == flag.option or a.startswith(flag.option + "=") for a in args)


def detect_modes(entry_path: str, common_args: Sequence[str] = ()) -> Tuple[List[str], str]:
    """The extra-argument strings of the modes to run, and a line saying why (see the module docstring)."""
    flags = read_flags(entry_path)
    if any(_sets(common_args, f) for f in flags if f.key in SWITCHES | OPT_LEVELS | PRECISION_CHOICES):
        return [""], "the arguments already choose the precision: one configuration"
    for f in flags:
        if f.key in SWITCHES and f.action in ("store_true", "store_false"):
            return ["", f.option], "precision switch %s (%s)" % (f.option, f.action)
    for f in flags:
        if f.key in OPT_LEVELS and f.takes_value:
            levels = [lv for lv in ("O0", "O1") if f.choices is None or lv in f.choices]
            if len(levels) == 2:
                return ["%s %s" % (f.option, lv) for lv in levels], "opt-level flag %s" % f.option
    for f in flags:
        if f.key in PRECISION_CHOICES and f.takes_value and f.choices and len(f.choices) <= 4:
            return ["%s %s" % (f.option, c) for c in f.choices], "precision choices of %s" % f.option
    return [""], "no precision flag found: one configuration"


def detect_checkpoint_args(entry_path: str) -> Tuple[Optional[str], Optional[str], str]:
    """(save_args, resume_args, why); resume_args is None when the flags do not say it for sure."""
    flags = read_flags(entry_path)
    resume = [f for f in flags if f.key in RESUME and f.takes_value]
    if len(resume) != 1:
        found = ", ".join(f.option for f in resume) or "none"
        return None, None, "cannot tell the resume flag (candidates: %s): pass --resume-args" % found
    save_path = [f for f in flags if f.key in SAVE_PATH and f.takes_value and f is not resume[0]]
    save_step = [f for f in flags if f.key in SAVE_STEP and f.takes_value]
    save = []
    if len(save_path) == 1:
        save.append("%s {ckpt}" % save_path[0].option)
    if len(save_step) == 1:
        save.append("%s {k}" % save_step[0].option)
    return " ".join(save), "%s {ckpt}" % resume[0].option, "checkpoint flags %s" % ", ".join(
        [resume[0].option] + [f.option for f in save_path[:1] + save_step[:1]])
