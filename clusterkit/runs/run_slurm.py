"""The Slurm shims: ``sbatch``, ``salloc``, ``srun`` and ``scontrol`` on a machine without the
cluster.

Each parses its arguments as the real tool does and judges them against the site profile named
by ``CLUSTERKIT_SITE`` (:mod:`clusterkit.emulate.sbatch`, :mod:`clusterkit.emulate.srun`); then
``sbatch --dry-run`` prints the plan, ``--test-only`` says where the job would start, and
otherwise the job runs here, scaled down (:mod:`clusterkit.runs.runtime`), its ``srun``
steps starting their ranks with the environment srun gives each.
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

import hostlist

from clusterkit.emulate import launch_env, slurm, slurm_options
from clusterkit.emulate import srun as srun_judge
from clusterkit.emulate.report import with_ranks
from clusterkit.emulate.sbatch import check_slurm_script
from clusterkit.emulate.script import read_script
from clusterkit.emulate.slurm_request import job_request
from clusterkit.runs import node_network, run_storage
from clusterkit.runs.runtime import (
    ALLOC_VAR,
    cores_here,
    current_site,
    fit_threads,
    keeps_threads,
    max_ranks,
    note,
    run_node_names,
    scaled,
    shell_env,
    wait_forwarding,
    wait_tasks,
)
from clusterkit.sites.profiles import Site


def sbatch(argv: list[str]) -> int:
    site = current_site("sbatch")
    try:
        parsed = slurm_options.parse("sbatch", argv)
    except slurm_options.OptionError as exc:
        message = slurm_options.option_message(exc)
        print(f'sbatch: {message}\nTry "sbatch --help" for more information', file=sys.stderr)
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
        print(json.dumps(with_ranks(report), indent=2))
        return 0
    plan = report.plan
    if "test_only" in parsed:
        print(
            f"sbatch: Job 1000 to start at now using {plan['ntasks'] * plan['cpus_per_task']} "
            f"processors on nodes {plan['nodelist']} in partition "
            f"{plan['partition']}",
            file=sys.stderr,
        )
        return 0
    return run_batch(site, path, parsed.get("script_args", []), report)


def allocation_env(
    site: Site, plan: dict, job_id: int, networked: bool = False
) -> tuple[dict[str, str], int, int]:
    """The environment of a job running here, scaled down: (env, nodes, tasks per node);
    ``networked``: its nodes are named by their addresses in node namespaces of their own
    (:mod:`clusterkit.runs.node_network`)."""
    run_nodes, run_tpn = scaled(plan["nodes"], plan["tasks_per_node"])
    nodes = node_network.addresses(run_nodes) if networked else run_node_names(run_nodes)
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
        ntasks_given="SLURM_NTASKS" in plan["job_env"],
        tasks_per_node_given="SLURM_NTASKS_PER_NODE" in plan["job_env"],
    )
    env.update(job_env)
    fit_threads(env, run_nodes * run_tpn)
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
    networked = node_network.wanted(scaled(plan["nodes"], plan["tasks_per_node"])[0])
    env, run_nodes, run_tpn = allocation_env(site, plan, job_id, networked)
    out_name = _output_name(report, job_id, plan)
    threads = "" if keeps_threads() else f", thread counts fitted to {cores_here()} core(s)"
    note(
        "sbatch",
        f"site {site.name}: job {job_id} runs here now, scaled down from "
        f"{plan['nodes']} node(s) x {plan['tasks_per_node']} task(s) to {run_nodes} x "
        f"{run_tpn}{threads}; output in {out_name}",
    )
    scratch, mapping, stand_ins = run_storage.prepare(site, env, plan.get("account"), job_id)
    for line in stand_ins:
        note("sbatch", f"node-local storage: {line}")
    nodes = None
    try:
        if networked:
            try:
                nodes = _start_nodes(env, scratch, run_nodes)
            except (OSError, subprocess.SubprocessError) as exc:
                detail = str(getattr(exc, "stderr", None) or exc).strip()
                print(
                    f"sbatch: error: the job's nodes could not be made: {detail}", file=sys.stderr
                )
                return 1
        print(f"Submitted batch job {job_id}", flush=True)
        open(out_name, "w").close()
        script = run_storage.mapped_script(path, mapping, scratch)
        command = ["bash", str(script), *script_args]
        if nodes:  # the batch script runs on the job's first node
            command = node_network.enter(nodes.pids[0], command)
        # append mode: lines that ranks write at the same time do not overwrite each other
        with open(out_name, "a", encoding="utf-8") as out:
            proc = subprocess.Popen(
                command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
            code = wait_forwarding(proc)
    finally:
        if nodes:
            nodes.stop()
        run_storage.cleanup(scratch)  # the site empties node-local storage after a job
    if code:
        note("sbatch", f"job {job_id} exited with status {code}; see {out_name}")
    return code


def _start_nodes(env: dict[str, str], scratch: Path, count: int) -> node_network.Nodes:
    """The job's nodes, each in namespaces of its own; their holders go into the allocation."""
    nodes = node_network.start(count, run_storage.node_local_dirs(scratch), scratch)
    alloc = json.loads(env[ALLOC_VAR])
    alloc["node_pids"] = nodes.pids
    env[ALLOC_VAR] = json.dumps(alloc)
    note(
        "sbatch",
        f"nodes {', '.join(nodes.names)}: each with a network, host name and node-local "
        "storage of its own, joined by a bridge",
    )
    return nodes


