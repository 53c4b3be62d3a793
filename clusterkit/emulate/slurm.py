"""Judge Slurm job requests against a site profile, as the site's slurmctld would.

``job_request`` turns a script's ``#SBATCH`` lines plus the command line into a request (each
value remembers where it came from); ``check_job`` applies the site's rules; ``check_step``
judges one ``srun`` inside the allocation. Messages start with the words Slurm itself prints for
the same refusal, then name the rule and the limit from the profile.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from clusterkit.emulate import slurm_options
from clusterkit.emulate.script import JobScript, expand
from clusterkit.errors import Finding
from clusterkit.profiles import NodeType, Partition, Site, duration_seconds, format_seconds

# Slurm's own refusal texts (slurm_strerror), used so messages read like the real tool's.
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
E_STEP = "Unable to create step for job: More processors requested than permitted"


class SlurmValueError(ValueError):
    """An option value Slurm would refuse to parse."""


# --------------------------------------------------------------------------- value grammars
def slurm_time(text: str) -> int | None:
    """Seconds in a Slurm time limit; None for UNLIMITED/INFINITE.

    Accepted forms (sbatch(1)): "minutes", "minutes:seconds", "hours:minutes:seconds",
    "days-hours", "days-hours:minutes" and "days-hours:minutes:seconds".
    """
    t = text.strip()
    if t.lower() in {"infinite", "unlimited", "-1"}:
        return None
    if re.fullmatch(r"[0:-]+", t) and re.search(r"\d", t):
        return None  # "A time limit of zero requests that no time limit be imposed" (sbatch(1))
    m = re.fullmatch(r"(\d+)-(\d+)(?::(\d+))?(?::(\d+))?", t)
    if m:
        d, h = int(m[1]), int(m[2])
        mi, s = int(m[3] or 0), int(m[4] or 0)
        return ((d * 24 + h) * 60 + mi) * 60 + s
    parts = t.split(":")
    if not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3:
        raise SlurmValueError(f"Invalid time specification {text!r}")
    nums = [int(p) for p in parts]
    if len(nums) == 1:
        return nums[0] * 60
    if len(nums) == 2:
        return nums[0] * 60 + nums[1]
    return nums[0] * 3600 + nums[1] * 60 + nums[2]


_MEM_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def slurm_mem_mb(text: str) -> int:
    """Megabytes in a ``--mem`` value (default unit M; suffixes K, M, G, T)."""
    m = re.fullmatch(r"(\d+)([KMGT]?)B?", text.strip(), re.IGNORECASE)
    if not m:
        raise SlurmValueError(f"Invalid --mem specification {text!r}")
    return math.ceil(int(m[1]) * _MEM_UNITS[(m[2] or "M").upper()])


def count_with_type(text: str, what: str) -> tuple[str | None, int]:
    """``[type:]N`` as used by --gpus, --gpus-per-node, --gpus-per-task."""
    parts = text.split(":")
    if len(parts) == 1 and parts[0].isdigit():
        return None, int(parts[0])
    if len(parts) == 2 and parts[1].isdigit():
        return parts[0], int(parts[1])
    raise SlurmValueError(f"Invalid {what} specification {text!r}")


def gres_gpus(text: str) -> tuple[str | None, int]:
    """GPUs per node in a ``--gres`` list: ``gpu``, ``gpu:N``, ``gpu:type:N``.

    Another name (``nvme:1``) raises: the profiles describe GPUs only, as the generated
    gres.conf does, and Slurm refuses a generic resource no node has.
    """
    gpus_type, gpus = None, 0
    for item in text.split(","):
        fields = item.strip().split(":")
        if fields[0] != "gpu":
            raise SlurmValueError(
                f"Invalid generic resource (gres) specification {text!r}: no node has "
                f"a generic resource named {fields[0]!r} (only gpu)"
            )
        if len(fields) == 1:
            gpus = 1
        elif len(fields) == 2:
            if fields[1].isdigit():
                gpus = int(fields[1])
            else:
                gpus_type, gpus = fields[1], 1
        elif len(fields) == 3 and fields[2].isdigit():
            gpus_type, gpus = fields[1], int(fields[2])
        else:
            raise SlurmValueError(f"Invalid generic resource (gres) specification {text!r}")
    return gpus_type, gpus


def node_range(text: str) -> tuple[int, int]:
    """``--nodes=N`` or ``--nodes=min-max``."""
    m = re.fullmatch(r"(\d+)(?:-(\d+))?", text.strip())
    if not m:
        raise SlurmValueError(f"Invalid node count specification {text!r}")
    lo = int(m[1])
    return lo, int(m[2] or lo)


def positive_int(text: str, what: str) -> int:
    if not re.fullmatch(r"\d+", text.strip()) or int(text) < 1:
        raise SlurmValueError(f"Invalid {what} specification {text!r}")
    return int(text)


# --------------------------------------------------------------------------- requests
@dataclass(frozen=True)
class Value:
    """An option's value and where it was given (script line, or 0 for the command line)."""

    text: str
    line: int


