"""Judge an IBM Spectrum LSF request (``bsub``) against a site profile, as on OLCF Summit.

Options come from ``#BSUB`` lines and from the command line, which wins (LSF reads every
``#BSUB`` line of a script passed as an argument when ``LSB_BSUB_PARSE_SCRIPT=Y``, as Summit had
it; lines after the first command are read too, with a warning). Summit's CSM had two modes:
"easy" mode asks for whole nodes with ``-nnodes``; "expert" mode (``-csm y``) counts slots with
``-n`` and places them with an ``-R`` resource string whose terms must add up to ``-n``, one launch
node (``LN``) slot first, then compute (``CN``) slots ``ptile`` to a node within ``maxcus`` racks.
The result is an :class:`LsfShape`, the allocation in counts.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from clusterkit.emulate.lsf_options import (
    LsfOptionError,
    RTerm,
    lsf_walltime,
    parse_bsub,
    parse_rstring,
    read_bsub_directives,
    slot_range,
)
from clusterkit.grammars.placeholders import placeholder_in
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import (
    NodeType,
    Partition,
    Site,
    duration_seconds,
    format_seconds,
    not_checked,
)

NOT_SUBMITTED = "Job not submitted."
# -alloc_flags values documented for Summit (OLCF user guide); others get a warning
ALLOC_FLAGS = {"gpumps", "gpudefault", "nvme", "maximizegpfs", "spectral", "smt1", "smt2", "smt4"}
_INTERACTIVE = {"I", "Ip", "Is", "IS", "ISp", "ISs", "IX"}


# --------------------------------------------------------------------------- the request
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
    found = read_bsub_directives(text)
    for line in found.ignored:
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
    for d in found.read:
        if d.problem:
            req.findings.append(
                Finding(path, d.line, "bsub-option", f"bsub: cannot read this line: {d.problem}")
            )
            continue
        if found.first_command and d.line > found.first_command:
            req.findings.append(
                Finding(
                    path,
                    d.line,
                    "bsub-directive-late",
                    f"#BSUB after the first command (line {found.first_command}): LSF still "
                    "reads it, readers of the script may not; keep the directives at the top",
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
        message = (
            f"bsub: {args.stopped_by}: LSF options take one hyphen ({args.stopped_by[1:]}); a "
            "word starting with -- ends the options"
        )
        req.findings.append(Finding(req.path, line, "bsub-option", message))
    elif args.command and line:
        message = (
            f"bsub: {shlex.join(args.command)!r} is not an option: a #BSUB line holds options only"
        )
        req.findings.append(Finding(req.path, line, "bsub-option", message))
    for name, value in args.options:
        # a placeholder stands for the reader's value and is not judged; the project's stays in
        # the request too, for LSB_PROJECT_NAME to show it
        if placeholder_in(value, placeholders, words=name in {"P", "q", "u", "G"}):
            req.placeholders[name] = line
            req.findings.append(
                Finding(
                    req.path,
                    line,
                    "placeholder",
                    f"fill in -{name}: {value!r} is a placeholder for your own value; bsub would "
                    "refuse it as written",
                    level="warning",
                )
            )
            if name == "P":
                req.values[name] = (value, line)
            else:
                req.values.pop(name, None)
        else:
            req.values[name] = (value, line)
            req.placeholders.pop(name, None)


# --------------------------------------------------------------------------- the allocation
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


@dataclass
class _Asked:
    queue: Partition
    wall: int | None = None
    smt: int = 1
    expert: bool = False
    nodes: int = 0
    slots_per_node: int = 0
    racks: int | None = None

    @property
    def node(self) -> NodeType:
        return self.queue.node_type


def check_request(req: BsubRequest, site: Site) -> tuple[list[Finding], LsfShape | None]:
    """Every rule of the site's LSF at submission; returns (findings, resolved shape)."""
    rules = _Rules(req, site)
    rules.project()
    queue = rules.queue()
    if queue is None:
        return rules.findings, None
    asked = _Asked(queue, smt=queue.node_type.threads_per_core)
    asked.slots_per_node = queue.node_type.usable_cores
    for rule in (rules.run_limit, rules.alloc_flags, rules.mode, rules.node_limits):
        rule(asked)
    return rules.findings, _shape(req, asked)


