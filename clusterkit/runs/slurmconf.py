"""A real Slurm configuration generated from a site profile, for a one-machine test cluster.

``python -m clusterkit.runs.slurmconf SITE --out DIR [--state DIR] [--port-base N|auto]`` writes
into DIR:

``slurm.conf``
    One ``PartitionName`` per profile partition (``MaxTime`` from max_walltime, ``DefaultTime``
    from default_walltime, ``MaxNodes`` from max_nodes, ``Default=YES`` for the default
    partition, ``OverSubscribe=EXCLUSIVE`` for exclusive ones; removed partitions are left out,
    so Slurm refuses them), ``EnforcePartLimits=ALL``, and nodes shaped like the profile's node
    types (Sockets, CoresPerSocket -- only the usable cores --, ThreadsPerCore, RealMemory from
    memory_gb, ``Gres=gpu:N``). ``SlurmdParameters=config_overrides``
    lets a slurmd on a 2-core machine claim such a shape.
``gres.conf``
    ``File=`` lines for fake GPU devices: symlinks to /dev/null under STATE/fakedev (a GPU
    count without device files does not work).
``job_submit.lua``
    The site's account and QoS rules, as a policy that needs no accounting database: the
    account must match the profile's pattern, example or placeholders (and is required where
    the profile says so); a QoS must exist, be allowed in the partition, and its walltime, node
    and GPU limits hold; a partition with ``qos_required`` needs one.
``nodes``
    ``NAME PORT GPUS`` for each logical node that gets a slurmd (ci/slurm/start.sh reads it).

Each node type gets two *logical nodes* (one slurmd each, all on this host, NodeHostname
localhost, ports from the port base + 1). So that node counts are judged at the site's real
scale, every partition is then filled up to the profile's node count with *phantom* nodes:
``State=CLOUD`` nodes that are powered down, never run anything, but count for the scheduler,
so ``sbatch --test-only -N 64`` is answered as the real site would answer it (a job is placed on
the real nodes first: they have the lower ``Weight``). ``--no-phantoms`` leaves them out.
"""

from __future__ import annotations

import argparse
import math
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from re import _constants as sre_c
from re import _parser as sre_parse

from clusterkit.sites.profiles import NodeType, Site, duration_seconds, load_site

REAL_NODES_PER_TYPE = 2
# A node type whose memory the profile gives as unknown: so much that no --mem is refused, as
# the emulator leaves such a request unchecked (with a warning).
UNKNOWN_MEMORY_MB = 16 * 1024 * 1024
DEFAULT_PORT_BASE = 17000  # slurmctld; slurmds on 17001, 17002, ...


# --------------------------------------------------------------------------- nodes
@dataclass(frozen=True)
class LogicalNodes:
    """The Slurm nodes that stand for one node type: real ones first, then phantoms."""

    node_type: NodeType
    stem: str
    total: int
    real: int

    @property
    def width(self) -> int:
        return len(str(self.total))

    def name(self, k: int) -> str:
        return f"{self.stem}{k:0{self.width}d}"

    @property
    def real_names(self) -> list[str]:
        return [self.name(k) for k in range(1, self.real + 1)]

    def hostlist(self, first: int, last: int) -> str:
        if first == last:
            return self.name(first)
        return f"{self.stem}[{first:0{self.width}d}-{last:0{self.width}d}]"


def logical_nodes(site: Site, phantoms: bool = True) -> dict[str, LogicalNodes]:
    """Per node type: how many Slurm nodes stand for it, and how they are named."""
    out: dict[str, LogicalNodes] = {}
    parts = [p for p in site.partitions.values() if p.status != "removed"]
    for name, nt in site.node_types.items():
        sizes = [nt.raw.get("count") or REAL_NODES_PER_TYPE]
        sizes += [
            p.raw.get("nodes") or 0
            for p in parts
            if not p.pools and name in {t.name for t in p.node_types or (p.node_type,)}
        ]
        total = max(sizes) if phantoms else REAL_NODES_PER_TYPE
        real = min(REAL_NODES_PER_TYPE, total)
        stem = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") + "-"
        out[name] = LogicalNodes(nt, stem, total, real)
    stems = [ln.stem for ln in out.values()]
    if len(set(stems)) != len(stems):
        raise ValueError(f"node type names give clashing node names: {stems}")
    return out


