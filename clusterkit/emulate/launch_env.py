"""The environment real launchers give each rank, so that scripts see what they would see.

Slurm: srun(1) "OUTPUT ENVIRONMENT VARIABLES"; IBM JSM: jsrun sets JSM_NAMESPACE_* and, through
its PMIx-based Spectrum MPI, OMPI_COMM_WORLD_* and PMIX_RANK.
"""

from __future__ import annotations

from functools import lru_cache

import hostlist

# A dry-run plan lists the first ranks of a step only: a whole-machine step has tens of
# thousands, and the plan must be made as fast for it as for one node.
RANKS_SHOWN = 256


def compress(nodes: list[str]) -> str:
    return _compress(tuple(nodes))


@lru_cache(maxsize=32)
def _compress(nodes: tuple[str, ...]) -> str:
    return hostlist.collect_hostlist(list(nodes))


def block_counts(nnodes: int, ntasks: int, tasks_per_node: int) -> list[int]:
    """Tasks on each node under the block distribution of :func:`layout`."""
    counts = [max(0, min(tasks_per_node, ntasks - i * tasks_per_node)) for i in range(nnodes)]
    if nnodes:
        counts[-1] = max(0, ntasks - (nnodes - 1) * tasks_per_node)
    return counts


def tasks_per_node_string(counts: list[int]) -> str:
    """Slurm's compressed per-node task counts, e.g. [4, 4, 2] -> "4(x2),2"."""
    out: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j + 1 < len(counts) and counts[j + 1] == counts[i]:
            j += 1
        n = j - i + 1
        out.append(f"{counts[i]}(x{n})" if n > 1 else str(counts[i]))
        i = j + 1
    return ",".join(out)


def layout(
    nodes: list[str], ntasks: int, tasks_per_node: int, limit: int | None = None
) -> list[tuple[str, int, int]]:
    """Block distribution (Slurm's default): [(node, node_index, local_rank)] per rank (the
    first ``limit`` ranks only, when given)."""
    ranks = []
    for rank in range(ntasks if limit is None else min(ntasks, limit)):
        idx = min(rank // tasks_per_node, len(nodes) - 1)
        ranks.append((nodes[idx], idx, rank - idx * tasks_per_node))
    return ranks


def slurm_job_env(
    *,
    job_id: int,
    job_name: str,
    nodes: list[str],
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
) -> dict[str, str]:
    """What sbatch puts in the batch script's environment."""
    env = {
        "SLURM_JOB_ID": str(job_id),
        "SLURM_JOBID": str(job_id),
        "SLURM_JOB_NAME": job_name,
        "SLURM_JOB_NODELIST": compress(nodes),
        "SLURM_NODELIST": compress(nodes),
        "SLURM_JOB_NUM_NODES": str(len(nodes)),
        "SLURM_NNODES": str(len(nodes)),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NPROCS": str(ntasks),
        "SLURM_NTASKS_PER_NODE": str(tasks_per_node),
        "SLURM_TASKS_PER_NODE": tasks_per_node_string([tasks_per_node] * len(nodes)),
        "SLURM_JOB_CPUS_PER_NODE": tasks_per_node_string([cpus_per_node] * len(nodes)),
        "SLURM_JOB_PARTITION": partition,
        "SLURM_SUBMIT_DIR": submit_dir,
        "SLURM_SUBMIT_HOST": "login1",
        "SLURM_CLUSTER_NAME": cluster,
        "SLURMD_NODENAME": nodes[0],
        "SLURM_NODEID": "0",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_GTIDS": "0",
        "ENVIRONMENT": "BATCH",
    }
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


def srun_rank_env(
    *,
    step_id: int,
    nodes: list[str],
    ntasks: int,
    tasks_per_node: int,
    rank: int,
    node_index: int,
    local_rank: int,
    cpus_per_task: int,
    gpus_per_node: int,
) -> dict[str, str]:
    """What srun adds for one task of a step."""
    counts = block_counts(len(nodes), ntasks, tasks_per_node)
    env = {
        "SLURM_STEP_ID": str(step_id),
        "SLURM_STEPID": str(step_id),
        "SLURM_STEP_NODELIST": compress(nodes),
        "SLURM_STEP_NUM_NODES": str(len(nodes)),
        "SLURM_STEP_NUM_TASKS": str(ntasks),
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node_string(counts),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NPROCS": str(ntasks),
        "SLURM_NNODES": str(len(nodes)),
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(local_rank),
        "SLURM_NODEID": str(node_index),
        "SLURMD_NODENAME": nodes[node_index],
        "SLURM_TASK_PID": "0",
        "SLURM_CPUS_PER_TASK": str(cpus_per_task),
    }
    if gpus_per_node:
        ids = ",".join(str(i) for i in range(gpus_per_node))
        env.update(CUDA_VISIBLE_DEVICES=ids, SLURM_STEP_GPUS=ids, ROCR_VISIBLE_DEVICES=ids)
    return env


def jsm_rank_env(
    *,
    nodes: list[str],
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
        "LSB_HOSTS": " ".join(nodes),
    }
    if gpus_per_rs:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(gpus_per_rs))
    return env
