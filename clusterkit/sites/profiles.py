"""Load and validate the site profiles in ``sites/<name>.yaml``.

A profile is the single source of truth for a site's facts. It is checked twice: against the JSON
Schema in ``sites/schema.yaml`` (shape and types), and by :func:`check_consistency` (references
between sections: a partition's node type exists, a removed module names its replacement, ...).
Every error names the file, the line and the rule broken.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from clusterkit.sites import spank
from clusterkit.sites.errors import Finding, ProfileError
from clusterkit.sites.root import ROOT
from clusterkit.sites.spank import Plugin

# CLUSTERKIT_SITES_DIR points the whole toolkit at other profiles (e.g. a refreshed copy).
SITES_DIR = Path(os.environ.get("CLUSTERKIT_SITES_DIR") or ROOT / "sites")
SCHEMA_PATH = ROOT / "sites" / "schema.yaml"


# --------------------------------------------------------------------------- YAML with line numbers
# libyaml's parser where PyYAML was built with it (its wheels are): every emulated command is a
# process that loads its site's profile and the schema, and the pure-Python parser took half a
# second of each (0.5 of 1.2 s for `module load`, 2026-11-29, on two cores)
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _LineLoader(_SAFE_LOADER):
    """A SafeLoader that keeps the line of every mapping key and sequence item."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict:
    mapping = _LineDict()
    loader.flatten_mapping(node)
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        mapping[key] = loader.construct_object(value_node, deep=True)
        mapping.lines[key] = key_node.start_mark.line + 1
    mapping.line = node.start_mark.line + 1
    return mapping


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode) -> list:
    seq = _LineList(loader.construct_object(child, deep=True) for child in node.value)
    seq.lines = [child.start_mark.line + 1 for child in node.value]
    seq.line = node.start_mark.line + 1
    return seq


class _LineDict(dict):
    line: int = 1

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lines: dict[Any, int] = {}


class _LineList(list):
    line: int = 1
    lines: list[int]


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)
# Dates stay strings: the schema checks their format, and pages print them as written.
_LineLoader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_yaml(path: Path) -> Any:
    """Parse a YAML file, keeping line numbers; a syntax error becomes a ProfileError."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError([Finding(path, 0, "profile-readable", str(exc))]) from None
    try:
        return yaml.load(text, Loader=_LineLoader)
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 0
        raise ProfileError([Finding(path, line, "yaml-syntax", str(exc.problem))]) from None


def line_of(data: Any, keys: tuple[Any, ...] | list[Any]) -> int:
    """The line of the deepest key of ``keys`` that exists in ``data``."""
    line = getattr(data, "line", 1)
    node = data
    for key in keys:
        if isinstance(node, _LineDict) and key in node:
            line = node.lines.get(key, line)
            node = node[key]
        elif isinstance(node, _LineList) and isinstance(key, int) and 0 <= key < len(node):
            line = node.lines[key]
            node = node[key]
        else:
            break
    return line


# --------------------------------------------------------------------------- unknown facts
# What pages print where the profile writes a fact as unknown.
NOT_DOCUMENTED = "not documented"
# A scaffold marker: ``FILL-IN:`` and a key, where ``python -m clusterkit new-site`` left a fact.
FILL_IN = re.compile(r"\bFILL-IN:(?P<key>[a-z0-9](?:[a-z0-9_.-]*[a-z0-9])?)")


def unknown_why(value: Any) -> str | None:
    """Why a fact is open, where the profile writes it ``{unknown: why}``; None when given.

    The schema allows the form where its readers cope (``$defs/unknown`` in sites/schema.yaml):
    a judge that needs the fact skips its rule with a warning naming the fact, a page prints
    :data:`NOT_DOCUMENTED`.
    """
    if isinstance(value, dict) and set(value) == {"unknown"}:
        return str(value["unknown"])
    return None


def not_checked(site_title: str, fact: str, why: str) -> str:
    """The warning of a rule skipped for an unknown fact: ``not checked: Perlmutter partition
    gpu's max_walltime is unknown (why)``."""
    return f"not checked: {site_title} {fact} is unknown ({why})"


# --------------------------------------------------------------------------- durations
UNLIMITED = "UNLIMITED"  # a partition with no limit of its own, as slurm.conf writes it
_DURATION = re.compile(r"^(?:(?P<d>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?$")


def duration_seconds(text: str) -> int:
    """Seconds in a profile duration: ``D-HH:MM:SS``, ``D-HH:MM``, ``HH:MM:SS`` or ``HH:MM``.

    (Job-script time strings follow Slurm's own, different rules: see emulate.slurm_time.)
    """
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError(f"not a duration: {text!r}")
    days = int(m["d"] or 0)
    a, b, c = int(m["a"]), int(m["b"] or 0), int(m["c"] or 0)
    return ((days * 24 + a) * 60 + b) * 60 + c


def _seconds_or_none(value: Any) -> int | None:
    """Seconds of a profile duration; None where it is absent or unknown."""
    return None if value is None or unknown_why(value) else duration_seconds(value)


def format_seconds(seconds: int) -> str:
    days, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return f"{days}-{h:02d}:{m:02d}:{s:02d}" if days else f"{h:02d}:{m:02d}:{s:02d}"


