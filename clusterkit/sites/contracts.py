"""Command-line contracts of Python scripts: which flags a script accepts, and their values.

A contract is the list of a script's argparse options (names, whether they take a value, choices,
type) as JSON. For the project's own examples it is read from the script itself by running it with
``ArgumentParser.parse_args`` intercepted (so nothing trains); for third-party scripts the same
introspection runs once on an upstream checkout and the result is kept as data under
``contracts/``. ``check_invocation`` then judges a command line without running the script.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from clusterkit.sites.errors import Finding
from clusterkit.sites.root import CACHE, ROOT

CONTRACTS_DIR = ROOT / "contracts"
CACHE_DIR = CACHE / "contracts"

# Runs inside the script's interpreter: intercept parse_args/parse_known_args, dump, exit 0.
_PROBE = r"""
import argparse, json, os, runpy, sys
path, out = sys.argv[1], sys.argv[2]
def describe(parser):
    opts = []
    for act in parser._actions:
        if isinstance(act, argparse._HelpAction):
            continue
        entry = {
            "flags": list(act.option_strings), "dest": act.dest,
            "takes_value": act.nargs != 0,
            "nargs": act.nargs if isinstance(act.nargs, (int, str)) or act.nargs is None else None,
            "choices": [str(c) for c in act.choices] if act.choices is not None else None,
            "type": getattr(act.type, "__name__", None) if act.type else None,
            "required": bool(act.required),
        }
        if isinstance(act, argparse._SubParsersAction):
            entry["subcommands"] = {name: describe(p) for name, p in act.choices.items()}
        opts.append(entry)
    return opts
def dump(self, *a, **k):
    with open(out, "w") as f:
        json.dump({"prog": self.prog, "options": describe(self)}, f, indent=1)
    raise SystemExit(0)
argparse.ArgumentParser.parse_args = dump
argparse.ArgumentParser.parse_known_args = dump
if path.startswith("module:"):
    sys.argv = [path[7:]]
    runpy.run_module(path[7:], run_name="__main__", alter_sys=True)