def _output_name(report, job_id: int, plan: dict) -> str:
    req = job_request(read_script(report.path), None)
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


# --------------------------------------------------------------------------- salloc
def salloc(argv: list[str]) -> int:
    """Judge the request like sbatch, then run the command (default: a shell) in it."""
    site = current_site("salloc")
    try:
        parsed = slurm_options.parse("salloc", argv)
    except slurm_options.OptionError as exc:
        print(f"salloc: {slurm_options.option_message(exc)}", file=sys.stderr)
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
    # the variables of node-local storage; a fixed path (/mnt/bb/...) is mapped in batch jobs only
    scratch, _mapping, _notes = run_storage.prepare(site, env, report.plan.get("account"), job_id)
    try:
        code = subprocess.call(command, env=env)
    finally:
        run_storage.cleanup(scratch)
    print(f"salloc: Relinquishing job allocation {job_id}", file=sys.stderr)
    return code


# --------------------------------------------------------------------------- srun
def _alloc_shapes(site: Site, plan: dict) -> list[slurm.Shape]:
    """The allocation of the job running here, component by component, from its plan."""
    shapes = []
    for c in plan.get("het_components") or [plan]:
        shapes.append(
            slurm.Shape(
                site.partitions[c["partition"]],
                c["nodes"],
                c["tasks_per_node"],
                c["ntasks"],
                c["cpus_per_task"],
                c["gpus_per_node"],
                c["time_limit_s"],
                bool(c.get("exclusive")),
                ntasks_given="SLURM_NTASKS" in os.environ,
                tasks_per_node_given="SLURM_NTASKS_PER_NODE" in os.environ,
            )
        )
    return shapes


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
    env = dict(os.environ)
    shapes = _alloc_shapes(site, alloc["plan"])
    findings, steps = srun_judge.check_steps("<srun>", 0, argv, shapes, env, expanded=True)
    for f in findings:
        print(str(f), file=sys.stderr)
    if any(f.level == "error" for f in findings) or not steps:
        return 1
    parsed, _ = srun_judge.step_request(srun_judge.split_parts(argv)[0], env, expanded=True)
    procs = _start_ranks(steps, alloc, env, label="label" in parsed)
    return _wait_all(procs)


def _start_ranks(steps: list, alloc: dict, env: dict[str, str], label: bool) -> list:
    """Each step's ranks, scaled down; every part of an MPMD line (``srun A : B``) starts at
    least one, and the ranks of all parts share one world."""
    step_id = int(env.get("CLUSTERKIT_NEXT_STEP", "0"))
    limit = max(1, max_ranks() // len(steps))
    runs = [_scaled_step(step, alloc["run_nodes"], limit) for step in steps]
    total = sum(ntasks for _nodes, _tpn, ntasks in runs)
    procs, first = [], 0
    for step, (run_nodes, run_tpn, ntasks) in zip(steps, runs, strict=True):
        note(
            "srun",
            f"step {step_id}: {step.ntasks} task(s) on {step.nodes} node(s) requested, "
            f"{ntasks} started here: {shlex.join(step.command)}",
        )
        for local in range(ntasks):
            renv = dict(env)
            renv.update(
                launch_env.srun_rank_env(
                    step_id=step_id,
                    nodes=run_nodes,
                    ntasks=ntasks,
                    tasks_per_node=run_tpn,
                    rank=local,
                    cpus_per_task=step.cpus_per_task,
                    gpus_per_node=alloc["plan"]["gpus_per_node"],
                )
            )
            if len(steps) > 1:
                renv.update(SLURM_PROCID=str(first + local), SLURM_NTASKS=str(total))
            fit_threads(renv, total)
            command = _on_node(step.command, alloc, int(renv["SLURM_NODEID"]))
            procs.append(_spawn(command, renv, f"{first + local}: " if label else ""))
        first += ntasks
    return procs


def _on_node(command: list[str], alloc: dict, index: int) -> list[str]:
    """``command`` run on node ``index`` of the job: in its namespaces where it has them."""
    pids = alloc.get("node_pids")
    return node_network.enter(pids[index], command) if pids else command


def _scaled_step(step, run_nodes: list[str], limit: int) -> tuple[list[str], int, int]:
    """(nodes, tasks per node, tasks) of a step run here, at most ``limit`` tasks."""
    nodes = run_nodes[: min(step.nodes, len(run_nodes))]
    _, tpn = scaled(len(nodes), step.tasks_per_node)
    tpn = max(1, min(tpn, limit))
    return nodes, tpn, max(1, min(step.ntasks, len(nodes) * tpn, limit))


def _spawn(command: list[str], env: dict[str, str], prefix: str):
    if not prefix:
        return subprocess.Popen(command, env=env)
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )

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
        codes = wait_tasks(procs, "srun")
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


HANDLERS = {"sbatch": sbatch, "salloc": salloc, "srun": srun, "scontrol": scontrol}
