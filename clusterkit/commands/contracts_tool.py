"""Third-party command-line contracts: made from upstream code, kept as data, checked in CI.

A contract (``contracts/<name>.json``) lists the options of a script as its parser defines them
at a pinned upstream commit (``source``: repo, commit, path), how pages and examples name the
script (``invoked_as``: path suffixes; ``invoked_in_context``: a bare name such as ``train.py``
plus a regex the surrounding text must match, e.g. DeepCam vs CosmoFlow), how it was read
(``method``) and, for scripts whose flags override a config file, the config keys they set.

Reading a parser, from most to least faithful:

* ``introspect``: :func:`clusterkit.sites.contracts.introspect`, the script run with ``parse_args``
  intercepted (needs the script's imports installed);
* ``introspect-stubbed``: the same, with every module that cannot be imported here (torch,
  tensorflow, horovod, apex, ...) replaced by an inert stand-in; the parser is still built by
  the script's own code (helpers, custom actions, mutually exclusive groups);
* ``ast-absl``: absl/``tf.flags`` ``DEFINE_*`` calls read from the script and the local
  modules it imports, plus absl's own flags (absl is not argparse, and the script cannot be
  run without TensorFlow).

Maintainer commands::

    python -m clusterkit.commands.contracts_tool regenerate --checkout DIR --script PATH \\
        --name NAME --commit SHA [--repo URL] [--method auto|introspect|stubbed|absl]
    python -m clusterkit.commands.contracts_tool check   # every invocation in docs/, examples/
    python -m clusterkit.commands.contracts_tool show NAME

``check`` reads every shell code block and inline code span of the pages and every example,
finds each ``*.py`` script a command runs (also after srun, jsrun, torchrun, ddlrun,
singularity exec, ...), and judges its arguments with :func:`clusterkit.sites.contracts.
check_invocation` against the third-party contract or, for the project's own examples, the
contract read from the example itself.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from clusterkit.grammars import myst as P
from clusterkit.sites import contracts as C
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import ROOT
from clusterkit.sites.root import CACHE as CACHE_ROOT

CONTRACTS_DIR = ROOT / "contracts"
CACHE_DIR = CACHE_ROOT / "contracts"
# Imported by the project's examples and by the benchmarks, but not needed to build a parser.
HEAVY = ("torch", "torchvision", "tensorflow", "keras", "horovod", "apex", "jax", "mpi4py")
HEAVY += ("transformers", "datasets", "accelerate", "peft", "tokenizers", "safetensors")

# --------------------------------------------------------------------------- stubbed introspection
_STUB_PROBE = r"""
import argparse, importlib.abc, importlib.machinery, json, runpy, sys, types
path, out, force = sys.argv[1], sys.argv[2], set(filter(None, sys.argv[3].split(",")))
stubbed = set()

class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _new(cls.__name__ + "." + name)
    def __call__(cls, *a, **k):
        if len(a) == 1 and not k and callable(a[0]) and not isinstance(a[0], _Meta):
            return a[0]  # used as a decorator
        return _new(cls.__name__ + "()")
    def __iter__(cls):
        return iter(())
    def __len__(cls):
        return 0
    def __bool__(cls):
        return False
    def __getitem__(cls, key):
        return _new(cls.__name__ + "[]")
    def __contains__(cls, key):
        return False
    def __enter__(cls):
        return cls
    def __exit__(cls, *a):
        return False
    def __index__(cls):
        return 0
    def __int__(cls):
        return 0
    def __float__(cls):
        return 0.0
    def __str__(cls):
        return cls.__name__
    __repr__ = __str__
    def __fspath__(cls):
        return cls.__name__

def _op(self, *a):
    return _new("op")
for _name in ("add radd sub rsub mul rmul truediv rtruediv floordiv rfloordiv mod pow neg pos "
              "and or xor matmul lt le gt ge").split():
    setattr(_Meta, "__%s__" % _name, _op)

def _new(name):
    # an Exception subclass, so that `except torch.OutOfMemoryError:` still works
    return _Meta(name, (Exception,), {"__getattr__": lambda self, n: _new(n), "__call__": _op})

class _StubModule(types.ModuleType):
    __path__ = []
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _new(self.__name__ + "." + name)