@dataclass
class JobRequest:
    path: Path
    options: dict[str, Value] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    def get(self, dest: str) -> str | None:
        v = self.options.get(dest)
        return v.text if v else None

    def line(self, dest: str) -> int:
        v = self.options.get(dest)
        return v.line if v else 0

    def has(self, dest: str) -> bool:
        return dest in self.options


def _merge(req: JobRequest, parsed: dict[str, list], line: int) -> None:
    for dest, values in parsed.items():
        if dest in {"script", "script_args", "command"}:
            continue
        last = values[-1]
        req.options[dest] = Value("" if last is True else str(last), line)


def job_request(
    script: JobScript, argv: list[str] | None = None, tool: str = "sbatch"
) -> JobRequest:
    """Options from the script's directives, then the command line (which wins)."""
    req = JobRequest(script.path)
    for d in script.directives:
        if d.words and d.words[0] == "__unparsable__":
            req.findings.append(
                Finding(
                    script.path,
                    d.line,
                    "directive-syntax",
                    f"{tool}: error: cannot split directive: {d.words[1]}",
                )
            )
            continue
        try:
            _merge(req, slurm_options.parse(tool, list(d.words)), d.line)
        except slurm_options.OptionError as exc:
            req.findings.append(
                Finding(script.path, d.line, "sbatch-option", f"{tool}: {_option_message(exc)}")
            )
    if argv:
        try:
            _merge(req, slurm_options.parse(tool, list(argv)), 0)
        except slurm_options.OptionError as exc:
            req.findings.append(
                Finding("<command line>", 0, "sbatch-option", f"{tool}: {_option_message(exc)}")
            )
    return req


def _option_message(exc: Exception) -> str:
    msg = str(exc)
    m = re.match(r"unrecognized arguments: (.*)", msg)
    if m:
        return f"unrecognized option '{m[1].split()[0]}'"
    m = re.match(r"argument (\S+?)(?:/\S+)?: expected one argument", msg)
    if m:
        return f"option '{m[1]}' requires an argument"
    m = re.match(r"ambiguous option: (\S+) could match (.*)", msg)
    if m:
        return f"option '{m[1]}' is ambiguous; possibilities: {m[2]}"
    return msg


# --------------------------------------------------------------------------- resolved shape
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

    @property
    def node(self) -> NodeType:
        return self.partition.node_type


def _resolve_int(req: JobRequest, dest: str, what: str, bad) -> int | None:
    text = req.get(dest)
    if text is None:
        return None
    try:
        return positive_int(text, what)
    except SlurmValueError as exc:
        bad(dest, "option-value", f"sbatch: error: {exc}")
        return None


def _resolve_int_or_zero(req: JobRequest, dest: str, what: str, bad) -> int | None:
    """A count that may be 0 (``--core-spec=0``); None when not given or not a number."""
    text = req.get(dest)
    if text is None:
        return None
    if not re.fullmatch(r"\d+", text.strip()):
        bad(dest, "option-value", f"sbatch: error: Invalid {what} specification {text!r}")
        return None
    return int(text)


def _check_partition_list(
    req: JobRequest, site: Site, names: list[str]
) -> tuple[list[Finding], Shape | None]:
    """``--partition=a,b``: Slurm runs the job in the first listed partition that can take it,
    and refuses it only when none can (or when a name is unknown)."""
    unknown = [n for n in names if n not in site.partitions]
    if unknown:
        line = req.line("partition")
        msg = (
            f"sbatch: error: invalid partition specified: {unknown[0]} ({E_PARTITION}); "
            f"{site.title} has {', '.join(sorted(site.partitions))}"
        )
        return [*req.findings, Finding(req.path, line, "partition-exists", msg)], None
    first: tuple[list[Finding], Shape | None] | None = None
    for name in names:
        options = dict(req.options)
        options["partition"] = Value(name, req.line("partition"))
        one = JobRequest(req.path, options, list(req.findings))
        findings, shape = check_job(one, site)
        if not any(f.level == "error" for f in findings):
            return findings, shape
        first = first or (findings, shape)
    assert first is not None
    return first


