"""A repository's own copy of torch.distributed.launch: is torchrun a drop-in replacement for it?

Repositories vendor the old launcher (`scripts/launch.py`) and run it from their shell scripts:
`python ./scripts/launch.py --nproc_per_node "$1" "$2" --cfg "$3"`. Often the copy is edited: it
passes no `--local_rank` and appends a flag of its own (`+ ["--dist"]`). torchrun replaces it exactly
when the copy does nothing torchrun does not do, which `launcher_copy_plan` checks on the copy's code:
- its options are only launcher options torchrun has with the same meaning and default
  (--nnodes 1, --node_rank 0, --nproc_per_node 1, --master_addr 127.0.0.1, --master_port 29500), then
  the training script and its arguments (argparse.REMAINDER);
- it starts one process per `local_rank in range(nproc_per_node)` with subprocess.Popen(cmd, env=E),
  E = os.environ.copy() plus exactly MASTER_ADDR, MASTER_PORT, WORLD_SIZE = nproc_per_node * nnodes,
  RANK = nproc_per_node * node_rank + local_rank and LOCAL_RANK = local_rank: torchrun's values;
- cmd = [sys.executable, ("-u",) args.training_script] + args.training_script_args (+ [literal strings]):
  no `--local_rank` (torchrun passes none), and the literal strings are what a caller's torchrun line
  must append at its end;
- it calls nothing else (no folder, no file, no port pick of its own).
The plan is then {"append": [...], "unbuffered": bool}; otherwise the reason torchrun does not replace
it. Its callers' lines are rewritten by migrate/launch_scripts_copy.py (A2A421).
"""
from __future__ import annotations

import ast
from typing import Dict, List, Optional, Tuple, Union

from .base import FIX, rule

CALLER = rule(
    "A2A421", "vendored-launcher-caller-torchrun", "`python COPY_OF_LAUNCH.py ...` -> torchrun in shell/launch files",
    fixes=True, severity=FIX,
    why="""
The repository holds its own copy of torch.distributed.launch (a module whose docstring documents it, which
parses --nproc_per_node and starts the workers with subprocess.Popen) and its shell scripts run it. When
the copy does only what torchrun does (its options are torchrun's with the same defaults, it sets exactly
MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK and LOCAL_RANK, passes no --local_rank and runs nothing
else), the line that runs it becomes the torchrun line with the same launcher options, and the literal
arguments the copy appended to the training script's (such as `--dist`) are appended at the end of the
command. A line whose options torchrun lacks, or whose command goes on into a pipe, a redirection or a
comment, is reported instead. The copy itself stays (A2A411 says to delete it once nothing runs it).""",
    before="""
# file: tools/launch.py
\"\"\"Copy of `torch.distributed.launch`: python -m torch.distributed.launch --nproc_per_node=N train.py\"\"\"
import os
import subprocess
import sys
from argparse import REMAINDER, ArgumentParser


def main():
    parser = ArgumentParser()
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node_rank", type=int, default=0)
    parser.add_argument("--nproc_per_node", type=int, default=1)
    parser.add_argument("--master_addr", default="127.0.0.1", type=str)
    parser.add_argument("--master_port", default=29500, type=int)
    parser.add_argument("training_script", type=str)
    parser.add_argument("training_script_args", nargs=REMAINDER)
    args = parser.parse_args()
    world = args.nproc_per_node * args.nnodes
    env = os.environ.copy()
    env["MASTER_ADDR"] = args.master_addr
    env["MASTER_PORT"] = str(args.master_port)
    env["WORLD_SIZE"] = str(world)
    procs = []
    for local_rank in range(args.nproc_per_node):
        env["RANK"] = str(args.nproc_per_node * args.node_rank + local_rank)
        env["LOCAL_RANK"] = str(local_rank)
        cmd = [sys.executable, "-u", args.training_script] + args.training_script_args + ["--dist"]
        procs.append(subprocess.Popen(cmd, env=env))
    for p in procs:
        p.wait()


if __name__ == "__main__":
    main()
# file: run.sh
python tools/launch.py --nproc_per_node "$1" train.py --cfg "$2\"""",
    after="""
# file: run.sh
torchrun --nproc_per_node "$1" train.py --cfg "$2" --dist""")

