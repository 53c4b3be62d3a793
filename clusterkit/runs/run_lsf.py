"""The LSF shims: ``bsub`` and ``jsrun`` on a machine without Summit.

``bsub`` judges the script (:mod:`clusterkit.emulate.lsf`); a dry run (``--dry-run`` or
``CLUSTERKIT_MODE=dry-run``) prints the plan as JSON; otherwise the job runs here, scaled down
to ``CLUSTERKIT_MAX_RANKS`` processes, its batch script on the "launch node" with LSF's
``LSB_*`` variables, each ``jsrun`` judging its step (:mod:`clusterkit.emulate.jsrun`) and
starting its ranks locally with the environment JSM gives each.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from clusterkit.emulate.bsub import NOT_SUBMITTED, LsfShape
from clusterkit.emulate.jsrun import layout, parse_step, rank_env
from clusterkit.emulate.lsf import LAUNCH_NODE, check_lsf_script, job_env
from clusterkit.emulate.lsf_options import BSUB_USAGE, LsfOptionError, parse_bsub
from clusterkit.emulate.report import with_ranks
from clusterkit.runs.runtime import (
    LSF_VAR,
    current_site,
    max_ranks,
    note,
    run_node_names,
    run_ranks,
    scaled,
    shell_env,
    wait_forwarding,
)
from clusterkit.sites.profiles import Site


def _stdin_script() -> Path | None:
    if sys.stdin is None or sys.stdin.isatty():
        return None
    text = sys.stdin.read()
    if not text.strip():
        return None
    fd, name = tempfile.mkstemp(prefix="bsub-stdin-", suffix=".lsf")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return Path(name)


def _is_script(word: str) -> bool:
    p = Path(word)
    if not p.is_file():
        return False
    try:
        head = p.read_bytes()[:4096]
    except OSError:
        return False
    return b"\0" not in head


def bsub(argv: list[str]) -> int:
    site = current_site("bsub")
    dry = "--dry-run" in argv or os.environ.get("CLUSTERKIT_MODE") == "dry-run"
    argv = [a for a in argv if a != "--dry-run"]
    try:
        args = parse_bsub(argv)
    except LsfOptionError as exc:
        print(f"{exc}\n{BSUB_USAGE}", file=sys.stderr)
        return 255
    command = args.command
    opts = argv[: len(argv) - len(command)]
    script: Path | None = None
    if len(command) == 1 and _is_script(command[0]):
        script = Path(command[0])
    elif not command:
        script = _stdin_script()
        if script is None:
            print(
                "bsub: the emulator needs a job script (bsub script.lsf or bsub < script.lsf) "
                "or a command",
                file=sys.stderr,
            )
            return 255
        try:  # the spooled copy of the script goes once the job has run, as LSF's does
            return _submit(site, script, opts, command, dry)
        finally:
            script.unlink(missing_ok=True)
    return _submit(site, script, opts, command, dry)


def _submit(site: Site, script: Path | None, opts: list[str], command: list[str], dry: bool) -> int:
    """Judge the job, then print its plan (dry run) or run it here."""
    if script is not None:
        report = check_lsf_script(script, site, opts)
    else:
        text = "#!/bin/bash\n" + shlex.join(command) + "\n"
        report = check_lsf_script(Path("<command line>"), site, opts, text=text)
    for f in report.findings:
        print(f, file=sys.stderr)
    if report.errors:
        print(NOT_SUBMITTED, file=sys.stderr)
        return 255
    plan = report.plan
    if dry:
        print(json.dumps(with_ranks(report), indent=2))
        return 0
    if not site.is_current:
        note("bsub", f"{site.title} is {site.status}: this run only replays how the job ran")
    return run_job(site, plan, script, command)


def run_job(site: Site, plan: dict, script: Path | None, command: list[str]) -> int:
    """Run a checked job here: the batch script (or command) on the "launch node", scaled."""
    job_id = int(os.environ.get("CLUSTERKIT_JOB_ID", "1000"))
    default = "" if plan.get("queue_given") else "default "
    print(f"Job <{job_id}> is submitted to {default}queue <{plan['queue']}>.", flush=True)
    env, run_nodes = _job_environment(site, plan, job_id)
    note(
        "bsub",
        f"site {site.name}: job {job_id} runs here now on {len(run_nodes)} local node(s) "
        f"(asked for {plan['nodes']}); the batch script runs on the launch node "
        f"{LAUNCH_NODE}",
    )
    argv = ["bash", str(script)] if script else ["bash", "-c", shlex.join(command)]
    if plan["interactive"]:
        print("<<Waiting for dispatch ...>>", file=sys.stderr)
        print(f"<<Starting on {LAUNCH_NODE}>>", file=sys.stderr, flush=True)
        return subprocess.call(argv, env=env)
    return _run_with_output_files(argv, env, plan, job_id)


def _job_environment(site: Site, plan: dict, job_id: int) -> tuple[dict[str, str], list[str]]:
    """LSF's variables for the scaled-down job, its host file, and the allocation for jsrun."""
    run_nodes = run_node_names(min(plan["nodes"], max_ranks()))
    shape = LsfShape(
        plan["queue"],
        len(run_nodes),
        plan["walltime_s"],
        0,
        0,
        smt=plan["smt"],
        slots_per_node=plan["slots_per_node"],
        interactive=plan["interactive"],
        info={"project": plan["project"]},
    )
    hostfile = Path(tempfile.mkdtemp(prefix=f"lsf-{job_id}-")) / "hostfile"
    env = dict(os.environ)
    env.update(job_env(shape, job_id, plan["job_name"], run_nodes, os.getcwd(), str(hostfile)))
    hostfile.write_text("\n".join(env["LSB_HOSTS"].split()) + "\n")
    env[LSF_VAR] = json.dumps(
        {
            "site": site.name,
            "queue": plan["queue"],
            "plan_nodes": plan["nodes"],
            "run_nodes": run_nodes,
            "smt": plan["smt"],
            "walltime_s": plan["walltime_s"],
        }
    )
    env.update(shell_env())
    return env, run_nodes