def partition_size(site: Site, part_name: str, nodes: dict[str, LogicalNodes]) -> int:
    p = site.partitions[part_name]
    if p.pools:  # every node of each type it pools
        return sum(nodes[nt.name].total for nt in p.node_types)
    ln = nodes[p.node_type.name]
    return min(p.raw.get("nodes") or ln.total, ln.total)


def partition_nodes(site: Site, part_name: str, nodes: dict[str, LogicalNodes]) -> str:
    """The ``Nodes=`` of a partition: its node type's first nodes, or every node of each type
    it pools."""
    p = site.partitions[part_name]
    if p.pools:
        return ",".join(nodes[nt.name].hostlist(1, nodes[nt.name].total) for nt in p.node_types)
    return nodes[p.node_type.name].hostlist(1, partition_size(site, part_name, nodes))


# --------------------------------------------------------------------------- ports
def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_port_base(count: int, start: int = DEFAULT_PORT_BASE) -> int:
    """The first base (start, start+100, ...) whose ``count`` ports are all free.

    Two test clusters on one machine (two pytest runs at once) must not share ports.
    """
    for base in range(start, start + 100 * 40, 100):
        if all(_port_free(base + i) for i in range(count)):
            return base
    raise RuntimeError(f"no {count} free ports from {start} on")


# --------------------------------------------------------------------------- times
def _slurm_time(duration: str) -> str:
    s = duration_seconds(duration)
    d, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    return f"{d}-{h:02d}:{m:02d}:{sec:02d}"


def _max_time(part) -> str:
    """A partition's MaxTime: its limit, or UNLIMITED where the profile gives limits per QoS or
    no source gives the limit (the emulator leaves it unchecked then, with a warning)."""
    return _slurm_time(part.max_walltime) if part.max_walltime_s is not None else "UNLIMITED"


def _minutes(duration: str) -> int:
    # Slurm keeps time limits in whole minutes, rounding a job's seconds up.
    return math.ceil(duration_seconds(duration) / 60)


# --------------------------------------------------------------------------- regex -> Lua
class UnsupportedPattern(ValueError):
    """A regular expression the Lua translation cannot express."""


MAX_LUA_ALTERNATIVES = 256
_CATEGORY = {
    "CATEGORY_DIGIT": "%d",
    "CATEGORY_NOT_DIGIT": "%D",
    "CATEGORY_SPACE": "%s",
    "CATEGORY_NOT_SPACE": "%S",
    "CATEGORY_WORD": "[%w_]",
    "CATEGORY_NOT_WORD": "[^%w_]",
}
_SET_CATEGORY = {"CATEGORY_DIGIT": "%d", "CATEGORY_SPACE": "%s", "CATEGORY_WORD": "%w_"}


def _lua_char(c: int) -> str:
    ch = chr(c)
    if ch.isascii() and ch.isalnum():
        return ch
    if not ch.isascii() or not ch.isprintable():
        raise UnsupportedPattern(f"character {ch!r}")
    return "%" + ch


def _lua_set(items: list) -> str:
    out, negate = [], False
    for op, arg in items:
        op = str(op)
        if op == "NEGATE":
            negate = True
        elif op == "LITERAL":
            out.append(_lua_char(arg))
        elif op == "RANGE":
            lo, hi = chr(arg[0]), chr(arg[1])
            if not (lo.isascii() and lo.isalnum() and hi.isascii() and hi.isalnum()):
                raise UnsupportedPattern(f"range {lo}-{hi}")
            out.append(f"{lo}-{hi}")
        elif op == "CATEGORY" and str(arg) in _SET_CATEGORY:
            out.append(_SET_CATEGORY[str(arg)])
        else:
            raise UnsupportedPattern(f"{op} {arg} in a character class")
    return "[" + ("^" if negate else "") + "".join(out) + "]"