# --------------------------------------------------------------------------- the Site object
@dataclass(frozen=True)
class NodeType:
    name: str
    arch: str
    cpu: str
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    memory_gb: float | None  # None: unknown (memory_unknown says why)
    usable_cores: int
    gpus: int
    gpu_model: str | None
    gpu_vendor: str | None
    raw: dict = field(repr=False, compare=False)

    @property
    def python(self) -> str | None:
        """major.minor of the plain ``python3`` on these nodes, if the profile gives it."""
        return self.raw.get("python")

    @property
    def memory_unknown(self) -> str | None:
        """Why no source gives the node's memory, where the profile says it is unknown."""
        return unknown_why(self.raw["memory_gb"])

    @property
    def memory_text(self) -> str:
        """The memory in GB as pages print it (``512``), or ``not documented``."""
        return NOT_DOCUMENTED if self.memory_gb is None else f"{self.memory_gb:g}"

    @property
    def features(self) -> frozenset[str]:
        """The node features (``Features=``) jobs select these nodes with (``-C``)."""
        return frozenset(self.raw.get("features", ()))

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def slurm_threads_per_core(self) -> int:
        """Hardware threads Slurm counts as CPUs on each core: all of them, unless the site's
        Slurm counts whole cores as CPUs (``slurm_cpu: core``: CPUs= in slurm.conf set to the
        cores, which makes Slurm schedule one thread per core, src/common/node_conf.c)."""
        return 1 if self.raw.get("slurm_cpu") == "core" else self.threads_per_core

    @property
    def cpus(self) -> int:
        """Logical CPUs a job may use, as Slurm counts them (usable cores x the threads it
        counts per core)."""
        return self.usable_cores * self.slurm_threads_per_core


@dataclass(frozen=True)
class Partition:
    name: str
    node_type: NodeType  # the first of node_types: the partition's only one, as most have
    # None: no limit of its own (the QoS limits apply), or unknown (max_walltime_unknown says why)
    max_walltime_s: int | None
    max_nodes: int | None
    qos: tuple[str, ...]
    qos_required: bool
    default: bool
    exclusive: bool
    status: str
    raw: dict = field(repr=False, compare=False)
    node_types: tuple[NodeType, ...] = ()  # every node type it pools, node_type first

    @property
    def max_walltime(self) -> str:
        """As written in the profile; ``UNLIMITED`` where the partition sets no limit, ``not
        documented`` where no source gives it."""
        if self.max_walltime_unknown:
            return NOT_DOCUMENTED
        return self.raw.get("max_walltime", UNLIMITED)

    @property
    def pools(self) -> bool:
        """Whether it holds nodes of several types (a job's constraint picks among them)."""
        return len(self.node_types) > 1

    @property
    def max_walltime_unknown(self) -> str | None:
        """Why no source gives the limit, where the profile says it is unknown."""
        return unknown_why(self.raw.get("max_walltime"))

    def walltime_limit(self, nodes: int) -> tuple[int | None, str, str]:
        """(seconds, as written, why) of the longest run a job of ``nodes`` nodes may ask for:
        the size bin of ``walltime_by_nodes`` it falls in, else ``max_walltime`` (None
        seconds where that is unknown)."""
        for b in self.raw.get("walltime_by_nodes", ()):
            if b["min_nodes"] <= nodes <= b["max_nodes"]:
                why = f"for {b['min_nodes']}-{b['max_nodes']} nodes"
                return duration_seconds(b["max_walltime"]), b["max_walltime"], why
        return self.max_walltime_s, self.max_walltime, "in all"

    @property
    def size(self) -> int | None:
        """Nodes in the partition: its own ``nodes``, else every node of its types."""
        if self.raw.get("nodes"):
            return self.raw["nodes"]
        counts = [nt.raw.get("count") for nt in self.node_types or (self.node_type,)]
        return sum(counts) if all(counts) else None  # type: ignore[arg-type]

    def walltime_for(self, nodes: int) -> tuple[int | None, str]:
        """(most seconds a job of ``nodes`` nodes may ask for, what sets that limit).

        The partition's max_walltime, or the limit of the size bin (``walltime_by_nodes``) the
        job falls in; None when the partition has bins and none holds that many nodes.
        """
        bins = self.raw.get("walltime_by_nodes")
        if not bins and self.max_walltime_unknown:
            why = self.max_walltime_unknown
            return None, f"the {self.name} partition's limit is unknown ({why})"
        if not bins:
            if self.max_walltime_s is None:
                return None, f"the {self.name} partition sets no limit of its own"
            return self.max_walltime_s, f"the {self.name} partition's limit of {self.max_walltime}"
        for b in bins:
            if b["min_nodes"] <= nodes <= b["max_nodes"]:
                return (
                    duration_seconds(b["max_walltime"]),
                    f"the {self.name} partition's limit of {b['max_walltime']} for jobs of "
                    f"{b['min_nodes']}-{b['max_nodes']} nodes",
                )
        return None, f"no size bin of the {self.name} partition holds {nodes} nodes"


@dataclass(frozen=True)
class Module:
    name: str
    version: str | None
    status: str
    default: bool
    replacement: str | None
    raw: dict = field(repr=False, compare=False)

    @property
    def full_name(self) -> str:
        return f"{self.name}/{self.version}" if self.version else self.name


# kinds of path that hold a copy staged for one job: each node sees only its own
STAGING_KINDS = ("node-local", "memory-backed")


