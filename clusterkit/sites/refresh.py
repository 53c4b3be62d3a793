"""Refresh a site profile from the live system: what site staff run on the real cluster.

::

    python -m clusterkit.sites.refresh --site bede \\
        --scontrol-partitions FILE --scontrol-nodes FILE --sacctmgr-qos FILE \\
        --module-avail FILE [--module-spider FILE] [--out DIR]
    python -m clusterkit.sites.refresh --site bede --live [--out DIR]   # runs the commands

It reads ``scontrol show partition -o``, ``scontrol show node -o``, ``sacctmgr -P show qos``
and ``module -t avail`` / ``module -t spider`` output, and for the software stacks ``conda search``
and ``pip index versions`` output (``--conda-search FILE``, ``--pip-index-versions [INDEX=]FILE``;
see :mod:`clusterkit.sites.stack_refresh`), compares them with ``sites/<site>.yaml``
and writes, for review, ``<out>/<site>.diff.txt`` (partitions, limits, node shapes, QoS and
modules added, changed or removed, each with the profile line it concerns) and
``<out>/<site>.yaml``, the profile with those changes made (line edits, so comments and layout
stay; removed modules and partitions are marked ``status: removed`` rather than deleted, so
pages that still use them fail with the replacement). The proposal is validated like any
profile. A section whose output is not given is not refreshed.

Facts the live system cannot know (descriptions, GPU models, sources) are left alone; a new
partition or node type gets a placeholder description to fill in.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hostlist

from clusterkit.sites.changes import Change
from clusterkit.sites.errors import CheckError, Finding
from clusterkit.sites.profiles import (
    ROOT,
    SITES_DIR,
    duration_seconds,
    format_seconds,
    line_of,
    load_profile,
    load_yaml,
    unknown_why,
)
from clusterkit.sites.stack_refresh import (
    PYPI,
    StackLive,
    compare_stacks,
    parse_conda_search,
    parse_pip_index,
    read_stack_live,
)

# --------------------------------------------------------------------------- parsing
_KEY = re.compile(r"\s+(?=[A-Za-z][A-Za-z0-9_:/.]*=)")


def parse_oneliner(line: str) -> dict[str, str]:
    """``Key=Value Key=Value ...`` as scontrol -o prints it (values may hold spaces)."""
    out = {}
    for part in _KEY.split(line.strip()):
        key, sep, value = part.partition("=")
        if sep:
            out[key] = value.strip()
    return out


def parse_scontrol(text: str, key: str) -> list[dict[str, str]]:
    return [
        parse_oneliner(line) for line in text.splitlines() if line.strip().startswith(f"{key}=")
    ]


def slurm_time(value: str) -> int | None:
    """Seconds in a Slurm time (``UNLIMITED``/``NONE`` -> None)."""
    value = value.strip()
    if not value or value.upper() in {"UNLIMITED", "NONE", "INFINITE", "N/A"}:
        return None
    return duration_seconds(value)


def parse_tres(text: str) -> dict[str, str]:
    out = {}
    for item in filter(None, (text or "").split(",")):
        k, _, v = item.partition("=")
        out[k] = v
    return out


def parse_qos(text: str) -> dict[str, dict[str, str]] | None:
    """``sacctmgr -P show qos``: QoS name -> columns; None if sacctmgr printed no table."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("Name|"):
        return None
    header = lines[0].split("|")
    out = {}
    for line in lines[1:]:
        row = dict(zip(header, line.split("|"), strict=False))
        out[row["Name"]] = row
    return out


def parse_modules(text: str) -> set[tuple[str, str | None]]:
    """``module -t avail``/``spider``: (name, version) pairs; hidden modules and paths skipped."""
    out: set[tuple[str, str | None]] = set()
    dirs = set()
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.endswith(":") or line.startswith(("-", "Lmod", "Modules")):
            continue
        line = re.sub(r"\((default|D|L|S|E|H)\)$|<[^>]*>$", "", line).strip()
        if line.endswith("/"):
            dirs.add(line[:-1])
            continue
        if line.startswith(".") or "/." in line:
            continue
        name, _, version = line.rpartition("/")
        if name:
            out.add((name, version))
        else:
            out.add((line, None))
    for d in dirs:  # a directory with no versions listed: the name alone
        if not d.startswith(".") and not any(n == d for n, _ in out):
            out.add((d, None))
    return out