def _run_with_output_files(argv: list[str], env: dict[str, str], plan: dict, job_id: int) -> int:
    """Run the batch shell with its output where -o/-e (-oo/-eo: overwrite) put it."""
    out_name = _writable(_output_name(plan.get("output"), job_id))
    err_name = _writable(_output_name(plan.get("error"), job_id))
    if not plan.get("output"):
        note("bsub", "no -o: LSF would mail the job's output; it is shown here instead")
    with contextlib.ExitStack() as stack:
        out = err = None
        if out_name:
            mode = "w" if plan.get("output_overwrite") else "a"
            out = stack.enter_context(open(out_name, mode, encoding="utf-8"))
            err = out  # without -e, standard error goes to the -o file
        if err_name and err_name != out_name:
            mode = "w" if plan.get("error_overwrite") else "a"
            err = stack.enter_context(open(err_name, mode, encoding="utf-8"))
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err, start_new_session=True)
        code = wait_forwarding(proc)
    if code:
        see = f"; see {out_name}" if out_name else ""
        note("bsub", f"job {job_id} exited with status {code}{see}")
    return code


def _writable(name: str | None) -> str | None:
    """The output file, or None (with a note) where its directory does not exist here."""
    if name and not Path(name).resolve().parent.is_dir():
        note("bsub", f"{name}: its directory does not exist here; output shown instead")
        return None
    return name


def _output_name(pattern: str | None, job_id: int) -> str | None:
    """An -o/-e file name: %J is the job ID, %I the array index (0 outside arrays)."""
    if not pattern:
        return None
    return pattern.replace("%J", str(job_id)).replace("%I", "0")


def jsrun(argv: list[str]) -> int:
    site = current_site("jsrun")
    alloc = json.loads(os.environ.get(LSF_VAR) or "null")
    if not alloc:
        print(
            "jsrun: error: the emulator runs jsrun only inside a job started by its bsub",
            file=sys.stderr,
        )
        return 1
    node = site.partitions[alloc["queue"]].node_type
    shape = LsfShape(
        alloc["queue"],
        alloc["plan_nodes"],
        alloc.get("walltime_s"),
        node.usable_cores,
        node.gpus,
        smt=alloc.get("smt") or 1,
    )
    env = dict(os.environ)
    findings, step = parse_step("<jsrun>", 0, argv, shape, env)
    for f in findings:
        print(f, file=sys.stderr)
    if step is None or any(f.level == "error" for f in findings):
        return 1
    run_nodes = alloc["run_nodes"]
    used = min(step.nodes_used, len(run_nodes))
    n_nodes, per_node = scaled(used, step.rs_per_host * step.tasks_per_rs)
    tasks = [t for t in layout(step, node_limit=n_nodes) if t["local_rank"] < per_node]
    tasks = tasks[: max_ranks()]
    note(
        "jsrun",
        f"{step.ntasks} task(s) in {step.nrs} resource set(s) requested, {len(tasks)} started "
        f"here: {shlex.join(step.command)}",
    )
    nodes = run_nodes[:n_nodes]
    for new_rank, t in enumerate(tasks):
        t["rank"] = new_rank
    for t in tasks:
        t["local_size"] = sum(1 for u in tasks if u["node_index"] == t["node_index"])
    envs = []
    for t in tasks:
        renv = {k: v for k, v in env.items() if k not in step.unset}
        renv.update(rank_env(step, t, " ".join(nodes), len(tasks), shape.smt, env))
        envs.append(renv)
    prefix = step.stdio_mode == "prepended"
    return run_ranks(step.command, envs, [f"{t['rank']}: " if prefix else "" for t in tasks])


HANDLERS = {"bsub": bsub, "jsrun": jsrun}