def _atom(op: str, arg) -> str | None:
    """A one-character Lua pattern item, or None if (op, arg) is not one."""
    if op == "LITERAL":
        return _lua_char(arg)
    if op == "NOT_LITERAL":
        return f"[^{_lua_char(arg)}]"
    if op == "ANY":
        return "."
    if op == "IN":
        return _lua_set(arg)
    if op == "CATEGORY" and str(arg) in _CATEGORY:
        return _CATEGORY[str(arg)]
    return None


def _product(a: list[str], b: list[str]) -> list[str]:
    out = [x + y for x in a for y in b]
    if len(out) > MAX_LUA_ALTERNATIVES:
        raise UnsupportedPattern("too many alternatives")
    return out


def _alternatives(seq) -> list[str]:
    """Lua pattern bodies (unanchored) whose union matches what ``seq`` fully matches."""
    alts = [""]
    for op, arg in seq:
        op = str(op)
        atom = _atom(op, arg)
        if atom is not None:
            alts = _product(alts, [atom])
        elif op == "AT":
            continue  # ^ and $: every Lua pattern is anchored at both ends anyway
        elif op == "SUBPATTERN":
            alts = _product(alts, _alternatives(arg[-1]))
        elif op == "BRANCH":
            alts = _product(alts, [x for sub in arg[1] for x in _alternatives(sub)])
        elif op in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            lo, hi, sub = arg
            unbounded = hi == sre_c.MAXREPEAT
            single = _atom(str(sub[0][0]), sub[0][1]) if len(sub) == 1 else None
            if single is not None:
                piece = single * lo
                if unbounded:
                    piece = single * max(lo - 1, 0) + single + ("+" if lo else "*")
                else:
                    piece += (single + "?") * (hi - lo)
                alts = _product(alts, [piece])
            elif unbounded:
                raise UnsupportedPattern("an unbounded repeat of a group")
            else:
                inner = _alternatives(sub)
                reps: list[str] = []
                for k in range(lo, hi + 1):
                    acc = [""]
                    for _ in range(k):
                        acc = _product(acc, inner)
                    reps += acc
                alts = _product(alts, reps)
        else:
            raise UnsupportedPattern(op)
    return alts


def lua_patterns(regex: str) -> list[str]:
    """Anchored Lua patterns that together accept exactly what ``re.fullmatch(regex)`` accepts.

    Lua patterns have no groups, alternation or counted repeats, so those are expanded into
    several patterns (``{2,3}`` -> ``xx`` then ``x?``; ``(-x)?`` -> with and without).
    Raises UnsupportedPattern for what cannot be expanded (an unbounded repeat of a group).
    """
    return sorted({f"^{body}$" for body in _alternatives(sre_parse.parse(regex))})


# --------------------------------------------------------------------------- generation
def _lua_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _lua_opt(v) -> str:
    return "nil" if v is None else str(v)


