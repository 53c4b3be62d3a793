"""The nodes of an emulated multi-node job, each with a network, a host name and node-local
storage of its own (clusterkit/runs/node_network.py), where this machine allows it."""

from __future__ import annotations

import subprocess

import pytest

from clusterkit.runs import node_network

pytestmark = pytest.mark.skipif(
    not node_network.available(),
    reason="this machine cannot give emulated nodes namespaces of their own (root and "
    "unshare, nsenter, ip, mount needed)",
)

# Two nodes, one task each: each task says where it runs, leaves a file in its node-local
# storage, lists what its node holds there, and holds port 8888 of every address for three
# seconds, at the same time as the other; the batch script sends a file to every node with
# sbcast.
SCRIPT = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --time=00:10:00
#SBATCH --output=job.out
set -euo pipefail
module load brics/userenv
echo "batch on $(hostname) $(hostname -i)"
srun bash -c 'echo "task $SLURM_NODEID on $(hostname)"; touch "$LOCALDIR/from-$SLURM_NODEID"'
srun bash -c 'echo "node $SLURM_NODEID holds $(ls "$LOCALDIR" | tr "\\n" " ")"'
sbcast "$0" "$LOCALDIR/script"
srun bash -c 'cmp -s "$LOCALDIR/script" "$0" && echo "node $SLURM_NODEID has the script"' "$0"
srun python3 -c 'import socket, time; s = socket.socket(); s.bind(("", 8888)); time.sleep(3)'
echo "both bound"
"""


def test_each_node_has_its_own_network_and_storage(emulated_env, tmp_path):
    (tmp_path / "job.sbatch").write_text(SCRIPT)
    env = dict(emulated_env, CLUSTERKIT_SITE="isambard-ai")
    r = subprocess.run(
        ["sbatch", "job.sbatch"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    out = (tmp_path / "job.out").read_text()
    assert r.returncode == 0, f"{r.stderr}\n{out}"
    first, second = node_network.addresses(2)
    assert f"batch on {first} {first}" in out
    assert f"task 0 on {first}" in out and f"task 1 on {second}" in out
    # each node sees only its own file
    assert "node 0 holds from-0 " in out and "node 1 holds from-1 " in out, out
    assert "node 0 has the script" in out and "node 1 has the script" in out
    assert "both bound" in out  # at once: each held port 8888 for three seconds
    assert "one copy on each of the job's 2 node(s)" in out


def test_off_where_asked(monkeypatch):
    monkeypatch.setenv("CLUSTERKIT_NODE_NETWORK", "0")
    assert not node_network.wanted(2)
    monkeypatch.delenv("CLUSTERKIT_NODE_NETWORK")
    assert node_network.wanted(2) and not node_network.wanted(1)
