"""A script's argparse options, read from its source with :mod:`ast`, never by importing it.

The project's trainers import PyTorch or TensorFlow at the top: reading their parser by running
them needs those frameworks installed. Their options are written as ``add_argument`` calls with
literal arguments, so the source says all a job script's flags are judged against: the flags,
whether each takes a value (``action``, ``nargs``), literal ``choices``, the ``type`` by name,
``required``. What is computed at run time (``choices=torchvision.models.list_models()``) is
left open: any value passes, and the trainer itself refuses a wrong one at start-up.

:func:`read_options` returns the options in the shape of a recorded contract
(:mod:`clusterkit.sites.contracts`), or None when the source holds something this reader
cannot follow (no parser, sub-commands, flags given by a variable): then the caller falls back
to reading the parser by running the script.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

NO_VALUE = {
    "store_true",
    "store_false",
    "store_const",
    "append_const",
    "count",
    "help",
    "version",
}


# argparse's own constants, as a parser's source names them (nargs=argparse.REMAINDER)
ARGPARSE_CONSTANTS = {
    "REMAINDER": "...",
    "OPTIONAL": "?",
    "ZERO_OR_MORE": "*",
    "ONE_OR_MORE": "+",
    "SUPPRESS": "==SUPPRESS==",
}


def _literal(node: ast.AST | None, names: dict[str, object]) -> object:
    if node is None:
        return None
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "argparse"
        and node.attr in ARGPARSE_CONSTANTS
    ):
        return ARGPARSE_CONSTANTS[node.attr]
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def _module_constants(tree: ast.Module) -> dict[str, object]:
    """``NAME = <literal>`` at the top of the module (for ``choices=NAME``)."""
    out: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name):
            try:
                out[target.id] = ast.literal_eval(value)
            except (ValueError, SyntaxError, TypeError):
                continue
    return out


def _name(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Lambda):
        return "<lambda>"  # as the running parser names it (the function's __name__)
    return None


def _calls(tree: ast.AST, attr: str) -> list[ast.Call]:
    found = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and (
            (isinstance(n.func, ast.Attribute) and n.func.attr == attr)
            or (isinstance(n.func, ast.Name) and n.func.id == attr)
        )
    ]
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def _option(call: ast.Call, names: dict[str, object]) -> dict | None:
    if any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        return None  # flags or settings given by a variable: not readable here
    words = [_literal(a, names) for a in call.args]
    if not words or not all(isinstance(w, str) for w in words):
        return None
    kw = {k.arg: k.value for k in call.keywords}
    action_node = kw.get("action")
    action = _literal(action_node, names) if action_node is not None else "store"
    action = action if isinstance(action, str) else _name(action_node)
    flags = [w for w in words if w.startswith("-")]
    if action == "help":
        return {"help": True}
    if action == "BooleanOptionalAction":
        flags += ["--no-" + f[2:] for f in flags if f.startswith("--")]
    if action not in NO_VALUE | {"BooleanOptionalAction", "store", "append", "extend"}:
        return None  # an Action class of the script's own: its arity is not known here
    nargs = _literal(kw.get("nargs"), names) if "nargs" in kw else None
    if "nargs" in kw and not isinstance(nargs, int | str):
        return None
    choices = _literal(kw.get("choices"), names) if "choices" in kw else None
    if not isinstance(choices, list | tuple | set | frozenset | range):
        choices = None  # computed at run time: left open
    if action in NO_VALUE | {"BooleanOptionalAction"}:
        nargs = 0  # as argparse records these actions
    required = _literal(kw.get("required"), names)
    long = next((f for f in flags if f.startswith("--")), flags[0] if flags else words[0])
    dest = _literal(kw.get("dest"), names) if "dest" in kw else None
    if not isinstance(dest, str):
        dest = long.lstrip("-").replace("-", "_")
    return {
        "flags": flags,
        "dest": dest,
        "takes_value": nargs != 0,
        "nargs": nargs,
        "choices": [str(c) for c in choices] if choices is not None else None,
        "type": _name(kw.get("type")),
        "required": bool(required) if flags else nargs not in ("?", "*"),
    }


def _handed_elsewhere(tree: ast.Module, parsers: list[ast.Call]) -> bool:
    """Whether options come from outside this file: a parser built on ``parents=``, or a parser
    (or one of its groups) handed to a function this file does not define
    (``record.add_common_arguments(p)``), which may add options the source here does not show.
    Names are followed within the function (or module body) that makes the parser."""
    if any(k.arg == "parents" for p in parsers for k in p.keywords):
        return True
    local = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))]
    return any(_hands_on(list(_own_nodes(scope)), local) for scope in scopes)


def _own_nodes(scope: ast.AST):
    """The nodes of a module or function body, without those of the functions inside it."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            todo += ast.iter_child_nodes(node)


def _hands_on(nodes: list[ast.AST], local: set[str]) -> bool:
    makers = {"ArgumentParser", "add_argument_group", "add_mutually_exclusive_group"}
    held = {
        t.id
        for n in nodes
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
        and _callee(n.value) in makers
        for t in n.targets
        if isinstance(t, ast.Name)
    }  # fmt: skip
    for call in (n for n in nodes if isinstance(n, ast.Call)):
        given = [*call.args, *(k.value for k in call.keywords)]
        if any(isinstance(a, ast.Name) and a.id in held for a in given):
            if not (isinstance(call.func, ast.Name) and call.func.id in local):
                return True
    return False


def _callee(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


@cache
def _read(path: Path, mtime_ns: int) -> dict | None:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    parsers = _calls(tree, "ArgumentParser")
    if not parsers or _calls(tree, "add_subparsers") or _handed_elsewhere(tree, parsers):
        return None
    names = _module_constants(tree)
    options = []
    for call in _calls(tree, "add_argument"):
        opt = _option(call, names)
        if opt is None:
            return None
        if not opt.get("help"):
            options.append(opt)
    if not options:
        return None
    abbrev = [
        _literal(k.value, names) for p in parsers for k in p.keywords if k.arg == "allow_abbrev"
    ]
    return {
        "prog": path.name,
        "options": options,
        "allow_abbrev": all(a is not False for a in abbrev),
        "read": "source",
    }


def read_options(path: Path | str) -> dict | None:
    """The argparse options of the script at ``path``, read from its source; None when this
    reader cannot follow it."""
    path = Path(path).resolve()
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return None
    return _read(path, stamp)