import sysconfig
_STDLIB = (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"])

def _importer_is_stdlib():
    f = sys._getframe(2)
    while f is not None and (f.f_code.co_filename.startswith("<frozen")
                             or "importlib" in f.f_code.co_filename):
        f = f.f_back
    name = f.f_code.co_filename if f is not None else ""
    return name.startswith(_STDLIB) and "site-packages" not in name

class _Stubber(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, only=None):
        self.only = only
    def find_spec(self, fullname, path=None, target=None):
        if self.only is not None and fullname.split(".")[0] not in self.only:
            return None
        if self.only is None and (fullname.startswith("_") or _importer_is_stdlib()):
            return None  # the standard library probing for optional modules: let it fail
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
    def create_module(self, spec):
        stubbed.add(spec.name.split(".")[0])
        return _StubModule(spec.name)
    def exec_module(self, module):
        pass

sys.meta_path.insert(0, _Stubber(only=force))   # forced: never import the real thing
sys.meta_path.append(_Stubber())                 # anything else this machine lacks

def dump(self, *a, **k):
    opts = []
    for act in self._actions:
        if isinstance(act, argparse._HelpAction):
            continue
        opts.append({
            "flags": list(act.option_strings), "dest": act.dest,
            "takes_value": act.nargs != 0,
            "nargs": act.nargs if isinstance(act.nargs, (int, str)) or act.nargs is None else None,
            # choices computed by a stubbed framework come out empty: unknown, not "none valid"
            "choices": [str(c) for c in act.choices] if act.choices else None,
            "type": getattr(act.type, "__name__", None) if act.type else None,
            "required": bool(act.required),
        })
    with open(out, "w") as f:
        json.dump({"prog": self.prog, "options": opts, "stubbed": sorted(stubbed),
                   "allow_abbrev": self.allow_abbrev}, f, indent=1)
    raise SystemExit(0)

argparse.ArgumentParser.parse_args = dump
argparse.ArgumentParser.parse_known_args = dump
sys.argv = [path]
sys.path.insert(0, __import__("os").path.dirname(path))
runpy.run_path(path, run_name="__main__")
raise SystemExit("no ArgumentParser.parse_args call reached")
"""


class ToolError(Exception):
    pass


def introspect_stubbed(script: Path, force: tuple[str, ...] = HEAVY, timeout: int = 120) -> dict:
    """The argparse options of ``script``, its unavailable (and ``force``d) imports stubbed."""
    script = Path(script).resolve()
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir) / "parser.json"
        r = subprocess.run(
            [sys.executable, "-c", _STUB_PROBE, str(script), str(tmp), ",".join(force)],
            capture_output=True,
            text=True,
            cwd=script.parent,
            env=env,
            timeout=timeout,
        )
        if r.returncode != 0 or not tmp.is_file():
            tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
            raise ToolError(f"{script}: could not read its parser with stubbed imports: {tail}")
        return json.loads(tmp.read_text())


def own_contract_fast(script: Path) -> C.Contract:
    """An example's contract without importing torch/TensorFlow.

    The real introspection's cache (clusterkit.sites.contracts) is used when it has this version of
    the file; otherwise the parser is read with the frameworks stubbed, and cached by hash.
    """
    script = Path(script).resolve()
    key = hashlib.sha256(script.read_bytes()).hexdigest()[:16]
    real = C.CACHE_DIR / f"{script.stem}-{key}.json"
    if real.is_file():
        data = json.loads(real.read_text())
    else:
        cached = CACHE_DIR / f"stubbed-{script.stem}-{key}.json"
        if cached.is_file():
            data = json.loads(cached.read_text())
        else:
            data = introspect_stubbed(script)
            CACHE_DIR.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps(data, indent=1))
    return C.Contract(script.name, data["options"], str(script))


# --------------------------------------------------------------------------- absl (AST)
ABSL_TYPES = {
    "DEFINE_string": "str",
    "DEFINE_boolean": "bool",
    "DEFINE_bool": "bool",
    "DEFINE_integer": "int",
    "DEFINE_float": "float",
    "DEFINE_enum": "enum",
    "DEFINE_enum_class": "enum",
    "DEFINE_list": "list",
    "DEFINE_spaceseplist": "list",
    "DEFINE_multi_string": "str",
    "DEFINE_multi_integer": "int",
    "DEFINE_multi_float": "float",
    "DEFINE_multi_enum": "enum",
}
# absl's own flags (absl-py 0.9.0, the release TensorFlow 1.15 installs): app.py defines
# run_with_pdb ... only_check_args with DEFINE_boolean/DEFINE_string (read by the AST reader
# from absl/app.py when a checkout of absl-py is given), the help flags and logging's
# verbosity/stderrthreshold are flag objects (DEFINE_flag), and flagfile/undefok are handled
# by FlagValues itself: those are listed here.
ABSL_SPECIAL = [
    {"name": "help", "type": "bool", "short": "?", "origin": "absl/app.py HelpFlag"},
    {"name": "helpshort", "type": "bool", "origin": "absl/app.py HelpshortFlag"},
    {"name": "helpfull", "type": "bool", "origin": "absl/app.py HelpfullFlag"},
    {"name": "helpxml", "type": "bool", "origin": "absl/app.py HelpXMLFlag"},
    {"name": "verbosity", "type": "int", "short": "v", "origin": "absl/logging _VerbosityFlag"},
    {"name": "stderrthreshold", "type": "str", "origin": "absl/logging _StderrthresholdFlag"},
    {"name": "flagfile", "type": "str", "origin": "absl/flags FlagValues"},
    {"name": "undefok", "type": "list", "origin": "absl/flags FlagValues"},
]


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def absl_defines(path: Path) -> list[dict]:
    """The literal ``*.DEFINE_<type>(name, default, ...)`` calls of one Python file."""
    tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), str(path))
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if fname not in ABSL_TYPES or not node.args:
            continue
        name = _literal(node.args[0])
        if not isinstance(name, str):
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        flag: dict[str, Any] = {"name": name, "type": ABSL_TYPES[fname], "line": node.lineno}
        if flag["type"] == "enum":
            values = node.args[2] if len(node.args) > 2 else kw.get("enum_values")
            choices = _literal(values) if values is not None else None
            if choices is not None:
                flag["choices"] = [str(c) for c in choices]
        for bound in ("lower_bound", "upper_bound"):
            if bound in kw and _literal(kw[bound]) is not None:
                flag[bound] = _literal(kw[bound])
        if "short_name" in kw and isinstance(_literal(kw["short_name"]), str):
            flag["short"] = _literal(kw["short_name"])
        out.append(flag)
    return out


def local_imports(script: Path, root: Path) -> list[Path]:
    """``script`` and the modules under ``script``'s directory it imports, transitively."""
    base = script.parent
    seen: list[Path] = []
    todo = [script]
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.append(path)
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), str(path))
        names = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.append(node.module)
                names += [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            rel = Path(*name.split("."))
            for cand in (base / f"{rel}.py", base / rel / "__init__.py"):
                if cand.is_file() and root in cand.resolve().parents:
                    todo.append(cand)
    return seen


def absl_contract(script: Path, root: Path, absl_checkout: Path | None = None) -> dict:
    """Options of an absl/tf.flags script, read without running it."""
    flags: dict[str, dict] = {}
    files = local_imports(script, root)
    for path in files:
        for f in absl_defines(path):
            f["file"] = str(path.relative_to(root))
            flags.setdefault(f["name"], f)
    builtin = list(ABSL_SPECIAL)
    if absl_checkout is not None:
        for rel in ("absl/app.py", "absl/logging/__init__.py"):
            if (absl_checkout / rel).is_file():
                for f in absl_defines(absl_checkout / rel):
                    builtin.append({**f, "origin": f"absl-py {rel}"})
    options = []
    for f in [*flags.values(), *builtin]:
        if f["name"] in {o["dest"] for o in options}:
            continue
        options += absl_options(f)
    return {
        "prog": script.name,
        "options": options,
        "files": sorted({f["file"] for f in flags.values()}),
    }


def absl_options(flag: dict) -> list[dict]:
    """argparse-shaped options for one absl flag (absl accepts --name=v, --name v; booleans
    also --name, --noname, --name=true/false)."""
    name, kind = flag["name"], flag["type"]
    extra = {k: flag[k] for k in ("lower_bound", "upper_bound", "origin", "file") if k in flag}
    short = [f"-{flag['short']}"] if flag.get("short") and flag["short"] != "?" else []
    if kind == "bool":
        return [
            {
                "flags": [f"--{name}", *short],
                "dest": name,
                "takes_value": True,
                "nargs": "?",
                "choices": None,
                "type": "bool",
                "required": False,
                **extra,
            },
            {
                "flags": [f"--no{name}"],
                "dest": name,
                "takes_value": False,
                "nargs": 0,
                "choices": None,
                "type": None,
                "required": False,
            },
        ]
    return [
        {
            "flags": [f"--{name}", *short],
            "dest": name,
            "takes_value": True,
            "nargs": None,
            "choices": flag.get("choices"),
            "type": {"enum": "str", "list": "str"}.get(kind, kind),
            "required": False,
            **extra,
        }
    ]


# --------------------------------------------------------------------------- config overrides
def config_overrides(script: Path, parser_options: list[dict]) -> dict[str, str]:
    """``--flag`` -> dotted config key, from ``config['a']['b'] = args.dest`` assignments."""
    tree = ast.parse(script.read_text(encoding="utf-8"), str(script))
    by_dest = {o["dest"]: o["flags"] for o in parser_options if o["flags"]}
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        keys, target = [], node.targets[0]
        while isinstance(target, ast.Subscript):
            key = _literal(target.slice)
            if not isinstance(key, str):
                break
            keys.insert(0, key)
            target = target.value
        if not keys or not isinstance(target, ast.Name):
            continue
        value = node.value
        if isinstance(value, ast.Call) and value.args:  # bool(args.apply_log)
            value = value.args[0]
        if (
            isinstance(value, ast.Attribute)
            and isinstance(value.value, ast.Name)
            and value.attr in by_dest
        ):
            flag = next((f for f in by_dest[value.attr] if f.startswith("--")), None)
            if flag:
                out[flag] = ".".join(keys)
    return out


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(data, dict):
        for k, v in data.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict):
                out.update(flatten(v, key))
            else:
                out[key] = v
    return out