def generate(
    site: Site,
    state: Path,
    port_base: int = DEFAULT_PORT_BASE,
    phantoms: bool = True,
) -> dict[str, str]:
    """The text of slurm.conf, gres.conf, job_submit.lua and the nodes file for ``site``."""
    if site.scheduler != "slurm":
        raise ValueError(f"{site.title} is scheduled by {site.scheduler}, not Slurm")
    nodes = logical_nodes(site, phantoms)
    node_lines, gres_lines, nodes_file = [], [], []
    port = port_base + 1
    for ln in nodes.values():
        nt = ln.node_type
        sockets, per_socket = nt.sockets, nt.cores_per_socket
        if nt.usable_cores < nt.cores:
            # Cores the site keeps for itself are left out of the node: CoreSpecCount would do
            # it on a node with a slurmd, but is not applied to never-registered CLOUD nodes.
            if nt.usable_cores % nt.sockets == 0:
                per_socket = nt.usable_cores // nt.sockets
            else:
                sockets, per_socket = 1, nt.usable_cores
        memory = UNKNOWN_MEMORY_MB if nt.memory_gb is None else int(nt.memory_gb * 1024)
        shape = (
            f"Sockets={sockets} CoresPerSocket={per_socket} "
            f"ThreadsPerCore={nt.threads_per_core} RealMemory={memory}"
        )
        if nt.slurm_threads_per_core < nt.threads_per_core:  # Slurm counts cores as CPUs
            shape = f"CPUs={sockets * per_socket} " + shape
        if nt.gpus:
            shape += f" Gres=gpu:{nt.gpus}"
        # what jobs select the nodes with (-C gpu), and ask for to have node-local storage
        # mounted (Frontier's nvme)
        features = sorted(site.node_features(nt))
        if features:
            shape += f" Features={','.join(features)}"
        node_lines.append(f"# node type {nt.name}: {ln.real} with a slurmd, {ln.total} in all")
        if nt.memory_unknown:
            node_lines.append(f"# its memory is unknown ({nt.memory_unknown}): not limited")
        for name in ln.real_names:
            node_lines.append(
                f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} "
                f"{shape} Weight=1 State=UNKNOWN"
            )
            nodes_file.append(f"{name} {port} {nt.gpus}")
            port += 1
        if ln.total > ln.real:
            node_lines.append(
                f"NodeName={ln.hostlist(ln.real + 1, ln.total)} NodeHostname=localhost "
                f"NodeAddr=127.0.0.1 Port={port_base + 1} {shape} Weight=100 State=CLOUD"
            )
        if nt.gpus:
            files = f"gpu[0-{nt.gpus - 1}]" if nt.gpus > 1 else "gpu0"
            gres_lines.append(
                f"NodeName={ln.hostlist(1, ln.total)} Name=gpu File={state}/fakedev/{files}"
            )

    default = site.default_partition.name if site.default_partition else None
    part_lines = []
    for p in site.partitions.values():
        if p.status == "removed":
            part_lines.append(f"# partition {p.name} is removed: Slurm refuses it as unknown")
            continue
        extra = ""
        if p.raw.get("default_walltime"):
            extra += f" DefaultTime={_slurm_time(p.raw['default_walltime'])}"
        if p.exclusive:
            extra += " OverSubscribe=EXCLUSIVE"
        if p.raw.get("cores_per_gpu"):  # in CPUs, as Slurm counts them
            extra += f" DefCpuPerGPU={p.raw['cores_per_gpu'] * p.node_type.slurm_threads_per_core}"
        if p.max_walltime_unknown:  # not limited, as the emulator leaves it unchecked
            part_lines.append(f"# {p.name}'s max_walltime is unknown ({p.max_walltime_unknown})")
        part_lines.append(
            f"PartitionName={p.name} Nodes={partition_nodes(site, p.name, nodes)}"
            f" MaxTime={_max_time(p)}{extra}"
            f" MaxNodes={p.max_nodes or 'UNLIMITED'}"
            f" Default={'YES' if p.name == default else 'NO'} State=UP"
        )

    gpus_any = any(nt.gpus for nt in site.node_types.values())
    conf = f"""# Generated from sites/{site.name}.yaml by clusterkit.runs.slurmconf: a one-machine
# test cluster.
ClusterName={site.name}
SlurmctldHost=localhost
SlurmctldPort={port_base}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation={state}/ctld
SlurmdSpoolDir={state}/slurmd-%n
SlurmctldPidFile={state}/slurmctld.pid
SlurmdPidFile={state}/slurmd-%n.pid
SlurmctldLogFile={state}/slurmctld.log
SlurmdLogFile={state}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
# the site's account and QoS rules: job_submit.lua next to this file
JobSubmitPlugins=lua
MailProg=/bin/true
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdParameters=config_overrides
SlurmdTimeout=120
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
EnforcePartLimits=ALL
# Phantom nodes (State=CLOUD) stay powered down: they count for the scheduler only.
SuspendProgram=/bin/true
ResumeProgram=/bin/true
SuspendTime=INFINITE
ResumeTimeout=600
{"GresTypes=gpu" if gpus_any else "# no GPUs on this site"}
"""
    conf += "\n".join(node_lines + part_lines) + "\n"
    gres = "AutoDetect=off\n" + "\n".join(gres_lines) + "\n"
    return {
        "slurm.conf": conf,
        "gres.conf": gres,
        "job_submit.lua": job_submit_lua(site),
        "nodes": "\n".join(nodes_file) + "\n",
    }


