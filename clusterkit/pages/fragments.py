"""Fragments of another project's source that a page tells readers to put into it.

A page shows a few lines to change in DeepCam's ``utils/comm.py``; they cannot run outside
DeepCam, but they can be checked against the function they go into. The marker above the
block names it, and what the page adds to it::

    % test: fragment deepcam/src/deepCam/driver/trainer.py:train_epoch adds writer=MODULE.Type

The check compiles the fragment (an ``elif``/``else`` branch inside an ``if`` of its own), finds
every name it reads among the names the upstream function has at that point (its parameters,
its locals, its module's imports and definitions), the names the page adds, or Python's
builtins, and binds every call on an imported module or an added object to the real
signature (``dist.init_process_group(backend="mpi", rank=..., world_size=...)`` against
``torch.distributed.init_process_group``).

The upstream scopes are kept as data (``contracts/fragments/scopes.json``: names only, no code),
recorded from a checkout at the commit the project's contracts pin::

    python -m clusterkit.pages.fragments record --checkout DIR --repo URL --commit SHA \
        PATH:FUNCTION...
"""

from __future__ import annotations

import argparse
import ast
import builtins
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import ROOT

RECORD = ROOT / "contracts" / "fragments" / "scopes.json"


# --------------------------------------------------------------------------- recording
def scope_of(source: str, function: str) -> dict:
    """The names a function of ``source`` can read, and its module's imports (alias -> module)."""
    tree = ast.parse(source)
    imports: dict[str, str] = {}
    module_names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                imports[a.asname or a.name.split(".")[0]] = (
                    a.name if a.asname else a.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                imports[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.ImportFrom):
            module_names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
            module_names.add(node.name)
        elif isinstance(node, ast.Assign):
            module_names |= {
                n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)
            }
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function), None)
    if fn is None:
        raise ValueError(f"no function {function}")
    args = fn.args
    params = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
    params += [a.arg for a in (args.vararg, args.kwarg) if a]
    local = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return {
        "parameters": params,
        "names": sorted(set(params) | local | module_names | set(imports)),
        "imports": dict(sorted(imports.items())),
    }


def record(checkout: Path, repo: str, commit: str, targets: list[str]) -> dict:
    data = {"repo": repo, "commit": commit, "functions": {}}
    for target in targets:
        path, _, function = target.partition(":")
        source = (checkout / path).read_text(encoding="utf-8")
        data["functions"][target] = scope_of(source, function)
    return data


# --------------------------------------------------------------------------- checking
@dataclass
class Marker:
    target: str  # path:function
    adds: dict[str, str] = field(default_factory=dict)  # name -> dotted type (or "")


def parse_marker(arg: str) -> Marker:
    """``PATH:FUNCTION [adds NAME[=dotted.Type] ...]``."""
    words = arg.split()
    if not words or ":" not in words[0]:
        raise ValueError(f"`% test: fragment {arg}`: name PATH:FUNCTION first")
    adds = {}
    if len(words) > 1:
        if words[1] != "adds":
            raise ValueError(f"`% test: fragment {arg}`: only `adds NAME=TYPE` may follow")
        for item in words[2:]:
            name, _, kind = item.partition("=")
            adds[name] = kind
    return Marker(words[0], adds)


def _scope(target: str) -> dict | None:
    data = json.loads(RECORD.read_text(encoding="utf-8"))
    for rec in data:
        if target in rec["functions"]:
            return {**rec["functions"][target], "repo": rec["repo"], "commit": rec["commit"]}
    return None


def _compilable(code: str) -> str:
    body = textwrap.dedent(code)
    first = body.lstrip().split(None, 1)[0] if body.strip() else ""
    if first in {"elif", "else:"} or first.startswith("else"):
        return "if False:\n    pass\n" + body
    return body


def check(page, line: int, code: str, marker_arg: str) -> tuple[list[Finding], str]:
    """(findings, detail) for a fragment block."""
    try:
        marker = parse_marker(marker_arg)
    except ValueError as exc:
        return [Finding(page, line, "fragment-marker", str(exc))], ""
    scope = _scope(marker.target)
    if scope is None:
        msg = f"{marker.target}: no recorded scope in contracts/fragments/scopes.json"
        return [Finding(page, line, "fragment-marker", msg)], ""
    source = _compilable(code)
    offset = line + 1 - (source.count("\n") - textwrap.dedent(code).count("\n"))
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [Finding(page, offset + (exc.lineno or 1) - 1, "fragment-syntax", exc.msg)], ""
    known = set(scope["names"]) | set(marker.adds) | set(dir(builtins))
    stored = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id not in known | stored:
                msg = (
                    f"`{node.id}` is not a name of {marker.target} at {scope['commit'][:12]} "
                    "(nor one the page adds)"
                )
                out.append(Finding(page, offset + node.lineno - 1, "fragment-name", msg))
    specs = [
        spec
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for spec in [_call_spec(node, scope["imports"], marker.adds)]
        if spec is not None
    ]
    for spec, found in zip(specs, bind_all(specs), strict=True):
        if found:
            level = "warning" if found.startswith("cannot import") else "error"
            out.append(Finding(page, offset + spec["line"] - 1, "fragment-call", found, level))
    detail = f"{marker.target} at {scope['repo']}@{scope['commit'][:12]}"
    return out, detail