# --------------------------------------------------------------------------- live facts
@dataclass
class Live:
    partitions: dict[str, dict[str, Any]] | None = None
    nodes: list[dict[str, Any]] | None = None
    qos: dict[str, dict[str, Any]] | None = None
    modules: set[tuple[str, str | None]] | None = None
    stacks: StackLive | None = None  # conda search / pip index output
    notes: list[str] = field(default_factory=list)


def node_shape(row: dict[str, str]) -> dict[str, Any]:
    gres = row.get("Gres", "(null)")
    gpus = 0
    for item in gres.split(","):
        m = re.match(r"^gpu(?::[^:(]+)?:(\d+)", item)
        if m:
            gpus += int(m[1])
    return {
        "name": row["NodeName"],
        "sockets": int(row.get("Sockets", 0) or 0),
        "cores_per_socket": int(row.get("CoresPerSocket", 0) or 0),
        "threads_per_core": int(row.get("ThreadsPerCore", 0) or 0),
        "memory_gb": round(int(row.get("RealMemory", 0) or 0) / 1024, 1),
        "gpus": gpus,
        "arch": row.get("Arch"),
        "partitions": [p for p in row.get("Partitions", "").split(",") if p],
        "features": sorted(
            f for f in row.get("AvailableFeatures", "").split(",") if f and f != "(null)"
        ),
    }


def read_live(
    partitions: str | None = None,
    nodes: str | None = None,
    qos: str | None = None,
    modules: list[str] | None = None,
    conda: list[str] | None = None,
    pip: list[tuple[str, str]] | None = None,
) -> Live:
    """Parse the outputs given; ``pip`` holds (index URL, ``pip index versions`` output)."""
    live = Live()
    if conda or pip:
        live.stacks = read_stack_live(conda or [], pip or [])
    if partitions is not None:
        live.partitions = {}
        for row in parse_scontrol(partitions, "PartitionName"):
            max_nodes = row.get("MaxNodes", "UNLIMITED")
            live.partitions[row["PartitionName"]] = {
                "max_walltime_s": slurm_time(row.get("MaxTime", "UNLIMITED")),
                "default_walltime_s": slurm_time(row.get("DefaultTime", "NONE")),
                "max_nodes": None if max_nodes.upper() == "UNLIMITED" else int(max_nodes),
                "default": row.get("Default") == "YES",
                "nodes": int(row.get("TotalNodes", 0) or 0),
                "node_names": hostlist.expand_hostlist(row["Nodes"])
                if row.get("Nodes") not in (None, "", "(null)")
                else [],
                "exclusive": row.get("OverSubscribe", "").upper().startswith("EXCLUSIVE"),
                "allow_qos": None
                if row.get("AllowQos", "ALL") == "ALL"
                else row["AllowQos"].split(","),
                "state": row.get("State"),
            }
    if nodes is not None:
        live.nodes = [node_shape(r) for r in parse_scontrol(nodes, "NodeName")]
    if qos is not None:
        rows = parse_qos(qos)
        if rows is None:
            first = (qos.strip().splitlines() or ["(no output)"])[0]
            live.notes.append(f"sacctmgr printed no QoS table ({first}): QoS not refreshed")
        else:
            live.qos = {}
            for name, row in rows.items():
                max_tres, min_tres = (
                    parse_tres(row.get("MaxTRES", "")),
                    parse_tres(row.get("MinTRES", "")),
                )
                live.qos[name] = {
                    "max_walltime_s": slurm_time(row.get("MaxWall", "")),
                    "max_nodes": int(max_tres["node"]) if "node" in max_tres else None,
                    "max_gpus": int(max_tres["gres/gpu"]) if "gres/gpu" in max_tres else None,
                    "min_nodes": int(min_tres["node"]) if "node" in min_tres else None,
                }
    if modules is not None:
        live.modules = set()
        for text in modules:
            live.modules |= parse_modules(text)
    return live