def _lua_limits(q: dict) -> str:
    """A QoS's limits as Lua table fields (nil where the profile gives none)."""
    wall = _minutes(q["max_walltime"]) if q.get("max_walltime") else None
    return (
        f"max_minutes = {_lua_opt(wall)}, max_nodes = {_lua_opt(q.get('max_nodes'))}, "
        f"min_nodes = {_lua_opt(q.get('min_nodes'))}, max_gpus = {_lua_opt(q.get('max_gpus'))}"
    )


def job_submit_lua(site: Site) -> str:
    """The site's account and QoS policy as a Slurm ``job_submit.lua``."""
    acct = site.account
    names = [acct["example"], *site.placeholders]
    patterns = lua_patterns(acct["pattern"])
    qos_rows = []
    for qname, q in site.qos.items():
        by_type = ", ".join(
            f"[{_lua_str(nt)}] = {{{_lua_limits(lim)}}}"
            for nt, lim in q.get("by_node_type", {}).items()
        )
        qos_rows.append(f"   [{_lua_str(qname)}] = {{{_lua_limits(q)}, by_type = {{{by_type}}}}},")
    part_rows = []
    for p in site.partitions.values():
        allowed = ", ".join(f"[{_lua_str(q)}] = true" for q in p.qos)
        bins = ", ".join(
            f"{{{b['min_nodes']}, {b['max_nodes']}, {_minutes(b['max_walltime'])}}}"
            for b in p.raw.get("walltime_by_nodes", ())
        )
        types = ", ".join(
            f"{{name = {_lua_str(nt.name)}, features = {{"
            + ", ".join(f"[{_lua_str(f)}] = true" for f in sorted(site.node_features(nt)))
            + "}}"
            for nt in p.node_types or (p.node_type,)
        )
        part_rows.append(
            f"   [{_lua_str(p.name)}] = {{required = {'true' if p.qos_required else 'false'}, "
            f"allowed = {{{allowed}}}, any = {'false' if p.qos else 'true'}, "
            f"bins = {{{bins}}}, types = {{{types}}}}},"
        )
    default = site.default_partition.name if site.default_partition else ""
    routed = site.default_partitions if len(site.default_partitions) > 1 else []
    nl = "\n"
    return f"""-- Generated from sites/{site.name}.yaml by clusterkit.runs.slurmconf: the site's
-- account and QoS rules, enforced at submission without an accounting database.
local site = {_lua_str(site.title)}
local account_required = {"true" if acct["required"] else "false"}
local account_option = {_lua_str(acct.get("option", "-A"))}
local account_example = {_lua_str(acct["example"])}
local account_regex = {_lua_str(acct["pattern"])}
local account_names = {{ {", ".join(f"[{_lua_str(a)}] = true" for a in names)} }}
-- {acct["pattern"]} as Lua patterns
local account_patterns = {{
{nl.join(f"   {_lua_str(p)}," for p in patterns)}
}}
local qos = {{
{nl.join(qos_rows)}
}}
local partitions = {{
{nl.join(part_rows)}
}}
local default_partition = {_lua_str(default)}
-- where a job that names no partition goes: tried in this order (the site routes by constraint)
local routed = {{ {", ".join(_lua_str(n) for n in routed)} }}
local default_qos = {_lua_str(site.default_qos) if site.default_qos else "nil"}
local NO_VAL = 4294967294
local NO_VAL16 = 65534
-- slurm_errno.h codes the Lua plugin does not export by name (Slurm 22.05)
local ESLURM_INVALID_QOS = 2066
local ESLURM_INVALID_TIME_LIMIT = 2051
-- what Slurm answers for a QoS limit with Flags=DenyOnLimit
local QOS_LIMIT = slurm.ESLURM_ACCOUNTING_POLICY or 2050

local function given(v, none)
   return v ~= nil and v ~= none
end

local function account_ok(a)
   if account_names[a] then return true end
   for _, p in ipairs(account_patterns) do
      if string.find(a, p) then return true end
   end
   return false
end

-- GPUs in a TRES string such as "gres:gpu:4" or "gres:gpu" (one); 0 when none.
local function gpus_in(tres)
   if tres == nil then return 0 end
   local n = 0
   for item in string.gmatch(tres, "[^,]+") do
      if string.find(item, "gpu") then
         local count = string.match(item, ":(%d+)$")
         n = n + (tonumber(count) or 1)
      end
   end
   return n
end

-- The node types of partition p that a constraint may select. An expression of names joined
-- by & (or ,) selects the types that have them all; with | or brackets every type may serve.
local function candidates(p, features)
   if features == nil or features == "" or string.find(features, "[|%[%]()*]") then
      return p.types
   end
   local out = {{}}
   for _, t in ipairs(p.types) do
      local all = true
      for f in string.gmatch(features, "[^&,]+") do
         if not t.features[f] then all = false end
      end
      if all then out[#out + 1] = t end
   end
   return out
end

-- A QoS limit for a job on any of the node types `types`: the most lenient of theirs (each
-- type's own limit where the QoS sets one, else the QoS's); nil when one of them has none.
local function qos_limit(q, key, types)
   if #types == 0 then return q[key] end
   local best = nil
   for _, t in ipairs(types) do
      local v = q[key]
      if q.by_type[t.name] ~= nil then v = q.by_type[t.name][key] end
      if v == nil then return nil end
      if best == nil or v > best then best = v end
   end
   return best
end

-- The partitions of `routed` that take a job of QoS qname whose constraint reaches some node.
local function route(qname, features)
   local fit = {{}}
   for _, name in ipairs(routed) do
      local p = partitions[name]
      local qos_ok = p.any or (qname ~= nil and p.allowed[qname])
      qos_ok = qos_ok or (qname == nil and not p.required)
      if qos_ok and #candidates(p, features) > 0 then fit[#fit + 1] = name end
   end
   return fit
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   local a = job_desc.account
   if a == nil or a == "" then
      if account_required then
         slurm.log_user("site policy: %s requires an account (%s %s)", site,
                        account_option, account_example)
         return slurm.ESLURM_INVALID_ACCOUNT or slurm.ERROR
      end
   elseif not account_ok(a) then
      slurm.log_user("site policy: account '%s' is not of the form %s (e.g. %s)", a,
                     account_regex, account_example)
      return slurm.ESLURM_INVALID_ACCOUNT or slurm.ERROR
   end

   local qname = job_desc.qos
   if qname == nil or qname == "" then qname = default_qos end
   local pname = job_desc.partition
   if (pname == nil or pname == "") and #routed > 1 then
      local fit = route(qname, job_desc.features)
      if #fit == 0 then
         slurm.log_user("site policy: no partition of %s takes QoS %s with constraint %s", site,
                        tostring(qname), tostring(job_desc.features))
         return ESLURM_INVALID_QOS
      end
      -- Slurm runs the job in the first of these that can take it
      job_desc.partition = table.concat(fit, ",")
      pname = fit[1]
   end
   pname = pname or default_partition
   local p = partitions[pname]
   if p == nil then return slurm.SUCCESS end  -- slurmctld refuses unknown partitions itself
   local types = candidates(p, job_desc.features)

   -- nodes as the job will get them: --nodes, else --ntasks over --ntasks-per-node, else 1
   local nodes = 1
   local tpn = 1
   local ntasks = job_desc.num_tasks
   if given(job_desc.ntasks_per_node, NO_VAL16) and job_desc.ntasks_per_node > 0 then
      tpn = job_desc.ntasks_per_node
   end
   if given(job_desc.min_nodes, NO_VAL) then
      nodes = job_desc.min_nodes
   elseif given(ntasks, NO_VAL) and given(job_desc.ntasks_per_node, NO_VAL16) then
      nodes = math.ceil(ntasks / tpn)
   end

   -- walltime by job size (the partition's size bins: {{min nodes, max nodes, max minutes}})
   local limit = job_desc.time_limit
   if #p.bins > 0 and given(limit, NO_VAL) then
      local fits = nil
      for _, b in ipairs(p.bins) do
         if nodes >= b[1] and nodes <= b[2] then fits = b end
      end
      if fits == nil then
         slurm.log_user("site policy: no size bin of partition %s holds %d nodes", pname, nodes)
         return ESLURM_INVALID_TIME_LIMIT
      elseif limit > fits[3] then
         slurm.log_user("site policy: partition %s allows %d minutes for %d-%d nodes, "
                        .. "the job asks for %d", pname, fits[3], fits[1], fits[2], limit)
         return ESLURM_INVALID_TIME_LIMIT
      end
   end

   if qname == nil or qname == "" then
      if p.required then
         slurm.log_user("site policy: partition %s needs --qos", pname)
         return ESLURM_INVALID_QOS
      end
      return slurm.SUCCESS
   end
   local q = qos[qname]
   if q == nil then
      slurm.log_user("site policy: %s has no QoS '%s'", site, qname)
      return ESLURM_INVALID_QOS
   end
   if not p.any and not p.allowed[qname] then
      slurm.log_user("site policy: QoS %s cannot be used in partition %s", qname, pname)
      return ESLURM_INVALID_QOS
   end

   local max_minutes = qos_limit(q, "max_minutes", types)
   if max_minutes and given(limit, NO_VAL) and limit > max_minutes then
      slurm.log_user("site policy: QoS %s allows %d minutes, the job asks for %d", qname,
                     max_minutes, limit)
      return QOS_LIMIT
   end

   local max_nodes = qos_limit(q, "max_nodes", types)
   if max_nodes and nodes > max_nodes then
      slurm.log_user("site policy: QoS %s allows %d nodes, the job asks for %d", qname,
                     max_nodes, nodes)
      return QOS_LIMIT
   end
   if max_nodes and given(job_desc.max_nodes, NO_VAL) and job_desc.max_nodes > max_nodes then
      job_desc.max_nodes = max_nodes  -- as Slurm's QoS MaxNodes trims --nodes=min-max
   end
   local min_nodes = qos_limit(q, "min_nodes", types)
   if min_nodes and nodes < min_nodes then
      slurm.log_user("site policy: QoS %s needs at least %d nodes, the job asks for %d",
                     qname, min_nodes, nodes)
      return QOS_LIMIT
   end

   if q.max_gpus then
      local gpus = gpus_in(job_desc.tres_per_node) * nodes
      gpus = math.max(gpus, gpus_in(job_desc.tres_per_job))
      local per_task = gpus_in(job_desc.tres_per_task)
      if per_task > 0 then
         local tasks = given(ntasks, NO_VAL) and ntasks or nodes * tpn
         gpus = math.max(gpus, per_task * tasks)
      end
      if gpus > q.max_gpus then
         slurm.log_user("site policy: QoS %s allows %d GPUs, the job asks for %d", qname,
                        q.max_gpus, gpus)
         return QOS_LIMIT
      end
   end
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end

return slurm.SUCCESS
"""


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("site", help="profile name (sites/SITE.yaml)")
    p.add_argument("--out", required=True, type=Path, help="directory for the files")
    p.add_argument(
        "--state",
        type=Path,
        help="directory for the daemons' state, logs, pid files and fake devices "
        "(default: --out itself)",
    )
    p.add_argument(
        "--port-base",
        default=str(DEFAULT_PORT_BASE),
        help="slurmctld's port; slurmds use the next ones. 'auto': the first free block "
        f"from {DEFAULT_PORT_BASE} on, in steps of 100 (default: {DEFAULT_PORT_BASE})",
    )
    p.add_argument(
        "--no-phantoms",
        action="store_true",
        help="only the logical nodes that get a slurmd (node counts then judged at that scale)",
    )
    args = p.parse_args(argv)
    site = load_site(args.site)
    if site.scheduler != "slurm":
        p.error(f"{site.title} is scheduled by {site.scheduler}, not Slurm")
    state = (args.state or args.out).resolve()
    n_real = sum(ln.real for ln in logical_nodes(site, not args.no_phantoms).values())
    if args.port_base == "auto":
        port_base = free_port_base(n_real + 1)
    else:
        port_base = int(args.port_base)
    args.out.mkdir(parents=True, exist_ok=True)
    files = generate(site, state, port_base, phantoms=not args.no_phantoms)
    for name, text in files.items():
        (args.out / name).write_text(text, encoding="utf-8")
    print(args.out)


if __name__ == "__main__":
    main()
