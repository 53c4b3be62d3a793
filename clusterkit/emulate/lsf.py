"""IBM Spectrum LSF (``bsub``) and Job Step Manager (``jsrun``), as on OLCF Summit.

bsub: options come from ``#BSUB`` lines and from the command line, which wins (LSF reads every
``#BSUB`` line of a script passed as an argument when ``LSB_BSUB_PARSE_SCRIPT=Y``, as Summit had
it; lines after the first command are read too, with a warning). Summit's CSM had two modes:
"easy" mode asks for whole nodes with ``-nnodes``; "expert" mode (``-csm y``) counts slots with
``-n`` and places them with an ``-R`` resource string whose terms must add up to ``-n``, one launch
node (``LN``) slot first, then compute (``CN``) slots ``ptile`` to a node within ``maxcus`` racks.

jsrun: resource sets (``-n``/``-r``) of ``-a`` tasks, ``-c`` cores and ``-g`` GPUs, bound with
``-b``; the arithmetic is judged against the node type of the site profile, and every task gets
the environment JSM and Spectrum MPI give it.

A dry run (``--dry-run`` or ``CLUSTERKIT_MODE=dry-run``) prints the plan as JSON; otherwise the
job runs here, scaled down to ``CLUSTERKIT_MAX_RANKS`` processes, its batch script on the "launch
node" with LSF's ``LSB_*`` variables, each ``jsrun`` starting its ranks locally.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from clusterkit.emulate import ddl, jobcheck, launch_env
from clusterkit.emulate.jobcheck import PLAN_RANKS_SHOWN, Report, add_step, check_command
from clusterkit.emulate.launch_env import NodeSet
from clusterkit.emulate.lsf_options import (
    BSUB_USAGE,
    JSRUN_OPTIONS,
    LsfOptionError,
    RTerm,
    lsf_walltime,
    parse_bsub,
    parse_jsrun,
    parse_rstring,
    slot_range,
)
from clusterkit.emulate.modules import check_module_command
from clusterkit.emulate.script import (
    Directive,
    JobScript,
    UnreadableScript,
    expand,
    not_evaluable,
    read_script,
    text_lines,
)
from clusterkit.errors import Finding
from clusterkit.profiles import Site, format_seconds

__all__ = [
    "LsfOptionError",
    "LsfShape",
    "RTerm",
    "check_jsrun",
    "check_jsrun_line",
    "check_lsf_script",
    "lsf_walltime",
    "parse_rstring",
]

LAUNCH_NODE = "batch1"  # the node a Summit batch script runs on (launch nodes: batch1..batch5)
LSF_VAR = "CLUSTERKIT_LSF"  # the allocation of a job running here, for jsrun/ddlrun
PLAN_HOSTS_SHOWN = 64  # nodes written out one word per slot in a plan's LSB_HOSTS
NOT_SUBMITTED = "Job not submitted."
# -alloc_flags values documented for Summit (OLCF user guide); others get a warning
ALLOC_FLAGS = {"gpumps", "gpudefault", "nvme", "maximizegpfs", "spectral", "smt1", "smt2", "smt4"}
_INTERACTIVE = {"I", "Ip", "Is", "IS", "ISp", "ISs", "IX"}


# --------------------------------------------------------------------------- reading a script
def read_bsub_directives(text: str) -> tuple[list[Directive], int, list[int]]:
    """Every ``#BSUB`` line of ``text`` (a trailing backslash continues one), the line of the
    first command (0 if none), and the lines that look like directives but are comments to
    LSF (``# BSUB -W 10``): LSF reads ``#BSUB`` lines anywhere in the script."""
    out: list[Directive] = []
    ignored: list[int] = []
    first_command = 0
    lines = text_lines(text)
    i = 0
    while i < len(lines):
        start = i
        raw = lines[i].strip()
        while raw.endswith("\\") and raw.startswith("#BSUB") and i + 1 < len(lines):
            i += 1
            raw = raw[:-1] + " " + lines[i].strip()
        i += 1
        if raw.startswith("#BSUB") and (len(raw) == 5 or raw[5] in " \t"):
            try:
                words = shlex.split(raw[5:])
            except ValueError as exc:
                out.append(Directive(start + 1, ("__unparsable__", str(exc))))
                continue
            # a word starting with '#' starts a comment (LSF's parseLine)
            cut = next((k for k, w in enumerate(words) if w.startswith("#")), len(words))
            out.append(Directive(start + 1, tuple(words[:cut])))
        elif re.match(r"#\s+BSUB(\s+-|\s*$)", raw, re.IGNORECASE) or raw.startswith("#bsub"):
            ignored.append(start + 1)
        elif raw and not raw.startswith("#") and not first_command:
            first_command = start + 1
    return out, first_command, ignored


@dataclass
class BsubRequest:
    """bsub options with the line each came from (0: the command line)."""

    path: Path
    values: dict[str, tuple[str | bool, int]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    # options given as one of the site docs' placeholders (-W <time>): not judged
    placeholders: dict[str, int] = field(default_factory=dict)

    def get(self, name: str) -> str | None:
        v = self.values.get(name)
        return None if v is None or v[0] is True else str(v[0])

    def has(self, name: str) -> bool:
        return name in self.values

    def line(self, name: str | None) -> int:
        return self.values[name][1] if name in self.values else 0


def bsub_request(
    path: Path, text: str, argv: list[str] | None, placeholders: tuple[str, ...] = ()
) -> BsubRequest:
    """Options from the script's ``#BSUB`` lines, then ``argv`` (the command line wins)."""
    req = BsubRequest(path)
    directives, first_command, ignored = read_bsub_directives(text)
    for line in ignored:
        req.findings.append(
            Finding(
                path,
                line,
                "directive-ignored",
                "bsub ignores this line: it reads lines that start with #BSUB; with a space "
                "after the '#' (or in lower case) it is a comment, and what it asks for is lost",
                level="warning",
            )
        )
    for d in directives:
        if d.words and d.words[0] == "__unparsable__":
            req.findings.append(
                Finding(path, d.line, "bsub-option", f"bsub: cannot read this line: {d.words[1]}")
            )
            continue
        if first_command and d.line > first_command:
            req.findings.append(
                Finding(
                    path,
                    d.line,
                    "bsub-directive-late",
                    f"#BSUB after the first command (line {first_command}): LSF still reads it, "
                    "readers of the script may not; keep the directives at the top",
                    level="warning",
                )
            )
        _merge(req, list(d.words), d.line, placeholders)
    if argv:
        _merge(req, list(argv), 0, placeholders)
    return req


def _merge(
    req: BsubRequest, words: list[str], line: int, placeholders: tuple[str, ...] = ()
) -> None:
    try:
        args = parse_bsub(words)
    except LsfOptionError as exc:
        req.findings.append(Finding(req.path, line, "bsub-option", f"{exc}. {NOT_SUBMITTED}"))
        return
    if args.stopped_by and args.stopped_by != "--":
        req.findings.append(
            Finding(
                req.path,
                line,
                "bsub-option",
                f"bsub: {args.stopped_by}: LSF options take one hyphen "
                f"({args.stopped_by[1:]}); a word starting with -- ends the options",
            )
        )
    elif args.command and line:
        req.findings.append(
            Finding(
                req.path,
                line,
                "bsub-option",
                f"bsub: {shlex.join(args.command)!r} is not an option: a #BSUB line holds "
                "options only",
            )
        )
    for name, value in args.options:
        # the project placeholder stays (the site's rule accepts it); another is not judged
        if value in placeholders and name != "P":
            req.placeholders[name] = line
            req.values.pop(name, None)
        else:
            req.values[name] = (value, line)
            req.placeholders.pop(name, None)


# --------------------------------------------------------------------------- judging a request
@dataclass
class LsfShape:
    """What a bsub request amounts to on its queue."""

    queue: str
    nodes: int
    walltime_s: int | None
    usable_cores: int
    gpus: int
    smt: int = 1  # hardware threads per core the job runs with (-alloc_flags smtN)
    mode: str = "easy"
    slots_per_node: int | None = None  # LSF slots of a compute node (ptile in expert mode)
    racks: int | None = None
    interactive: bool = False
    info: dict = field(default_factory=dict)


def check_request(req: BsubRequest, site: Site) -> tuple[list[Finding], LsfShape | None]:
    """Every rule of the site's LSF at submission; returns (findings, resolved shape)."""
    findings = list(req.findings)

    def bad(key: str | None, rule: str, msg: str, level: str = "error") -> None:
        findings.append(Finding(req.path, req.line(key), rule, msg, level))

    # project
    acct = site.account
    opt = acct.get("option", "-P")
    proj = req.get("P")
    if proj is None:
        if acct.get("required"):
            bad(
                None,
                "project-required",
                f"bsub: {site.title} requires a project: {opt} {acct['example']}. {NOT_SUBMITTED}",
            )
    elif not site.account_ok(proj):
        bad(
            "P",
            "project-form",
            f"bsub: {proj!r} is not a project ID of the form {acct['pattern']} "
            f"(e.g. {acct['example']})",
        )
    # queue
    default = site.default_partition
    qname = req.get("q") or (default.name if default else None)
    if qname not in site.partitions:
        bad(
            "q",
            "queue-exists",
            f"{qname}: No such queue. {NOT_SUBMITTED} ({site.title} has "
            f"{', '.join(site.partitions)})",
        )
        return findings, None
    queue = site.partitions[qname]
    node = queue.node_type
    if queue.status != "current":
        bad(
            "q",
            "queue-status",
            f"bsub: queue {qname} is {queue.status} on {site.title}",
            level="warning" if queue.status == "historical" else "error",
        )
    # run limit
    wall = None
    if "W" in req.placeholders:
        pass  # a run limit the reader fills in
    elif req.get("W") is None:
        if queue.raw.get("default_walltime"):
            from clusterkit.profiles import duration_seconds

            wall = duration_seconds(queue.raw["default_walltime"])
        else:
            bad(
                None,
                "walltime-required",
                f"bsub: queue {qname} of {site.title} has no default run limit: "
                "give one with -W [hours:]minutes",
            )
    else:
        try:
            wall = lsf_walltime(req.get("W") or "")
        except ValueError as exc:
            bad("W", "walltime-format", f"bsub: {exc}. {NOT_SUBMITTED}")
        if wall is not None and wall > queue.max_walltime_s:
            bad(
                "W",
                "walltime-limit",
                f"bsub: run limit {req.get('W')} ({format_seconds(wall)}) exceeds queue "
                f"{qname}'s limit of {queue.max_walltime}",
            )
    # SMT level and other allocation-wide flags
    smt = node.threads_per_core
    for flag in (req.get("alloc_flags") or "").split():
        m = re.fullmatch(r"smt(\d+)", flag.lower())
        if m:
            level = int(m[1])
            if level < 1 or level > node.threads_per_core or level & (level - 1):
                bad(
                    "alloc_flags",
                    "alloc-flags-smt",
                    f"bsub: -alloc_flags {flag}: a {node.name} node runs 1 to "
                    f"{node.threads_per_core} hardware threads per core (smt1, smt2, ... "
                    f"smt{node.threads_per_core})",
                )
            else:
                smt = level
        elif flag.lower() not in ALLOC_FLAGS:
            bad(
                "alloc_flags",
                "alloc-flags",
                f"bsub: -alloc_flags {flag!r} is not one of {', '.join(sorted(ALLOC_FLAGS))}",
                level="warning",
            )
    # easy versus expert mode
    csm = (req.get("csm") or "n").lower()
    if csm not in {"y", "n"}:
        bad("csm", "csm-value", f"bsub: -csm takes y or n, not {req.get('csm')!r}")
    expert = csm == "y"
    nodes = 0
    slots_per_node = node.usable_cores
    racks = None
    if expert:
        for name in ("nnodes", "ln_slots", "ln_mem", "cn_cu"):
            if req.has(name):
                bad(
                    name,
                    "expert-nnodes" if name == "nnodes" else "expert-easy-option",
                    f"bsub: -{name} cannot be used in expert mode (-csm y): "
                    + (
                        "count slots with -n and place them with -R"
                        if name == "nnodes"
                        else "describe the launch and compute nodes in the -R string"
                    ),
                )
        if not req.get("n") or not req.get("R"):
            bad(
                "csm",
                "expert-slots",
                "bsub: expert mode (-csm y) needs -n (slots) and -R (resource string)",
            )
        else:
            nodes, slots_per_node, racks = _check_expert(req, node, bad)
    else:
        if req.has("R"):
            bad(
                "R",
                "easy-mode-rstring",
                "bsub: -R needs expert mode (-csm y): in easy mode the resource string is "
                "written from -nnodes",
            )
        if req.has("n"):
            bad(
                "n",
                "easy-mode-n",
                "bsub: -n counts slots only in expert mode; ask for whole nodes with -nnodes",
                level="warning",
            )
        text = req.get("nnodes")
        if "nnodes" in req.placeholders:
            nodes = 1  # a node count the reader fills in: judged as one node
        elif text is None:
            bad(
                None,
                "nnodes-required",
                "bsub: ask for nodes with -nnodes N (or use expert mode, -csm y, with -n and -R)",
            )
        elif not text.isdigit() or int(text) < 1:
            bad("nnodes", "nnodes-value", f"bsub: -nnodes {text} is not a positive number")
        else:
            nodes = int(text)
    if queue.max_nodes and nodes > queue.max_nodes:
        bad(
            "R" if expert else "nnodes",
            "node-count",
            f"bsub: {nodes} nodes exceed queue {qname}'s {queue.max_nodes}",
        )
    elif wall is not None and nodes and queue.max_walltime_s >= wall:
        limit, shown, why = queue.walltime_limit(nodes)
        if wall > limit:
            bad(
                "W",
                "walltime-bin",
                f"bsub: run limit {req.get('W')} ({format_seconds(wall)}) exceeds the {shown} "
                f"queue {qname} allows {why}; the job asks for {nodes}. {NOT_SUBMITTED}",
            )
    interactive = any(req.has(k) for k in _INTERACTIVE)
    info = {
        "project": proj,
        "job_name": req.get("J"),
        "output": req.get("o") or req.get("oo"),
        "error": req.get("e") or req.get("eo"),
        "output_overwrite": req.has("oo") and not req.has("o"),
        "error_overwrite": req.has("eo") and not req.has("e"),
        "alloc_flags": (req.get("alloc_flags") or "").split(),
        "dependency": req.get("w"),
        "reservation": req.get("U"),
        "queue_given": req.has("q"),
    }
    shape = LsfShape(
        qname,
        max(nodes, 1),
        wall,
        node.usable_cores,
        node.gpus,
        smt=smt,
        mode="expert" if expert else "easy",
        slots_per_node=slots_per_node,
        racks=racks,
        interactive=interactive,
        info=info,
    )
    return findings, shape


def _check_expert(req: BsubRequest, node, bad) -> tuple[int, int, int | None]:
    """Judge ``-n`` and the ``-R`` string; (compute nodes, slots per node, racks)."""
    try:
        lo, hi = slot_range(req.get("n") or "")
    except ValueError as exc:
        bad("n", "slots-value", f"bsub: {exc}. {NOT_SUBMITTED}")
        return 0, node.usable_cores, None
    try:
        terms = parse_rstring(req.get("R") or "")
    except ValueError as exc:
        bad("R", "rstring-syntax", f"bsub: {exc}")
        return 0, node.usable_cores, None
    if len(terms) == 1 and terms[0].count is None:
        terms = [RTerm(hi, terms[0].sections)]
        compute = terms
        launch: list[RTerm] = []
    else:
        total = sum(t.count or 0 for t in terms)
        if not lo <= total <= hi:
            bad(
                "n",
                "expert-slot-count",
                f"bsub: -n {req.get('n')} but the -R terms ask for {total} slots "
                f"({' + '.join(str(t.count) for t in terms)})",
            )
        launch = [t for t in terms if t.selects("LN")]
        compute = [t for t in terms if t.selects("CN")]
        for k, t in enumerate(terms, start=1):
            if t not in launch and t not in compute:
                bad(
                    "R",
                    "rstring-term",
                    f"bsub: -R term {k} ({t.count} slots) selects neither launch (LN) nor "
                    "compute (CN) nodes",
                    level="warning",
                )
        if not launch:
            bad(
                "R",
                "rstring-launch-node",
                "bsub: an expert-mode -R string starts with a launch-node term, "
                "1*{select[((LN)&&(type==any))]order[r15s:pg]span[hosts=1]...}",
            )
        for t in launch:
            if t.count != 1 or t.hosts not in (None, 1):
                bad(
                    "R",
                    "rstring-launch-node",
                    f"bsub: the launch-node term asks for {t.count} slot(s): a job has one "
                    "launch-node slot (1*{...span[hosts=1]...})",
                    level="warning",
                )
    if not compute:
        bad("R", "rstring-compute", "bsub: the -R string selects no compute (CN) nodes")
        return 0, node.usable_cores, None
    nodes = 0
    ptiles = []
    racks = None
    for t in compute:
        count = t.count or 0
        if t.ptile is None and t.hosts is None:
            bad(
                "R",
                "rstring-span",
                f"bsub: the compute term of {count} slots has no span[ptile=N] (slots per "
                "node): the node count cannot be told",
            )
            continue
        if t.ptile is not None:
            ptiles.append(t.ptile)
            if t.ptile > node.usable_cores:
                bad(
                    "R",
                    "ptile-cores",
                    f"bsub: span[ptile={t.ptile}] exceeds the {node.usable_cores} usable "
                    f"cores of a {node.name} node",
                )
            if t.ptile and count % t.ptile:
                bad(
                    "R",
                    "ptile-nodes",
                    f"bsub: {count} compute slots are not a whole number of nodes of "
                    f"{t.ptile} slots (ptile={t.ptile})",
                )
            nodes += -(-count // t.ptile) if t.ptile else 0
        else:
            hosts = t.hosts or 1
            if count > hosts * node.usable_cores:
                bad(
                    "R",
                    "ptile-cores",
                    f"bsub: {count} slots on span[hosts={hosts}] exceed {hosts} x "
                    f"{node.usable_cores} usable cores",
                )
            nodes += hosts
        if t.maxcus is not None:
            racks = max(racks or 0, t.maxcus)
            per_rack = node.raw.get("nodes_per_rack")
            if per_rack and nodes > t.maxcus * per_rack:
                bad(
                    "R",
                    "rack-count",
                    f"bsub: {nodes} nodes do not fit in maxcus={t.maxcus} racks of "
                    f"{per_rack} nodes",
                )
    return nodes, (min(ptiles) if ptiles else node.usable_cores), racks


# --------------------------------------------------------------------------- jsrun
@dataclass
class JsrunStep:
    nrs: int
    rs_per_host: int
    tasks_per_rs: int
    ntasks: int
    cores: int
    gpus: int
    bind: str
    distribution: str
    env: dict[str, str]
    unset: list[str]
    stdio_mode: str
    command: list[str]

    @property
    def nodes_used(self) -> int:
        return max(1, -(-self.nrs // max(self.rs_per_host, 1)))


def _int_value(ns, name: str, special: dict[str, int], minimum: int, bad) -> int | None:
    text = ns.get(name)
    if text is None:
        return None
    if text in special:
        return special[text]
    why = not_evaluable(text)
    if why:
        short = next((f"-{s}/" for s, lng, _v in JSRUN_OPTIONS if lng == name and s), "")
        bad(
            "value-not-evaluable",
            f"jsrun {short}--{name} {text}: not evaluable here ({why}); not judged",
            level="warning",
        )
        return None
    if not text.isdigit() or int(text) < minimum:
        what = "a positive number" if minimum else "a number"
        extra = f" or {' / '.join(special)}" if special else ""
        bad("jsrun-value", f"jsrun: --{name} takes {what}{extra}, not {text!r}")
        return None
    return int(text)


def parse_step(
    path: Path | str, line: int, words: list[str], shape: LsfShape, env: dict[str, str]
) -> tuple[list[Finding], JsrunStep | None]:
    """Judge a jsrun line against the allocation; the resolved step, or None."""
    findings: list[Finding] = []

    def bad(rule: str, msg: str, level: str = "error") -> None:
        findings.append(Finding(path, line, rule, msg, level))

    try:
        ns = parse_jsrun([expand(w, env) for w in words])
    except LsfOptionError as exc:
        bad("jsrun-option", str(exc))
        return findings, None
    nodes = max(shape.nodes, 1)
    n_bad = len(findings)
    cores = _int_value(ns, "cpu_per_rs", {"ALL_CPUS": shape.usable_cores}, 1, bad)
    gpus = _int_value(ns, "gpu_per_rs", {"ALL_GPUS": shape.gpus}, 0, bad)
    tasks = _int_value(ns, "tasks_per_rs", {}, 1, bad)
    rph = _int_value(ns, "rs_per_host", {}, 1, bad)
    nrs = _int_value(ns, "nrs", {"ALL_HOSTS": nodes}, 1, bad)
    np_ = _int_value(ns, "np", {}, 1, bad)
    if any(f.level == "error" for f in findings[n_bad:]):
        return findings, None
    # a value not evaluable here (-c $(($NCORES/$NRS))) leaves the sums it enters unjudged
    cores_known = cores is not None or ns.get("cpu_per_rs") is None
    tasks_known = tasks is not None or ns.get("tasks_per_rs") is None
    cores = cores or 1
    gpus = gpus or 0
    fit = shape.usable_cores // cores
    if gpus:
        fit = min(fit, shape.gpus // gpus)
    if cores_known and cores > shape.usable_cores:
        bad(
            "rs-cores",
            f"jsrun: a resource set of {cores} cores does not fit a node of "
            f"{shape.usable_cores} usable cores",
        )
    if gpus > shape.gpus:
        bad(
            "rs-gpus",
            f"jsrun: a resource set of {gpus} GPUs does not fit a node of {shape.gpus} GPUs",
        )
    if rph is not None:
        if cores_known and rph * cores > shape.usable_cores and cores <= shape.usable_cores:
            bad(
                "rs-cores",
                f"jsrun: {rph} resource sets per host x {cores} cores = {rph * cores}; a node "
                f"has {shape.usable_cores} usable cores",
            )
        if gpus and rph * gpus > shape.gpus and gpus <= shape.gpus:
            bad(
                "rs-gpus",
                f"jsrun: {rph} resource sets per host x {gpus} GPUs = {rph * gpus}; a node "
                f"has {shape.gpus} GPUs",
            )
        per_host = rph
    else:
        per_host = max(fit, 1)
    if nrs is None:
        nrs = per_host * nodes
    elif nrs > per_host * nodes:
        how = f"at -r {rph} per host" if rph is not None else f"{fit} fit a node"
        bad(
            "rs-count",
            f"jsrun: {nrs} resource sets do not fit the job's {nodes} node(s) ({how}: at most "
            f"{per_host * nodes})",
        )
    if tasks is None and np_ is not None:
        tasks = -(-np_ // nrs)
    elif tasks is not None and np_ is not None and np_ != nrs * tasks:
        bad(
            "jsrun-tasks",
            f"jsrun: -p {np_} disagrees with {nrs} resource sets x -a {tasks} tasks",
            level="warning",
        )
    tasks = tasks or 1
    ntasks = np_ if np_ is not None else nrs * tasks
    # binding: packed:N cores per task (default packed:1), rs (all the set's cores), none
    bind = (ns.get("bind") or "packed:1").lower()
    m = re.fullmatch(r"packed:(\d+)", bind)
    why = not_evaluable(bind)
    if why:
        bad(
            "value-not-evaluable",
            f"jsrun --bind {bind}: not evaluable here ({why}); not judged",
            level="warning",
        )
    elif not (cores_known and tasks_known):
        pass  # the cores or tasks of a resource set are not known here: nothing to add up
    elif m:
        per_task = int(m[1])
        if per_task < 1:
            bad("jsrun-bind", f"jsrun: bad binding {bind!r}")
        elif per_task * tasks > cores:
            msg = (
                f"jsrun: -b {bind} x {tasks} tasks = {per_task * tasks} cores; a resource set "
                f"has {cores} (-c {cores})"
            )
            if ns.get("bind") is None:
                bad(
                    "bind-cores",
                    msg + ": more than 1 task/rank assigned to a core (default binding)",
                    level="warning",
                )
            else:
                bad("bind-cores", msg)
    elif bind == "rs":
        if tasks > 1:
            bad(
                "bind-cores",
                f"jsrun: -b rs binds each of the {tasks} tasks to all {cores} cores of its "
                "resource set: more than 1 task/rank assigned to a core",
                level="warning",
            )
    elif bind != "none":
        bad("jsrun-bind", f"jsrun: unknown binding {ns.get('bind')!r} (packed:N, rs or none)")
    if cores_known and not why:
        _check_omp_threads(bad, bind, cores, shape.smt, ns, env)
    dist = (ns.get("launch_distribution") or "packed").lower()
    if not re.fullmatch(r"packed|cyclic|plane:[1-9]\d*", dist):
        bad(
            "jsrun-distribution",
            f"jsrun: unknown launch distribution {dist!r} (packed, cyclic or plane:N)",
        )
        dist = "packed"
    lat = ns.get("latency_priority")
    if lat:
        known = {"gpu-cpu", "cpu-mem", "cpu-cpu", "gpu-gpu", "mem-mem"}
        for item in lat.lower().split(","):
            if item not in known:
                bad(
                    "jsrun-latency",
                    f"jsrun: latency priority {item!r} is not one of {', '.join(sorted(known))}",
                    level="warning",
                )
    jenv: dict[str, str] = {}
    for item in ns.all("env") + ns.all("env_eval"):
        k, eq, v = item.partition("=")
        jenv[k] = v if eq else env.get(k, "")
    if not ns.command:
        bad("jsrun-command", "jsrun: no program to launch")
    step = JsrunStep(
        nrs=nrs,
        rs_per_host=per_host,
        tasks_per_rs=tasks,
        ntasks=ntasks,
        cores=cores,
        gpus=gpus,
        bind=bind,
        distribution=dist,
        env=jenv,
        unset=ns.all("env_no_propagate"),
        stdio_mode=(ns.get("stdio_mode") or "collected").lower(),
        command=list(ns.command),
    )
    return findings, step


def _check_omp_threads(bad, bind: str, cores: int, smt: int, ns, env: dict[str, str]) -> None:
    """jsrun warns when a task is told to start more OpenMP threads than it has hardware
    threads (OLCF Summit guide, "Be careful with assigning threads to tasks")."""
    given = {k: v for k, _, v in (e.partition("=") for e in ns.all("env") + ns.all("env_eval"))}
    text = given.get("OMP_NUM_THREADS", env.get("OMP_NUM_THREADS", ""))
    m = re.fullmatch(r"packed:(\d+)", bind)
    bound = int(m[1]) if m else cores if bind == "rs" else None
    if not text.isdigit() or not bound:
        return
    if int(text) > bound * smt:
        bad(
            "jsrun-omp-threads",
            f"jsrun: Warning: OMP_NUM_THREADS={text} is greater than available PU's (each task "
            f"is bound to {bound} core(s) x {smt} hardware thread(s) with -b {bind})",
            level="warning",
        )


def omp_threads(step: JsrunStep, smt: int) -> int | None:
    """OMP_NUM_THREADS jsrun sets when the user has not: bound cores x SMT level."""
    m = re.fullmatch(r"packed:(\d+)", step.bind)
    if m:
        return int(m[1]) * smt
    if step.bind == "rs":
        return step.cores * smt
    return None


def layout(step: JsrunStep, node_limit: int | None = None) -> list[dict]:
    """Tasks of a step on its nodes: rank, node index, resource set (global and on its node).

    Resource sets fill a node (``rs_per_host`` of them) before the next; tasks go to resource
    sets packed (default), cyclic, or ``plane:N``. Only nodes below ``node_limit`` are listed.
    """
    out = []
    last = step.nodes_used if node_limit is None else min(step.nodes_used, node_limit)
    per = step.tasks_per_rs
    plane = int(step.distribution.split(":")[1]) if step.distribution.startswith("plane") else 0
    for node in range(last):
        first_rs = node * step.rs_per_host
        for rs in range(first_rs, min(step.nrs, first_rs + step.rs_per_host)):
            for k in range(per):
                if step.distribution == "cyclic":
                    rank = rs + k * step.nrs
                elif plane:
                    rank = ((k // plane) * step.nrs + rs) * plane + k % plane
                else:
                    rank = rs * per + k
                if rank < step.ntasks:
                    out.append(
                        {"rank": rank, "node_index": node, "rs": rs, "rs_local": rs - first_rs}
                    )
    out.sort(key=lambda r: (r["node_index"], r["rank"]))
    local: dict[int, int] = {}
    for r in out:
        r["local_rank"] = local.get(r["node_index"], 0)
        local[r["node_index"]] = r["local_rank"] + 1
    for r in out:
        r["local_size"] = local[r["node_index"]]
    return sorted(out, key=lambda r: r["rank"])


def rank_env(
    step: JsrunStep, task: dict, hosts: str, ntasks: int, smt: int, base: dict[str, str]
) -> dict[str, str]:
    """The environment jsrun gives one task (on top of ``base``); ``hosts`` is LSB_HOSTS."""
    env = launch_env.jsm_rank_env(
        hosts=hosts,
        ntasks=ntasks,
        rank=task["rank"],
        node_index=task["node_index"],
        local_rank=task["local_rank"],
        local_size=task["local_size"],
        gpus_per_rs=step.gpus,
    )
    if step.gpus:
        first = task["rs_local"] * step.gpus
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(first + i) for i in range(step.gpus))
    threads = omp_threads(step, smt)
    if threads and "OMP_NUM_THREADS" not in base and "OMP_NUM_THREADS" not in step.env:
        env["OMP_NUM_THREADS"] = str(threads)
    env.update(step.env)
    return env


def check_jsrun(
    path: Path | str, line: int, words: list[str], shape: LsfShape, env: dict[str, str]
) -> tuple[list[Finding], dict | None, list[str]]:
    """(findings, the step as a plan dict, the command it starts) for ``jsrun words``."""
    findings, step = parse_step(path, line, words, shape, env)
    if step is None:
        return findings, None, []
    plan, ranks = step_plan(step, line, shape, NodeSet.of("node", shape.nodes), env)
    plan["ranks"] = ranks(PLAN_RANKS_SHOWN)
    return findings, plan, step.command


def check_jsrun_line(page, line: int, words: list[str], site: Site) -> list[Finding]:
    """A ``jsrun ...`` line shown on its own (a page snippet): the per-node arithmetic against
    the default queue's node type, then the command it starts. ``words`` include ``jsrun``.
    (Signature of :data:`clusterkit.pagetest.COMMAND_CHECKERS`.)"""
    queue = site.default_partition or next(iter(site.partitions.values()))
    node = queue.node_type
    # the allocation of a snippet is unknown: as many nodes as the queue allows
    shape = LsfShape(queue.name, queue.max_nodes or 1, None, node.usable_cores, node.gpus,
                     smt=node.threads_per_core)  # fmt: skip
    findings, step = parse_step(page, line, list(words[1:]), shape, {})
    if step is not None and step.command:
        report = Report(Path(str(page)), site.name)
        report.plan = {"nodes": 0, "steps": []}
        tasks = step.rs_per_host * step.tasks_per_rs
        inner = _slurm_shape(site, LsfShape(queue.name, 1, None, 0, 0), tasks, step.gpus)
        check_command(page, line, step.command, site, inner, {}, report, tasks)
        findings += report.findings
    return findings


def step_plan(
    step: JsrunStep, line: int, shape: LsfShape, nodes: NodeSet, env: dict[str, str]
) -> tuple[dict, Callable[[int], list[dict]]]:
    """The step in counts, and the function that writes out its first ranks."""
    used = nodes.head(step.nodes_used)
    per_host = step.rs_per_host * step.tasks_per_rs
    hosts = (
        " ".join(used.names())
        if used.count <= PLAN_HOSTS_SHOWN
        else f"{used.name(0)} ... {used.name(used.count - 1)} (abbreviated)"
    )

    def ranks(limit: int) -> list[dict]:
        first_nodes = min(used.count, -(-limit // max(per_host, 1)) + 1)
        return [
            {
                "rank": t["rank"],
                "node": used.name(t["node_index"]),
                "resource_set": t["rs"],
                "local_rank": t["local_rank"],
                "env": rank_env(step, t, hosts, step.ntasks, shape.smt, env),
            }
            for t in layout(step, node_limit=first_nodes)[:limit]
        ]

    plan = {
        "launcher": "jsrun",
        "line": line,
        "resource_sets": step.nrs,
        "rs_per_host": step.rs_per_host,
        "nodes": used.count,
        "nodelist": used.compressed,
        "tasks_per_rs": step.tasks_per_rs,
        "cores_per_rs": step.cores,
        "gpus_per_rs": step.gpus,
        "bind": step.bind,
        "launch_distribution": step.distribution,
        "ntasks": step.ntasks,
        "tasks_per_host": per_host,
        "omp_num_threads": omp_threads(step, shape.smt),
        "command": step.command,
    }
    return plan, ranks


# --------------------------------------------------------------------------- whole scripts
def job_env(
    shape: LsfShape,
    job_id: int,
    job_name: str,
    nodes: list[str],
    subcwd: str,
    hostfile: str,
) -> dict[str, str]:
    """What LSF puts in a Summit batch job's environment (the launch node listed first)."""
    slots = shape.slots_per_node or shape.usable_cores
    hosts = [LAUNCH_NODE] + [n for n in nodes for _ in range(slots)]
    env = {
        "LSB_JOBID": str(job_id),
        "LSB_JOBNAME": job_name,
        "LSB_QUEUE": shape.queue,
        "LSB_HOSTS": " ".join(hosts),
        "LSB_MCPU_HOSTS": " ".join([LAUNCH_NODE, "1"] + [f"{n} {slots}" for n in nodes]),
        "LSB_DJOB_NUMPROC": str(len(hosts)),
        "LSB_MAX_NUM_PROCESSORS": str(len(hosts)),
        "LSB_DJOB_HOSTFILE": hostfile,
        "LS_SUBCWD": subcwd,
        "LSB_JOBINDEX": "0",
    }
    if shape.info.get("project"):
        env["LSB_PROJECT_NAME"] = shape.info["project"]
    if shape.interactive:
        env["LSB_INTERACTIVE"] = "Y"
    return env


def check_lsf_script(
    path: Path | str,
    site: Site,
    argv: list[str] | None = None,
    text: str | None = None,
    first_line: int = 1,
) -> Report:
    """Judge an LSF job script (or a page snippet, with ``text``) against ``site``.

    ``first_line`` shifts reported lines, for a snippet that starts inside a page.
    """
    path = Path(path)
    try:
        script = read_script(path, text)
    except UnreadableScript as exc:
        return jobcheck.unreadable(path, site, exc, "bsub")
    report = Report(path, site.name, text=script.text)
    report.findings += script.reading_findings() + _dos_line_breaks(script)
    req = bsub_request(path, script.text, argv, site.placeholders)
    findings, shape = check_request(req, site)
    report.findings.extend(findings)
    if shape is None:
        return jobcheck._shift(report, first_line)
    nodes = NodeSet.of("node", shape.nodes)
    report.plan = lsf_plan(site, path, shape, nodes)
    if script.parse_error:
        report.findings.append(
            Finding(
                path,
                0,
                "bash-parse",
                f"bashlex could not parse the body ({script.parse_error}); read line by line",
                level="warning",
            )
        )
    walk_body(script, site, shape, dict(report.plan["job_env"]), report, nodes)
    return jobcheck._shift(report, first_line)


def _dos_line_breaks(script: JobScript) -> list[Finding]:
    """bsub takes a script with DOS line breaks; bash then reads each \\r as part of the
    last word of its line."""
    if not script.source.crlf_line:
        return []
    return [
        Finding(
            script.path,
            script.source.crlf_line,
            "script-dos-line-breaks",
            "DOS line breaks (\\r\\n): LSF takes the script, but bash reads each \\r as part of "
            "the last word of its line ('hostname\\r: command not found'); convert it with "
            "dos2unix",
            level="warning",
        )
    ]


def lsf_plan(site: Site, path: Path, shape: LsfShape, nodes: NodeSet) -> dict:
    name = shape.info.get("job_name") or path.name
    node = site.partitions[shape.queue].node_type
    return {
        "site": site.name,
        "scheduler": "lsf",
        "script": str(path),
        "queue": shape.queue,
        "mode": shape.mode,
        "node_type": node.name,
        "launch_node": LAUNCH_NODE,
        "nodes": nodes.count,
        "nodelist": nodes.compressed,
        "slots_per_node": shape.slots_per_node,
        "racks": shape.racks,
        "walltime_s": shape.walltime_s,
        "smt": shape.smt,
        "project": shape.info.get("project"),
        "job_name": name,
        "output": shape.info.get("output"),
        "error": shape.info.get("error"),
        "alloc_flags": shape.info.get("alloc_flags", []),
        "interactive": shape.interactive,
        "queue_given": shape.info.get("queue_given", False),
        "output_overwrite": shape.info.get("output_overwrite", False),
        "error_overwrite": shape.info.get("error_overwrite", False),
        "job_env": _plan_env(shape, name, nodes),
        "steps": [],
    }


def _plan_env(shape: LsfShape, name: str, nodes: NodeSet) -> dict[str, str]:
    """The job's LSF variables for a plan; the host lists (LSB_HOSTS one word per slot,
    LSB_MCPU_HOSTS one pair per node) are abbreviated for jobs of more than PLAN_HOSTS_SHOWN
    nodes."""
    shown = nodes.names(PLAN_HOSTS_SHOWN)
    env = job_env(shape, 1000, name, shown, "$LS_SUBCWD", "$LSB_DJOB_HOSTFILE")
    if nodes.count > PLAN_HOSTS_SHOWN:
        slots = shape.slots_per_node or shape.usable_cores
        first, last = nodes.name(0), nodes.name(nodes.count - 1)
        env["LSB_HOSTS"] = (
            f"{LAUNCH_NODE} then each of {first} ... {last} {slots} times (abbreviated)"
        )
        env["LSB_MCPU_HOSTS"] = (
            f"{LAUNCH_NODE} 1 {first} {slots} ... {last} {slots} (abbreviated: one pair for "
            f"each of the {nodes.count} nodes {nodes.compressed})"
        )
        env["LSB_DJOB_NUMPROC"] = env["LSB_MAX_NUM_PROCESSORS"] = str(1 + slots * nodes.count)
    return env


def _slurm_shape(site: Site, shape: LsfShape, tasks_per_node: int = 1, gpus: int | None = None):
    """The command checks of jobcheck take a Slurm shape: the same allocation in its terms."""
    from clusterkit.emulate.slurm import Shape

    part = site.partitions[shape.queue]
    return Shape(
        part,
        shape.nodes,
        tasks_per_node,
        shape.nodes * tasks_per_node,
        1,
        part.node_type.gpus if gpus is None else gpus,
        shape.walltime_s,
        True,
    )


def walk_body(
    script: JobScript,
    site: Site,
    shape: LsfShape,
    env: dict[str, str],
    report: Report,
    nodes: NodeSet,
) -> None:
    """Judge every command of the body: modules, jsrun steps, launchers, Python programs."""
    path = script.path
    for cmd in script.commands:
        for a in cmd.assignments:
            k, _, v = a.partition("=")
            env[k] = expand(v, env)
        if not cmd.words:
            continue
        name = Path(cmd.name).name
        words = list(cmd.words[1:])
        if name == "export":
            for w in words:
                if "=" in w:
                    k, _, v = w.partition("=")
                    env[k] = expand(v, env)
            continue
        if name in {"module", "ml"}:
            report.findings.extend(check_module_command(path, cmd.line, name, words, site))
            continue
        if name == "jsrun":
            findings, step = parse_step(path, cmd.line, words, shape, env)
            report.findings.extend(findings)
            if step is not None:
                add_step(report, *step_plan(step, cmd.line, shape, nodes, env))
                inner = _slurm_shape(site, shape, step.rs_per_host * step.tasks_per_rs, step.gpus)
                check_command(
                    path,
                    cmd.line,
                    step.command,
                    site,
                    inner,
                    env,
                    report,
                    step.rs_per_host * step.tasks_per_rs,
                )
            continue
        if name in ddl.DDL_TOOLS:
            gpus = site.partitions[shape.queue].node_type.gpus
            findings, dstep = ddl.check_ddl_step(
                path, cmd.line, name, [expand(w, env) for w in words], site, nodes, gpus
            )
            report.findings.extend(findings)
            if dstep:
                add_step(report, dstep, None)
        elif name in {"srun", "sbatch", "salloc"} and site.launcher(name) is None:
            report.findings.append(
                Finding(
                    path,
                    cmd.line,
                    "scheduler-mismatch",
                    f"{name} is Slurm's; {site.title} runs LSF: start steps with jsrun",
                )
            )
            continue
        elif (name.startswith("python") or name == "torchrun") and site.launcher("jsrun"):
            report.findings.append(
                Finding(
                    path,
                    cmd.line,
                    "launch-node-command",
                    f"{name} runs on the launch node ({LAUNCH_NODE}), not on the job's compute "
                    "nodes: start it with jsrun",
                    level="warning",
                )
            )
        check_command(
            path, cmd.line, [cmd.name, *words], site, _slurm_shape(site, shape), env, report, None
        )


# --------------------------------------------------------------------------- running ranks
def run_ranks(command: list[str], envs: list[dict[str, str]], prefixes: list[str]) -> int:
    """Start one process per env; copy their output line by line (so that lines of different
    ranks never interleave), forward USR1/TERM/INT; the largest exit status wins."""
    lock = threading.Lock()
    procs = []
    pumps = []

    def pump(stream, sink, prefix):
        for line in stream:
            with lock:
                sink.write(prefix + line)
                sink.flush()

    for env, prefix in zip(envs, prefixes, strict=True):
        try:
            proc = subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        except OSError as exc:
            print(f"{command[0]}: {exc.strerror}", file=sys.stderr)
            for p in procs:
                p.kill()
            return 127
        procs.append(proc)
        for stream, sink in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
            t = threading.Thread(target=pump, args=(stream, sink, prefix), daemon=True)
            t.start()
            pumps.append(t)

    def forward(signum, _frame):
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)}
    try:
        codes = [p.wait() for p in procs]
        for t in pumps:
            t.join(timeout=5)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    failed = [c for c in codes if c]
    return max(failed, key=abs) if failed else 0


# --------------------------------------------------------------------------- shims
def _stdin_script() -> Path | None:
    if sys.stdin is None or sys.stdin.isatty():
        return None
    text = sys.stdin.read()
    if not text.strip():
        return None
    fd, name = tempfile.mkstemp(prefix="bsub-stdin-", suffix=".lsf")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return Path(name)


def _is_script(word: str) -> bool:
    p = Path(word)
    if not p.is_file():
        return False
    try:
        head = p.read_bytes()[:4096]
    except OSError:
        return False
    return b"\0" not in head


def bsub(argv: list[str]) -> int:
    from clusterkit.emulate.entry import current_site, note

    site = current_site("bsub")
    dry = "--dry-run" in argv or os.environ.get("CLUSTERKIT_MODE") == "dry-run"
    argv = [a for a in argv if a != "--dry-run"]
    try:
        args = parse_bsub(argv)
    except LsfOptionError as exc:
        print(f"{exc}\n{BSUB_USAGE}", file=sys.stderr)
        return 255
    command = args.command
    opts = argv[: len(argv) - len(command)]
    script: Path | None = None
    if len(command) == 1 and _is_script(command[0]):
        script = Path(command[0])
    elif not command:
        script = _stdin_script()
        if script is None:
            print(
                "bsub: the emulator needs a job script (bsub script.lsf or bsub < script.lsf) "
                "or a command",
                file=sys.stderr,
            )
            return 255
    if script is not None:
        report = check_lsf_script(script, site, opts)
    else:
        text = "#!/bin/bash\n" + shlex.join(command) + "\n"
        report = check_lsf_script(Path("<command line>"), site, opts, text=text)
    for f in report.findings:
        print(f, file=sys.stderr)
    if report.errors:
        print(NOT_SUBMITTED, file=sys.stderr)
        return 255
    plan = report.plan
    if dry:
        print(json.dumps(jobcheck.with_ranks(report), indent=2))
        return 0
    if not site.is_current:
        note("bsub", f"{site.title} is {site.status}: this run only replays how the job ran")
    return run_job(site, plan, script, command)


def run_job(site: Site, plan: dict, script: Path | None, command: list[str]) -> int:
    """Run a checked job here: the batch script (or command) on the "launch node", scaled."""
    from clusterkit.emulate.entry import (
        _wait_forwarding,
        max_ranks,
        note,
        run_node_names,
        shell_env,
    )

    job_id = int(os.environ.get("CLUSTERKIT_JOB_ID", "1000"))
    default = "" if plan.get("queue_given") else "default "
    print(f"Job <{job_id}> is submitted to {default}queue <{plan['queue']}>.", flush=True)
    run_nodes = run_node_names(min(plan["nodes"], max_ranks()))
    tmp = Path(tempfile.mkdtemp(prefix=f"lsf-{job_id}-"))
    shape = LsfShape(
        plan["queue"],
        len(run_nodes),
        plan["walltime_s"],
        0,
        0,
        smt=plan["smt"],
        slots_per_node=plan["slots_per_node"],
        interactive=plan["interactive"],
        info={"project": plan["project"]},
    )
    hostfile = tmp / "hostfile"
    env = dict(os.environ)
    env.update(job_env(shape, job_id, plan["job_name"], run_nodes, os.getcwd(), str(hostfile)))
    hostfile.write_text("\n".join(env["LSB_HOSTS"].split()) + "\n")
    env[LSF_VAR] = json.dumps(
        {
            "site": site.name,
            "queue": plan["queue"],
            "plan_nodes": plan["nodes"],
            "run_nodes": run_nodes,
            "smt": plan["smt"],
            "walltime_s": plan["walltime_s"],
        }
    )
    env.update(shell_env())
    note(
        "bsub",
        f"site {site.name}: job {job_id} runs here now on {len(run_nodes)} local node(s) "
        f"(asked for {plan['nodes']}); the batch script runs on the launch node "
        f"{LAUNCH_NODE}",
    )
    argv = ["bash", str(script)] if script else ["bash", "-c", shlex.join(command)]
    if plan["interactive"]:
        print("<<Waiting for dispatch ...>>", file=sys.stderr)
        print(f"<<Starting on {LAUNCH_NODE}>>", file=sys.stderr, flush=True)
        return subprocess.call(argv, env=env)
    out_name = _writable(_output_name(plan.get("output"), job_id))
    err_name = _writable(_output_name(plan.get("error"), job_id))
    if not plan.get("output"):
        note("bsub", "no -o: LSF would mail the job's output; it is shown here instead")
    with contextlib.ExitStack() as stack:
        out = err = None
        if out_name:
            mode = "w" if plan.get("output_overwrite") else "a"
            out = stack.enter_context(open(out_name, mode, encoding="utf-8"))
            err = out  # without -e, standard error goes to the -o file
        if err_name and err_name != out_name:
            mode = "w" if plan.get("error_overwrite") else "a"
            err = stack.enter_context(open(err_name, mode, encoding="utf-8"))
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err, start_new_session=True)
        code = _wait_forwarding(proc)
    if code:
        note(
            "bsub",
            f"job {job_id} exited with status {code}" + (f"; see {out_name}" if out_name else ""),
        )
    return code


def _writable(name: str | None) -> str | None:
    """The output file, or None (with a note) where its directory does not exist here."""
    if name and not Path(name).resolve().parent.is_dir():
        from clusterkit.emulate.entry import note

        note("bsub", f"{name}: its directory does not exist here; output shown instead")
        return None
    return name


def _output_name(pattern: str | None, job_id: int) -> str | None:
    """An -o/-e file name: %J is the job ID, %I the array index (0 outside arrays)."""
    if not pattern:
        return None
    return pattern.replace("%J", str(job_id)).replace("%I", "0")


def jsrun(argv: list[str]) -> int:
    from clusterkit.emulate.entry import current_site, max_ranks, note, scaled

    site = current_site("jsrun")
    alloc = json.loads(os.environ.get(LSF_VAR) or "null")
    if not alloc:
        print(
            "jsrun: error: the emulator runs jsrun only inside a job started by its bsub",
            file=sys.stderr,
        )
        return 1
    node = site.partitions[alloc["queue"]].node_type
    shape = LsfShape(
        alloc["queue"],
        alloc["plan_nodes"],
        alloc.get("walltime_s"),
        node.usable_cores,
        node.gpus,
        smt=alloc.get("smt") or 1,
    )
    env = dict(os.environ)
    findings, step = parse_step("<jsrun>", 0, argv, shape, env)
    for f in findings:
        print(f, file=sys.stderr)
    if step is None or any(f.level == "error" for f in findings):
        return 1
    run_nodes = alloc["run_nodes"]
    used = min(step.nodes_used, len(run_nodes))
    n_nodes, per_node = scaled(used, step.rs_per_host * step.tasks_per_rs)
    tasks = [t for t in layout(step, node_limit=n_nodes) if t["local_rank"] < per_node]
    tasks = tasks[: max_ranks()]
    note(
        "jsrun",
        f"{step.ntasks} task(s) in {step.nrs} resource set(s) requested, {len(tasks)} started "
        f"here: {shlex.join(step.command)}",
    )
    nodes = run_nodes[:n_nodes]
    for new_rank, t in enumerate(tasks):
        t["rank"] = new_rank
    for t in tasks:
        t["local_size"] = sum(1 for u in tasks if u["node_index"] == t["node_index"])
    envs = []
    for t in tasks:
        renv = {k: v for k, v in env.items() if k not in step.unset}
        renv.update(rank_env(step, t, " ".join(nodes), len(tasks), shape.smt, env))
        envs.append(renv)
    prefix = step.stdio_mode == "prepended"
    return run_ranks(step.command, envs, [f"{t['rank']}: " if prefix else "" for t in tasks])


# The DDL launchers live in ddl.py; they are listed here too so that a shim dispatcher that
# loads this module alone still finds them.
HANDLERS = {"bsub": bsub, "jsrun": jsrun, **ddl.HANDLERS}