def run_live(site: str) -> dict[str, str]:
    """Run the commands on this machine (site staff on a login node)."""

    def run(cmd: str) -> str:
        r = subprocess.run(["bash", "-lc", cmd], capture_output=True, text=True)
        return r.stdout + r.stderr

    return {
        "partitions": run("scontrol show partition -o"),
        "nodes": run("scontrol show node -o"),
        "qos": run("sacctmgr -P show qos"),
        "avail": run("module -t avail 2>&1"),
        "spider": run("module -t spider 2>&1"),
    }


# --------------------------------------------------------------------------- the diff
def _t(seconds: int | None) -> str | None:
    return None if seconds is None else format_seconds(seconds)


def _shape_of(nt: dict) -> dict[str, Any]:
    gpus = (nt.get("gpus") or {}).get("count", 0)
    return {
        "sockets": nt["sockets"],
        "cores_per_socket": nt["cores_per_socket"],
        "threads_per_core": nt["threads_per_core"],
        "memory_gb": None if unknown_why(nt["memory_gb"]) else float(nt["memory_gb"]),
        "gpus": gpus,
    }


def _same_memory(profile_gb: float | None, live_gb: float) -> bool:
    """Nominal memory vs RealMemory: equal within 10% (sites hold some back for the OS); an
    unknown memory is never the same (the live figure fills it in)."""
    if profile_gb is None:
        return False
    return profile_gb == 0 or abs(live_gb - profile_gb) <= 0.1 * profile_gb