def config_section(checkout: Path, script: Path, config: str, options: list[dict]) -> dict:
    data = yaml.safe_load((checkout / config).read_text())
    keys = flatten(data)
    overrides = {}
    for flag, key in sorted(config_overrides(script, options).items()):
        overrides[flag] = {"key": key, "in_config": key in keys}
        if key in keys:
            overrides[flag]["default"] = keys[key]
    return {
        "path": config,
        "positional": "config",
        "overrides": overrides,
        "keys": {k: v for k, v in keys.items() if isinstance(v, str | int | float | bool)},
    }


# --------------------------------------------------------------------------- regenerate
def _git(checkout: Path, *args: str) -> str:
    r = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""


def regenerate(
    checkout: Path,
    script: str,
    name: str,
    commit: str,
    repo: str = "",
    method: str = "auto",
    invoked_as: list[str] | None = None,
    context: list[str] | None = None,
    config: str | None = None,
    absl_checkout: Path | None = None,
    description: str = "",
    absl_commit: str = "",
) -> dict:
    """A contract for ``checkout/script`` (the checkout must be at ``commit``)."""
    checkout = Path(checkout).resolve()
    path = checkout / script
    if not path.is_file():
        raise ToolError(f"{path} does not exist")
    head = _git(checkout, "rev-parse", "HEAD")
    if head and not head.startswith(commit) and not commit.startswith(head):
        raise ToolError(f"{checkout} is at {head}, not at {commit}: check out {commit} first")
    repo = repo or _git(checkout, "config", "--get", "remote.origin.url")
    text = path.read_text(encoding="utf-8", errors="replace")
    if method == "auto":
        method = (
            "absl"
            if re.search(r"\bDEFINE_\w+\(|absl|tf\.flags|tf\.app\.flags", text)
            and ("argparse" not in text)
            else "stubbed"
        )
    parser: dict[str, Any]
    if method == "introspect":
        data = C.introspect(path)
        how = (
            "introspect: clusterkit.sites.contracts.introspect ran the script, "
            "parse_args intercepted"
        )
        parser = {"kind": "argparse", "allow_abbrev": True}
    elif method == "stubbed":
        data = introspect_stubbed(path)
        stubbed = ", ".join(data.get("stubbed", [])) or "none"
        how = (
            "introspect-stubbed: the script ran with parse_args intercepted and these imports "
            f"replaced by inert stand-ins (not installable here): {stubbed}"
        )
        parser = {"kind": "argparse", "allow_abbrev": bool(data.get("allow_abbrev", True))}
    elif method == "absl":
        data = absl_contract(path, checkout, absl_checkout)
        how = (
            "ast-absl: DEFINE_* calls read from "
            + ", ".join(data["files"])
            + " and the local modules the script imports (it needs TensorFlow to run), plus "
            "absl-py's own flags"
        )
        parser = {"kind": "absl", "allow_abbrev": False, "positionals": False}
        if absl_commit:
            parser["absl_source"] = {
                "repo": "https://github.com/abseil/abseil-py",
                "commit": absl_commit,
                "paths": ["absl/app.py", "absl/logging/__init__.py"],
            }
    else:
        raise ToolError(f"unknown method {method!r}")
    out: dict[str, Any] = {
        "name": name,
        "description": description,
        "prog": Path(script).name,
        "source": {"repo": repo, "commit": commit, "path": script},
        "method": how,
        "parser": parser,
        "invoked_as": invoked_as or [script],
        "invoked_in_context": [{"path": Path(script).name, "context": c} for c in (context or [])],
        "generated_by": (
            "python -m clusterkit.commands.contracts_tool regenerate --checkout DIR "
            f"--script {script} --name {name} --commit {commit}"
            + (f" --method {method}" if method != "auto" else "")
        ),
        "options": data["options"],
    }
    if config:
        out["config"] = config_section(checkout, path, config, data["options"])
    return out


