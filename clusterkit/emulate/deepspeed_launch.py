"""The ``deepspeed`` launcher's options (deepspeed 0.19.8, ``deepspeed/launcher/runner.py``'s
``parse_args``), to judge launch lines without DeepSpeed, and what a line asks for.

tests/test_launcher_contracts.py reads the options of the released runner.py from its sources
(PyPI has DeepSpeed as sources only) and compares them with this table. DeepSpeed's parser takes
abbreviations (``--num_gpu`` is ``--num_gpus``), as argparse does by default.

What a line starts: ``--num_gpus`` processes on each node (-1, the default: every GPU the node
shows), on ``--num_nodes`` nodes of the hostfile (-1: all of them; no hostfile: this node only).
``--include``/``--exclude`` (``host1:0,1@host2``) pick the hosts and GPU slots instead.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from clusterkit.emulate.slurm_options import close_words

# (option strings, takes a value), in runner.py's order
OPTIONS: tuple[tuple[tuple[str, ...], bool], ...] = (
    (("-H", "--hostfile"), True),
    (("-i", "--include"), True),
    (("-e", "--exclude"), True),
    (("--num_nodes",), True),
    (("--num_gpus", "--num_accelerators"), True),
    (("--master_port",), True),
    (("--master_addr",), True),
    (("--node_rank",), True),
    (("--launcher",), True),
    (("--launcher_args",), True),
    (("--module",), False),
    (("--no_python",), False),
    (("--no_local_rank",), False),
    (("--no_ssh",), False),
    (("--no_ssh_check",), False),
    (("--force_multi",), False),
    (("--save_pid",), False),
    (("--enable_each_rank_log",), True),
    (("--autotuning",), True),
    (("--bind_cores_to_rank",), False),
    (("--bind_core_list",), True),
    (("--ssh_port",), True),
    (("--venv_script",), True),
    (("--log_level",), True),
    (("-q", "--quiet"), False),
)
CHOICES = {
    "autotuning": ("tune", "run"),
    "log_level": ("debug", "info", "warning", "error", "critical"),
}
INTEGERS = ("num_nodes", "num_gpus", "master_port", "node_rank", "ssh_port")
# where runner.py looks for a hostfile when -H names none (DLTS_HOSTFILE)
DEFAULT_HOSTFILE = "/job/hostfile"


class LaunchError(Exception):
    """The line as deepspeed would refuse it (its own words, with a hint where one helps)."""


def _dest(names: tuple[str, ...]) -> str:
    return next(n for n in names if n.startswith("--")).lstrip("-")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        words = message.removeprefix("unrecognized arguments: ").split()
        if message.startswith("unrecognized arguments:") and words:
            near = close_words(words[0], [n for names, _ in OPTIONS for n in names])
            if near:
                message += f" (did you mean {near[0]}?)"
        raise LaunchError(message)


@cache
def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="deepspeed", add_help=False)  # abbreviations allowed, as in runner.py
    p.add_argument("-h", "--help", action="store_true")
    for names, takes in OPTIONS:
        p.add_argument(*names, dest=_dest(names), action=None if takes else "store_true")
    p.add_argument("user_script", nargs="?")
    p.add_argument("user_args", nargs=argparse.REMAINDER)
    return p


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """(options, [script, args...]) as deepspeed splits them; values are kept as written."""
    ns = parser().parse_args(argv)
    for name in INTEGERS:
        value = getattr(ns, name)
        if value is not None and "$" not in value and not re.fullmatch(r"-?\d+", value):
            flag = next(n for names, _ in OPTIONS for n in names if _dest(names) == name)
            raise LaunchError(f"argument --{flag.lstrip('-')}: invalid int value: {value!r}")
    for name, allowed in CHOICES.items():
        value = getattr(ns, name)
        if value is not None and "$" not in value and value not in allowed:
            shown = ", ".join(repr(a) for a in allowed)
            raise LaunchError(f"argument --{name}: invalid choice: {value!r} (choose from {shown})")
    if not ns.user_script and not ns.help:
        raise LaunchError("the following arguments are required: user_script, user_args")
    if ns.include and ns.exclude:
        raise LaunchError("--include and --exclude are mutually exclusive")
    script = [ns.user_script] if ns.user_script else []
    return ns, script + list(ns.user_args)


def slots(spec: str) -> dict[str, int | None]:
    """``host1:0,1@host2`` -> {host1: 2, host2: None}: the GPU slots named per host (None: all
    of the host's)."""
    out: dict[str, int | None] = {}
    for part in filter(None, spec.split("@")):
        host, _, listed = part.partition(":")
        out[host] = len([s for s in listed.split(",") if s]) if listed else None
    return out


def read_hostfile(path: Path) -> dict[str, int]:
    """``host slots=N`` lines (``#`` comments) -> {host: N}; LaunchError on a bad line."""
    out: dict[str, int] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LaunchError(f"hostfile {path}: {exc}") from None
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"(\S+)\s+slots=(\d+)", line)
        if m is None:
            raise LaunchError(f"hostfile {path}, line {n}: expected 'HOST slots=N', got {line!r}")
        out[m[1]] = int(m[2])
    return out


@dataclass(frozen=True)
class Launch:
    """What a deepspeed line asks for; None where it cannot be read here."""

    per_node: int | None  # processes on each node (None: one per GPU the node shows)
    nodes: int | None  # None: all hosts of a hostfile this check could not read


def settings(ns: argparse.Namespace, hostfile: dict[str, int] | None) -> Launch:
    """Processes per node and nodes, from --num_gpus/--num_nodes, --include/--exclude and the
    hostfile's slots (``hostfile``: its hosts, or None when there is none or it is not here)."""
    gpus = _int(ns.num_gpus, -1)
    nodes = _int(ns.num_nodes, -1)
    per_node = gpus if gpus is not None and gpus >= 0 else None
    if ns.include:
        picked = slots(ns.include)
        counts = [c for c in picked.values() if c is not None]
        if counts and len(counts) == len(picked):
            per_node = max(counts)
        return Launch(per_node, len(picked))
    if hostfile is not None:
        if per_node is None:
            per_node = max(hostfile.values(), default=None)
        count = len(hostfile) if nodes is None or nodes < 0 else min(nodes, len(hostfile))
        return Launch(per_node, count)
    return Launch(per_node, nodes if nodes is not None and nodes > 0 else 1)


def _int(value: str | None, default: int) -> int | None:
    if value is None:
        return default
    return int(value) if re.fullmatch(r"-?\d+", value) else None