def compare(data: dict, live: Live) -> list[Change]:
    out: list[Change] = []
    parts = data.get("partitions", {})
    if live.partitions is not None:
        for name, p in parts.items():
            line = line_of(data, ["partitions", name])
            if name not in live.partitions:
                if p.get("status", "current") != "removed":
                    out.append(Change("partitions", name, "removed", line=line))
                continue
            lp = live.partitions[name]
            why = unknown_why(p.get("max_walltime"))
            # a partition without a limit of its own is MaxTime=UNLIMITED
            wall = p.get("max_walltime")
            prof_max = duration_seconds(wall) if wall and not why else None
            if lp["max_walltime_s"] != prof_max:
                out.append(
                    Change(
                        "partitions",
                        name,
                        "changed",
                        "max_walltime",
                        "unknown" if why else p.get("max_walltime"),
                        _t(lp["max_walltime_s"]),
                        line_of(data, ["partitions", name, "max_walltime"]),
                    )
                )
            prof_def = (
                duration_seconds(p["default_walltime"]) if p.get("default_walltime") else None
            )
            if lp["default_walltime_s"] != prof_def:
                out.append(
                    Change(
                        "partitions",
                        name,
                        "changed",
                        "default_walltime",
                        p.get("default_walltime"),
                        _t(lp["default_walltime_s"]),
                        line_of(data, ["partitions", name, "default_walltime"]),
                    )
                )
            if lp["max_nodes"] != p.get("max_nodes"):
                out.append(
                    Change(
                        "partitions",
                        name,
                        "changed",
                        "max_nodes",
                        p.get("max_nodes"),
                        lp["max_nodes"],
                        line_of(data, ["partitions", name, "max_nodes"]),
                    )
                )
            if p.get("nodes") is not None and lp["nodes"] != p["nodes"]:
                out.append(
                    Change(
                        "partitions",
                        name,
                        "changed",
                        "nodes",
                        p["nodes"],
                        lp["nodes"],
                        line_of(data, ["partitions", name, "nodes"]),
                    )
                )
            sched = data["scheduler"]
            named = sched.get("default_partition") or (sched.get("default_partitions") or [None])[0]
            if lp["default"] and not p.get("default") and name != named:
                out.append(
                    Change(
                        "partitions",
                        name,
                        "notice",
                        note=f"the live default partition; the profile names {named}",
                        line=line,
                    )
                )
            if lp["allow_qos"] is not None and sorted(lp["allow_qos"]) != sorted(p.get("qos", [])):
                out.append(
                    Change(
                        "partitions",
                        name,
                        "changed",
                        "qos",
                        sorted(p.get("qos", [])),
                        sorted(lp["allow_qos"]),
                        line_of(data, ["partitions", name, "qos"]),
                    )
                )
        for name, lp in live.partitions.items():
            if name not in parts:
                out.append(
                    Change(
                        "partitions",
                        name,
                        "added",
                        new=f"MaxTime {_t(lp['max_walltime_s'])}, {lp['nodes']} nodes",
                    )
                )
    if live.nodes is not None and live.partitions is not None:
        out += _compare_nodes(data, live)
    if live.qos is not None:
        prof_qos = data.get("qos", {})
        for name, q in prof_qos.items():
            line = line_of(data, ["qos", name])
            if name not in live.qos:
                out.append(Change("qos", name, "removed", line=line))
                continue
            lq = live.qos[name]
            checks = [
                ("max_walltime", q.get("max_walltime"), _t(lq["max_walltime_s"])),
                ("max_nodes", q.get("max_nodes"), lq["max_nodes"]),
                ("min_nodes", q.get("min_nodes"), lq["min_nodes"]),
                ("max_gpus", q.get("max_gpus"), lq["max_gpus"]),
            ]
            for key, old, new in checks:
                if key == "max_walltime" and old is not None:
                    old_s = duration_seconds(old)
                    if old_s == lq["max_walltime_s"]:
                        continue
                elif old == new:
                    continue
                out.append(
                    Change("qos", name, "changed", key, old, new, line_of(data, ["qos", name, key]))
                )
        for name, lq in live.qos.items():
            if name not in prof_qos and name != "normal":
                out.append(Change("qos", name, "added", new=f"MaxWall {_t(lq['max_walltime_s'])}"))
    if live.modules is not None:
        out += _compare_modules(data, live.modules)
    out += compare_stacks(data, live.modules, live.stacks)
    return out


def _compare_nodes(data: dict, live: Live) -> list[Change]:
    out: list[Change] = []
    by_part: dict[str, list[dict]] = {}
    for n in live.nodes or []:
        for p in n["partitions"]:
            by_part.setdefault(p, []).append(n)
    node_types = data.get("node_types", {})
    seen_types: dict[str, list[dict]] = {}
    mount = {p["constraint"] for p in data.get("paths", {}).values() if p.get("constraint")}
    for pname, p in data.get("partitions", {}).items():
        types = [t for t in p.get("node_types") or [p["node_type"]] if t in node_types]
        for n in by_part.get(pname) or []:
            nt_name = _type_of(n, types, node_types)
            if nt_name is None:
                continue
            seen_types.setdefault(nt_name, [])
            if n["name"] not in {x["name"] for x in seen_types[nt_name]}:
                seen_types[nt_name].append(n)
    for nt_name, nodes in seen_types.items():
        nt = node_types[nt_name]
        prof = _shape_of(nt)
        shapes = {tuple(sorted((k, n[k]) for k in prof)) for n in nodes}
        if len(shapes) > 1:
            out.append(
                Change(
                    "node_types",
                    nt_name,
                    "notice",
                    note=f"its partitions hold {len(shapes)} node shapes: split the node type",
                    line=line_of(data, ["node_types", nt_name]),
                )
            )
        n = nodes[0]
        for key, old in prof.items():
            new = n[key]
            if key == "memory_gb":
                if _same_memory(old, new):
                    continue
            elif old == new:
                continue
            path = (
                ["node_types", nt_name, "gpus", "count"]
                if key == "gpus"
                else [
                    "node_types",
                    nt_name,
                    key,
                ]
            )
            out.append(Change("node_types", nt_name, "changed", key, old, new, line_of(data, path)))
        features = sorted(set(nt.get("features", ())) | mount)
        if "features" in n and n["features"] != features:
            out.append(
                Change(
                    "node_types",
                    nt_name,
                    "changed",
                    "features",
                    features,
                    n["features"],
                    line_of(data, ["node_types", nt_name, "features"]),
                )
            )
        if n.get("arch") and n["arch"] != nt["arch"]:
            out.append(
                Change(
                    "node_types",
                    nt_name,
                    "changed",
                    "arch",
                    nt["arch"],
                    n["arch"],
                    line_of(data, ["node_types", nt_name, "arch"]),
                )
            )
        if nt.get("count") is not None and nt["count"] != len(nodes):
            out.append(
                Change(
                    "node_types",
                    nt_name,
                    "changed",
                    "count",
                    nt["count"],
                    len(nodes),
                    line_of(data, ["node_types", nt_name, "count"]),
                )
            )
    return out