# torchrun's launcher options with the copy's meaning, and their defaults
OPTIONS: Dict[str, object] = {"nnodes": 1, "node_rank": 0, "nproc_per_node": 1, "master_addr": "127.0.0.1",
                              "master_port": 29500}
_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK")
_CALLS = {"str", "int", "range", "len", "subprocess.Popen", "subprocess.CalledProcessError", "os.environ.copy",
          "ArgumentParser", "argparse.ArgumentParser", "sys.exit"}
_METHODS = {"add_argument", "parse_args", "append", "wait", "poll"}

Plan = Dict[str, Union[List[str], bool]]


def launcher_copy_plan(code: str) -> Tuple[Optional[Plan], str]:
    """(plan, "") when torchrun replaces the launcher copy `code`, else (None, why not)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None, "it does not parse"
    popens = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _name(n.func) == "subprocess.Popen"]
    if len(popens) != 1:
        return None, f"it starts processes at {len(popens)} places"
    why = _options(tree)
    if why:
        return None, why
    fn = next((f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and any(p is popens[0] for p in ast.walk(f))),
              None)
    if fn is None:
        return None, "its subprocess.Popen is not in a function"
    plan, why = _workers(fn, popens[0])
    if plan is None:
        return plan, why
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and not _allowed_call(n, tree):
            return None, f"it also calls `{ast.unparse(n.func)}` (line {n.lineno}), which torchrun does not do"
    return plan, ""


def _name(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # pragma: no cover - ast.unparse handles every expression
        return ""


def _allowed_call(call: ast.Call, tree: ast.Module) -> bool:
    name = _name(call.func)
    if name in _CALLS or isinstance(call.func, ast.Attribute) and call.func.attr in _METHODS:
        return True
    local = {f.name for f in tree.body if isinstance(f, ast.FunctionDef)}
    return isinstance(call.func, ast.Name) and call.func.id in local  # main(), parse_args()


def _options(tree: ast.Module) -> str:
    seen = set()
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"):
            continue
        if not call.args or not isinstance(call.args[0], ast.Constant) or len(call.args) > 1:
            return f"line {call.lineno} declares an option apex2amp cannot read"
        flag = str(call.args[0].value)
        kw = {k.arg: k.value for k in call.keywords}
        if flag == "training_script":
            seen.add(flag)
            continue
        if flag == "training_script_args":
            if _name(kw.get("nargs", ast.Constant(None))) not in ("REMAINDER", "argparse.REMAINDER"):
                return "its training_script_args are not argparse.REMAINDER"
            seen.add(flag)
            continue
        name = flag[2:] if flag.startswith("--") else ""
        if name not in OPTIONS:
            return f"it has an option torchrun does not take the same way: `{flag}` (line {call.lineno})"
        default = kw.get("default")
        if not isinstance(default, ast.Constant) or default.value != OPTIONS[name]:
            return f"its `{flag}` defaults to something other than torchrun's {OPTIONS[name]!r}"
        want = "str" if name == "master_addr" else "int"
        if _name(kw.get("type", ast.Name("str"))) != want or set(kw) - {"type", "default", "help"}:
            return f"its `{flag}` is not declared as torchrun's (type {want})"
        seen.add(flag)
    if not {"training_script", "training_script_args"} <= seen:
        return "it takes the training script some other way than torch's launcher"
    return ""


def _workers(fn: ast.FunctionDef, popen: ast.Call) -> Tuple[Optional[Plan], str]:
    loop = next((n for n in ast.walk(fn) if isinstance(n, ast.For) and any(p is popen for p in ast.walk(n))), None)
    if loop is None or not isinstance(loop.target, ast.Name) or \
            _name(loop.iter).replace("range(0, ", "range(") not in ("range(args.nproc_per_node)",):
        return None, "it does not start one process per local rank in range(args.nproc_per_node)"
    lr = loop.target.id
    if len(popen.args) != 1 or not isinstance(popen.args[0], ast.Name) or [k.arg for k in popen.keywords] != ["env"] \
            or not isinstance(popen.keywords[0].value, ast.Name):
        return None, "its subprocess.Popen takes more than the command and env="
    cmd_name, env_name = popen.args[0].id, popen.keywords[0].value.id
    values: Dict[str, ast.expr] = {}
    env: Dict[str, str] = {}
    cmds = []
    assigns = [n for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))]
    for n in assigns:
        if not isinstance(n, ast.Assign) or len(n.targets) != 1:
            return None, f"line {n.lineno} assigns in a way apex2amp does not follow"
        t = n.targets[0]
        if isinstance(t, ast.Name):
            if t.id in values:
                return None, f"`{t.id}` is assigned more than once (line {n.lineno})"
            if t.id == cmd_name:
                cmds.append(n.value)
            values[t.id] = n.value
        elif not (isinstance(t, ast.Subscript) and _name(t.value) == env_name):
            return None, f"line {n.lineno} assigns `{_name(t)}`"
    plain = {k: v for k, v in values.items() if isinstance(v, (ast.BinOp, ast.Name, ast.Constant))}
    for n in assigns:
        t = n.targets[0]  # type: ignore[union-attr]
        if isinstance(t, ast.Subscript):
            if not isinstance(t.slice, ast.Constant) or t.slice.value not in _ENV or t.slice.value in env:
                return None, f"it sets `{_name(t)}` (line {n.lineno}), which torchrun does not set so"
            env[t.slice.value] = _name(_inline(n.value, plain))  # type: ignore[union-attr]
    if _name(values.get(env_name, ast.Constant(None))) != "os.environ.copy()":
        return None, "its workers' environment is not os.environ.copy() plus the launcher's variables"
    want = {"MASTER_ADDR": {"args.master_addr"}, "MASTER_PORT": {"str(args.master_port)"},
            "WORLD_SIZE": {"str(args.nproc_per_node * args.nnodes)", "str(args.nnodes * args.nproc_per_node)"},
            "RANK": {f"str(args.nproc_per_node * args.node_rank + {lr})", f"str(args.node_rank * args.nproc_per_node + {lr})",
                     f"str({lr} + args.nproc_per_node * args.node_rank)"},
            "LOCAL_RANK": {f"str({lr})"}}
    for key, forms in want.items():
        if env.get(key) not in forms:
            return None, f"its {key} is `{env.get(key)}`, not torchrun's value"
    if len(cmds) != 1:
        return None, "its command is built in more than one place"
    return _command(cmds[0])


def _inline(expr: ast.expr, values: Dict[str, ast.expr]) -> ast.expr:
    """`expr` with the names assigned before it replaced by their values (one level at a time)."""

    class _Sub(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            v = values.get(node.id)
            return _inline(v, {k: e for k, e in values.items() if k != node.id}) if v is not None else node

    return _Sub().visit(ast.parse(ast.unparse(expr), mode="eval").body)


def _command(cmd: ast.expr) -> Tuple[Optional[Plan], str]:
    parts: List[ast.expr] = []
    node = cmd
    while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        parts.insert(0, node.right)
        node = node.left
    parts.insert(0, node)
    if len(parts) not in (2, 3) or _name(parts[1]) != "args.training_script_args" or not isinstance(parts[0], ast.List):
        return None, "its command is not [sys.executable, args.training_script] + args.training_script_args (+ [...])"
    head = [_name(e) for e in parts[0].elts]
    unbuffered = head == ["sys.executable", "'-u'", "args.training_script"]
    if not unbuffered and head != ["sys.executable", "args.training_script"]:
        return None, f"its command starts `{_name(parts[0])}`, which torchrun does not run"
    append: List[str] = []
    if len(parts) == 3:
        tail = parts[2]
        if "local_rank" in _name(tail) or "local-rank" in _name(tail):
            return None, "it passes --local_rank, which torchrun does not: the script must read LOCAL_RANK first"
        if not isinstance(tail, ast.List) or not all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                                                     for e in tail.elts):
            return None, f"it appends `{_name(tail)}` to the script's arguments, which is not a list of literal strings"
        append = [e.value for e in tail.elts]  # type: ignore[attr-defined]
    if any(a.startswith(("--local_rank", "--local-rank")) for a in append):
        return None, "it passes --local_rank, which torchrun does not: the script must read LOCAL_RANK first"
    return {"append": append, "unbuffered": unbuffered}, ""
