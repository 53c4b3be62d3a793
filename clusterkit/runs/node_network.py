"""The nodes of a job run here, each with a network, a host name and node-local storage of
its own.

Every node of a scaled-down job is this machine, so by default its nodes share what real nodes
do not: two TensorFlow workers on two nodes both listen on port 8888 of every address, and two
nodes unpacking their copy of a data set into node-local storage write the same directory.
Where this user may make namespaces (root, as in CI), a batch job of several nodes gives each
node a network, UTS (host name) and mount namespace of its own:

* the nodes are joined by a bridge, in a namespace of its own, on the private network
  ``10.77.0.0/24``: node *i* is ``10.77.0.<i+1>``, and that address is also its host name (so
  that ``hostname -i``, ``socket.gethostbyname(socket.gethostname())`` and the job's node list
  resolve with no name service); nothing else, not this machine's network, is reachable;
* in each node, the job's stand-ins of node-local storage (:mod:`clusterkit.runs.run_storage`)
  are bind mounts of that node's own directory;
* the batch script runs on the first node; the ``srun`` shim starts each task on its node
  (:func:`enter`), and ``sbcast`` writes each node's copy through ``/proc/PID/root``.

A namespace lives as long as a process in it: each node is held by a ``sleep`` that dies with
the ``sbatch`` shim that started it (``PR_SET_PDEATHSIG``), and is ended when the job ends.
``CLUSTERKIT_NODE_NETWORK=0`` turns this off; without the rights or the tools (``unshare``,
``nsenter``, ``ip``) the nodes share this machine as before.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SUBNET = "10.77.0"  # node i is SUBNET.(i+1)
BRIDGE = "cknodes"
_PR_SET_PDEATHSIG = 1
_TOOLS = ("unshare", "nsenter", "ip", "mount")


# what start() does, once, in throw-away namespaces: a root without CAP_NET_ADMIN or
# CAP_SYS_ADMIN (a container's, say) fails here
_PROBE = (
    "ip link add ck0 type veth peer name ck1 && ip link add ckbr type bridge && "
    "hostname ck-probe && mount --bind /tmp /tmp"
)


@functools.cache
def available() -> bool:
    """Whether this user may give each node of a job namespaces of its own here."""
    if os.geteuid() != 0 or not all(shutil.which(t) for t in _TOOLS):
        return False
    spaces = ["--net", "--uts", "--mount", "--propagation", "private"]
    try:
        probe = subprocess.run(
            ["unshare", *spaces, "sh", "-c", _PROBE], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def wanted(nodes: int) -> bool:
    """Whether a job of ``nodes`` run nodes gets node namespaces here."""
    if nodes < 2 or os.environ.get("CLUSTERKIT_NODE_NETWORK") == "0":
        return False
    return available()


def addresses(count: int) -> list[str]:
    """The node names (and addresses) of a job of ``count`` nodes."""
    return [f"{SUBNET}.{i + 1}" for i in range(count)]


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _holder(*spaces: str) -> subprocess.Popen:
    """A process in new namespaces (``--net``, ...) that keeps them until it is killed. It
    returns once the namespaces exist: until then its PID names this process's own."""
    proc = subprocess.Popen(
        ["unshare", *spaces, "sh", "-c", "echo ready && exec sleep infinity"],
        preexec_fn=_die_with_parent,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    kinds = [s.removeprefix("--") for s in spaces if s in {"--net", "--uts", "--mount"}]
    ready = proc.stdout.readline().strip() == "ready"
    proc.stdout.close()
    # never configure this machine's own network or mounts by mistake
    if not ready or any(_space(proc.pid, k) == _space(os.getpid(), k) for k in kinds):
        proc.kill()
        proc.wait()
        raise OSError(f"unshare {' '.join(spaces)}: no namespaces of its own")
    return proc


def _space(pid: int, kind: str) -> str:
    name = {"mount": "mnt"}.get(kind, kind)
    return os.readlink(f"/proc/{pid}/ns/{name}")


def _in(pid: int, *command: str, spaces: tuple[str, ...] = ("--net",)) -> None:
    subprocess.run(
        ["nsenter", f"--target={pid}", *spaces, *command],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )


@dataclass
class Nodes:
    """The namespaces of a running job's nodes: ``pids[i]`` holds node *i*'s."""

    names: list[str]
    pids: list[int]
    holders: list[subprocess.Popen] = field(default_factory=list)

    def stop(self) -> None:
        for proc in self.holders:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def start(count: int, node_local: list[Path], scratch: Path) -> Nodes:
    """Make ``count`` nodes joined by a bridge, each with its own copy of the ``node_local``
    stand-in directories (under ``scratch/nodes/<i>/``); OSError or CalledProcessError if the
    kernel or the rights do not allow it (whatever was made is ended)."""
    names = addresses(count)
    fabric = _holder("--net")
    holders = [fabric]
    try:
        _in(fabric.pid, "ip", "link", "add", BRIDGE, "type", "bridge")
        _in(fabric.pid, "ip", "link", "set", BRIDGE, "up")
        for i, name in enumerate(names):
            node = _holder("--net", "--uts", "--mount", "--propagation", "private")
            holders.append(node)
            port = f"n{i}"
            veth = ("eth0", "type", "veth", "peer", "name", port, "netns", str(fabric.pid))
            _in(node.pid, "ip", "link", "add", *veth)
            _in(fabric.pid, "ip", "link", "set", port, "master", BRIDGE)
            _in(fabric.pid, "ip", "link", "set", port, "up")
            _in(node.pid, "ip", "addr", "add", f"{name}/24", "dev", "eth0")
            _in(node.pid, "ip", "link", "set", "eth0", "up")
            _in(node.pid, "ip", "link", "set", "lo", "up")
            _in(node.pid, "hostname", name, spaces=("--uts",))
            for place in node_local:
                own = scratch / "nodes" / str(i) / place.name
                shutil.copytree(place, own, dirs_exist_ok=True)  # the same empty tree
                _in(node.pid, "mount", "--bind", str(own), str(place), spaces=("--mount",))
    except (OSError, subprocess.SubprocessError):
        Nodes(names, [], holders).stop()
        raise
    return Nodes(names, [h.pid for h in holders[1:]], holders)


def enter(pid: int, command: list[str], cwd: str | None = None) -> list[str]:
    """``command`` run on the node whose namespaces ``pid`` holds, in ``cwd`` (entering a mount
    namespace moves a process to its root otherwise). nsenter execs the command in its place,
    so the process started keeps its PID and receives the signals sent to it."""
    wd = cwd or os.getcwd()
    spaces = ["--net", "--uts", "--mount"]
    return ["nsenter", f"--target={pid}", *spaces, f"--wd={wd}", "--", *command]


def on_node(pid: int, path: Path) -> Path:
    """``path`` as node ``pid`` sees it (its own node-local storage), from outside the node."""
    return Path(f"/proc/{pid}/root") / path.relative_to("/")