def _type_of(node: dict, types: list[str], node_types: dict) -> str | None:
    """The node type of a partition's node: its only one, or, in a partition that pools
    several, the one whose features the node has."""
    if len(types) <= 1:
        return types[0] if types else None
    have = set(node.get("features", ()))
    return next((t for t in types if set(node_types[t].get("features", ())) <= have), None)


def _compare_modules(data: dict, live: set[tuple[str, str | None]]) -> list[Change]:
    out: list[Change] = []
    live_names = {n for n, _ in live}
    prof = data.get("modules", [])
    listed = set()
    for i, m in enumerate(prof):
        key = (m["name"], m.get("version"))
        listed.add(key)
        full = f"{m['name']}/{m['version']}" if m.get("version") else m["name"]
        present = key in live or (m.get("version") is None and m["name"] in live_names)
        line = line_of(data, ["modules", i])
        if m["status"] == "current" and not present:
            others = sorted((v for n, v in live if n == m["name"] and v), key=_vkey, reverse=True)
            repl = f"{m['name']}/{others[0]}" if others else None
            out.append(
                Change(
                    "modules",
                    full,
                    "removed",
                    new=repl,
                    line=line,
                    note=f"live versions: {', '.join(others)}" if others else "no version left",
                )
            )
        elif m["status"] == "removed" and present:
            out.append(
                Change(
                    "modules",
                    full,
                    "notice",
                    line=line,
                    note="listed as removed, but the live system still has it",
                )
            )
    for name, version in sorted(live, key=lambda k: (k[0], _vkey(k[1] or ""))):
        if (name, version) in listed:
            continue
        if version is None and any(n == name for n, _ in listed):
            continue
        full = f"{name}/{version}" if version else name
        out.append(Change("modules", full, "added"))
    return out


def _vkey(version: str) -> tuple:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.\-]", version))


