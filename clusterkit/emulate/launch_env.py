"""The environment real launchers give each rank, so that scripts see what they would see.

Slurm: srun(1) "OUTPUT ENVIRONMENT VARIABLES"; IBM JSM: jsrun sets JSM_NAMESPACE_* and, through
its PMIx-based Spectrum MPI, OMPI_COMM_WORLD_* and PMIX_RANK.

A job's nodes are a :class:`NodeSet` (a name stem and a count) and its tasks are counted, not
listed: the environment of any one rank is computed on its own, so a plan of a whole machine
costs no more than one of a node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import hostlist


def compress(nodes: list[str]) -> str:
    return hostlist.collect_hostlist(nodes)


@dataclass(frozen=True)
class NodeSet:
    """``count`` nodes named ``stem`` + a zero-padded index from 1 (``gpu001``...)."""

    stem: str
    count: int
    width: int = 3
    first: int = 0  # index of the first node (a part of a larger set)

    @classmethod
    def of(cls, partition: str, count: int) -> NodeSet:
        """The nodes of a dry-run plan: the partition's name and an index wide enough for all."""
        stem = re.sub(r"[^a-z0-9]", "", partition.lower()) or "node"
        return cls(stem, max(count, 1), max(3, len(str(max(count, 1)))))

    def name(self, index: int) -> str:
        return f"{self.stem}{self.first + index + 1:0{self.width}d}"

    def head(self, count: int) -> NodeSet:
        """The first ``count`` nodes (a step's share of the allocation)."""
        return self.part(0, count)

    def part(self, start: int, count: int) -> NodeSet:
        """``count`` nodes from the ``start``-th on (as far as the set goes)."""
        start = max(0, min(start, self.count - 1))
        count = max(1, min(count, self.count - start))
        return NodeSet(self.stem, count, self.width, self.first + start)

    @property
    def compressed(self) -> str:
        """Slurm's compressed host list, e.g. ``gpu[001-032]``."""
        if self.count == 1:
            return self.name(0)
        first, last = (f"{i:0{self.width}d}" for i in (self.first + 1, self.first + self.count))
        return f"{self.stem}[{first}-{last}]"

    def names(self, limit: int | None = None) -> list[str]:
        """The first ``limit`` names (all when None), expanded by python-hostlist."""
        return hostlist.expand_hostlist(self.head(limit or self.count).compressed)


def runs_string(runs: list[tuple[int, int]]) -> str:
    """Slurm's compressed per-node counts from (count, nodes) runs: [(4, 2), (2, 1)] is
    "4(x2),2"."""
    merged: list[tuple[int, int]] = []
    for c, n in runs:
        if n <= 0:
            continue
        if merged and merged[-1][0] == c:
            merged[-1] = (c, merged[-1][1] + n)
        else:
            merged.append((c, n))
    return ",".join(f"{c}(x{n})" if n > 1 else str(c) for c, n in merged)


def tasks_per_node_string(counts: list[int]) -> str:
    """Slurm's compressed per-node task counts, e.g. [4, 4, 2] -> "4(x2),2"."""
    return runs_string([(c, 1) for c in counts])


def block_runs(ntasks: int, tasks_per_node: int, nodes: int) -> list[tuple[int, int]]:
    """Tasks per node of a block distribution as (count, nodes) runs: full nodes first, the
    remainder on the next, none after it; tasks beyond the last node's share stay on it."""
    tpn = max(tasks_per_node, 1)
    if ntasks >= nodes * tpn:
        return [(tpn, nodes - 1), (ntasks - (nodes - 1) * tpn, 1)]
    full, rest = divmod(ntasks, tpn)
    runs = [(tpn, full)]
    if rest:
        runs.append((rest, 1))
    return [*runs, (0, nodes - full - (1 if rest else 0))]