def diff_contracts(old: dict, new: dict) -> list[str]:
    """Human-readable changes between two contracts (flags added, removed, changed)."""

    def by_flag(c: dict) -> dict[str, dict]:
        return {f: o for o in c.get("options", []) for f in o["flags"]}

    a, b = by_flag(old), by_flag(new)
    out = [f"+ {f}" for f in sorted(set(b) - set(a))]
    out += [f"- {f}" for f in sorted(set(a) - set(b))]
    for f in sorted(set(a) & set(b)):
        for key in ("takes_value", "nargs", "choices", "type"):
            if a[f].get(key) != b[f].get(key):
                out.append(f"~ {f} {key}: {a[f].get(key)!r} -> {b[f].get(key)!r}")
    if old.get("source", {}).get("commit") != new.get("source", {}).get("commit"):
        out.insert(0, f"commit {old.get('source', {}).get('commit')} -> {new['source']['commit']}")
    return out


# --------------------------------------------------------------------------- the check
@dataclass(frozen=True)
class Kept:
    name: str
    data: dict
    contract: C.Contract


def kept_contracts(directory: Path = CONTRACTS_DIR) -> list[Kept]:
    out = []
    for path in sorted(directory.glob("*.json")):
        data = json.loads(path.read_text())
        out.append(Kept(path.stem, data, C.Contract(path.stem, data["options"], path.stem)))
    return out