# --------------------------------------------------------------------------- the proposal
class Editor:
    """Line edits of a profile's text; comments and layout are kept."""

    def __init__(self, text: str):
        self.lines = text.splitlines()
        self.appends: dict[int, list[str]] = {}  # after line (1-based) -> new lines
        self.deleted: set[int] = set()

    def set_value(self, line: int, key: str, value: str) -> bool:
        i = line - 1
        if not 0 <= i < len(self.lines):
            return False
        raw = self.lines[i]
        pat = re.compile(
            rf"((?:^|[\s{{,]){re.escape(key)}:\s*)"
            rf"(\[[^\]]*\]|\"[^\"]*\"|'[^']*'|[^,}}#\s][^,}}#]*?)(\s*[,}}#]|\s*$)"
        )
        new, n = pat.subn(lambda m: m[1] + value + m[3], raw, count=1)
        if n:
            self.lines[i] = new
        return bool(n)

    def remove_key(self, line: int, key: str) -> bool:
        """Drop ``key: value`` from a line: the whole line, or the item of a ``{...}`` mapping."""
        i = line - 1
        raw = self.lines[i]
        if re.match(rf"^\s*{re.escape(key)}:", raw):
            self.deleted.add(line)
            return True
        pat = re.compile(
            rf"(?<=[{{,])\s*{re.escape(key)}:\s*(\[[^\]]*\]|\"[^\"]*\"|'[^']*'|[^,}}]*)\s*(,|(?=}}))"
        )
        new, n = pat.subn("", raw, count=1)
        if n:
            self.lines[i] = re.sub(r"\{\s+", "{", new).replace(", }", "}")
        return bool(n)

    def add_to_flow(self, line: int, text: str) -> None:
        """Add ``key: value`` items to a one-line ``{...}`` mapping."""
        i = line - 1
        raw = self.lines[i]
        j = raw.rfind("}")
        if j >= 0:
            self.lines[i] = raw[:j] + ", " + text + raw[j:]

    def insert_after(self, line: int, new: list[str]) -> None:
        self.appends.setdefault(line, []).extend(new)

    def delete(self, start: int, end: int) -> None:
        self.deleted |= set(range(start, end + 1))

    def text(self) -> str:
        out = []
        for n, raw in enumerate(self.lines, 1):
            if n not in self.deleted:
                out.append(raw)
            out += self.appends.get(n, [])
        out += self.appends.get(0, [])
        return "\n".join(out) + "\n"


def _block_end(data: dict, keys: list) -> int:
    """The last line of the YAML node at ``keys`` (the line before its next sibling)."""
    parent = data
    for k in keys[:-1]:
        parent = parent[k]
    siblings = list(range(len(parent))) if isinstance(parent, list) else list(parent)
    idx = siblings.index(keys[-1])
    if idx + 1 < len(siblings):
        return line_of(data, [*keys[:-1], siblings[idx + 1]]) - 1
    # the last child: up to the next top-level key
    top = list(data)
    t = top.index(keys[0])
    return line_of(data, [top[t + 1]]) - 1 if t + 1 < len(top) else 10**9


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def propose(text: str, data: dict, changes: list[Change]) -> str:
    ed = Editor(text)
    new_modules: list[str] = []
    for c in changes:
        if c.section in {"partitions", "node_types", "qos"} and c.kind == "changed":
            if c.new is None:
                if c.line and c.old is not None:
                    ed.remove_key(c.line, c.field)
                continue
            value = f'"{c.new}"' if c.field in {"max_walltime", "default_walltime"} else str(c.new)
            if c.field == "qos":
                value = "[" + ", ".join(c.new) + "]"
            if c.field == "gpus":
                ok = ed.set_value(c.line, "count", value)
            else:
                ok = ed.set_value(c.line, c.field, value) if c.old is not None else False
            if not ok:
                parent = line_of(data, [c.section, c.name])
                indent = _indent(ed.lines[parent]) if parent < len(ed.lines) else "    "
                ed.insert_after(parent, [f"{indent}{c.field}: {value}  # refresh: added"])
        elif c.section == "partitions" and c.kind == "removed":
            indent = _indent(ed.lines[c.line]) if c.line < len(ed.lines) else "    "
            ed.insert_after(c.line, [f"{indent}status: removed  # refresh: not in scontrol output"])
        elif c.section == "partitions" and c.kind == "added":
            end = _block_end(data, ["partitions", list(data["partitions"])[-1]])
            ed.insert_after(
                min(end, len(ed.lines)),
                [
                    f"  {c.name}:  # refresh: new partition ({c.new}); check node_type",
                    "    description: TODO (added by refresh)",
                    f"    node_type: {next(iter(data['node_types']))}",
                    '    max_walltime: "00:00:00"',
                ],
            )
        elif c.section == "qos" and c.kind == "removed":
            ed.delete(line_of(data, ["qos", c.name]), _block_end(data, ["qos", c.name]))
            for pname, p in data.get("partitions", {}).items():
                if c.name in p.get("qos", []):
                    kept = [q for q in p["qos"] if q != c.name]
                    ed.set_value(
                        line_of(data, ["partitions", pname, "qos"]),
                        "qos",
                        "[" + ", ".join(kept) + "]",
                    )
        elif c.section == "qos" and c.kind == "added":
            end = _block_end(data, ["qos", list(data["qos"])[-1]])
            wall = c.new.split()[-1] if c.new else None
            lines = [f"  {c.name}:  # refresh: new QoS", "    description: TODO (added by refresh)"]
            if wall and wall != "(none)" and wall != "None":
                lines.append(f'    max_walltime: "{wall}"')
            ed.insert_after(min(end, len(ed.lines)), lines)
        elif c.section == "modules" and c.kind == "removed":
            repl = c.new or "none left on the system: check with the site"
            raw = ed.lines[c.line - 1]
            if raw.lstrip().startswith("- {"):
                ed.set_value(c.line, "status", "removed")
                if "replacement:" in raw:
                    ed.set_value(c.line, "replacement", repl)
                else:
                    ed.add_to_flow(c.line, f"replacement: {repl}")
                ed.lines[c.line - 1] += "  # refresh: not in module avail/spider"
            else:
                end = _block_end(data, ["modules", _module_index(data, c.name)])
                for n in range(c.line, min(end, len(ed.lines)) + 1):
                    if re.match(r"^\s*-?\s*status:", ed.lines[n - 1]):
                        ed.set_value(n, "status", "removed")
                ed.insert_after(c.line, [f"    replacement: {repl}"])
        elif c.section == "stacks" and c.kind == "changed":
            key = c.field.rpartition(".")[2]
            ed.set_value(c.line, key, _yaml_str(str(c.new)))
            ed.lines[c.line - 1] += f"  # refresh: {c.note or 'was ' + str(c.old)}"
        elif c.section == "modules" and c.kind == "added":
            name, _, version = c.name.partition("/")
            item = f"name: {name}" + (f", version: {_yaml_str(version)}" if version else "")
            new_modules.append(f"  - {{{item}, status: current}}  # refresh: new")
    if new_modules:
        end = _block_end(data, ["modules", len(data["modules"]) - 1]) if data.get("modules") else 0
        ed.insert_after(min(end, len(ed.lines)), new_modules)
    return ed.text()