def placement(rank: int, tasks_per_node: int, nodes: int) -> tuple[int, int]:
    """(node index, local rank) of ``rank`` in a block distribution (Slurm's default)."""
    idx = min(rank // max(tasks_per_node, 1), nodes - 1)
    return idx, rank - idx * tasks_per_node


def layout(nodes: list[str], ntasks: int, tasks_per_node: int) -> list[tuple[str, int, int]]:
    """Block distribution (Slurm's default): [(node, node_index, local_rank)] per rank."""
    out = []
    for rank in range(ntasks):
        idx, local = placement(rank, tasks_per_node, len(nodes))
        out.append((nodes[idx], idx, local))
    return out


def slurm_job_env(
    *,
    job_id: int,
    job_name: str,
    nodes: NodeSet | list[str],
    partition: str,
    account: str | None,
    ntasks: int,
    tasks_per_node: int,
    cpus_per_task: int,
    gpus_per_node: int,
    cpus_per_node: int,
    submit_dir: str,
    cluster: str,
    cpus_per_task_given: bool,
    qos: str | None,
    ntasks_given: bool = True,
    tasks_per_node_given: bool = True,
) -> dict[str, str]:
    """What sbatch puts in the batch script's environment (SLURM_NTASKS only where the job
    gave --ntasks or --ntasks-per-node, SLURM_NTASKS_PER_NODE only where it gave the latter:
    srun takes them as its own -n and --ntasks-per-node)."""
    nodelist, count, first = _nodes(nodes)
    env = {
        "SLURM_JOB_ID": str(job_id),
        "SLURM_JOBID": str(job_id),
        "SLURM_JOB_NAME": job_name,
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(count),
        "SLURM_NNODES": str(count),
        "SLURM_TASKS_PER_NODE": runs_string([(tasks_per_node, count)]),
        "SLURM_JOB_CPUS_PER_NODE": runs_string([(cpus_per_node, count)]),
        "SLURM_JOB_PARTITION": partition,
        "SLURM_SUBMIT_DIR": submit_dir,
        "SLURM_SUBMIT_HOST": "login1",
        "SLURM_CLUSTER_NAME": cluster,
        "SLURMD_NODENAME": first,
        "SLURM_NODEID": "0",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_GTIDS": "0",
        "ENVIRONMENT": "BATCH",
    }
    if ntasks_given:
        env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = str(ntasks)
    if tasks_per_node_given:
        env["SLURM_NTASKS_PER_NODE"] = str(tasks_per_node)
    if account:
        env["SLURM_JOB_ACCOUNT"] = account
    if qos:
        env["SLURM_JOB_QOS"] = qos
    if cpus_per_task_given:
        env["SLURM_CPUS_PER_TASK"] = str(cpus_per_task)
    if gpus_per_node:
        ids = ",".join(str(i) for i in range(gpus_per_node))
        env.update(
            SLURM_GPUS_ON_NODE=str(gpus_per_node), SLURM_JOB_GPUS=ids, CUDA_VISIBLE_DEVICES=ids
        )
    return env


def _nodes(nodes: NodeSet | list[str]) -> tuple[str, int, str]:
    """(compressed list, count, first name) of a node set or a short list of names."""
    if isinstance(nodes, NodeSet):
        return nodes.compressed, nodes.count, nodes.name(0)
    return compress(nodes), len(nodes), nodes[0]


def _node_name(nodes: NodeSet | list[str], index: int) -> str:
    return nodes.name(index) if isinstance(nodes, NodeSet) else nodes[index]


def srun_rank_env(
    *,
    step_id: int,
    nodes: NodeSet | list[str],
    ntasks: int,
    tasks_per_node: int,
    rank: int,
    cpus_per_task: int,
    gpus_per_node: int,
) -> dict[str, str]:
    """What srun adds for one task of a step (block distribution over ``nodes``)."""
    nodelist, count, _ = _nodes(nodes)
    idx, local = placement(rank, tasks_per_node, count)
    env = {
        "SLURM_STEP_ID": str(step_id),
        "SLURM_STEPID": str(step_id),
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_NUM_NODES": str(count),
        "SLURM_STEP_NUM_TASKS": str(ntasks),
        "SLURM_STEP_TASKS_PER_NODE": runs_string(block_runs(ntasks, tasks_per_node, count)),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NPROCS": str(ntasks),
        "SLURM_NNODES": str(count),
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(local),
        "SLURM_NODEID": str(idx),
        "SLURMD_NODENAME": _node_name(nodes, idx),
        "SLURM_TASK_PID": "0",
        "SLURM_CPUS_PER_TASK": str(cpus_per_task),
    }
    if gpus_per_node:
        ids = ",".join(str(i) for i in range(gpus_per_node))
        env.update(CUDA_VISIBLE_DEVICES=ids, SLURM_STEP_GPUS=ids, ROCR_VISIBLE_DEVICES=ids)
    return env


def jsm_rank_env(
    *,
    hosts: str,
    ntasks: int,
    rank: int,
    node_index: int,
    local_rank: int,
    local_size: int,
    gpus_per_rs: int,
) -> dict[str, str]:
    """What jsrun (IBM Job Step Manager) and Spectrum MPI give each task."""
    env = {
        "JSM_NAMESPACE_RANK": str(rank),
        "JSM_NAMESPACE_SIZE": str(ntasks),
        "JSM_NAMESPACE_LOCAL_RANK": str(local_rank),
        "JSM_NAMESPACE_LOCAL_SIZE": str(local_size),
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_SIZE": str(ntasks),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(local_rank),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(local_size),
        "OMPI_COMM_WORLD_NODE_RANK": str(node_index),
        "PMIX_RANK": str(rank),
        "LSB_HOSTS": hosts,
    }
    if gpus_per_rs:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(gpus_per_rs))
    return env