def _suffix_match(script: str, pattern: str) -> bool:
    return script == pattern or script.endswith("/" + pattern)


def select(script: str, context: str, kept: list[Kept]) -> tuple[Kept | None, str | None]:
    """The contract for ``script`` as invoked in ``context`` (the text around the command);
    (None, reason) when none or several fit."""
    direct = [
        k for k in kept if any(_suffix_match(script, p) for p in k.data.get("invoked_as", []))
    ]
    if len(direct) == 1:
        return direct[0], None
    by_context = [
        k
        for k in kept
        for entry in k.data.get("invoked_in_context", [])
        if _suffix_match(script, entry["path"]) and re.search(entry["context"], context)
    ]
    if len(by_context) == 1:
        return by_context[0], None
    named = {
        k.name
        for k in kept
        for entry in k.data.get("invoked_in_context", [])
        if _suffix_match(script, entry["path"])
    }
    if len(direct) > 1 or len(by_context) > 1:
        names = ", ".join(sorted({k.name for k in direct + by_context}))
        return None, f"{script} could be any of {names}: name it by its path"
    if named:
        return None, (
            f"{script} is the name of {', '.join(sorted(named))}, but the text around it does "
            "not say which: name the benchmark near the command or use its path"
        )
    return None, None


_REDIRECT = {">", ">>", "<", ">&", "&>", "<&", ">|", "<<", "<<<"}


def _args_after(words: tuple[P.Word, ...], i: int) -> tuple[P.Word, ...]:
    out: list[P.Word] = []
    skip = False
    for w in words[i + 1 :]:
        if skip:
            skip = False
            continue
        if w.text in _REDIRECT:
            if out and out[-1].text.isdigit():
                out.pop()
            skip = True
            continue
        out.append(w)
    return tuple(out)


_RUNNERS = ("python*", "ipython*", "torchrun", "pypy*")
_SCRIPT_MODULES = {"torch.distributed.run", "torch.distributed.launch"}


