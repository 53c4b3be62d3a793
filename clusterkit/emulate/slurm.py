"""Judge a Slurm job request against a site profile, as the site's slurmctld would.

:func:`check_job` applies the site's rules in the order a reader checks a job: partition,
account, time, GPUs, nodes and tasks, CPUs, GPUs per node, memory, QoS. Each rule is a short
method of :class:`_Rules`; what the request amounts to so far is an :class:`_Asked`. The result
is a :class:`Shape`, the allocation in counts. Messages start with the words Slurm itself prints
for the same refusal (slurm_strerror), then name the rule and the limit from the profile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from clusterkit.emulate.slurm_options import (
    SlurmValueError,
    check_hint,
    count_with_type,
    gres_gpus,
    is_count,
    literal_hint,
    node_range,
    positive_int,
    slurm_mem_mb,
    slurm_time,
)
from clusterkit.emulate.slurm_request import JobRequest, Value
from clusterkit.grammars.slurm_constraint import Constraint, ConstraintError
from clusterkit.grammars.slurm_constraint import parse as parse_constraint
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import (
    NodeType,
    Partition,
    Site,
    duration_seconds,
    format_seconds,
    not_checked,
)

E_PARTITION = "Batch job submission failed: Invalid partition name specified"
E_TIME = (
    "Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)"
)
E_CONFIG = "Batch job submission failed: Requested node configuration is not available"
E_NODES = "Batch job submission failed: Node count specification invalid"
E_ACCOUNT = (
    "Batch job submission failed: Invalid account or account/partition combination specified"
)
E_QOS = "Batch job submission failed: Invalid qos specification"
E_QOS_LIMIT = (
    "Batch job submission failed: Job violates accounting/QOS policy "
    "(job submit limit, user's size and/or time limits)"
)
E_FEATURE = "Batch job submission failed: Invalid feature specification"


@dataclass
class Shape:
    """What the request amounts to on the chosen partition."""

    partition: Partition
    nodes: int
    tasks_per_node: int
    ntasks: int
    cpus_per_task: int
    gpus_per_node: int
    time_s: int | None
    exclusive: bool
    ntasks_given: bool = True  # --ntasks or --ntasks-per-node given: srun inherits SLURM_NTASKS
    tasks_per_node_given: bool = True  # srun inherits SLURM_NTASKS_PER_NODE
    component: int = 0  # of a heterogeneous job
    # False on a site whose node sizes are not known (--site generic) when the job does not
    # fix its node count: Slurm picks it from the node size, so a step's node count is not
    # judged against it
    nodes_known: bool = True
    # False on such a site when the job names no tasks or CPUs (only --nodes): many sites then
    # give whole nodes of a size not known here, so a step's CPUs are not judged against it
    cpus_known: bool = True
    # the node type the job lands on, where its partition pools several (else its only one)
    node_type: NodeType | None = None
    qos: str | None = None  # the job's QoS: named, or the site's default

    @property
    def node(self) -> NodeType:
        return self.node_type or self.partition.node_type

    @property
    def cpus_per_node(self) -> int:
        """CPUs the job holds on each node: the whole node when it has it exclusively, else its
        tasks' CPUs rounded up to whole cores (CR_Core, as the generated slurm.conf has it)."""
        node = self.node
        if self.exclusive:
            return node.cpus
        tpc = node.slurm_threads_per_core
        cores = -(-self.tasks_per_node * self.cpus_per_task // tpc)
        # a partition that hands out cores per GPU (DefCpuPerGPU) gives at least those
        cores = max(cores, self.gpus_per_node * self.partition.raw.get("cores_per_gpu", 0))
        return min(node.cpus, cores * tpc)


@dataclass
class _Asked:
    """What the request amounts to, as far as the rules have read it."""

    part: Partition
    node_type: NodeType | None = None
    candidates: list[NodeType] = field(default_factory=list)  # the types -C selects
    qos: str | None = None  # named with --qos, else the site's default QoS
    time_s: int | None = None
    gpu_dest: str | None = None  # the option the GPUs were asked with
    gpus_asked: int | None = None  # per node, by --gres or --gpus-per-node
    gpus_total: int | None = None  # --gpus
    gpus_per_task: int | None = None
    nodes: int = 1
    nodes_max: int | None = None
    nodes_known: bool = True
    cpus_known: bool = True
    ntasks: int = 1
    tasks_per_node: int = 1
    cpus_per_task: int = 1
    gpus_per_node: int = 0

    @property
    def node(self) -> NodeType:
        return self.node_type or self.part.node_type


def check_job(req: JobRequest, site: Site) -> tuple[list[Finding], Shape | None]:
    """Every rule a site's Slurm applies at submission; returns (findings, resolved shape).

    A partition list (``-p a,b``, or the partitions a site routes a job that names none to)
    is tried in turn; within a partition that pools several node types, the job is judged on
    each its constraint selects, in the profile's order, and lands on the first that can take
    it."""
    names = (req.get("partition") or "").split(",")
    if len(names) > 1 and not site.generic:  # a generic site takes any partition name
        return _first_partition_that_fits(req, site, names)
    routed = [] if site.generic or req.get("partition") else site.default_partitions
    if len(routed) > 1:
        return _first_partition_that_fits(req, site, routed, routed=True)
    probe = _Rules(req, site)
    part = probe.partition()
    if part is None:
        return probe.findings, None
    candidates = probe.node_types(part)
    if not candidates:
        return probe.findings, None
    first: tuple[list[Finding], Shape | None] | None = None
    for node_type in candidates:
        findings, shape = _judge(req, site, part, node_type, probe.findings, candidates)
        if not any(f.level == "error" for f in findings):
            return findings, shape
        first = first or (findings, shape)
    assert first is not None
    return first


def _judge(
    req: JobRequest,
    site: Site,
    part: Partition,
    node_type: NodeType,
    start: list[Finding],
    candidates: list[NodeType],
) -> tuple[list[Finding], Shape | None]:
    """The rules on one partition and node type, after what choosing them found (``start``);
    ``candidates``: every node type of the partition the job's constraint selects."""
    rules = _Rules(req, site)
    rules.findings = list(start)
    asked = _Asked(part, node_type, candidates)
    for rule in (
        rules.hint,
        rules.account,
        rules.qos_name,
        rules.time,
        rules.gpus,
        rules.nodes_and_tasks,
        rules.node_count,
        rules.time_for_nodes,
        rules.cpus,
        rules.gpus_per_node,
        rules.memory,
        rules.constraint_counts,
        rules.qos,
        rules.reservation,
    ):
        rule(asked)
    return rules.findings, _shape(req, asked)


def _shape(req: JobRequest, a: _Asked) -> Shape:
    return Shape(
        a.part,
        a.nodes,
        a.tasks_per_node,
        a.ntasks,
        a.cpus_per_task,
        a.gpus_per_node,
        a.time_s,
        req.has("exclusive") or a.part.exclusive,
        ntasks_given=req.has("ntasks") or req.has("ntasks_per_node"),
        tasks_per_node_given=req.has("ntasks_per_node"),
        nodes_known=a.nodes_known,
        cpus_known=a.cpus_known,
        node_type=a.node,
        qos=a.qos,
    )


def _first_partition_that_fits(
    req: JobRequest, site: Site, names: list[str], routed: bool = False
) -> tuple[list[Finding], Shape | None]:
    """``--partition=a,b``: Slurm runs the job in the first listed partition that can take it,
    and refuses it only when none can (or when a name is unknown). ``routed``: the site's own
    list for a job that names no partition; a refusal then comes from the first partition
    whose nodes the job's constraint selects."""
    unknown = [n for n in names if n not in site.partitions]
    if unknown:
        msg = (
            f"sbatch: error: invalid partition specified: {unknown[0]} ({E_PARTITION}); "
            f"{site.title} has {', '.join(sorted(site.partitions))}"
        )
        finding = Finding(req.path, req.line("partition"), "partition-exists", msg)
        return [*req.findings, finding], None
    tried: list[tuple[list[Finding], Shape | None]] = []
    for name in names:
        options = {**req.options, "partition": Value(name, req.line("partition"))}
        findings, shape = check_job(JobRequest(req.path, options, list(req.findings)), site)
        if not any(f.level == "error" for f in findings):
            return findings, shape
        tried.append((findings, shape))
    if routed:  # the first partition that takes the job's QoS and whose nodes it reaches
        for skip in ({"constraint-nodes", "qos-partition"}, {"constraint-nodes"}):
            for findings, shape in tried:
                if not any(f.rule in skip for f in findings):
                    return findings, shape
    return tried[0]


class _Rules:
    """The rules, each reading the request and adding to what it amounts to."""

    def __init__(self, req: JobRequest, site: Site):
        self.req, self.site = req, site
        self.findings: list[Finding] = list(req.findings)

    def bad(self, dest: str | None, rule: str, msg: str, level: str = "error") -> None:
        line = self.req.line(dest) if dest else 0
        self.findings.append(Finding(self.req.path, line, rule, msg, level))

    def number(self, dest: str, what: str) -> int | None:
        text = self.req.get(dest)
        if text is None:
            return None
        try:
            return positive_int(text, what)
        except SlurmValueError as exc:
            self.bad(dest, "option-value", f"sbatch: error: {exc}{literal_hint(text)}")
            return None

    # -- partition and account
    def partition(self) -> Partition | None:
        req, site, parts = self.req, self.site, self.site.partitions
        name = req.get("partition")
        if site.generic:  # any name: the site's partitions are not known
            return site.generic_partition(name or "(the default)")
        if name is None:
            return self._default_partition()
        if name not in parts:
            self.bad(
                "partition",
                "partition-exists",
                f"sbatch: error: invalid partition specified: "
                f"{name} ({E_PARTITION}); {site.title} has {', '.join(sorted(parts))}",
            )
            return None
        part = parts[name]
        if part.status != "current":
            self.bad(
                "partition",
                "partition-status",
                f"partition {part.name} is {part.status} on {site.title}",
                level="warning" if part.status == "historical" else "error",
            )
        return part

    def _default_partition(self) -> Partition | None:
        req, site = self.req, self.site
        if site.default_partition is not None:
            return site.default_partition
        if "partition" in req.placeholders:
            self.bad(
                "partition",
                "partition-placeholder",
                f"the partition is the docs' placeholder {req.placeholders['partition'].text!r} "
                f"and {site.title} has no default: the request is not judged further",
                level="warning",
            )
            return None
        self.bad(
            None,
            "partition-required",
            f"sbatch: error: {E_PARTITION}: {site.title} has no default partition; choose one "
            f"of {sorted(site.partitions)} with -p/--partition",
        )
        return None

    # -- node features: which of the partition's node types the job's constraint selects
    def node_types(self, part: Partition) -> list[NodeType]:
        pool = list(part.node_types or (part.node_type,))
        text = self.req.get("constraint")
        if text is None:
            return pool
        try:
            constraint = parse_constraint(text)
        except ConstraintError as exc:
            self.bad("constraint", "constraint-syntax", f"sbatch: error: {E_FEATURE} ({exc})")
            return []
        if self.site.generic:
            return pool
        return self._selected(part, pool, constraint)

    def _selected(
        self, part: Partition, pool: list[NodeType], constraint: Constraint
    ) -> list[NodeType]:
        site, text = self.site, constraint.text
        unknown = sorted(constraint.names - site.features)
        declared = any(nt.features for nt in site.node_types.values())
        if not declared:  # the profile lists no node features: -C is not judged there
            return pool
        if unknown:
            self.bad(
                "constraint",
                "constraint-feature",
                f"sbatch: error: {E_FEATURE}: no {site.title} node has the feature(s) "
                f"{', '.join(unknown)} (features: {', '.join(sorted(site.features))})",
            )
            return []
        fits = [nt for nt in pool if constraint.matches(site.node_features(nt))]
        if not fits:
            have = "; ".join(
                f"{nt.name}: {','.join(sorted(site.node_features(nt))) or 'none'}" for nt in pool
            )
            self.bad(
                "constraint",
                "constraint-nodes",
                f"sbatch: error: {E_CONFIG}: no node of partition {part.name} matches -C {text} "
                f"({have})",
            )
            return []
        for term, count in constraint.counts:
            if not any(constraint.term_matches(term, site.node_features(nt)) for nt in pool):
                self.bad(
                    "constraint",
                    "constraint-nodes",
                    f"sbatch: error: {E_CONFIG}: -C {text} asks for {count} node(s) that no "
                    f"node of partition {part.name} can be",
                )
                return []
        return fits

    def constraint_counts(self, a: _Asked) -> None:
        """Node counts in a constraint (``gpu*2``, ``[a*2&b*4]``) need that many nodes."""
        text = self.req.get("constraint")
        if text is None:
            return
        try:
            wanted = sum(n for _t, n in parse_constraint(text).counts)
        except ConstraintError:
            return
        if wanted > max(a.nodes, a.nodes_max or 0):
            self.bad(
                "constraint",
                "constraint-count",
                f"sbatch: error: {E_NODES}: -C {text} asks for {wanted} node(s) by feature, "
                f"the job for {a.nodes}",
            )

    def hint(self, a: _Asked) -> None:
        text = self.req.get("hint")
        if text is None:
            return
        try:
            check_hint(text)
        except SlurmValueError as exc:
            self.bad("hint", "option-value", f"sbatch: error: {exc}")

    def account(self, a: _Asked) -> None:
        acct, rule = self.req.get("account"), self.site.account
        if self.site.generic or "account" in self.req.placeholders:
            return
        if acct is None and rule["required"]:
            self.bad(
                None,
                "account-required",
                f"sbatch: error: {E_ACCOUNT}: {self.site.title} requires "
                f"an account ({rule.get('option', '-A')} {rule['example']})",
            )
        elif acct is not None and not self.site.account_ok(acct):
            self.bad(
                "account",
                "account-form",
                f"sbatch: error: {E_ACCOUNT}: {acct!r} is not of the "
                f"form {rule['pattern']} (e.g. {rule['example']})",
            )

    # -- time
    def time(self, a: _Asked) -> None:
        text = self.req.get("time")
        if text is None:
            return
        try:
            a.time_s = slurm_time(text)
        except SlurmValueError as exc:
            self.bad("time", "time-format", f"sbatch: error: {exc}{literal_hint(text)}")
            return
        if self.site.generic or self._overrides_partition(a, "PartitionTimeLimit"):
            return
        why = a.part.max_walltime_unknown
        if why and not a.part.raw.get("walltime_by_nodes"):
            fact = f"partition {a.part.name}'s max_walltime"
            self.bad("time", "fact-unknown", not_checked(self.site.title, fact, why), "warning")
            return
        limit = a.part.max_walltime_s
        if limit is not None and (a.time_s is None or a.time_s > limit):
            shown = "UNLIMITED" if a.time_s is None else format_seconds(a.time_s)
            self.bad(
                "time",
                "time-limit",
                f"sbatch: error: {E_TIME}: {text} ({shown}) exceeds the {a.part.name} "
                f"partition's limit of {a.part.max_walltime}",
            )

    def _overrides_partition(self, a: _Asked, flag: str) -> bool:
        """Whether the job's QoS has ``flag``, which lets its limit replace the partition's
        (Slurm, "Resource Limits": MaxWall and Min/MaxNodes are bounded by the partition's
        unless the QoS has PartitionTimeLimit / PartitionMaxNodes / PartitionMinNodes)."""
        return bool(a.qos) and flag in self.site.qos.get(a.qos or "", {}).get("flags", ())

    def time_for_nodes(self, a: _Asked) -> None:
        """A limit that depends on the node count (a profile's walltime_by_nodes)."""
        limit = a.part.max_walltime_s
        if self.site.generic or a.time_s is None or (limit is not None and a.time_s > limit):
            return
        if self._overrides_partition(a, "PartitionTimeLimit"):
            return
        limit, shown, why = a.part.walltime_limit(a.nodes)
        if limit is None and a.part.max_walltime_unknown and a.part.raw.get("walltime_by_nodes"):
            fact = f"partition {a.part.name}'s max_walltime"
            msg = not_checked(self.site.title, fact, a.part.max_walltime_unknown)
            self.bad("time", "fact-unknown", f"{msg}; no size bin holds {a.nodes}", "warning")
        elif limit is not None and a.time_s > limit:
            self.bad(
                "time",
                "time-limit",
                f"sbatch: error: {E_TIME}: {self.req.get('time')} ({format_seconds(a.time_s)}) "
                f"exceeds the {shown} partition {a.part.name} allows {why}; the job asks for "
                f"{a.nodes}",
            )

    # -- GPUs asked for (read first: without --nodes they decide how many nodes the job gets)
    def gpus(self, a: _Asked) -> None:
        req, gpu_type, per_node = self.req, None, None
        forms = (
            ("gres", lambda t: gres_gpus(t)),
            ("gpus_per_node", lambda t: count_with_type(t, "--gpus")),
            ("gpus", lambda t: count_with_type(t, "--gpus")),
            ("gpus_per_task", lambda t: count_with_type(t, "--gpus-per-task")),
        )
        try:
            for dest, read in forms:
                if not req.has(dest):
                    continue
                if dest == "gres":
                    gpu_type, count = gres_gpus(req.get(dest) or "", self.site.generic)
                else:
                    gpu_type, count = read(req.get(dest) or "")
                a.gpu_dest = a.gpu_dest if a.gpu_dest and dest != "gpus_per_node" else dest
                if dest == "gpus":
                    a.gpus_total = count
                elif dest == "gpus_per_task":
                    a.gpus_per_task = count
                elif (dest == "gres" and per_node is None) or dest == "gpus_per_node":
                    per_node = count
        except SlurmValueError as exc:
            self.bad(a.gpu_dest or "gres", "option-value", f"sbatch: error: {exc}")
        a.gpus_asked = per_node
        self._gpus_per_task_needs_tasks(a)
        if gpu_type is not None and not self.site.generic:
            node = a.node
            self.bad(
                a.gpu_dest,
                "gpu-type",
                f"sbatch: error: Batch job submission failed: Invalid generic resource (gres) "
                f"specification: no {a.part.name} node has GPUs of type {gpu_type!r}; ask for a "
                f"number only (the node's GPUs are {node.gpus} x {node.gpu_model or 'none'})",
            )

    def _gpus_per_task_needs_tasks(self, a: _Asked) -> None:
        """Slurm's GRES validation (gres.c, every release from 22.05 on) refuses
        --gpus-per-task unless the job gives its task count (--ntasks, or --ntasks-per-node,
        from which sbatch counts them) or --gpus."""
        req = self.req
        if a.gpus_per_task is None or a.gpus_total is not None:
            return
        if req.has("ntasks") or req.has("ntasks_per_node"):
            return
        self.bad(
            "gpus_per_task",
            "gpus-per-task",
            "sbatch: error: Failed to validate job spec. --gpus-per-task used without either "
            "--gpus or -n/--ntasks is not allowed. (Invalid generic resource (gres) "
            "specification)",
        )

    # -- nodes and tasks
    def nodes_and_tasks(self, a: _Asked) -> None:
        nodes_min = self._node_range(a)
        ntasks = self.number("ntasks", "--ntasks")
        tpn = self.number("ntasks_per_node", "--ntasks-per-node")
        per_gpu = self.number("ntasks_per_gpu", "--ntasks-per-gpu")
        a.cpus_per_task = self.number("cpus_per_task", "--cpus-per-task") or 1
        if tpn is None and per_gpu and a.gpus_asked:
            tpn = per_gpu * a.gpus_asked  # --ntasks-per-gpu with GPUs per node fixes it
        if nodes_min is not None:
            a.nodes = nodes_min
        elif ntasks and tpn:
            a.nodes = math.ceil(ntasks / tpn)
        else:
            a.nodes = self._nodes_needed(a, ntasks)
            a.nodes_known = not self.site.generic
        if ntasks and a.nodes > ntasks and nodes_min is not None:
            self.bad(
                "ntasks",
                "tasks-per-node",
                f"sbatch: warning: can't run {ntasks} processes on {a.nodes} nodes, setting "
                f"nnodes to {ntasks}",
                level="warning",
            )
            a.nodes = ntasks
        a.tasks_per_node = tpn or (math.ceil(ntasks / a.nodes) if ntasks else 1)
        a.ntasks = ntasks or a.nodes * a.tasks_per_node
        shaped = ("ntasks", "ntasks_per_node", "cpus_per_task", "ntasks_per_gpu", "mincpus")
        a.cpus_known = not self.site.generic or any(self.req.has(d) for d in shaped)

    def _node_range(self, a: _Asked) -> int | None:
        text = self.req.get("nodes")
        if text is None:
            return None
        try:
            low, a.nodes_max = node_range(text)
        except SlurmValueError as exc:
            self.bad("nodes", "option-value", f"sbatch: error: {exc}{literal_hint(text)}")
            return None
        if low == 0:
            self.bad(
                "nodes",
                "node-count",
                f"sbatch: error: {E_NODES}: --nodes={text}: a batch job runs on at least one node",
            )
            low, a.nodes_max = 1, max(a.nodes_max, 1)
        if low > a.nodes_max:
            self.bad("nodes", "node-count", f"sbatch: error: {E_NODES}: {text}")
        return low

    def _cpu_limit(self, a: _Asked) -> int:
        """CPUs a job may use per node: the usable cores (x threads unless nomultithread);
        ``-S N`` (--core-spec) leaves N cores of the node to the system instead of the
        profile's own reservation."""
        hint = self.req.get("hint") or ""
        usable = a.node.usable_cores
        spec = self.req.get("core_spec")
        if spec is not None:
            if is_count(spec.strip()):
                usable = max(a.node.cores - int(spec), 0)
            else:
                self.bad(
                    "core_spec", "option-value", f"sbatch: error: Invalid --core-spec {spec!r}"
                )
        return usable if "nomultithread" in hint else usable * a.node.slurm_threads_per_core

    def _nodes_needed(self, a: _Asked, ntasks: int | None) -> int:
        """Without --nodes Slurm takes as many nodes as the tasks and GPUs need."""
        node, cpt, limit = a.node, a.cpus_per_task, self._cpu_limit(a)
        need = [1]
        if ntasks and cpt <= limit:
            need.append(math.ceil(ntasks / (limit // cpt)))
        if node.gpus and a.gpus_total:
            need.append(math.ceil(a.gpus_total / node.gpus))
        if node.gpus and a.gpus_per_task and ntasks:
            need.append(math.ceil(ntasks / max(1, node.gpus // a.gpus_per_task)))
        return max(need)

    def node_count(self, a: _Asked) -> None:
        part, req = a.part, self.req
        over = self._overrides_partition(a, "PartitionMaxNodes")
        if part.max_nodes and not over and max(a.nodes, a.nodes_max or 0) > part.max_nodes:
            self.bad(
                "nodes" if req.has("nodes") else "ntasks",
                "node-count",
                f"sbatch: error: {E_NODES}: {req.get('nodes') or a.nodes} nodes requested, "
                f"partition {part.name} allows at most {part.max_nodes} per job",
            )
        elif part.size and a.nodes > part.size:
            self.bad(
                "nodes" if req.has("nodes") else a.gpu_dest or "ntasks",
                "node-count",
                f"sbatch: error: {E_NODES}: {a.nodes} nodes requested, partition {part.name} "
                f"has {part.size}",
            )
        elif part.pools and not part.raw.get("nodes"):
            self._pool_count(a)

    def _pool_count(self, a: _Asked) -> None:
        """In a partition of several node types, a job's nodes come from the types its
        constraint selects (several at once, unless it asks for one of them by name)."""
        counts = [nt.raw.get("count") for nt in a.candidates]
        if not a.candidates or not all(counts) or a.nodes <= sum(counts):
            return
        kinds = ", ".join(f"{nt.raw['count']} {nt.name}" for nt in a.candidates)
        self.bad(
            "constraint" if self.req.has("constraint") else "nodes",
            "node-count",
            f"sbatch: error: {E_NODES}: {a.nodes} nodes requested, partition {a.part.name} "
            f"has {kinds} node(s) the job's constraint allows",
        )

    # -- CPUs and GPUs per node
    def cpus(self, a: _Asked) -> None:
        limit, per_node = self._cpu_limit(a), a.tasks_per_node * a.cpus_per_task
        if per_node <= limit:
            return
        req = self.req
        given = [d for d in ("cpus_per_task", "ntasks_per_node", "ntasks_per_gpu") if req.has(d)]
        nomulti = "nomultithread" in (req.get("hint") or "")
        self.bad(
            given[0] if given else "ntasks",
            "cpus-per-node",
            f"sbatch: error: {E_CONFIG}: {a.tasks_per_node} tasks x {a.cpus_per_task} CPUs per "
            f"task = {per_node} per node, but a {a.part.name} node ({a.node.name}) has {limit} "
            f"usable {'cores' if nomulti else 'CPUs (cores x threads)'}",
        )

    def gpus_per_node(self, a: _Asked) -> None:
        node, gpn = a.node, a.gpus_asked or 0
        if a.gpus_total:
            gpn = max(gpn, math.ceil(a.gpus_total / a.nodes))
        if a.gpus_per_task:
            self._gpus_per_task(a)
            gpn = max(gpn, a.gpus_per_task * a.tasks_per_node)
        a.gpus_per_node = gpn
        if gpn and node.gpus == 0:
            self.bad(
                a.gpu_dest,
                "gpus-per-node",
                f"sbatch: error: {E_CONFIG}: {gpn} GPU(s) per node requested, but "
                f"{a.part.name} nodes ({node.name}) have no GPUs",
            )
        elif gpn > node.gpus:
            self.bad(
                a.gpu_dest,
                "gpus-per-node",
                f"sbatch: error: {E_CONFIG}: {gpn} GPUs per node requested, but a "
                f"{a.part.name} node ({node.name}) has {node.gpus} x {node.gpu_model}",
            )

    def _gpus_per_task(self, a: _Asked) -> None:
        per_task, asked, tpn = a.gpus_per_task or 1, a.gpus_asked, a.tasks_per_node
        if asked and self.req.has("ntasks_per_node") and asked != per_task * tpn:
            self.bad(
                "gpus_per_task",
                "gpus-per-task",
                f"sbatch: error: {E_CONFIG}: {asked} GPUs per node at --gpus-per-task="
                f"{per_task} is {asked // per_task} task(s) per node, but "
                f"--ntasks-per-node={tpn}",
            )

    # -- memory
    def memory(self, a: _Asked) -> None:
        node, cpus = a.node, a.tasks_per_node * a.cpus_per_task
        for dest in ("mem", "mem_per_cpu"):
            text = self.req.get(dest)
            if text is None:
                continue
            try:
                mb = slurm_mem_mb(text) * (cpus if dest == "mem_per_cpu" else 1)
            except SlurmValueError as exc:
                self.bad(dest, "option-value", f"sbatch: error: {exc}")
                continue
            if node.memory_gb is None:
                fact = f"node type {node.name}'s memory_gb"
                msg = not_checked(self.site.title, fact, node.memory_unknown)
                self.bad(dest, "fact-unknown", msg, "warning")
                continue
            if mb <= node.memory_gb * 1024:
                continue
            asked = (
                f"--mem={text} exceeds"
                if dest == "mem"
                else f"--mem-per-cpu={text} x {cpus} CPUs per node = {mb / 1024:g} GB, more than"
            )
            self.bad(
                dest,
                "memory-per-node",
                f"sbatch: error: {E_CONFIG}: {asked} the {node.memory_gb:g} GB of a "
                f"{a.part.name} node",
            )

    # -- QoS
    def reservation(self, a: _Asked) -> None:
        """Reservations come and go with the site's operations; no profile lists them, so a
        named one is not judged (the test clusters generated from the profiles have none)."""
        name = self.req.get("reservation")
        if name and not self.site.generic:
            self.bad(
                "reservation",
                "reservation-unknown",
                f"--reservation={name}: whether {self.site.title} has this reservation is not "
                "known here; check with `scontrol show reservation` on the site",
                level="warning",
            )

    def qos_name(self, a: _Asked) -> None:
        """The job's QoS: the one it names, else the site's default (read before the time,
        whose partition limit a QoS flag may lift)."""
        if not self.site.generic:
            a.qos = self.req.get("qos") or (
                None if "qos" in self.req.placeholders else self.site.default_qos
            )

    def qos(self, a: _Asked) -> None:
        name, part, site = self.req.get("qos"), a.part, self.site
        if site.generic:
            return
        if name is None and a.qos:  # the site's default QoS: held to its limits as if named
            self._default_qos(a, a.qos)
            return
        if name is None:
            if part.qos_required and "qos" not in self.req.placeholders:
                self.bad(
                    None,
                    "qos-required",
                    f"sbatch: error: {E_QOS}: partition {part.name} on {site.title} needs --qos "
                    f"(one of {', '.join(part.qos)})",
                )
            return
        if name not in site.qos:
            self.bad(
                "qos",
                "qos-exists",
                f"sbatch: error: {E_QOS}: {name!r}; {site.title} has "
                f"{', '.join(sorted(site.qos)) or 'no QoS'}",
            )
            return
        if part.qos and name not in part.qos:
            self.bad(
                "qos",
                "qos-partition",
                f"sbatch: error: {E_QOS}: QoS {name} cannot be used in partition {part.name} "
                f"(allowed: {', '.join(part.qos)})",
            )
        self._qos_limits(a, name, site.qos_limits(name, a.node.name))

    def _default_qos(self, a: _Asked, name: str) -> None:
        part = a.part
        if part.qos and name not in part.qos:
            self.bad(
                None,
                "qos-partition",
                f"sbatch: error: {E_QOS}: the job names no QoS, so it gets {self.site.title}'s "
                f"default {name}, which partition {part.name} does not take (allowed: "
                f"{', '.join(part.qos)}); give --qos",
            )
            return
        self._qos_limits(a, name, self.site.qos_limits(name, a.node.name), default=True)

    def _qos_limits(self, a: _Asked, name: str, q: dict, default: bool = False) -> None:
        nodes_dest = "nodes" if self.req.has("nodes") else "qos"
        limits = [
            (
                "time",
                "qos-time-limit",
                q.get("max_walltime") and a.time_s is not None
                and a.time_s > duration_seconds(q["max_walltime"]),
                f"--time {self.req.get('time')} exceeds QoS {name}'s {q.get('max_walltime')}",
            ),
            (
                nodes_dest,
                "qos-node-limit",
                q.get("max_nodes") and a.nodes > q["max_nodes"],
                f"{a.nodes} nodes exceed QoS {name}'s {q.get('max_nodes')}",
            ),
            (
                nodes_dest,
                "qos-node-limit",
                q.get("min_nodes") and a.nodes < q["min_nodes"],
                f"QoS {name} needs at least {q.get('min_nodes')} nodes, job asks for {a.nodes}",
            ),
            (
                a.gpu_dest,
                "qos-gpu-limit",
                q.get("max_gpus") and a.gpus_per_node * a.nodes > q["max_gpus"],
                f"{a.gpus_per_node * a.nodes} GPUs exceed QoS {name}'s {q.get('max_gpus')}",
            ),
        ]  # fmt: skip
        why = f" (the job names no QoS: {name} is the site's default)" if default else ""
        for dest, rule, broken, msg in limits:
            if broken:
                self.bad(dest, rule, f"sbatch: error: {E_QOS_LIMIT}: {msg}{why}")
