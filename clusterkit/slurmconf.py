"""A real Slurm configuration generated from a site profile, for a one-machine test cluster.

Each node type of the profile becomes two logical nodes (one slurmd each, on this host) that
claim the type's shape through ``SlurmdParameters=config_overrides``: sockets, cores, threads,
memory and GPUs (fake devices: symlinks to /dev/null). Partitions carry the profile's MaxTime
and MaxNodes with ``EnforcePartLimits=ALL``. Accounts and QoS are judged by a ``job_submit.lua``
policy written from the profile (no accounting database needed).

``python -m clusterkit.slurmconf SITE --out DIR --state DIR`` writes slurm.conf, gres.conf,
job_submit.lua and a nodes file listing ``name port`` for the start script.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from clusterkit.profiles import Site, duration_seconds, load_site

NODES_PER_TYPE = 2
FIRST_PORT = 17001


def _minutes(duration: str) -> int:
    return duration_seconds(duration) // 60


def _slurm_time(duration: str) -> str:
    s = duration_seconds(duration)
    d, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    return f"{d}-{h:02d}:{m:02d}:{sec:02d}"


def node_names(site: Site) -> dict[str, list[str]]:
    """Logical node names per node type."""
    out = {}
    for i, name in enumerate(site.node_types):
        stem = re.sub(r"[^a-z0-9]", "", f"{site.name}{i}")
        out[name] = [f"{stem}n{k}" for k in range(1, NODES_PER_TYPE + 1)]
    return out


def _lua_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def generate(site: Site, state: Path) -> dict[str, str]:
    if site.scheduler != "slurm":
        raise ValueError(f"{site.title} is scheduled by {site.scheduler}, not Slurm")
    names = node_names(site)
    port = FIRST_PORT
    node_lines, gres_lines, nodes_file = [], [], []
    for nt_name, nt in site.node_types.items():
        for n in names[nt_name]:
            shape = (
                f"Sockets={nt.sockets} CoresPerSocket={nt.cores_per_socket} "
                f"ThreadsPerCore={nt.threads_per_core} "
                f"RealMemory={int(nt.memory_gb * 1024)}"
            )
            gres = f" Gres=gpu:{nt.gpus}" if nt.gpus else ""
            node_lines.append(
                f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 "
                f"Port={port} {shape}{gres} State=UNKNOWN"
            )
            if nt.gpus:
                gres_lines.append(
                    f"NodeName={n} Name=gpu File={state}/fakedev/gpu[0-{nt.gpus - 1}]"
                )
            nodes_file.append(f"{n} {port}")
            port += 1
    part_lines = []
    default = site.default_partition.name if site.default_partition else None
    for p in site.partitions.values():
        nodes = ",".join(names[p.node_type.name])
        max_nodes = p.max_nodes or "UNLIMITED"
        part_lines.append(
            f"PartitionName={p.name} Nodes={nodes} MaxTime={_slurm_time(p.max_walltime)} "
            f"MaxNodes={max_nodes} Default={'YES' if p.name == default else 'NO'} "
            f"State=UP"
        )
    gpus_any = any(nt.gpus for nt in site.node_types.values())
    conf = (
        f"""# generated from sites/{site.name}.yaml by clusterkit.slurmconf: a test cluster
ClusterName={site.name}
SlurmctldHost=localhost
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
SlurmctldPort=16817
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobSubmitPlugins=lua
JobCompType=jobcomp/none
MailProg=/bin/true
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdParameters=config_overrides
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
EnforcePartLimits=ALL
{"GresTypes=gpu" if gpus_any else ""}
"""
        + "\n".join(node_lines + part_lines)
        + "\n"
    )
    gres = "AutoDetect=off\n" + "\n".join(gres_lines) + "\n"

    accounts = [site.account["example"], *site.account.get("placeholders", [])]
    qos_rows = []
    for qname, q in site.qos.items():
        wall = _minutes(q["max_walltime"]) if q.get("max_walltime") else "nil"
        qos_rows.append(
            f"  [{_lua_str(qname)}] = {{max_minutes = {wall}, "
            f"max_nodes = {q.get('max_nodes', 'nil')}, "
            f"min_nodes = {q.get('min_nodes', 'nil')}}},"
        )
    part_rows = []
    for p in site.partitions.values():
        allowed = ", ".join(f"[{_lua_str(q)}] = true" for q in p.qos)
        part_rows.append(
            f"  [{_lua_str(p.name)}] = {{required = "
            f"{'true' if p.qos_required else 'false'}, allowed = {{{allowed}}}}},"
        )
    lua = f"""-- generated from sites/{site.name}.yaml: the site's account and QoS rules
local accounts = {{ {", ".join(f"[{_lua_str(a)}] = true" for a in accounts)} }}
local account_required = {"true" if site.account["required"] else "false"}
local qos = {{
{chr(10).join(qos_rows)}
}}
local partitions = {{
{chr(10).join(part_rows)}
}}
local default_partition = {_lua_str(default or "")}
local NO_VAL = 4294967294

function slurm_job_submit(job_desc, part_list, submit_uid)
   if job_desc.account == nil then
      if account_required then
         slurm.log_user("site policy: an account is required (-A/--account)")
         return slurm.ESLURM_INVALID_ACCOUNT or slurm.ERROR
      end
   elseif not accounts[job_desc.account] then
      slurm.log_user("site policy: unknown account '%s'", job_desc.account)
      return slurm.ESLURM_INVALID_ACCOUNT or slurm.ERROR
   end
   local pname = job_desc.partition or default_partition
   local p = partitions[pname]
   if p == nil then return slurm.SUCCESS end  -- slurmctld refuses unknown partitions itself
   if job_desc.qos == nil then
      if p.required then
         slurm.log_user("site policy: partition %s needs --qos", pname)
         return slurm.ESLURM_INVALID_QOS or slurm.ERROR
      end
      return slurm.SUCCESS
   end
   local q = qos[job_desc.qos]
   if q == nil or (next(p.allowed) ~= nil and not p.allowed[job_desc.qos]) then
      slurm.log_user("site policy: QoS '%s' is not valid in partition %s", job_desc.qos, pname)
      return slurm.ESLURM_INVALID_QOS or slurm.ERROR
   end
   local limit = job_desc.time_limit
   if q.max_minutes and limit ~= nil and limit ~= NO_VAL and limit > q.max_minutes then
      slurm.log_user("site policy: QoS %s allows %d minutes", job_desc.qos, q.max_minutes)
      return slurm.ESLURM_INVALID_TIME_LIMIT or slurm.ERROR
   end
   local nodes = job_desc.min_nodes
   if nodes ~= nil and nodes ~= NO_VAL then
      if q.max_nodes and nodes > q.max_nodes then
         slurm.log_user("site policy: QoS %s allows %d nodes", job_desc.qos, q.max_nodes)
         return slurm.ESLURM_INVALID_NODE_COUNT or slurm.ERROR
      end
      if q.min_nodes and nodes < q.min_nodes then
         slurm.log_user("site policy: QoS %s needs %d nodes", job_desc.qos, q.min_nodes)
         return slurm.ESLURM_INVALID_NODE_COUNT or slurm.ERROR
      end
   end
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end

return slurm.SUCCESS
"""
    return {
        "slurm.conf": conf,
        "gres.conf": gres,
        "job_submit.lua": lua,
        "nodes": "\n".join(nodes_file) + "\n",
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("site")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--state", required=True, type=Path)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in generate(load_site(args.site), args.state.resolve()).items():
        (args.out / name).write_text(text)
    print(args.out)


if __name__ == "__main__":
    main()