@dataclass(frozen=True)
class Place:
    """A file system or directory of the site (``paths:`` in the profile)."""

    name: str
    path: str  # with <user>, <project>, ... where a value of the user's goes
    kind: str  # parallel, network, node-local, memory-backed
    raw: dict = field(repr=False, compare=False)

    @property
    def variable(self) -> str | None:
        """The environment variable that holds the path in a job, if one does."""
        return self.raw.get("variable")

    @property
    def constraint(self) -> str | None:
        """The node feature a job must ask for (``-C``) before the path exists, if any."""
        return self.raw.get("constraint")

    @property
    def staging(self) -> bool:
        """Whether it holds one node's copy for one job (node-local or memory-backed)."""
        return self.kind in STAGING_KINDS

    @property
    def fixed_prefix(self) -> str:
        """The path up to its first placeholder: ``/mnt/bb`` of ``/mnt/bb/<user>``."""
        parts = []
        for part in self.path.split("/")[1:]:
            if "<" in part:
                break
            parts.append(part)
        return "/" + "/".join(parts)


@dataclass(frozen=True)
class Stack:
    """A framework environment the site gives its users (``stacks:`` in the profile)."""

    site: str
    name: str
    raw: dict = field(repr=False, compare=False)

    @property
    def key(self) -> str:
        """``site/name``, the way pages and tests name a stack."""
        return f"{self.site}/{self.name}"

    @property
    def status(self) -> str:
        return self.raw["status"]

    @property
    def python(self) -> str | None:
        """major.minor of the stack's interpreter; None where the profile says it is unknown."""
        return None if self.python_unknown else self.raw["python"]

    @property
    def python_unknown(self) -> str | None:
        """Why no source gives the stack's Python, where the profile says it is unknown."""
        return unknown_why(self.raw["python"])

    @property
    def python_text(self) -> str:
        """The Python as pages print it (``3.11``), or ``not documented``."""
        return self.python or NOT_DOCUMENTED

    @property
    def frameworks(self) -> dict[str, str]:
        return dict(self.raw["frameworks"])

    @property
    def accelerator(self) -> str:
        """``cuda 12.2``, ``rocm 5.2``, ``cpu``, or ``cuda (version not known)``."""
        acc = self.raw["accelerator"]
        if acc.get("version"):
            return f"{acc['kind']} {acc['version']}"
        return f"{acc['kind']} (version not known)" if acc.get("unknown") else acc["kind"]

    @property
    def route(self) -> str:
        """How users make it: module, conda, pip or container."""
        return next(iter(self.raw["install"]))

    @property
    def install(self) -> dict:
        return dict(self.raw["install"][self.route])

    @property
    def ci_skip(self) -> str | None:
        """Why CI cannot run examples under this stack, or None."""
        return self.raw.get("ci", {}).get("skip")

    @property
    def ci_pip(self) -> list[str] | None:
        """The pip requirements of CI's x86-64 environment for this stack (None: skipped).

        ``ci.pip`` when given; otherwise each framework at the stack's version from PyPI, with
        ``tensorflow-cpu`` for TensorFlow; a two-part version (numpy 1.26) is a release series
        (``==1.26.*``). Horovod is left out: it is built against the frameworks
        (``nox -s horovod``).
        """
        if self.ci_skip:
            return None
        if "pip" in self.raw.get("ci", {}):
            return list(self.raw["ci"]["pip"])
        names = {"tensorflow": "tensorflow-cpu"}
        return [
            f"{names.get(fw, fw)}=={version}" + (".*" if version.count(".") == 1 else "")
            for fw, version in self.frameworks.items()
            if fw != "horovod"
        ]


