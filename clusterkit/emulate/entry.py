"""Entry points of the shims: ``sbatch``, ``srun``, ``scontrol``, ``torchrun``, ``conda``, ...

Each shim stands in for a tool that cannot run on a machine without the cluster. It parses its
arguments as the real tool does, judges them against the site profile named by
``CLUSTERKIT_SITE``, and then either prints a plan (dry run) or runs the job locally, scaled down
to at most ``CLUSTERKIT_MAX_RANKS`` processes (default 2) on logical nodes that all resolve to
this machine. Every shim says on stderr that it is an emulation.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from clusterkit.emulate import launch_env, slurm, slurm_options
from clusterkit.emulate.jobcheck import check_slurm_script
from clusterkit.emulate.modules import check_module_command
from clusterkit.errors import CheckError, Finding
from clusterkit.profiles import ProfileError, Site, load_site, profile_paths

ALLOC_VAR = "CLUSTERKIT_ALLOC"
LMOD_INIT = Path("/usr/share/lmod/lmod/init/bash")


def note(tool: str, msg: str) -> None:
    print(f"[{tool} emulator] {msg}", file=sys.stderr, flush=True)


def fail(findings: list[Finding], code: int = 1) -> None:
    for f in findings:
        print(str(f), file=sys.stderr)
    sys.exit(code)


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


# --------------------------------------------------------------------------- sbatch
def sbatch(argv: list[str]) -> int:
    site = current_site("sbatch")
    try:
        parsed = slurm_options.parse("sbatch", argv)
    except slurm_options.OptionError as exc:
        print(
            f'sbatch: {slurm._option_message(exc)}\nTry "sbatch --help" for more information',
            file=sys.stderr,
        )
        return 1
    script_path = parsed.get("script")
    if not script_path:
        print(
            "sbatch: error: this emulator needs a script file (reading the script from "
            "standard input is not supported)",
            file=sys.stderr,
        )
        return 1
    path = Path(script_path)
    if not path.is_file():
        print(f"sbatch: error: Unable to open file {script_path}", file=sys.stderr)
        return 1
    opts_argv = argv[: argv.index(script_path)]
    opts_argv = [a for a in opts_argv if a != "--dry-run"]
    report = check_slurm_script(path, site, opts_argv)
    for f in report.findings:
        print(str(f), file=sys.stderr)
    if report.errors:
        return 1
    dry = "dry_run" in parsed or os.environ.get("CLUSTERKIT_MODE") == "dry-run"
    if dry:
        print(json.dumps(report.plan, indent=2))
        return 0
    plan = report.plan
    if "test_only" in parsed:
        print(
            f"sbatch: Job 1000 to start at now using {plan['ntasks'] * plan['cpus_per_task']} "
            f"processors on nodes {launch_env.compress(plan['nodes'])} in partition "
            f"{plan['partition']}",
            file=sys.stderr,
        )
        return 0
    return run_batch(site, path, parsed.get("script_args", []), report)


def allocation_env(site: Site, plan: dict, job_id: int) -> tuple[dict[str, str], int, int]:
    """The environment of a job running here, scaled down: (env, nodes, tasks per node)."""
    run_nodes, run_tpn = scaled(len(plan["nodes"]), plan["tasks_per_node"])
    nodes = run_node_names(run_nodes)
    env = dict(os.environ)
    # a login session always has USER, and the job inherits it; a CI container may not
    env.setdefault("USER", getpass.getuser())
    job_env = launch_env.slurm_job_env(
        job_id=job_id,
        job_name=plan["job_env"]["SLURM_JOB_NAME"],
        nodes=nodes,
        partition=plan["partition"],
        account=plan["account"],
        ntasks=run_nodes * run_tpn,
        tasks_per_node=run_tpn,
        cpus_per_task=plan["cpus_per_task"],
        gpus_per_node=plan["gpus_per_node"],
        cpus_per_node=os.cpu_count() or 1,
        submit_dir=os.getcwd(),
        cluster=site.name,
        cpus_per_task_given="SLURM_CPUS_PER_TASK" in plan["job_env"],
        qos=plan["qos"],
    )
    env.update(job_env)
    env[ALLOC_VAR] = json.dumps(
        {
            "site": site.name,
            "plan": {k: v for k, v in plan.items() if k not in {"job_env", "steps"}},
            "run_nodes": nodes,
            "run_tasks_per_node": run_tpn,
        }
    )
    env.update(shell_env())
    return env, run_nodes, run_tpn


def run_batch(site: Site, path: Path, script_args: list[str], report) -> int:
    plan = report.plan
    job_id = int(os.environ.get("CLUSTERKIT_JOB_ID", "1000"))
    env, run_nodes, run_tpn = allocation_env(site, plan, job_id)
    out_name = _output_name(report, job_id, plan)
    note(
        "sbatch",
        f"site {site.name}: job {job_id} runs here now, scaled down from "
        f"{len(plan['nodes'])} node(s) x {plan['tasks_per_node']} task(s) to {run_nodes} x "
        f"{run_tpn}; output in {out_name}",
    )
    print(f"Submitted batch job {job_id}", flush=True)
    open(out_name, "w").close()
    # append mode: lines that ranks write at the same time do not overwrite each other
    with open(out_name, "a", encoding="utf-8") as out:
        proc = subprocess.Popen(
            ["bash", str(path), *script_args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        code = _wait_forwarding(proc)
    if code:
        note("sbatch", f"job {job_id} exited with status {code}; see {out_name}")
    return code


def _output_name(report, job_id: int, plan: dict) -> str:
    from clusterkit.emulate.script import read_script

    req = slurm.job_request(read_script(report.path), None)
    pattern = req.get("output") or "slurm-%j.out"
    name = plan["job_env"]["SLURM_JOB_NAME"]
    return (
        pattern.replace("%j", str(job_id))
        .replace("%J", str(job_id))
        .replace("%x", name)
        .replace("%u", os.environ.get("USER", "user"))
        .replace("%N", "localhost")
        .replace("%%", "%")
    )


def _wait_forwarding(proc: subprocess.Popen) -> int:
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
    from clusterkit.emulate import shimdir

    shims = shimdir.ensure()
    env = {"PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}"}
    if "CONDA_ROOT" not in os.environ:
        env["CONDA_ROOT"] = str(shimdir.conda_root(shims))
    site = os.environ.get("CLUSTERKIT_SITE") or json.loads(os.environ.get(ALLOC_VAR, "{}")).get(
        "site"
    )
    if LMOD_INIT.is_file() and site and not os.environ.get("CLUSTERKIT_NO_LMOD"):
        from clusterkit import lmod

        env["BASH_ENV"] = str(LMOD_INIT)
        env["MODULEPATH"] = str(lmod.ensure_modulefiles(load_site(site)))
        env["LMOD_SHORT_TIME"] = "86400"
    return env


# --------------------------------------------------------------------------- salloc
def salloc(argv: list[str]) -> int:
    """Judge the request like sbatch, then run the command (default: a shell) in it."""
    site = current_site("salloc")
    try:
        parsed = slurm_options.parse("salloc", argv)
    except slurm_options.OptionError as exc:
        print(f"salloc: {slurm._option_message(exc)}", file=sys.stderr)
        return 1
    command = parsed.get("command") or [os.environ.get("SHELL", "bash")]
    opts = argv[: len(argv) - len(parsed.get("command") or [])]
    report = check_slurm_script(Path("<salloc>"), site, opts, text="#!/bin/bash\n")
    for f in report.findings:
        print(str(f).replace("sbatch:", "salloc:"), file=sys.stderr)
    if report.errors:
        return 1
    job_id = int(os.environ.get("CLUSTERKIT_JOB_ID", "1000"))
    env, run_nodes, run_tpn = allocation_env(site, report.plan, job_id)
    print(f"salloc: Granted job allocation {job_id}", file=sys.stderr, flush=True)
    note("salloc", f"site {site.name}: {run_nodes} local node(s) x {run_tpn} task(s)")
    code = subprocess.call(command, env=env)
    print(f"salloc: Relinquishing job allocation {job_id}", file=sys.stderr)
    return code


# --------------------------------------------------------------------------- srun
def srun(argv: list[str]) -> int:
    site = current_site("srun")
    alloc_text = os.environ.get(ALLOC_VAR)
    if not alloc_text:
        print(
            "srun: error: the emulator runs srun only inside a job started by its sbatch or salloc",
            file=sys.stderr,
        )
        return 1
    alloc = json.loads(alloc_text)
    p = alloc["plan"]
    part = site.partitions[p["partition"]]
    shape = slurm.Shape(
        part,
        len(p["nodes"]),
        p["tasks_per_node"],
        p["ntasks"],
        p["cpus_per_task"],
        p["gpus_per_node"],
        p["time_limit_s"],
        False,
    )
    env = dict(os.environ)
    findings, step = slurm.check_step("<srun>", 0, argv, shape, env)
    for f in findings:
        print(str(f), file=sys.stderr)
    if any(f.level == "error" for f in findings) or step is None:
        return 1
    run_nodes = alloc["run_nodes"][: min(step.nodes, len(alloc["run_nodes"]))]
    _, run_tpn = scaled(len(run_nodes), step.tasks_per_node)
    run_tpn = min(run_tpn, max_ranks())
    ntasks = min(step.ntasks, len(run_nodes) * run_tpn)
    step_id = int(env.get("CLUSTERKIT_NEXT_STEP", "0"))
    note(
        "srun",
        f"step {step_id}: {step.ntasks} task(s) on {step.nodes} node(s) requested, "
        f"{ntasks} started here: {shlex.join(step.command)}",
    )
    parsed, _ = slurm.step_request(argv, env)
    label = "label" in parsed
    procs = []
    for rank, (_node, idx, local) in enumerate(launch_env.layout(run_nodes, ntasks, run_tpn)):
        renv = dict(env)
        renv.update(
            launch_env.srun_rank_env(
                step_id=step_id,
                nodes=run_nodes,
                ntasks=ntasks,
                tasks_per_node=run_tpn,
                rank=rank,
                node_index=idx,
                local_rank=local,
                cpus_per_task=step.cpus_per_task,
                gpus_per_node=p["gpus_per_node"],
            )
        )
        procs.append(_spawn(step.command, renv, f"{rank}: " if label else ""))
    return _wait_all(procs)


def _spawn(command: list[str], env: dict[str, str], prefix: str):
    if not prefix:
        return subprocess.Popen(command, env=env)
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    import threading

    def pump():
        for line in proc.stdout:
            sys.stdout.write(prefix + line)
            sys.stdout.flush()

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    proc._pump = t  # type: ignore[attr-defined]
    return proc


def _wait_all(procs: list[subprocess.Popen]) -> int:
    def forward(signum, _frame):
        for pr in procs:
            if pr.poll() is None:
                pr.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)}
    try:
        codes = [pr.wait() for pr in procs]
        for pr in procs:
            t = getattr(pr, "_pump", None)
            if t:
                t.join(timeout=5)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    bad = [c for c in codes if c]
    if bad:
        print(f"srun: error: {len(bad)} task(s) exited with a non-zero status", file=sys.stderr)
    return max(codes, key=abs) if bad else 0


# --------------------------------------------------------------------------- scontrol
def scontrol(argv: list[str]) -> int:
    import hostlist

    words = [w for w in argv if not w.startswith("-")]
    if len(words) >= 2 and words[0] == "show" and words[1] in {"hostnames", "hostname"}:
        spec = words[2] if len(words) > 2 else os.environ.get("SLURM_JOB_NODELIST", "")
        if not spec:
            print("scontrol: error: host list is empty", file=sys.stderr)
            return 1
        try:
            print("\n".join(hostlist.expand_hostlist(spec)))
        except hostlist.BadHostlist as exc:
            print(f"scontrol: error: invalid hostlist {spec!r}: {exc}", file=sys.stderr)
            return 1
        return 0
    if len(words) >= 2 and words[0] == "show" and words[1] == "hostlist":
        print(hostlist.collect_hostlist(",".join(words[2:]).split(",")))
        return 0
    if words and words[0] == "requeue":
        note(
            "scontrol",
            f"requeue {' '.join(words[1:])}: the job would go back to the queue "
            "and restart from its newest checkpoint",
        )
        return 0
    print(
        f"scontrol: error: the emulator supports 'show hostnames', 'show hostlist' and "
        f"'requeue', not {' '.join(argv)!r}",
        file=sys.stderr,
    )
    return 1


# --------------------------------------------------------------------------- torchrun
def torchrun_shim(argv: list[str]) -> int:
    """Check the launch line, scale the workers down, then run the real torchrun."""
    from clusterkit.emulate import torchrun

    try:
        ns, _script = torchrun.parse(argv)
    except torchrun.TorchrunError as exc:
        print(f"torchrun: error: {exc}", file=sys.stderr)
        return 2
    alloc = json.loads(os.environ.get(ALLOC_VAR, "null") or "null")
    gpus = alloc["plan"]["gpus_per_node"] if alloc else 0
    nproc = torchrun.nproc_per_node(ns, gpus) or 1
    if alloc and gpus and nproc > gpus:
        print(
            f"torchrun: --nproc_per_node={nproc} starts more workers than the {gpus} GPU(s) "
            f"per node the job holds [rule nproc-per-gpu]",
            file=sys.stderr,
        )
        return 1
    nnodes = (
        int(str(ns.nnodes or "1").split(":")[-1])
        if str(ns.nnodes or "1").replace(":", "").isdigit()
        else 1
    )
    run = max(1, min(nproc, max_ranks() // max(1, min(nnodes, max_ranks()))))
    new_argv, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a in {"--nproc-per-node", "--nproc_per_node"} and i + 1 < len(argv):
            new_argv += [a, str(run)]
            skip = True
        elif re.match(r"--nproc[-_]per[-_]node=", a):
            new_argv.append(f"{a.split('=')[0]}={run}")
        else:
            new_argv.append(a)
    if ns.nproc_per_node is None:
        new_argv = [f"--nproc-per-node={run}", *new_argv]
    note("torchrun", f"{nproc} worker(s) per node requested, {run} started here (CPU, gloo)")
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    sys.stderr.flush()
    # exec, so that signals sent to "torchrun" (the job script's trap) reach the real agent
    os.execve(sys.executable, [sys.executable, "-m", "torch.distributed.run", *new_argv], env)
    return 0  # not reached


# --------------------------------------------------------------------------- conda
CONDA_HOOK = r"""
conda() {
    case "${1:-}" in
        activate|deactivate)
            echo "[conda emulator] conda $* (the current Python environment is used)" >&2 ;;
        *) command conda "$@" ;;
    esac
}
"""


def conda(argv: list[str]) -> int:
    if argv[:2] == ["shell.bash", "hook"] or argv[:2] == ["shell.posix", "hook"]:
        print(CONDA_HOOK)
        return 0
    note("conda", f"conda {shlex.join(argv)}: nothing is installed or changed here")
    return 0


# --------------------------------------------------------------------------- nvidia-smi
def nvidia_smi(argv: list[str]) -> int:
    """Lists the allocation's GPUs on NVIDIA nodes; elsewhere behaves as a missing command."""
    alloc = json.loads(os.environ.get(ALLOC_VAR, "null") or "null")
    if not alloc:
        print(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
            file=sys.stderr,
        )
        return 9
    site = load_site(alloc["site"])
    node = site.partitions[alloc["plan"]["partition"]].node_type
    if node.gpu_vendor != "nvidia":
        print("bash: nvidia-smi: command not found", file=sys.stderr)
        return 127
    n = alloc["plan"]["gpus_per_node"]
    note("nvidia-smi", f"{n} emulated {node.gpu_model} GPU(s) of {site.title}")
    for i in range(n):
        print(f"GPU {i}: {node.gpu_model} (UUID: GPU-emulated-{i})")
    return 0