def _runs_script(words: tuple[P.Word, ...], i: int) -> bool:
    """Whether ``words[i]`` (a ``*.py`` word) is the program a command runs: it follows a
    Python interpreter or torchrun (not ``-m pytest``), or is run directly (``./x.py``)."""
    if i == 0:  # run directly, by its path; a bare `x.py` names a file
        return words[0].text.startswith(("./", "/", "$"))
    for k in range(i - 1, -1, -1):
        base = words[k].text.rsplit("/", 1)[-1]
        if any(fnmatch.fnmatchcase(base, r) for r in _RUNNERS):
            between = [w.text for w in words[k + 1 : i]]
            if "-c" in between:
                return False
            if "-m" in between:
                module = between[between.index("-m") + 1] if between[-1] != "-m" else ""
                return module in _SCRIPT_MODULES
            return True
    first = words[0].text.rsplit("/", 1)[-1]
    return first in {
        "srun",
        "jsrun",
        "mpirun",
        "mpiexec",
        "horovodrun",
        "ddlrun",
        "bede-ddlrun",
    } and words[i - 1].text not in {"-o", "-e", "--output"}


def _bad_word_line(message: str, args: tuple[P.Word, ...], default: int) -> int:
    m = (
        re.search(r"unrecognized arguments: (\S+)", message)
        or re.search(r"invalid choice: '([^']+)'", message)
        or re.search(r"argument (--?[\w-]+)", message)
        or re.search(r"invalid \w+ value: '([^']+)'", message)
    )
    if m:
        for w in args:
            if w.text == m[1] or w.text.startswith(m[1] + "=") or m[1] in w.text:
                return w.line
    return default


def check_args(
    path: Path | str,
    line: int,
    kept: Kept,
    args: tuple[P.Word, ...],
) -> list[Finding]:
    """Judge ``args`` against a kept contract: the parser, then bounds and config keys."""
    words = [w.text for w in args]
    contract = kept.contract
    parser = kept.data.get("parser", {})
    out: list[Finding] = []
    for f in C.check_invocation(path, line, contract, words):
        out.append(
            Finding(
                f.path,
                _bad_word_line(f.message, args, line),
                f.rule,
                f"{f.message} [{kept.name} at {kept.data['source']['commit'][:12]}]",
            )
        )
    if out:
        return out
    options = {flag: o for o in kept.data["options"] for flag in o["flags"]}
    # absl takes no abbreviations and no positional arguments
    for k, w in enumerate(words):
        if not w.startswith("-") or w == "--":
            if parser.get("positionals") is False and w and not w.startswith("-"):
                prev = words[k - 1] if k else ""
                popt = options.get(prev.split("=", 1)[0])
                takes = popt and popt["takes_value"] and "=" not in prev and popt["type"] != "bool"
                if not takes:
                    out.append(
                        Finding(
                            path,
                            args[k].line,
                            "script-flag-unknown",
                            f"{kept.data['prog']}: positional argument {w!r}: absl flags take "
                            "their value as --flag=value (a boolean flag takes none)",
                        )
                    )
            continue
        name, _, value = w.partition("=")
        opt = options.get(name)
        if opt is None:
            if parser.get("allow_abbrev") is False and name.startswith("--"):
                out.append(
                    Finding(
                        path,
                        args[k].line,
                        "script-flag-unknown",
                        f"{kept.data['prog']}: unknown flag {name} (absl takes no abbreviations)",
                    )
                )
            continue
        if not value and opt["takes_value"] and opt["type"] != "bool" and k + 1 < len(words):
            value = words[k + 1]
        if "$" in value or not value:
            continue
        try:
            number = float(value)
        except ValueError:
            number = None
        if number is not None:
            lo, hi = opt.get("lower_bound"), opt.get("upper_bound")
            if (lo is not None and number < lo) or (hi is not None and number > hi):
                out.append(
                    Finding(
                        path,
                        args[k].line,
                        "script-flag-value",
                        f"{kept.data['prog']}: {name}={value} is outside [{lo}, {hi}]",
                    )
                )
    config = kept.data.get("config")
    if config:
        for k, w in enumerate(words):
            name = w.split("=", 1)[0]
            over = config["overrides"].get(name)
            if over is None:
                continue
            if not over["in_config"]:
                out.append(
                    Finding(
                        path,
                        args[k].line,
                        "script-config-key",
                        f"{kept.data['prog']} {name} sets {over['key']}, which "
                        f"{config['path']} does not have at "
                        f"{kept.data['source']['commit'][:12]}: it is not an override of the "
                        "config file",
                    )
                )
    return out