def _module_index(data: dict, full: str) -> int:
    for i, m in enumerate(data["modules"]):
        f = f"{m['name']}/{m['version']}" if m.get("version") else m["name"]
        if f == full:
            return i
    return 0


def _yaml_str(v: str) -> str:
    return f'"{v}"' if re.fullmatch(r"[\d.]+", v) or ":" in v else v


# --------------------------------------------------------------------------- report
def report(site: str, changes: list[Change], notes: list[str], valid: list[str]) -> str:
    lines = [f"Refresh of sites/{site}.yaml from the live system", ""]
    for section in ("partitions", "node_types", "qos", "modules", "stacks"):
        items = [c for c in changes if c.section == section]
        if items:
            lines.append(f"[{section}]")
            lines += [f"  {c}" for c in items]
            lines.append("")
    if not changes:
        lines += ["no differences", ""]
    lines += [f"note: {n}" for n in notes]
    if valid:
        lines += ["", "the proposal does not validate yet (fill in the TODOs):"]
        lines += [f"  {v}" for v in valid]
    else:
        lines += ["", "the proposal validates against sites/schema.yaml"]
    return "\n".join(lines).rstrip() + "\n"


def refresh(
    site: str,
    live: Live,
    out_dir: Path,
    sites_dir: Path = SITES_DIR,
) -> tuple[list[Change], Path, Path]:
    """Compare, write the diff and the proposal; return the changes and the two paths."""
    profile = sites_dir / f"{site}.yaml"
    data = load_yaml(profile)
    changes = compare(data, live)
    text = propose(profile.read_text(encoding="utf-8"), data, changes)
    out_dir.mkdir(parents=True, exist_ok=True)
    proposal = out_dir / f"{site}.yaml"
    proposal.write_text(text, encoding="utf-8")
    problems = []
    try:
        load_profile(proposal)
    except CheckError as exc:
        problems = [str(f) for f in exc.findings]
    diff = out_dir / f"{site}.diff.txt"
    diff.write_text(report(site, changes, live.notes, problems), encoding="utf-8")
    return changes, diff, proposal