@dataclass(frozen=True)
class Site:
    """A validated site profile."""

    name: str
    path: Path
    data: dict = field(repr=False)

    # -- plain facts
    @property
    def title(self) -> str:
        return self.data["title"]

    @property
    def scheduler(self) -> str:
        return self.data["scheduler"]["kind"]

    @property
    def status(self) -> str:
        return self.data["lifecycle"]["status"]

    @property
    def is_current(self) -> bool:
        return self.status == "current"

    @property
    def out_of_service(self) -> str | None:
        """ "Summit is retired (since 2024-11-15)" for a site no longer in service (its pages
        keep its scripts and stacks as a record); None for a site in service."""
        if self.is_current:
            return None
        when = self.data["lifecycle"].get("retired")
        return f"{self.title} is {self.status.replace('-', ' ')}" + (
            f" (since {when})" if when else ""
        )

    @property
    def compute_internet(self) -> str:
        """Whether jobs on compute nodes reach the internet: none, proxy, direct or unknown
        (unknown also where the profile does not say)."""
        return (self.data.get("internet") or {}).get("compute_nodes", "unknown")

    @property
    def node_types(self) -> dict[str, NodeType]:
        out = {}
        for name, nt in self.data["node_types"].items():
            gpus = nt.get("gpus") or {}
            cores = nt["sockets"] * nt["cores_per_socket"]
            out[name] = NodeType(
                name=name,
                arch=nt["arch"],
                cpu=nt["cpu"],
                sockets=nt["sockets"],
                cores_per_socket=nt["cores_per_socket"],
                threads_per_core=nt["threads_per_core"],
                memory_gb=None if unknown_why(nt["memory_gb"]) else nt["memory_gb"],
                usable_cores=nt.get("usable_cores", cores),
                gpus=gpus.get("count", 0),
                gpu_model=gpus.get("model"),
                gpu_vendor=gpus.get("vendor"),
                raw=nt,
            )
        return out

    @property
    def partitions(self) -> dict[str, Partition]:
        nts = self.node_types
        out = {}
        for name, p in self.data["partitions"].items():
            pool = tuple(nts[n] for n in p.get("node_types") or [p["node_type"]])
            wall = p.get("max_walltime")
            out[name] = Partition(
                name=name,
                node_type=pool[0],
                node_types=pool,
                max_walltime_s=_seconds_or_none(wall),
                max_nodes=p.get("max_nodes"),
                qos=tuple(p.get("qos", ())),
                qos_required=bool(p.get("qos_required", False)),
                default=bool(p.get("default", False)),
                exclusive=bool(p.get("exclusive", False)),
                status=p.get("status", "current"),
                raw=p,
            )
        return out

    @property
    def default_partition(self) -> Partition | None:
        parts = self.partitions
        name = self.data["scheduler"].get("default_partition")
        if name:
            return parts[name]
        routed = self.data["scheduler"].get("default_partitions")
        if routed:
            return parts[routed[0]]
        return next((p for p in parts.values() if p.default), None)

    @property
    def default_partitions(self) -> list[str]:
        """Where a job that names no partition may go, in the order they are tried: the
        profile's ``default_partitions`` (a site that routes jobs by constraint), else the one
        default partition, else none."""
        routed = self.data["scheduler"].get("default_partitions")
        if routed:
            return list(routed)
        default = self.default_partition
        return [default.name] if default else []

    @property
    def qos(self) -> dict[str, dict]:
        return dict(self.data.get("qos", {}))

    @property
    def default_qos(self) -> str | None:
        """The QoS a job that names none gets (``default: true``), if the site has one."""
        return next((n for n, q in self.qos.items() if q.get("default")), None)

    def qos_limits(self, name: str, node_type: str | None = None) -> dict:
        """A QoS's limits for a job on ``node_type``: its own, with those it sets for that node
        type (``by_node_type``) in their place."""
        q = dict(self.qos.get(name, {}))
        q.update((q.get("by_node_type") or {}).get(node_type or "", {}))
        return q

    @property
    def features(self) -> frozenset[str]:
        """Every node feature of the site: the node types', and those a job asks for to have a
        path mounted (``paths: constraint``)."""
        out = {f for nt in self.node_types.values() for f in nt.features}
        return frozenset(out | set(self.mount_features))

    @property
    def mount_features(self) -> list[str]:
        """Features that mount a node-local path on request (Frontier's nvme), on every node."""
        return sorted({p.constraint for p in self.places.values() if p.constraint})

    def node_features(self, node_type: NodeType) -> frozenset[str]:
        """The features a job's -C can name to reach ``node_type``."""
        return node_type.features | frozenset(self.mount_features)

    @property
    def plugins(self) -> list[Plugin]:
        """The SPANK plugins the site runs, with the options they add (``plugins:``)."""
        return [spank.from_profile(n, raw) for n, raw in self.data.get("plugins", {}).items()]

    @property
    def modules(self) -> list[Module]:
        return [
            Module(
                name=m["name"],
                version=m.get("version"),
                status=m["status"],
                default=bool(m.get("default", False)),
                replacement=m.get("replacement"),
                raw=m,
            )
            for m in self.data["modules"]
        ]

    @property
    def account(self) -> dict:
        return self.data["account"]

    @property
    def stacks(self) -> dict[str, Stack]:
        return {n: Stack(self.name, n, raw) for n, raw in self.data.get("stacks", {}).items()}

    @property
    def places(self) -> dict[str, Place]:
        """The file systems and directories of ``paths:``, by name."""
        return {
            n: Place(n, raw["path"], raw["kind"], raw)
            for n, raw in self.data.get("paths", {}).items()
        }

    @property
    def placeholders(self) -> tuple[str, ...]:
        """What the site's docs write where a value of the user's goes (``[budget code]``)."""
        return tuple(self.data.get("placeholders", ()))

    @property
    def modules_complete(self) -> bool:
        """Whether the modules list claims to hold every module of the site."""
        return self.data["module_inventory"]["coverage"] == "complete"

    def versions_complete(self, name: str) -> bool:
        """Whether every version of module ``name`` is listed (a complete inventory, or a name
        the inventory's ``complete_for`` gives)."""
        inv = self.data["module_inventory"]
        return inv["coverage"] == "complete" or name in inv.get("complete_for", ())

    def account_ok(self, account: str) -> bool:
        acct = self.account
        if account == acct["example"] or account in self.placeholders:
            return True
        return re.fullmatch(acct["pattern"], account) is not None

    def tool(self, name: str) -> dict | None:
        """A command the site adds for its users (``tools:``), if it is one."""
        return self.data.get("tools", {}).get(name)

    def wrapper(self, name: str) -> dict | None:
        """A command the site adds around a Slurm client (``tools:`` with ``wraps``)."""
        tool = self.tool(name)
        return tool if tool and "wraps" in tool else None

    def example(self, name: str) -> Path | None:
        """The file of ``examples/<site>/`` a command names (``sbatch NAME``), if one matches."""
        for cand in (ROOT / "examples" / self.name / name, ROOT / name):
            if cand.is_file():
                return cand
        hits = sorted((ROOT / "examples" / self.name).rglob(Path(name).name))
        return hits[0] if len(hits) == 1 else None

    def launcher(self, name: str) -> dict | None:
        return next((x for x in self.data["launchers"] if x["name"] == name), None)

    def find_module(self, spec: str) -> tuple[Module | None, list[Module]]:
        """Resolve ``name`` or ``name/version`` as Lmod would.

        Returns (the module, the other versions of that name). A bare name resolves to the
        version marked default, else to the highest current version, as Lmod picks.
        """
        name, _, version = spec.partition("/")
        same = [m for m in self.modules if m.name == name]
        if version:
            hit = next((m for m in same if m.version == version), None)
            return hit, [m for m in same if m is not hit]
        if not same:
            return None, []
        default = next((m for m in same if m.default), None)
        if default is None:
            live = [m for m in same if m.status == "current"] or same
            default = max(live, key=lambda m: _version_key(m.version or ""))
        return default, [m for m in same if m is not default]

    def line(self, *keys: Any) -> int:
        return line_of(self.data, keys)

    def retired_path(self, path: str) -> dict | None:
        """The retired file system (``retired_paths:``) that ``path`` lies on, if any."""
        for fs in self.data.get("retired_paths", ()):
            root = fs["path"].rstrip("/")
            if path == root or path.startswith(root + "/"):
                return fs
        return None

    @property
    def slurm_release(self) -> str:
        """The Slurm release the site runs (``scheduler.release``); 22.05 when the profile does
        not say, and the newest the emulator knows for the generic site."""
        return self.data["scheduler"].get("release", "22.05")

    @property
    def slurm_options_release(self) -> str | None:
        """The Slurm release whose sbatch, srun and salloc options a script is held to: the one
        the profile records (``scheduler.release``); None -- any release's options -- where it
        records none, and for the generic site."""
        return None if self.generic else self.data["scheduler"].get("release")

    @property
    def generic(self) -> bool:
        """The generic Slurm site (``--site generic``): no facts of any one site, so the rules
        that need them (partitions, accounts, QoS, node sizes, limits, modules) are not
        applied, and every other rule is."""
        return bool(self.data.get("generic"))

    def generic_partition(self, name: str) -> Partition:
        """A partition of the generic site: any name is taken, on nodes of unknown size."""
        nt = self.node_types[GENERIC_NODE]
        raw = {"node_type": GENERIC_NODE, "max_walltime": UNLIMITED}
        return Partition(name, nt, 0, None, (), False, False, False, "current", raw, (nt,))