sys.argv = [path]
sys.path.insert(0, os.path.dirname(os.path.abspath(path)))  # as python does for a script
runpy.run_path(path, run_name="__main__")
raise SystemExit("no ArgumentParser.parse_args call reached")
"""


class ContractError(Exception):
    pass


@dataclass(frozen=True)
class Contract:
    name: str
    options: list[dict]
    source: str = ""
    allow_abbrev: bool = True  # False for absl flags (tf_cnn_benchmarks)

    def parser(self) -> argparse.ArgumentParser:
        p = _StrictParser(prog=self.name, add_help=True, allow_abbrev=self.allow_abbrev)
        _add_options(p, self.options)
        return p


def _add_options(p: argparse.ArgumentParser, options: list[dict]) -> None:
    for opt in options:
        if opt.get("subcommands") is not None:
            sub = p.add_subparsers(dest=opt["dest"], parser_class=_StrictParser)
            for name, sub_options in opt["subcommands"].items():
                _add_options(sub.add_parser(name), sub_options)
            continue
        if not opt["flags"]:
            # positionals: accept anything
            nargs = opt.get("nargs")
            p.add_argument(opt["dest"], nargs="*" if nargs in ("*", "+", "...") else "?")
            continue
        kwargs: dict = {"dest": opt["dest"]}
        if not opt["takes_value"]:
            kwargs["action"] = "append_const"
            kwargs["const"] = True
        else:
            nargs = opt.get("nargs")
            if nargs not in (None, 1):
                kwargs["nargs"] = nargs if nargs != "..." else "*"
            if opt.get("choices"):
                kwargs["choices"] = _Choices(opt["choices"])
            kwargs["type"] = _shell_tolerant(_TYPES.get(opt.get("type") or "", str))
        flags = [f for f in opt["flags"] if f not in ("-h", "--help")]
        if flags:
            p.add_argument(*flags, **kwargs)


def _bool_text(value: str) -> str:
    if value.lower() not in {"true", "false", "1", "0", "yes", "no"}:
        raise ValueError(value)
    return value


class _Choices(list):
    """Choices that let a shell expansion ($VAR) through: its value is known only at run time."""

    def __contains__(self, item: object) -> bool:
        return (isinstance(item, str) and "$" in item) or super().__contains__(str(item))


def _shell_tolerant(convert):
    def wrapped(text: str):
        return text if "$" in text or "`" in text else convert(text)

    wrapped.__name__ = getattr(convert, "__name__", "value")
    return wrapped


_TYPES = {"int": int, "float": float, "str": str, "bool": _bool_text, "str2bool": _bool_text}


class _StrictParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise ContractError(message)

    def exit(self, status: int = 0, message: str | None = None) -> None:
        raise ContractError(message or "exit")


def introspect(script: Path, python: str | None = None, module: str | None = None) -> dict:
    """Read a script's argparse options by running it with parse_args intercepted (as
    ``python -m MODULE`` when ``module`` is given: ``script`` is then the module's file)."""
    script = Path(script).resolve()
    key = hashlib.sha256(_source_bytes(script, module) + _PROBE.encode()).hexdigest()[:16]
    cached = CACHE_DIR / f"{module or script.stem}-{key}.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".{os.getpid()}.tmp")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    r = subprocess.run(
        [
            python or sys.executable,
            "-c",
            _PROBE,
            f"module:{module}" if module else str(script),
            str(tmp),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if r.returncode != 0 or not tmp.is_file():
        raise ContractError(
            f"{script}: could not read its command-line options: "
            f"{(r.stderr or r.stdout).strip().splitlines()[-1:]}"
        )
    os.replace(tmp, cached)
    return json.loads(cached.read_text())


def _source_bytes(script: Path, module: str | None) -> bytes:
    """What the options depend on: the script; for a module of this project, every file of
    its package (``python -m clusterkit`` reads its parser from ``cli.py``)."""
    if module and ROOT in script.parents:
        package = ROOT / module.split(".")[0]
        return b"".join(p.read_bytes() for p in sorted(package.rglob("*.py")))
    return script.read_bytes()


def own_contract(script: Path, module: str | None = None) -> Contract:
    data = introspect(script, module=module)
    return Contract(module or Path(script).name, data["options"], str(script))


def _kept(name: str, data: dict) -> Contract:
    src = data.get("source", "")
    if isinstance(src, dict):  # {repo, commit, path}
        src = f"{src.get('repo')}@{src.get('commit', '')[:12]}:{src.get('path')}"
    allow = data.get("parser", {}).get("allow_abbrev", True)
    return Contract(name, data["options"], src, allow)


def load_contract(name: str) -> Contract:
    path = CONTRACTS_DIR / f"{name}.json"
    return _kept(name, json.loads(path.read_text()))


def check_invocation(
    path: Path | str, line: int, contract: Contract, args: list[str]
) -> list[Finding]:
    """Findings for ``args`` (the words after the script name) against ``contract``."""
    if any(a in ("-h", "--help") for a in args):
        return []  # asks for the help text, which every parser gives (and exits)
    try:
        contract.parser().parse_args(list(args))
    except ContractError as exc:
        msg = str(exc)
        if "unrecognized arguments" in msg:
            rule = "script-flag-unknown"
        elif "invalid choice" in msg or "invalid" in msg:
            rule = "script-flag-value"
        elif "expected" in msg:
            rule = "script-flag-arity"
        else:
            rule = "script-flags"
        return [Finding(path, line, rule, f"{contract.name}: error: {msg}")]
    return []


def third_party_contracts() -> list[tuple[dict, Contract]]:
    out = []
    for path in sorted(CONTRACTS_DIR.glob("*.json")):
        data = json.loads(path.read_text())
        out.append((data, _kept(path.stem, data)))
    return out


def find_third_party(script: str, context: str = "") -> Contract | None:
    """The kept contract for ``script`` (a path as pages write it): one whose ``invoked_as``
    names it, else one whose ``invoked_in_context`` names it and whose regex matches
    ``context``, the text around the command (DeepCam's and CosmoFlow's are both train.py)."""

    def named(pattern: str) -> bool:
        return script == pattern or script.endswith("/" + pattern)

    kept = third_party_contracts()
    for data, contract in kept:
        if any(named(p) for p in data.get("invoked_as", [])):
            return contract
    hits = [
        contract
        for data, contract in kept
        for entry in data.get("invoked_in_context", [])
        if named(entry["path"]) and re.search(entry["context"], context)
    ]
    return hits[0] if len(hits) == 1 else None


_FRAMEWORK_WORDS = {
    "pytorch": r"torch|pytorch",
    "tensorflow": r"tensorflow|keras|\btf\b",
}


def own_script(script: str, root: Path = ROOT, context: str = "") -> Path | None:
    """The project example a command runs, by name; when several examples share the name
    (examples/pytorch/train_resnet.py, examples/tensorflow/train_resnet_keras.py), the one whose
    framework the surrounding text names."""
    name = Path(script).name
    if script.startswith(("benchmarks/", "./benchmarks/")):
        bench = root / script.removeprefix("./")
        if bench.is_file():  # the benchmark scripts, run from the repository root
            return bench
    hits = sorted(p for p in (root / "examples").rglob(name) if p.is_file())
    if len(hits) <= 1:
        return hits[0] if hits else None
    if "/" in script:
        exact = [h for h in hits if str(h).endswith("/" + script.lstrip("./"))]
        if len(exact) == 1:
            return exact[0]
    scored = []
    for h in hits:
        pattern = _FRAMEWORK_WORDS.get(h.parent.name, re.escape(h.parent.name))
        scored.append((len(re.findall(pattern, context, re.I)), h))
    scored.sort(key=lambda t: -t[0])
    if scored[0][0] and scored[0][0] > scored[1][0]:
        return scored[0][1]
    return None