def proposal_sites(proposal: Path, into: Path, sites_dir: Path = SITES_DIR) -> Path:
    """A copy of the sites directory with ``proposal`` in place: judge pages against it."""
    into.mkdir(parents=True, exist_ok=True)
    for p in sites_dir.glob("*.yaml"):
        shutil.copy2(p, into / p.name)
    shutil.copy2(proposal, into / proposal.name)
    return into


def stack_input_findings(conda: list[Path], pip: list[str]) -> list[Finding]:
    """Outputs that are not what the option expects, each named with file, line and rule."""
    out = []
    for path in conda:
        try:
            parse_conda_search(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            line = getattr(exc, "lineno", 0)
            out.append(
                Finding(path, line, "conda-search-output", f"not conda search output: {exc}")
            )
    for arg in pip:
        path = Path(arg.rpartition("=")[2])
        if not parse_pip_index(path.read_text(encoding="utf-8")):
            out.append(
                Finding(
                    path, 1, "pip-index-output", "no 'NAME (VERSION)' + 'Available versions:' lines"
                )
            )
    return out


def _index_and_text(arg: str) -> tuple[str, str]:
    """``INDEX=FILE`` or ``FILE`` (PyPI) -> (index URL, the file's text)."""
    index, sep, path = arg.rpartition("=")
    return (index if sep else PYPI), Path(path).read_text(encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", required=True)
    ap.add_argument("--scontrol-partitions", type=Path, help="`scontrol show partition -o`")
    ap.add_argument("--scontrol-nodes", type=Path, help="`scontrol show node -o`")
    ap.add_argument("--sacctmgr-qos", type=Path, help="`sacctmgr -P show qos`")
    ap.add_argument("--module-avail", type=Path, help="`module -t avail` (stderr)")
    ap.add_argument("--module-spider", type=Path, help="`module -t spider` (stderr)")
    ap.add_argument(
        "--conda-search",
        type=Path,
        action="append",
        default=[],
        help="`conda search --json -c CHANNEL NAME` (or the plain table); repeatable",
    )
    ap.add_argument(
        "--pip-index-versions",
        metavar="[INDEX=]FILE",
        action="append",
        default=[],
        help="`pip index versions NAME [--index-url INDEX]` output; repeatable (default: PyPI)",
    )
    ap.add_argument("--live", action="store_true", help="run the commands here instead")
    ap.add_argument("--sites-dir", type=Path, default=SITES_DIR)
    ap.add_argument("--out", type=Path, default=ROOT / "_build" / "refresh")
    args = ap.parse_args(argv)

    def read(p: Path | None) -> str | None:
        return p.read_text(encoding="utf-8", errors="replace") if p else None

    bad = stack_input_findings(args.conda_search, args.pip_index_versions)
    if bad:
        print("\n".join(str(f) for f in bad), file=sys.stderr)
        return 1
    if args.live:
        got = run_live(args.site)
        live = read_live(got["partitions"], got["nodes"], got["qos"], [got["avail"], got["spider"]])
    else:
        mods = [t for t in (read(args.module_avail), read(args.module_spider)) if t is not None]
        live = read_live(
            read(args.scontrol_partitions),
            read(args.scontrol_nodes),
            read(args.sacctmgr_qos),
            mods or None,
            [p.read_text(encoding="utf-8") for p in args.conda_search],
            [_index_and_text(arg) for arg in args.pip_index_versions],
        )
    _changes, diff, proposal = refresh(args.site, live, args.out, args.sites_dir)
    print(diff.read_text(), end="")
    print(
        f"\nwrote {diff} and {proposal}; review, then copy the proposal to sites/{args.site}.yaml"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