def _dotted(node: ast.expr) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _resolve(dotted: str):
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def _call_spec(node: ast.Call, imports: dict[str, str], adds: dict[str, str]) -> dict | None:
    """What binding ``node`` needs (the callable's import path, the number of positional and the
    keyword arguments); None for calls on names this check cannot import."""
    parts = _dotted(node.func)
    if not parts or len(parts) < 2:
        return None
    head, rest = parts[0], parts[1:]
    if head in imports:
        base, instance = imports[head], False
    elif adds.get(head):
        base, instance = adds[head], True
    else:
        return None
    if any(isinstance(a, ast.Starred) for a in node.args) or any(
        k.arg is None for k in node.keywords
    ):
        return None
    return {
        "line": node.lineno,
        "name": ".".join(parts),
        "base": base,
        "attrs": rest,
        "instance": instance,
        "nargs": len(node.args),
        "kwargs": [k.arg for k in node.keywords],
    }


def bind(spec: dict) -> str | None:
    """Why the call ``spec`` describes would not bind to the real callable; None if it does."""
    name, base = spec["name"], spec["base"]
    try:
        target = _resolve(base)
        for attr in spec["attrs"]:
            target = getattr(target, attr)
    except ImportError:
        return f"cannot import {base} here: {name}(...) not bound to its signature"
    except AttributeError:
        return f"{name}: {base} has no attribute {'.'.join(spec['attrs'])}"
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    args = [None] * (spec["nargs"] + (1 if spec["instance"] else 0))
    try:
        sig.bind(*args, **dict.fromkeys(spec["kwargs"]))
    except TypeError as exc:
        shown = re.sub(r"\s+", " ", str(sig))
        return f"{name}(...): {exc} (signature {shown})"
    return None


def bind_all(specs: list[dict]) -> list[str | None]:
    """:func:`bind` for each spec, in a process of its own: importing the frameworks the calls
    belong to (TensorFlow through TensorBoard, torch) must not change the test process. A spec
    bound once is not bound again (the answer depends only on the spec and the installed
    frameworks)."""
    keys = [json.dumps(s, sort_keys=True) for s in specs]
    todo = [s for s, k in zip(specs, keys, strict=True) if k not in _BOUND]
    for spec, answer in zip(todo, _bind_elsewhere(todo), strict=True):
        _BOUND[json.dumps(spec, sort_keys=True)] = answer
    return [_BOUND[k] for k in keys]


_BOUND: dict[str, str | None] = {}


def _bind_elsewhere(specs: list[dict]) -> list[str | None]:
    if not specs:
        return []
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    env.update(TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    run = subprocess.run(
        [sys.executable, "-m", "clusterkit.pages.fragments", "bind"],
        input=json.dumps(specs),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if run.returncode:
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        return [f"cannot import {s['base']} here ({tail}): not bound" for s in specs]
    return json.loads(run.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- command line
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m clusterkit.pages.fragments")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record", help="record the scopes of upstream functions")
    r.add_argument("--checkout", type=Path, required=True)
    r.add_argument("--repo", required=True)
    r.add_argument("--commit", required=True)
    r.add_argument("targets", nargs="+", help="PATH:FUNCTION")
    sub.add_parser("bind", help="bind the calls described on stdin (JSON); print the results")
    args = p.parse_args(argv)
    if args.command == "bind":
        print(json.dumps([bind(spec) for spec in json.load(sys.stdin)]))
        return 0
    data = json.loads(RECORD.read_text()) if RECORD.is_file() else []
    new = record(args.checkout, args.repo, args.commit, args.targets)
    data = [d for d in data if not (d["repo"] == new["repo"] and d["commit"] == new["commit"])]
    RECORD.write_text(json.dumps([*data, new], indent=1) + "\n")
    print(f"{RECORD}: {len(new['functions'])} function(s) of {args.repo}@{args.commit[:12]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