def check_command(
    path: Path | str,
    cmd: P.Logical,
    context: str,
    kept: list[Kept],
    root: Path = ROOT,
    own=None,
) -> tuple[list[Finding], list[str]]:
    """Findings for the scripts one logical command runs, and the names of the contracts used."""
    own = own or own_contract_fast
    out: list[Finding] = []
    used: list[str] = []
    for simple in P.split_commands(cmd.words):
        for i, w in enumerate(simple):
            text = w.text
            if not text.endswith(".py") or text.startswith("-"):
                continue
            if not _runs_script(simple, i):
                continue
            args = _args_after(simple, i)
            if any(a.text in {"-h", "--help", "--helpfull"} for a in args):
                break  # asks for the help text: any parser takes that
            choice, problem = select(text, context, kept)
            if choice is not None:
                out += check_args(path, w.line, choice, args)
                used.append(choice.name)
                continue
            if problem:
                out.append(Finding(path, w.line, "script-contract", problem))
                continue
            target = C.own_script(text, root, f"{path}\n{context}")
            if target is None:
                out.append(
                    Finding(
                        path,
                        w.line,
                        "script-contract",
                        f"no command-line contract for {text}: add one under contracts/ "
                        "(python -m clusterkit.commands.contracts_tool regenerate ...)",
                        level="warning",
                    )
                )
                continue
            try:
                contract = own(target)
            except (ToolError, C.ContractError) as exc:
                out.append(Finding(path, w.line, "script-contract", str(exc)))
                continue
            for f in C.check_invocation(path, w.line, contract, [a.text for a in args]):
                out.append(
                    Finding(f.path, _bad_word_line(f.message, args, w.line), f.rule, f.message)
                )
            used.append(str(target.relative_to(root)))
            break  # the rest of the command is the script's arguments
    return out, used


def _section_text(page: P.Page, line: int) -> str:
    """The heading and text of the section holding ``line`` (the context of a page command)."""
    lines = page.text.splitlines()
    above = [h for h in page.headings if h[0] <= line]
    start = above[-1][0] if above else 1
    return "\n".join(lines[start - 1 : page.section_end(line)])


def check_page(
    path: Path, kept: list[Kept] | None = None, text: str | None = None, root: Path = ROOT
) -> list[Finding]:
    kept = kept_contracts() if kept is None else kept
    page = P.scan_page(Path(path), text)
    out: list[Finding] = []
    for block in page.blocks:
        if block.is_include or not (block.is_shell or block.lang == ""):
            continue
        context = block.text + "\n" + _section_text(page, block.line)
        for cmd in P.logical_commands(list(block.body), console=block.lang == "console"):
            out += check_command(path, cmd, context, kept, root)[0]
    for span in page.inline:
        if ".py" not in span.code:
            continue
        for cmd in P.logical_commands([(span.line, span.code)]):
            out += check_command(path, cmd, _section_text(page, span.line), kept, root)[0]
    return out


def check_file(
    path: Path, kept: list[Kept] | None = None, text: str | None = None, root: Path = ROOT
) -> list[Finding]:
    kept = kept_contracts() if kept is None else kept
    path = Path(path)
    text = text if text is not None else path.read_text(encoding="utf-8", errors="replace")
    if P.file_kind(path, text) != "shell":
        return []
    out: list[Finding] = []
    for cmd in P.logical_commands(list(enumerate(text.splitlines(), 1))):
        out += check_command(path, cmd, text, kept, root)[0]
    return out


def check_tree(root: Path = ROOT) -> list[Finding]:
    kept = kept_contracts(root / "contracts")
    out: list[Finding] = []
    for page in sorted((root / "docs").rglob("*.md")):
        if "_build" not in page.parts:
            out += check_page(page, kept, root=root)
    for f in P.example_files(root / "examples"):
        out += check_file(f, kept, root=root)
    return out