def _version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.\-]", version))


# --------------------------------------------------------------------------- loading and checks
@cache
def _schema() -> dict:
    return yaml.load(SCHEMA_PATH.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)


@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    """One validator a process: loading all profiles read the schema once for each."""
    return jsonschema.Draft202012Validator(_schema(), format_checker=jsonschema.FormatChecker())


def _schema_findings(path: Path, data: Any) -> list[Finding]:
    validator = _validator()
    findings = []
    for err in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path))):
        err = _closest(err)
        where = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        findings.append(
            Finding(
                path,
                line_of(data, list(err.absolute_path)),
                f"schema:{err.validator}",
                f"{where}: {err.message}",
            )
        )
    return findings


def _closest(err: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """For a value that fits none of a ``oneOf`` (a fact or ``{unknown: why}``), the error of
    the form it was meant as: the one whose type it has (``two days`` breaks the duration's
    pattern, not the unknown form's type)."""
    if err.validator != "oneOf" or not err.context:
        return err
    typed = [e for e in err.context if e.validator != "type" and not e.relative_path]
    deeper = [e for e in err.context if e.relative_path]
    return (typed or deeper or [err])[0]


_RELEASE = re.compile(r"^\d+(\.\d+)*$")


def _stack_route_findings(path: Path, data: dict, name: str, stack: dict) -> list[Finding]:
    """A stack's module exists and suits it; CI can install its versions or says how."""
    out: list[Finding] = []

    def bad(keys: tuple, rule: str, msg: str) -> None:
        out.append(Finding(path, line_of(data, ("stacks", name, *keys)), rule, msg))

    module = stack["install"].get("module")
    if module:
        full = module["name"]
        found = [
            m
            for m in data.get("modules", [])
            if (f"{m['name']}/{m['version']}" if m.get("version") else m["name"]) == full
        ]
        if not found:
            bad(("install",), "stack-module", f"stack {name}: module {full} is not under modules:")
        elif found[0]["status"] == "removed" and stack["status"] == "current":
            bad(
                ("status",),
                "stack-module",
                f"stack {name}: module {full} is removed, so the stack is historical",
            )
        else:
            served = found[0].get("node_types")
            missing = [nt for nt in stack["node_types"] if served and nt not in served]
            if missing:
                bad(
                    ("node_types",),
                    "stack-module",
                    f"stack {name}: module {full} is not built for node type(s) {missing}",
                )
    if data.get("lifecycle", {}).get("status") == "retired" and stack["status"] != "historical":
        bad(("status",), "stack-status", f"stack {name}: a retired site's stacks are historical")
    odd = {k: v for k, v in stack["frameworks"].items() if not _RELEASE.match(v)}
    if odd and "ci" not in stack:
        shown = ", ".join(f"{k} {v}" for k, v in odd.items())
        bad(
            ("frameworks",),
            "stack-ci",
            f"stack {name}: {shown} is not a release on PyPI; give ci.pip (the releases CI "
            "installs instead) or ci.skip (why CI cannot run it)",
        )
    return out


def check_consistency(path: Path, data: dict) -> list[Finding]:
    """Cross-references the schema cannot express."""
    out: list[Finding] = []

    def bad(keys: tuple, rule: str, msg: str) -> None:
        out.append(Finding(path, line_of(data, keys), rule, msg))

    if data.get("name") != path.stem:
        bad(
            ("name",),
            "profile-name",
            f"name {data.get('name')!r} must match the file name {path.stem!r}",
        )
    node_types = data.get("node_types", {})
    for name, nt in node_types.items():
        cores = nt["sockets"] * nt["cores_per_socket"]
        if nt.get("usable_cores", cores) > cores:
            bad(
                ("node_types", name, "usable_cores"),
                "usable-cores",
                f"node type {name}: usable_cores {nt['usable_cores']} exceeds sockets x "
                f"cores_per_socket = {cores}",
            )
    for name, nt in node_types.items():
        out.extend(_map_findings(path, data, name, nt))
    qos_names = set(data.get("qos", {}))
    for name, part in data.get("partitions", {}).items():
        out.extend(_bin_findings(path, data, name, part))
        key = "node_types" if "node_types" in part else "node_type"
        for nt in part.get("node_types") or [part["node_type"]]:
            if nt not in node_types:
                bad(
                    ("partitions", name, key),
                    "partition-node-type",
                    f"partition {name}: node type {nt!r} is not one of {sorted(node_types)}",
                )
        for q in part.get("qos", ()):
            if q not in qos_names:
                bad(
                    ("partitions", name, "qos"),
                    "partition-qos",
                    f"partition {name}: QoS {q!r} is not defined under qos: {sorted(qos_names)}",
                )
        limit = _seconds_or_none(part.get("max_walltime"))
        if (
            part.get("default_walltime")
            and limit is not None
            and duration_seconds(part["default_walltime"]) > limit
        ):
            bad(
                ("partitions", name, "default_walltime"),
                "default-walltime",
                f"partition {name}: default_walltime exceeds max_walltime",
            )
    default = data.get("scheduler", {}).get("default_partition")
    if default and default not in data.get("partitions", {}):
        bad(
            ("scheduler", "default_partition"),
            "default-partition",
            f"default partition {default!r} is not a partition of this site",
        )
    out += _routing_findings(path, data)
    out += _qos_findings(path, data)
    out += _plugin_findings(path, data)
    seen = set()
    for i, mod in enumerate(data.get("modules", [])):
        full = f"{mod['name']}/{mod.get('version')}" if mod.get("version") else mod["name"]
        if full in seen:
            bad(("modules", i), "module-unique", f"module {full} is listed twice")
        seen.add(full)
        if mod["status"] == "removed" and not mod.get("replacement"):
            bad(
                ("modules", i),
                "module-replacement",
                f"module {full} is removed but names no replacement",
            )
        for nt in mod.get("node_types", ()):
            if nt not in node_types:
                bad(
                    ("modules", i, "node_types"),
                    "module-node-type",
                    f"module {full}: node type {nt!r} is not one of {sorted(node_types)}",
                )
    for name, tool in data.get("tools", {}).items():
        unknown = [p for p in tool.get("partitions", ()) if p not in data.get("partitions", {})]
        if unknown:
            bad(
                ("tools", name, "partitions"),
                "tool-partition",
                f"tool {name}: partition(s) {unknown} are not partitions of this site",
            )
    for i, launcher in enumerate(data.get("launchers", [])):
        if launcher["status"] != "current" and not launcher.get("replacement"):
            bad(
                ("launchers", i),
                "launcher-replacement",
                f"launcher {launcher['name']} is {launcher['status']} but names no replacement",
            )
    for name, stack in data.get("stacks", {}).items():
        unknown = [nt for nt in stack["node_types"] if nt not in node_types]
        if unknown:
            bad(
                ("stacks", name, "node_types"),
                "stack-node-type",
                f"stack {name}: node type(s) {unknown} are not among {sorted(node_types)}",
            )
        arches = {node_types[nt]["arch"] for nt in stack["node_types"] if nt in node_types}
        if len(arches) > 1:
            bad(
                ("stacks", name, "node_types"),
                "stack-arch",
                f"stack {name}: one stack cannot serve several architectures {sorted(arches)}",
            )
        out += _stack_route_findings(path, data, name, stack)
        acc = stack["accelerator"]
        given = [k for k in ("version", "unknown") if k in acc]
        if acc["kind"] == "cpu" and given:
            bad(
                ("stacks", name, "accelerator"),
                "stack-accelerator",
                f"stack {name}: a cpu build has no toolkit version ({given[0]} given)",
            )
        elif acc["kind"] != "cpu" and len(given) != 1:
            bad(
                ("stacks", name, "accelerator"),
                "stack-accelerator",
                f"stack {name}: a {acc['kind']} build must give either its version or, "
                "under unknown, why the sources leave it open",
            )
    current = data.get("lifecycle", {}).get("status") == "current"
    for name, place in data.get("paths", {}).items():
        if place.get("constraint") and place.get("kind") != "node-local":
            bad(
                ("paths", name, "constraint"),
                "path-constraint",
                f"path {name}: only a node-local path is mounted on request (it is "
                f"{place.get('kind')})",
            )
        if current and place.get("kind") in STAGING_KINDS and not place.get("sources"):
            bad(
                ("paths", name),
                "path-sources",
                f"path {name}: a {place['kind']} path of a site in service gives its sources "
                "(jobs stage data there on the strength of them)",
            )
    life = data.get("lifecycle", {})
    if life.get("status") == "retired" and not life.get("retired"):
        bad(("lifecycle",), "lifecycle-date", "a retired site must give its retirement date")
    try:
        re.compile(data.get("account", {}).get("pattern", ""))
    except re.error as exc:
        bad(("account", "pattern"), "account-pattern", f"account pattern is not a regex: {exc}")
    return out


def _routing_findings(path: Path, data: dict) -> list[Finding]:
    """Every node type is reached by a partition; the partitions a job that names none is
    routed to exist. A node type no partition holds would be a node no job can have (and a
    slurmd the generated test cluster waits for in vain)."""
    out = []
    sched, parts = data.get("scheduler", {}), data.get("partitions", {})
    routed = sched.get("default_partitions") or []
    if routed and sched.get("default_partition"):
        out.append(
            Finding(
                path,
                line_of(data, ("scheduler", "default_partitions")),
                "default-partition",
                "give default_partition or default_partitions, not both",
            )
        )
    for name in routed:
        if name not in parts:
            out.append(
                Finding(
                    path,
                    line_of(data, ("scheduler", "default_partitions")),
                    "default-partition",
                    f"default partition {name!r} is not a partition of this site",
                )
            )
    reached = {
        nt
        for p in parts.values()
        if p.get("status") != "removed"
        for nt in p.get("node_types") or [p.get("node_type")]
    }
    for name in data.get("node_types", {}):
        if name not in reached:
            out.append(
                Finding(
                    path,
                    line_of(data, ("node_types", name)),
                    "node-type-reached",
                    f"node type {name}: no partition holds it, so no job can reach its nodes "
                    "by partition or constraint; list it under a partition's node_type or "
                    "node_types (or remove it)",
                )
            )
    return out


def _qos_findings(path: Path, data: dict) -> list[Finding]:
    """One default QoS at most; per-node-type limits name node types of the site."""
    out = []
    qos = data.get("qos", {})
    defaults = [n for n, q in qos.items() if q.get("default")]
    for name in defaults[1:]:
        out.append(
            Finding(
                path,
                line_of(data, ("qos", name, "default")),
                "qos-default",
                f"QoS {name}: {defaults[0]} is the default QoS already (one at most)",
            )
        )
    for name, q in qos.items():
        for nt in q.get("by_node_type", {}):
            if nt not in data.get("node_types", {}):
                out.append(
                    Finding(
                        path,
                        line_of(data, ("qos", name, "by_node_type", nt)),
                        "qos-node-type",
                        f"QoS {name}: node type {nt!r} is not one of "
                        f"{sorted(data.get('node_types', {}))}",
                    )
                )
    return out


def _plugin_findings(path: Path, data: dict) -> list[Finding]:
    """A plugin the built-in registry does not know lists its options."""
    return [
        Finding(
            path,
            line_of(data, ("plugins", name)),
            "plugin-options",
            f"plugin {name}: not one the built-in registry knows ({', '.join(spank.REGISTRY)});"
            " list the options it adds under options:",
        )
        for name, raw in data.get("plugins", {}).items()
        if name not in spank.REGISTRY and not raw.get("options")
    ]


def cpu_numbers(text: str) -> list[int]:
    """``"0-7,64-71"`` -> [0, ..., 7, 64, ..., 71]."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def _map_findings(path: Path, data: dict, name: str, nt: dict) -> list[Finding]:
    """A cpu_gpu_map names cores and GPUs the node type has, each core in one group."""
    out = []
    cores = nt["sockets"] * nt["cores_per_socket"]
    gpus = (nt.get("gpus") or {}).get("count", 0)
    seen: set[int] = set()
    for i, group in enumerate(nt.get("cpu_gpu_map", ())):
        where = ("node_types", name, "cpu_gpu_map", i)
        mine = cpu_numbers(group["cores"])
        if max(mine) >= cores or seen & set(mine):
            out.append(
                Finding(
                    path,
                    line_of(data, where),
                    "cpu-gpu-map",
                    f"node type {name}: cores {group['cores']} are outside its {cores} cores "
                    "or in another group too",
                )
            )
        seen |= set(mine)
        if any(g >= gpus for g in group["gpus"]):
            out.append(
                Finding(
                    path,
                    line_of(data, where),
                    "cpu-gpu-map",
                    f"node type {name}: GPU {max(group['gpus'])} does not exist ({gpus} GPUs)",
                )
            )
        if not set(cpu_numbers(group.get("reserved") or group["cores"])) <= set(mine):
            out.append(
                Finding(
                    path,
                    line_of(data, where),
                    "cpu-gpu-map",
                    f"node type {name}: reserved cores {group['reserved']} are not among "
                    f"the group's cores {group['cores']}",
                )
            )
    return out


def _bin_findings(path: Path, data: dict, name: str, part: dict) -> list[Finding]:
    """Size bins: ordered, not overlapping, each within the partition's limits."""
    out = []
    limit = _seconds_or_none(part.get("max_walltime"))
    last = 0
    for i, b in enumerate(part.get("walltime_by_nodes", ())):
        where = ("partitions", name, "walltime_by_nodes", i)
        problem = None
        if b["min_nodes"] > b["max_nodes"] or b["min_nodes"] <= last:
            problem = "bins must be in order of size and must not overlap"
        elif limit is not None and duration_seconds(b["max_walltime"]) > limit:
            problem = f"a bin's max_walltime exceeds the partition's {part['max_walltime']}"
        elif part.get("max_nodes") and b["max_nodes"] > part["max_nodes"]:
            problem = f"a bin goes beyond the partition's max_nodes {part['max_nodes']}"
        if problem:
            out.append(
                Finding(
                    path,
                    line_of(data, where),
                    "walltime-bins",
                    f"partition {name}: bin {b['min_nodes']}-{b['max_nodes']}: {problem}",
                )
            )
        last = b["max_nodes"]
    return out


def markers_in(path: Path) -> list[tuple[int, str]]:
    """(line, key) of each scaffold marker (``FILL-IN:key``) left in the file."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [
        (n, m["key"]) for n, line in enumerate(text.splitlines(), 1) for m in FILL_IN.finditer(line)
    ]


def load_profile(path: Path) -> Site:
    """Load one profile file; raise ProfileError listing every problem found. A profile that
    still holds scaffold markers is not validated: one finding says how many, and where the
    first is."""
    path = Path(path)
    markers = markers_in(path)
    if markers:
        line, key = markers[0]
        msg = (
            f"{len(markers)} fill-in marker(s) left (the first: FILL-IN:{key}), so the profile is "
            "not validated: write each fact from the site's documentation, or {unknown: why} "
            "where no source gives it; `python -m clusterkit check` lists them"
        )
        raise ProfileError([Finding(path, line, "fill-in", msg)])
    data = load_yaml(path)
    findings = _schema_findings(path, data)
    if not findings:
        findings = check_consistency(path, data)
    if findings:
        raise ProfileError(findings)
    return Site(name=data["name"], path=path, data=data)


def profile_paths(sites_dir: Path = SITES_DIR) -> list[Path]:
    return sorted(p for p in sites_dir.glob("*.yaml") if p.name != "schema.yaml")


GENERIC = "generic"
GENERIC_RELEASE = "25.11"  # the newest Slurm of clusterkit/emulate/slurm_option_table.py
GENERIC_NODE = "any"
# A node of the generic site: no size is known, so none is too small (rules that compare a
# request with a node's cores, GPUs or memory do not apply there).
_UNBOUNDED = 1 << 20


def generic_site() -> Site:
    """The site ``check-job --site generic`` judges against: a Slurm site of which nothing is
    known beyond Slurm and bash themselves."""
    data = {
        "name": GENERIC,
        "generic": True,
        "title": "a Slurm site (generic: no site facts)",
        "scheduler": {
            "kind": "slurm",
            "submit": "sbatch",
            "directive": "#SBATCH",
            "release": GENERIC_RELEASE,
        },
        "lifecycle": {"status": "current"},
        "launchers": [{"name": "srun", "status": "current"}],
        "node_types": {
            GENERIC_NODE: {
                "arch": "unknown",
                "cpu": "unknown",
                "sockets": 1,
                "cores_per_socket": _UNBOUNDED,
                "threads_per_core": 1,
                "memory_gb": _UNBOUNDED,
                "gpus": {"count": _UNBOUNDED, "model": "GPU", "vendor": None},
            }
        },
        "partitions": {},
        "account": {"required": False, "option": "--account", "pattern": ".*", "example": ""},
        "modules": [],
        "module_inventory": {"coverage": "partial"},
        "placeholders": [],
        "paths": {},
    }
    return Site(name=GENERIC, path=SITES_DIR / f"{GENERIC}.yaml", data=data)


@cache
def _loaded(name: str) -> Site | ProfileError:
    """The site, or the error that stops it loading: each profile is read once, when first
    asked for, so a broken profile stops only what asks for that site."""
    if name == GENERIC:
        return generic_site()
    path = SITES_DIR / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join([*(p.stem for p in profile_paths()), GENERIC])
        return ProfileError(
            [Finding(path, 0, "site-exists", f"no profile for site {name!r} (known: {known})")]
        )
    try:
        return load_profile(path)
    except ProfileError as exc:
        return exc


def load_site(name: str) -> Site:
    """The site called ``name`` (``generic`` too); ProfileError when its profile does not
    load."""
    got = _loaded(name)
    if isinstance(got, ProfileError):
        raise ProfileError(got.findings)
    return got


def all_sites() -> Iterator[Site]:
    """Every site whose profile loads; :func:`broken_sites` has the others, with their
    errors. Checks that go over every site go over these, and say which they left out."""
    for path in profile_paths():
        got = _loaded(path.stem)
        if isinstance(got, Site):
            yield got


def broken_sites() -> dict[str, ProfileError]:
    """Sites whose profile does not load (scaffold markers left, schema or consistency
    errors), with what stops each."""
    out = {}
    for path in profile_paths():
        got = _loaded(path.stem)
        if isinstance(got, ProfileError):
            out[path.stem] = got
    return out


def raw_profile(name: str) -> Any:
    """The profile of ``name`` as its YAML reads, not validated (a half-written one too); None
    where there is no such file or it is not YAML."""
    path = SITES_DIR / f"{name}.yaml"
    try:
        return load_yaml(path) if path.is_file() else None
    except ProfileError:
        return None


def unless_unloaded(path: Path | str, check: Callable[[], list[Finding]]) -> list[Finding]:
    """``check()``'s findings for a file; where it stops at a site whose profile does not load,
    one warning for the file instead (that profile's own errors are reported as its own), so a
    broken profile stops the checks of its own files only."""
    try:
        return check()
    except ProfileError as exc:
        name = Path(exc.findings[0].path).stem if exc.findings else ""
        if name not in broken_sites() or exc.findings[0].rule == "site-exists":
            return list(exc.findings)
        return [Finding(path, 0, "profile-loads", unloaded_note(name), "warning")]


def unloaded_note(name: str) -> str:
    """What a check says of a site it skipped because its profile does not load."""
    got = broken_sites().get(name)
    count = len(got.findings) if got else 0
    return (
        f"not checked: sites/{name}.yaml does not load ({count} problem(s), which "
        f"`python -m clusterkit profiles` lists)"
    )
