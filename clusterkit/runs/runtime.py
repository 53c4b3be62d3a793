"""What the shims share when they run a job here: the site, the scaled-down shape of the run,
the shell environment (the shims on PATH, a stand-in conda, a real Lmod where installed), and
the running and waiting of processes with the signals forwarded as the real tools forward them.

A job runs scaled down to at most ``CLUSTERKIT_MAX_RANKS`` processes (default 2) on logical
nodes that all resolve to this machine; its allocation travels to the launchers it starts in
``CLUSTERKIT_ALLOC`` (Slurm) or ``CLUSTERKIT_LSF`` (LSF), as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from clusterkit.runs import shimdir
from clusterkit.sites.profiles import ProfileError, Site, load_site, profile_paths

ALLOC_VAR = "CLUSTERKIT_ALLOC"  # the allocation of a Slurm job running here
LSF_VAR = "CLUSTERKIT_LSF"  # the allocation of an LSF job running here
LMOD_INIT = Path("/usr/share/lmod/lmod/init/bash")


def note(tool: str, msg: str) -> None:
    print(f"[{tool} emulator] {msg}", file=sys.stderr, flush=True)


def current_site(tool: str) -> Site:
    name = os.environ.get("CLUSTERKIT_SITE")
    if not name:
        alloc = os.environ.get(ALLOC_VAR)
        name = json.loads(alloc)["site"] if alloc else None
    if not name:
        known = ", ".join(p.stem for p in profile_paths())
        print(
            f"{tool}: error: set CLUSTERKIT_SITE to the site whose rules apply ({known})",
            file=sys.stderr,
        )
        sys.exit(1)
    try:
        return load_site(name)
    except ProfileError as exc:
        print(str(exc), file=sys.stderr)
        sys.exit(1)


def max_ranks() -> int:
    return max(1, int(os.environ.get("CLUSTERKIT_MAX_RANKS", "2")))


def cores_here() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def keeps_threads() -> bool:
    return os.environ.get("CLUSTERKIT_KEEP_THREADS") == "1"


def fit_threads(env: dict[str, str], ranks: int) -> dict[str, str]:
    """``env`` with its thread counts fitted to this machine, for one of ``ranks`` processes
    running here. A scaled-down run keeps the shape of the job but not the cores of its nodes:
    sixteen threads a rank on two cores spend their time waiting for each other. A value of
    ``OMP_NUM_THREADS`` or ``SLURM_CPUS_PER_TASK`` above the cores each rank has here is
    lowered to that share (the job was judged with the values it asked for);
    ``CLUSTERKIT_KEEP_THREADS=1`` keeps the values as asked."""
    if keeps_threads():
        return env
    share = max(1, cores_here() // max(1, ranks))
    for var in ("OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK"):
        value = env.get(var, "")
        if value.isdigit() and int(value) > share:
            env[var] = str(share)
    return env


def run_node_names(count: int) -> list[str]:
    """Logical node names for a local run; every one resolves to this machine."""
    names = ["localhost"] + [f"127.0.0.{i}" for i in range(2, count + 1)]
    return names[:count]


def scaled(nodes: int, tasks_per_node: int) -> tuple[int, int]:
    """(nodes, tasks per node) of the local run: at most max_ranks() processes in all.

    Several ranks per node stay on one logical node (so ranks that pick ports by their local
    index, as TensorFlow's Slurm resolver does, do not collide); jobs of one rank per node keep
    two logical nodes, so that the per-node environment (SLURM_NODEID, ...) is exercised.
    """
    limit = max_ranks()
    if nodes == 1 or tasks_per_node >= limit:
        return 1, max(1, min(tasks_per_node, limit))
    run_nodes = min(nodes, limit)
    return run_nodes, max(1, min(tasks_per_node, limit // run_nodes))


def wait_forwarding(proc: subprocess.Popen) -> int:
    """Wait for the batch shell, forwarding USR1/TERM to it as slurmd forwards --signal=B:."""

    def forward(signum, _frame):
        try:
            os.kill(proc.pid, signum)
        except ProcessLookupError:
            pass

    old = {s: signal.signal(s, forward) for s in (signal.SIGUSR1, signal.SIGTERM)}
    try:
        return proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def shell_env() -> dict[str, str]:
    """PATH with the shims first, a stand-in conda installation, and a real Lmod ``module``
    function where Lmod is installed."""
    shims = shimdir.ensure()
    env = {"PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}"}
    if "CONDA_ROOT" not in os.environ:
        env["CONDA_ROOT"] = str(shimdir.conda_root(shims))
    site = os.environ.get("CLUSTERKIT_SITE") or json.loads(os.environ.get(ALLOC_VAR, "{}")).get(
        "site"
    )
    if LMOD_INIT.is_file() and site and not os.environ.get("CLUSTERKIT_NO_LMOD"):
        from clusterkit.sites import lmod

        env["BASH_ENV"] = str(LMOD_INIT)
        env["MODULEPATH"] = str(lmod.ensure_modulefiles(load_site(site)))
        env["LMOD_SHORT_TIME"] = "86400"
    return env


def run_ranks(command: list[str], envs: list[dict[str, str]], prefixes: list[str]) -> int:
    """Start one process per env; copy their output line by line (so that lines of different
    ranks never interleave), forward USR1/TERM/INT; the largest exit status wins."""
    lock = threading.Lock()
    procs = []
    pumps = []

    def pump(stream, sink, prefix):
        for line in stream:
            with lock:
                sink.write(prefix + line)
                sink.flush()

    for env, prefix in zip(envs, prefixes, strict=True):
        try:
            proc = subprocess.Popen(
                command,
                env=fit_threads(dict(env), len(envs)),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        except OSError as exc:
            print(f"{command[0]}: {exc.strerror}", file=sys.stderr)
            for p in procs:
                p.kill()
            return 127
        procs.append(proc)
        for stream, sink in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
            t = threading.Thread(target=pump, args=(stream, sink, prefix), daemon=True)
            t.start()
            pumps.append(t)

    def forward(signum, _frame):
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)}
    try:
        codes = wait_tasks(procs, command[0])
        for t in pumps:
            t.join(timeout=5)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    failed = [c for c in codes if c]
    return max(failed, key=abs) if failed else 0


def wait_tasks(procs: list[subprocess.Popen], launcher: str, grace: float = 10.0) -> list[int]:
    """Wait for a step's tasks. When one fails, the others are ended (TERM, then KILL after
    ``grace`` seconds), as ``srun --kill-on-bad-exit`` would: a rank whose peer never came
    would otherwise wait for it until the job's time limit."""
    ended_at, ended, first_bad = None, set(), 0
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            # the tasks ended here report the failure that ended them
            return [first_bad if i in ended else c for i, c in enumerate(codes)]
        bad = [i for i, c in enumerate(codes) if c]
        if bad and ended_at is None:
            ended_at, first_bad = time.monotonic(), codes[bad[0]]
            ended = {i for i, c in enumerate(codes) if c is None}
            note(
                Path(launcher).name,
                f"task {bad[0]} exited with status {codes[bad[0]]}: ending the step's other "
                "tasks (a rank left without its peers would wait until the time limit)",
            )
            for p in procs:
                if p.poll() is None:
                    p.terminate()
        elif ended_at is not None and time.monotonic() - ended_at > grace:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.1)