def validate_contract(path: Path) -> list[Finding]:
    """The shape every kept contract must have."""
    out = []
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        return [Finding(path, exc.lineno, "contract-json", str(exc))]
    for key in ("name", "prog", "source", "method", "parser", "invoked_as", "options"):
        if key not in data:
            out.append(Finding(path, 1, "contract-shape", f"missing {key!r}"))
    src = data.get("source", {})
    if not (
        isinstance(src, dict)
        and src.get("repo")
        and re.fullmatch(r"[0-9a-f]{40}", src.get("commit", ""))
        and src.get("path")
    ):
        out.append(
            Finding(path, 1, "contract-source", "source needs repo, a 40-hex commit and path")
        )
    for entry in data.get("invoked_in_context", []):
        try:
            re.compile(entry["context"])
        except (re.error, KeyError) as exc:
            out.append(Finding(path, 1, "contract-context", f"bad context: {exc}"))
    try:
        C.Contract(path.stem, data.get("options", []), "").parser()
    except Exception as exc:
        out.append(Finding(path, 1, "contract-options", f"options do not form a parser: {exc}"))
    return out


# --------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("regenerate", help="write contracts/NAME.json from an upstream checkout")
    r.add_argument("--checkout", type=Path, required=True, help="the upstream work tree")
    r.add_argument("--script", required=True, help="the script's path inside the checkout")
    r.add_argument("--name", required=True)
    r.add_argument("--commit", required=True, help="the commit the checkout is at (pinned)")
    r.add_argument("--repo", default="", help="the upstream URL (default: remote.origin.url)")
    r.add_argument("--method", default="auto", choices=["auto", "introspect", "stubbed", "absl"])
    r.add_argument("--invoked-as", action="append", help="a path suffix pages use (repeat)")
    r.add_argument(
        "--context",
        action="append",
        help="a regex the text around a bare invocation must match (repeat)",
    )
    r.add_argument("--config", help="a config file (in the checkout) the flags override")
    r.add_argument("--absl-checkout", type=Path, help="an absl-py checkout, for absl's flags")
    r.add_argument("--absl-commit", default="", help="the commit of that absl-py checkout")
    r.add_argument("--description", default="")
    r.add_argument("--out", type=Path, help="default: contracts/NAME.json")
    c = sub.add_parser("check", help="check every invocation in docs/ and examples/")
    c.add_argument("files", nargs="*", type=Path)
    s = sub.add_parser("show", help="print a contract's flags")
    s.add_argument("name")
    sub.add_parser("validate", help="check the shape of every kept contract")
    args = ap.parse_args(argv)

    if args.cmd == "regenerate":
        out = args.out or CONTRACTS_DIR / f"{args.name}.json"
        old = json.loads(out.read_text()) if out.is_file() else {}
        try:
            data = regenerate(
                args.checkout,
                args.script,
                args.name,
                args.commit,
                args.repo,
                args.method,
                args.invoked_as,
                args.context,
                args.config,
                args.absl_checkout,
                args.description or old.get("description", ""),
                args.absl_commit,
            )
        except ToolError as exc:
            print(exc, file=sys.stderr)
            return 1
        if old:
            data.setdefault("invoked_in_context", old.get("invoked_in_context", []))
            if not args.invoked_as:
                data["invoked_as"] = old.get("invoked_as", data["invoked_as"])
            if not args.context:
                data["invoked_in_context"] = old.get("invoked_in_context", [])
            for line in diff_contracts(old, data):
                print(line)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {out} ({len(data['options'])} options)")
        return 0
    if args.cmd == "show":
        data = json.loads((CONTRACTS_DIR / f"{args.name}.json").read_text())
        print(f"{data['prog']} at {data['source']['repo']} {data['source']['commit']}")
        for o in data["options"]:
            extra = f" {{{','.join(o['choices'])}}}" if o.get("choices") else ""
            kind = o.get("type") or ("flag" if not o["takes_value"] else "str")
            print(f"  {', '.join(o['flags']) or o['dest']}: {kind}{extra}")
        return 0
    if args.cmd == "validate":
        found = [f for p in sorted(CONTRACTS_DIR.glob("*.json")) for f in validate_contract(p)]
    elif args.files:
        found = []
        for f in args.files:
            found += check_page(f) if f.suffix == ".md" else check_file(f)
    else:
        found = [f for p in sorted(CONTRACTS_DIR.glob("*.json")) for f in validate_contract(p)]
        found += check_tree()
    errors = [f for f in found if f.level == "error"]
    for f in found:
        print(f, file=sys.stderr)
    print(f"contracts: {len(errors)} error(s), {len(found) - len(errors)} warning(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
