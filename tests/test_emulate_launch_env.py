"""Node sets and per-rank environments computed from counts, checked against lists."""

from __future__ import annotations

import hostlist
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterkit.emulate import launch_env
from clusterkit.emulate.launch_env import NodeSet


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["gpu", "standard", "Grace-Hopper", ""]),
    st.one_of(st.integers(1, 120), st.sampled_from([999, 1000, 5860])),
)
def test_a_node_set_is_the_list_python_hostlist_would_compress(partition, count):
    nodes = NodeSet.of(partition, count)
    names = hostlist.expand_hostlist(nodes.compressed)
    assert len(names) == count
    assert names[0] == nodes.name(0) and names[-1] == nodes.name(count - 1)
    assert hostlist.collect_hostlist(names) == nodes.compressed
    assert nodes.names(3) == names[:3]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(1, 9), st.integers(1, 400))
def test_rank_environment_from_counts_matches_the_listed_layout(nodes, per_node, ntasks):
    names = NodeSet.of("n", nodes).names()
    listed = launch_env.layout(names, ntasks, per_node)
    counts = [sum(1 for _n, idx, _l in listed if idx == i) for i in range(nodes)]
    for rank in {0, ntasks // 2, ntasks - 1}:
        env = launch_env.srun_rank_env(
            step_id=0,
            nodes=NodeSet.of("n", nodes),
            ntasks=ntasks,
            tasks_per_node=per_node,
            rank=rank,
            cpus_per_task=1,
            gpus_per_node=0,
        )
        node, idx, local = listed[rank]
        assert env["SLURMD_NODENAME"] == node and env["SLURM_NODEID"] == str(idx)
        assert env["SLURM_LOCALID"] == str(local)
        assert env["SLURM_STEP_TASKS_PER_NODE"] == launch_env.tasks_per_node_string(counts)