def check_job(req: JobRequest, site: Site) -> tuple[list[Finding], Shape | None]:
    """Every rule a site's Slurm applies at submission; returns (findings, resolved shape)."""
    findings = list(req.findings)

    def bad(dest: str | None, rule: str, msg: str, level: str = "error") -> None:
        line = req.line(dest) if dest else 0
        findings.append(Finding(req.path, line, rule, msg, level))

    # -- partition
    part_name = req.get("partition")
    parts = site.partitions
    if part_name is None:
        part = site.default_partition
        if part is None:
            bad(
                None,
                "partition-required",
                f"sbatch: error: {E_PARTITION}: {site.title} has "
                f"no default partition; choose one of {sorted(parts)} with -p/--partition",
            )
            return findings, None
    elif "," in part_name:
        return _check_partition_list(req, site, part_name.split(","))
    elif part_name not in parts:
        bad(
            "partition",
            "partition-exists",
            f"sbatch: error: invalid partition specified: "
            f"{part_name} ({E_PARTITION}); {site.title} has {', '.join(sorted(parts))}",
        )
        return findings, None
    else:
        part = parts[part_name]
    if part.status != "current":
        bad(
            "partition",
            "partition-status",
            f"partition {part.name} is {part.status} on {site.title}",
            level="warning" if part.status == "historical" else "error",
        )
    node = part.node_type

    # -- account
    acct = req.get("account")
    if acct is None:
        if site.account["required"]:
            bad(
                None,
                "account-required",
                f"sbatch: error: {E_ACCOUNT}: {site.title} requires "
                f"an account ({site.account.get('option', '-A')} {site.account['example']})",
            )
    elif not site.account_ok(acct):
        bad(
            "account",
            "account-form",
            f"sbatch: error: {E_ACCOUNT}: {acct!r} is not of the "
            f"form {site.account['pattern']} (e.g. {site.account['example']})",
        )

    # -- time
    time_s: int | None = None
    time_text = req.get("time")
    if time_text is not None:
        try:
            time_s = slurm_time(time_text)
        except SlurmValueError as exc:
            bad("time", "time-format", f"sbatch: error: {exc}")
        else:
            if time_s is None or time_s > part.max_walltime_s:
                shown = "UNLIMITED" if time_s is None else format_seconds(time_s)
                bad(
                    "time",
                    "time-limit",
                    f"sbatch: error: {E_TIME}: {time_text} ({shown}) "
                    f"exceeds the {part.name} partition's limit of {part.max_walltime}",
                )

    # -- GPUs asked for (read first: without --nodes they decide how many nodes the job gets)
    gpu_type = None
    gres_gpn = per_node_gpus = total_gpus = per_task_gpus = None
    gpu_dest = None
    try:
        if req.has("gres"):
            gpu_type, gres_gpn = gres_gpus(req.get("gres") or "")
            gpu_dest = "gres"
        if req.has("gpus_per_node"):
            gpu_type, per_node_gpus = count_with_type(req.get("gpus_per_node") or "", "--gpus")
            gpu_dest = "gpus_per_node"
        if req.has("gpus"):
            gpu_type, total_gpus = count_with_type(req.get("gpus") or "", "--gpus")
            gpu_dest = gpu_dest or "gpus"
        if req.has("gpus_per_task"):
            gpu_type, per_task_gpus = count_with_type(
                req.get("gpus_per_task") or "", "--gpus-per-task"
            )
            gpu_dest = gpu_dest or "gpus_per_task"
    except SlurmValueError as exc:
        bad(gpu_dest or "gres", "option-value", f"sbatch: error: {exc}")
    if gpu_type is not None:
        bad(
            gpu_dest,
            "gpu-type",
            f"sbatch: error: Batch job submission failed: Invalid generic resource (gres) "
            f"specification: no {part.name} node has GPUs of type {gpu_type!r}; ask for a "
            f"number only (the node's GPUs are {node.gpus} x {node.gpu_model or 'none'})",
        )
    gpn_asked = per_node_gpus if per_node_gpus is not None else gres_gpn

    # -- nodes and tasks
    nodes_min = nodes_max = None
    if req.has("nodes"):
        try:
            nodes_min, nodes_max = node_range(req.get("nodes") or "")
        except SlurmValueError as exc:
            bad("nodes", "option-value", f"sbatch: error: {exc}")
    ntasks = _resolve_int(req, "ntasks", "--ntasks", bad)
    tpn = _resolve_int(req, "ntasks_per_node", "--ntasks-per-node", bad)
    tpg = _resolve_int(req, "ntasks_per_gpu", "--ntasks-per-gpu", bad)
    cpt = _resolve_int(req, "cpus_per_task", "--cpus-per-task", bad) or 1
    hint = req.get("hint") or ""
    usable = node.usable_cores
    spec = _resolve_int_or_zero(req, "core_spec", "--core-spec", bad)
    if spec is not None:  # -S N: N cores per node for the system, the rest for the job
        usable = max(node.cores - spec, 0)
    cpu_limit = usable if "nomultithread" in hint else usable * node.threads_per_core
    if tpn is None and tpg and gpn_asked:
        tpn = tpg * gpn_asked  # --ntasks-per-gpu with GPUs per node fixes the tasks per node
    if nodes_min is not None:
        nodes = nodes_min
    elif ntasks and tpn:
        nodes = math.ceil(ntasks / tpn)
    else:
        # Without --nodes Slurm takes as many nodes as the tasks and GPUs need.
        need = [1]
        if ntasks and cpt <= cpu_limit:
            need.append(math.ceil(ntasks / (cpu_limit // cpt)))
        if node.gpus and total_gpus:
            need.append(math.ceil(total_gpus / node.gpus))
        if node.gpus and per_task_gpus and ntasks:
            need.append(math.ceil(ntasks / max(1, node.gpus // per_task_gpus)))
        nodes = max(need)
    if ntasks and nodes > ntasks and nodes_min is not None:
        bad(
            "ntasks",
            "tasks-per-node",
            f"sbatch: warning: can't run {ntasks} processes on {nodes} nodes, setting nnodes "
            f"to {ntasks}",
            level="warning",
        )
        nodes = ntasks
    if tpn is None:
        tpn = math.ceil(ntasks / nodes) if ntasks else 1
    if ntasks is None:
        ntasks = nodes * tpn
    if nodes_min is not None and nodes_max is not None and nodes_min > nodes_max:
        bad("nodes", "node-count", f"sbatch: error: {E_NODES}: {req.get('nodes')}")
    asked_max = max(nodes, nodes_max or 0)
    if part.max_nodes and asked_max > part.max_nodes:
        bad(
            "nodes" if req.has("nodes") else "ntasks",
            "node-count",
            f"sbatch: error: {E_NODES}: {req.get('nodes') or nodes} nodes requested, partition "
            f"{part.name} allows at most {part.max_nodes} per job",
        )
    elif part.size and nodes > part.size:
        bad(
            "nodes" if req.has("nodes") else gpu_dest or "ntasks",
            "node-count",
            f"sbatch: error: {E_NODES}: {nodes} nodes requested, partition {part.name} has "
            f"{part.size}",
        )

    # -- walltime by job size, where the partition has size bins
    if time_s is not None and time_s <= part.max_walltime_s and part.raw.get("walltime_by_nodes"):
        limit, what = part.walltime_for(nodes)
        if limit is None:
            bad(
                "nodes" if req.has("nodes") else "time",
                "time-limit",
                f"sbatch: error: {E_TIME}: {what}",
            )
        elif time_s > limit:
            bad(
                "time",
                "time-limit",
                f"sbatch: error: {E_TIME}: {time_text} ({format_seconds(time_s)}) for "
                f"{nodes} node(s) exceeds {what}",
            )

    # -- CPUs per node
    cpus_node = tpn * cpt
    what = "cores" if "nomultithread" in hint else "CPUs (cores x threads)"
    if cpus_node > cpu_limit:
        dest = (
            "cpus_per_task"
            if req.has("cpus_per_task")
            else "ntasks_per_gpu"
            if req.has("ntasks_per_gpu") and not req.has("ntasks_per_node")
            else "ntasks_per_node"
            if req.has("ntasks_per_node")
            else "ntasks"
        )
        bad(
            dest,
            "cpus-per-node",
            f"sbatch: error: {E_CONFIG}: {tpn} tasks x {cpt} CPUs per "
            f"task = {cpus_node} per node, but a {part.name} node ({node.name}) has {cpu_limit} "
            f"usable {what}",
        )

    # -- GPUs per node
    gpn = gpn_asked or 0
    if total_gpus:
        gpn = max(gpn, math.ceil(total_gpus / nodes))
    if per_task_gpus:
        if gpn_asked and req.has("ntasks_per_node") and gpn_asked != per_task_gpus * tpn:
            bad(
                "gpus_per_task",
                "gpus-per-task",
                f"sbatch: error: {E_CONFIG}: {gpn_asked} GPUs per node at --gpus-per-task="
                f"{per_task_gpus} is {gpn_asked // per_task_gpus} task(s) per node, but "
                f"--ntasks-per-node={tpn}",
            )
        gpn = max(gpn, per_task_gpus * tpn)
    if gpn and node.gpus == 0:
        bad(
            gpu_dest,
            "gpus-per-node",
            f"sbatch: error: {E_CONFIG}: {gpn} GPU(s) per node "
            f"requested, but {part.name} nodes ({node.name}) have no GPUs",
        )
    elif gpn > node.gpus:
        bad(
            gpu_dest,
            "gpus-per-node",
            f"sbatch: error: {E_CONFIG}: {gpn} GPUs per node "
            f"requested, but a {part.name} node ({node.name}) has {node.gpus} "
            f"x {node.gpu_model}",
        )

    # -- memory
    if req.has("mem"):
        try:
            mem_mb = slurm_mem_mb(req.get("mem") or "")
            if mem_mb > node.memory_gb * 1024:
                bad(
                    "mem",
                    "memory-per-node",
                    f"sbatch: error: {E_CONFIG}: --mem={req.get('mem')}"
                    f" exceeds the {node.memory_gb:g} GB of a {part.name} node",
                )
        except SlurmValueError as exc:
            bad("mem", "option-value", f"sbatch: error: {exc}")
    if req.has("mem_per_cpu"):
        try:
            per_cpu = slurm_mem_mb(req.get("mem_per_cpu") or "")
        except SlurmValueError as exc:
            bad("mem_per_cpu", "option-value", f"sbatch: error: {exc}")
        else:
            if per_cpu * cpus_node > node.memory_gb * 1024:
                bad(
                    "mem_per_cpu",
                    "memory-per-node",
                    f"sbatch: error: {E_CONFIG}: --mem-per-cpu={req.get('mem_per_cpu')} x "
                    f"{cpus_node} CPUs per node = {per_cpu * cpus_node / 1024:g} GB, more than "
                    f"the {node.memory_gb:g} GB of a {part.name} node",
                )

    # -- QoS
    qos_name = req.get("qos")
    if qos_name is not None:
        if qos_name not in site.qos:
            bad(
                "qos",
                "qos-exists",
                f"sbatch: error: {E_QOS}: {qos_name!r}; {site.title} has "
                f"{', '.join(sorted(site.qos)) or 'no QoS'}",
            )
        else:
            if part.qos and qos_name not in part.qos:
                bad(
                    "qos",
                    "qos-partition",
                    f"sbatch: error: {E_QOS}: QoS {qos_name} cannot be "
                    f"used in partition {part.name} (allowed: {', '.join(part.qos)})",
                )
            q = site.qos[qos_name]
            if q.get("max_walltime") and time_s is not None:
                if time_s > duration_seconds(q["max_walltime"]):
                    bad(
                        "time",
                        "qos-time-limit",
                        f"sbatch: error: {E_QOS_LIMIT}: --time "
                        f"{req.get('time')} exceeds QoS {qos_name}'s {q['max_walltime']}",
                    )
            if q.get("max_nodes") and nodes > q["max_nodes"]:
                bad(
                    "nodes" if req.has("nodes") else "qos",
                    "qos-node-limit",
                    f"sbatch: error: {E_QOS_LIMIT}: {nodes} nodes exceed QoS {qos_name}'s "
                    f"{q['max_nodes']}",
                )
            if q.get("min_nodes") and nodes < q["min_nodes"]:
                bad(
                    "nodes" if req.has("nodes") else "qos",
                    "qos-node-limit",
                    f"sbatch: error: {E_QOS_LIMIT}: QoS {qos_name} needs at least "
                    f"{q['min_nodes']} nodes, job asks for {nodes}",
                )
            if q.get("max_gpus") and gpn * nodes > q["max_gpus"]:
                bad(
                    gpu_dest,
                    "qos-gpu-limit",
                    f"sbatch: error: {E_QOS_LIMIT}: {gpn * nodes} "
                    f"GPUs exceed QoS {qos_name}'s {q['max_gpus']}",
                )
    elif part.qos_required:
        bad(
            None,
            "qos-required",
            f"sbatch: error: {E_QOS}: partition {part.name} on "
            f"{site.title} needs --qos (one of {', '.join(part.qos)})",
        )

    shape = Shape(
        part, nodes, tpn, ntasks, cpt, gpn, time_s, req.has("exclusive") or part.exclusive
    )
    return findings, shape


# --------------------------------------------------------------------------- job steps (srun)
@dataclass
class Step:
    line: int
    nodes: int
    ntasks: int
    tasks_per_node: int
    cpus_per_task: int
    command: list[str]


def step_request(words: list[str], env: dict[str, str]) -> tuple[dict[str, list], list[str]]:
    expanded = [expand(w, env) for w in words]
    parsed = slurm_options.parse("srun", expanded)
    return parsed, parsed.pop("command", [])


def check_step(
    path: Path | str, line: int, words: list[str], shape: Shape, env: dict[str, str]
) -> tuple[list[Finding], Step | None]:
    """Judge one ``srun`` command line (words after ``srun``) inside an allocation."""
    findings: list[Finding] = []

    def bad(rule: str, msg: str, level: str = "error") -> None:
        findings.append(Finding(path, line, rule, msg, level))

    try:
        opts, command = step_request(words, env)
    except slurm_options.OptionError as exc:
        bad("srun-option", f"srun: {_option_message(exc)}")
        return findings, None

    def one(dest: str) -> str | None:
        v = opts.get(dest)
        return None if v is None else str(v[-1])

    try:
        nodes = node_range(one("nodes"))[0] if one("nodes") else None
        ntasks = positive_int(one("ntasks"), "--ntasks") if one("ntasks") else None
        tpn = (
            positive_int(one("ntasks_per_node"), "--ntasks-per-node")
            if one("ntasks_per_node")
            else None
        )
        cpt = (
            positive_int(one("cpus_per_task"), "--cpus-per-task") if one("cpus_per_task") else None
        )
    except SlurmValueError as exc:
        bad("option-value", f"srun: error: {exc}")
        return findings, None
    # A step inherits the allocation's shape where it gives none of its own.
    nodes = nodes or (min(shape.nodes, ntasks) if ntasks else shape.nodes)
    if tpn is None:
        tpn = math.ceil(ntasks / nodes) if ntasks else shape.tasks_per_node
    ntasks = ntasks or nodes * tpn
    if cpt is None:
        # Since Slurm 22.05 srun does not inherit --cpus-per-task from sbatch unless
        # SRUN_CPUS_PER_TASK is set (the ARCHER2 scripts export it for that reason).
        cpt = int(env.get("SRUN_CPUS_PER_TASK") or 1)
    if nodes > shape.nodes:
        bad(
            "step-nodes",
            f"srun: error: {E_STEP}: step asks for {nodes} nodes, the job has {shape.nodes}",
        )
    if ntasks > shape.nodes * shape.node.cpus:
        bad("step-tasks", f"srun: error: {E_STEP}: {ntasks} tasks on {shape.nodes} node(s)")
    hint = one("hint") or ""
    limit = shape.node.usable_cores if "nomultithread" in hint else shape.node.cpus
    if tpn * cpt > limit:
        bad(
            "step-cpus",
            f"srun: error: {E_STEP}: {tpn} tasks x {cpt} CPUs per task per node "
            f"= {tpn * cpt}, a {shape.partition.name} node has {limit} "
            f"{'cores' if 'nomultithread' in hint else 'CPUs'}",
        )
    if (
        shape.gpus_per_node
        and shape.node.gpus
        and tpn > shape.gpus_per_node
        and _launches_gpu_ranks(command)
    ):
        bad(
            "ranks-per-gpu",
            f"srun: {tpn} ranks per node but the job holds "
            f"{shape.gpus_per_node} GPU(s) per node: one rank per GPU is the rule for "
            f"data-parallel training",
            level="warning",
        )
    if not command:
        bad("step-command", "srun: fatal: No command given to execute.")
    return findings, Step(line, nodes, ntasks, tpn, cpt, command)


def _launches_gpu_ranks(command: list[str]) -> bool:
    return bool(command) and Path(command[0]).name.startswith("python")