# --------------------------------------------------------------------------- module (fallback)
def module(argv: list[str], tool: str = "module") -> int:
    """Used only where Lmod is not installed: the same verdicts as the generated modulefiles."""
    site = current_site(tool)
    findings = check_module_command("<module>", 0, tool, argv, site)
    for f in findings:
        print(str(f), file=sys.stderr)
    return 1 if any(f.level == "error" for f in findings) else 0


def main(tool: str | None = None) -> None:
    tool = tool or Path(sys.argv[0]).name
    argv = sys.argv[1:]
    handlers = {
        "sbatch": sbatch,
        "salloc": salloc,
        "srun": srun,
        "scontrol": scontrol,
        "torchrun": torchrun_shim,
        "conda": conda,
        "nvidia-smi": nvidia_smi,
        "module": module,
        "ml": lambda a: module(a, "ml"),
    }
    extra = _extra_handlers()
    handlers.update(extra)
    if tool not in handlers:
        print(f"clusterkit: no emulator for {tool!r}", file=sys.stderr)
        sys.exit(2)
    try:
        sys.exit(handlers[tool](argv))
    except CheckError as exc:
        print(str(exc), file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)


def _extra_handlers() -> dict:
    """Emulators that live in their own modules (LSF/JSM, IBM DDL, containers)."""
    import importlib
    import importlib.util

    out = {}
    for modname in EXTRA_MODULES:
        if importlib.util.find_spec(modname) is not None:
            out.update(importlib.import_module(modname).HANDLERS)
    return out


EXTRA_MODULES = ("clusterkit.emulate.lsf", "clusterkit.emulate.containers")