def _shape(req: BsubRequest, a: _Asked) -> LsfShape:
    info = {
        "project": req.get("P"),
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
    return LsfShape(
        a.queue.name,
        max(a.nodes, 1),
        a.wall,
        a.node.usable_cores,
        a.node.gpus,
        smt=a.smt,
        mode="expert" if a.expert else "easy",
        slots_per_node=a.slots_per_node,
        racks=a.racks,
        interactive=any(req.has(k) for k in _INTERACTIVE),
        info=info,
    )


class _Rules:
    def __init__(self, req: BsubRequest, site: Site):
        self.req, self.site = req, site
        self.findings: list[Finding] = list(req.findings)

    def bad(self, key: str | None, rule: str, msg: str, level: str = "error") -> None:
        self.findings.append(Finding(self.req.path, self.req.line(key), rule, msg, level))

    def project(self) -> None:
        acct, site, proj = self.site.account, self.site, self.req.get("P")
        if proj is None and acct.get("required"):
            self.bad(
                None,
                "project-required",
                f"bsub: {site.title} requires a project: {acct.get('option', '-P')} "
                f"{acct['example']}. {NOT_SUBMITTED}",
            )
        elif proj is not None and "P" not in self.req.placeholders and not site.account_ok(proj):
            self.bad(
                "P",
                "project-form",
                f"bsub: {proj!r} is not a project ID of the form {acct['pattern']} "
                f"(e.g. {acct['example']})",
            )

    def queue(self) -> Partition | None:
        site, default = self.site, self.site.default_partition
        name = self.req.get("q") or (default.name if default else None)
        if name not in site.partitions:
            self.bad(
                "q",
                "queue-exists",
                f"{name}: No such queue. {NOT_SUBMITTED} ({site.title} has "
                f"{', '.join(site.partitions)})",
            )
            return None
        queue = site.partitions[name]
        if queue.status != "current":
            self.bad(
                "q",
                "queue-status",
                f"bsub: queue {name} is {queue.status} on {site.title}",
                level="warning" if queue.status == "historical" else "error",
            )
        return queue

    def run_limit(self, a: _Asked) -> None:
        text, queue = self.req.get("W"), a.queue
        if "W" in self.req.placeholders:
            return  # a run limit the reader fills in
        if text is None:
            if queue.raw.get("default_walltime"):
                a.wall = duration_seconds(queue.raw["default_walltime"])
            else:
                self.bad(
                    None,
                    "walltime-required",
                    f"bsub: queue {queue.name} of {self.site.title} has no default run limit: "
                    "give one with -W [hours:]minutes",
                )
            return
        try:
            a.wall = lsf_walltime(text)
        except ValueError as exc:
            self.bad("W", "walltime-format", f"bsub: {exc}. {NOT_SUBMITTED}")
            return
        if queue.max_walltime_s is None:  # unknown, or no limit of its own
            if queue.max_walltime_unknown and not queue.raw.get("walltime_by_nodes"):
                fact = f"queue {queue.name}'s max_walltime"
                msg = not_checked(self.site.title, fact, queue.max_walltime_unknown)
                self.bad("W", "fact-unknown", msg, "warning")
            return
        if a.wall > queue.max_walltime_s:
            self.bad(
                "W",
                "walltime-limit",
                f"bsub: run limit {text} ({format_seconds(a.wall)}) exceeds queue "
                f"{queue.name}'s limit of {queue.max_walltime}",
            )

    def alloc_flags(self, a: _Asked) -> None:
        """The SMT level and the other allocation-wide flags."""
        node = a.node
        for flag in (self.req.get("alloc_flags") or "").split():
            m = re.fullmatch(r"smt(\d+)", flag.lower())
            level = int(m[1]) if m else 0
            if m and 1 <= level <= node.threads_per_core and not level & (level - 1):
                a.smt = level
            elif m:
                self.bad(
                    "alloc_flags",
                    "alloc-flags-smt",
                    f"bsub: -alloc_flags {flag}: a {node.name} node runs 1 to "
                    f"{node.threads_per_core} hardware threads per core (smt1, smt2, ... "
                    f"smt{node.threads_per_core})",
                )
            elif flag.lower() not in ALLOC_FLAGS:
                self.bad(
                    "alloc_flags",
                    "alloc-flags",
                    f"bsub: -alloc_flags {flag!r} is not one of {', '.join(sorted(ALLOC_FLAGS))}",
                    level="warning",
                )

    # -- easy versus expert mode
    def mode(self, a: _Asked) -> None:
        csm = (self.req.get("csm") or "n").lower()
        if csm not in {"y", "n"}:
            self.bad("csm", "csm-value", f"bsub: -csm takes y or n, not {self.req.get('csm')!r}")
        a.expert = csm == "y"
        if a.expert:
            self.expert_mode(a)
        else:
            self.easy_mode(a)

    def easy_mode(self, a: _Asked) -> None:
        req = self.req
        if req.has("R"):
            self.bad(
                "R",
                "easy-mode-rstring",
                "bsub: -R needs expert mode (-csm y): in easy mode the resource string is "
                "written from -nnodes",
            )
        if req.has("n"):
            self.bad(
                "n",
                "easy-mode-n",
                "bsub: -n counts slots only in expert mode; ask for whole nodes with -nnodes",
                level="warning",
            )
        text = req.get("nnodes")
        if "nnodes" in req.placeholders:
            a.nodes = 1  # a node count the reader fills in: judged as one node
        elif text is None:
            self.bad(
                None,
                "nnodes-required",
                "bsub: ask for nodes with -nnodes N (or use expert mode, -csm y, with -n and -R)",
            )
        elif not (text.isascii() and text.isdigit()) or int(text) < 1:
            self.bad("nnodes", "nnodes-value", f"bsub: -nnodes {text} is not a positive number")
        else:
            a.nodes = int(text)

    def expert_mode(self, a: _Asked) -> None:
        for name in ("nnodes", "ln_slots", "ln_mem", "cn_cu"):
            if self.req.has(name):
                how = (
                    "count slots with -n and place them with -R"
                    if name == "nnodes"
                    else "describe the launch and compute nodes in the -R string"
                )
                rule = "expert-nnodes" if name == "nnodes" else "expert-easy-option"
                self.bad(name, rule, f"bsub: -{name} cannot be used in expert mode (-csm y): {how}")
        if not self.req.get("n") or not self.req.get("R"):
            self.bad(
                "csm",
                "expert-slots",
                "bsub: expert mode (-csm y) needs -n (slots) and -R (resource string)",
            )
            return
        compute = self._compute_terms()
        if compute:
            _ExpertNodes(self, a).count(compute)

    def _compute_terms(self) -> list[RTerm]:
        """The compute (CN) terms of ``-R``, having judged the string against ``-n``."""
        req = self.req
        try:
            low, high = slot_range(req.get("n") or "")
        except ValueError as exc:
            self.bad("n", "slots-value", f"bsub: {exc}. {NOT_SUBMITTED}")
            return []
        try:
            terms = parse_rstring(req.get("R") or "")
        except ValueError as exc:
            self.bad("R", "rstring-syntax", f"bsub: {exc}")
            return []
        if len(terms) == 1 and terms[0].count is None:
            return [RTerm(high, terms[0].sections)]  # a simple string: -n slots, all compute
        total = sum(t.count or 0 for t in terms)
        if not low <= total <= high:
            self.bad(
                "n",
                "expert-slot-count",
                f"bsub: -n {req.get('n')} but the -R terms ask for {total} slots "
                f"({' + '.join(str(t.count) for t in terms)})",
            )
        self._launch_terms(terms)
        compute = [t for t in terms if t.selects("CN")]
        if not compute:
            self.bad("R", "rstring-compute", "bsub: the -R string selects no compute (CN) nodes")
        return compute

    def _launch_terms(self, terms: list[RTerm]) -> None:
        """One launch-node slot, first; every term selects launch or compute nodes."""
        launch = [t for t in terms if t.selects("LN")]
        for k, t in enumerate(terms, start=1):
            if not t.selects("LN") and not t.selects("CN"):
                self.bad(
                    "R",
                    "rstring-term",
                    f"bsub: -R term {k} ({t.count} slots) selects neither launch (LN) nor "
                    "compute (CN) nodes",
                    level="warning",
                )
        if not launch:
            self.bad(
                "R",
                "rstring-launch-node",
                "bsub: an expert-mode -R string starts with a launch-node term, "
                "1*{select[((LN)&&(type==any))]order[r15s:pg]span[hosts=1]...}",
            )
        for t in launch:
            if t.count != 1 or t.hosts not in (None, 1):
                self.bad(
                    "R",
                    "rstring-launch-node",
                    f"bsub: the launch-node term asks for {t.count} slot(s): a job has one "
                    "launch-node slot (1*{...span[hosts=1]...})",
                    level="warning",
                )

    def node_limits(self, a: _Asked) -> None:
        queue, wall = a.queue, a.wall
        if queue.max_nodes and a.nodes > queue.max_nodes:
            self.bad(
                "R" if a.expert else "nnodes",
                "node-count",
                f"bsub: {a.nodes} nodes exceed queue {queue.name}'s {queue.max_nodes}",
            )
            return
        if wall is None or not a.nodes:
            return
        if queue.max_walltime_s is not None and wall > queue.max_walltime_s:
            return  # refused already (run_limit)
        limit, shown, why = queue.walltime_limit(a.nodes)
        if limit is not None and wall > limit:
            self.bad(
                "W",
                "walltime-bin",
                f"bsub: run limit {self.req.get('W')} ({format_seconds(wall)}) exceeds the "
                f"{shown} queue {queue.name} allows {why}; the job asks for {a.nodes}. "
                f"{NOT_SUBMITTED}",
            )


class _ExpertNodes:
    """The compute nodes of an expert-mode job: its terms' slots, ptile to a node."""

    def __init__(self, rules: _Rules, asked: _Asked):
        self.rules, self.a = rules, asked
        self.ptiles: list[int] = []

    def count(self, compute: list[RTerm]) -> None:
        for t in compute:
            if t.ptile is None and t.hosts is None:
                self.rules.bad(
                    "R",
                    "rstring-span",
                    f"bsub: the compute term of {t.count or 0} slots has no span[ptile=N] "
                    "(slots per node): the node count cannot be told",
                )
                continue
            self.a.nodes += self._by_ptile(t) if t.ptile is not None else self._by_hosts(t)
            self._racks(t)
        self.a.slots_per_node = min(self.ptiles) if self.ptiles else self.a.node.usable_cores

    def _by_ptile(self, t: RTerm) -> int:
        node, count, ptile = self.a.node, t.count or 0, t.ptile or 0
        self.ptiles.append(ptile)
        if ptile > node.usable_cores:
            self.rules.bad(
                "R",
                "ptile-cores",
                f"bsub: span[ptile={ptile}] exceeds the {node.usable_cores} usable cores of a "
                f"{node.name} node",
            )
        if ptile and count % ptile:
            self.rules.bad(
                "R",
                "ptile-nodes",
                f"bsub: {count} compute slots are not a whole number of nodes of {ptile} slots "
                f"(ptile={ptile})",
            )
        return -(-count // ptile) if ptile else 0

    def _by_hosts(self, t: RTerm) -> int:
        node, count, hosts = self.a.node, t.count or 0, t.hosts or 1
        if count > hosts * node.usable_cores:
            self.rules.bad(
                "R",
                "ptile-cores",
                f"bsub: {count} slots on span[hosts={hosts}] exceed {hosts} x "
                f"{node.usable_cores} usable cores",
            )
        return hosts

    def _racks(self, t: RTerm) -> None:
        if t.maxcus is None:
            return
        self.a.racks = max(self.a.racks or 0, t.maxcus)
        per_rack = self.a.node.raw.get("nodes_per_rack")
        if per_rack and self.a.nodes > t.maxcus * per_rack:
            self.rules.bad(
                "R",
                "rack-count",
                f"bsub: {self.a.nodes} nodes do not fit in maxcus={t.maxcus} racks of "
                f"{per_rack} nodes",
            )
