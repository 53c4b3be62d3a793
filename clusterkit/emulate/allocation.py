"""``srun`` typed at a login node, and the site commands that wrap a Slurm client: each makes an
allocation of its own, or joins a running job.

* an ``srun`` that names ``--partition`` or ``--account`` is typed outside a job (inside one,
  the job has both already; a bare ``srun --pty bash`` is a step of the allocation salloc
  made): it makes an allocation, as salloc would, and runs its command there as the one step;
  the options sbatch also takes shape the job, and the whole line is judged as that job's
  step ``srun OPTIONS COMMAND``;
* ``srun --jobid=ID ...`` joins the reader's running job: its options go through srun's grammar,
  the id is the reader's own (a number, a variable or a ``<...>`` placeholder), and without
  ``--overlap`` the new step waits for the CPUs the training step holds (srun(1), Slurm 20.11
  and later), which is worth a warning.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from clusterkit.emulate import registry, slurm_options
from clusterkit.emulate.report import Report
from clusterkit.grammars.slurm_query import JOB_ID
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import Site

JOB_SHAPING = ("partition", "account")


def job_options(srun_argv: list[str]) -> list[str]:
    """The options of an ``srun`` command line that sbatch takes too: those that shape the
    allocation srun makes when it runs outside a job."""
    parsed = slurm_options.parse("srun", srun_argv)
    batch = {spec.dest: spec for spec in slurm_options.specs("sbatch")}
    out = []
    for dest, values in parsed.items():
        if dest == "exclusive":
            out += ["--exclusive" if v == "node" else f"--exclusive={v}" for v in values]
        elif dest in batch and batch[dest].takes_value:
            out += [f"{batch[dest].long}={v}" for v in values]
        elif dest in batch:
            out.append(batch[dest].long)
    return out


def session(path: Path | str, line: int, srun_argv: list[str], site: Site) -> Report:
    """The job ``srun OPTIONS COMMAND`` makes outside a job, with that line as its one step;
    every finding at ``line``."""
    step = f"#!/bin/bash\nsrun {shlex.join(srun_argv)}\n"
    report = registry.scheduler("slurm")(path, site, job_options(srun_argv), text=step)
    report.findings = [Finding(path, line, f.rule, f.message, f.level) for f in report.findings]
    return report


def outside_job(words: list[str]) -> str | None:
    """``"joins"`` for an ``srun`` that joins a running job (``--jobid``), ``"allocates"`` for
    one that makes an allocation of its own, None for a step of the job it runs in (or a line
    srun's grammar refuses, which the step's judge reports)."""
    try:
        parsed = slurm_options.parse("srun", list(words[1:]))
    except slurm_options.OptionError:
        return None
    if "jobid" in parsed:
        return "joins"
    return "allocates" if any(k in parsed for k in JOB_SHAPING) else None


def joined_job(path: Path | str, line: int, words: list[str]) -> list[Finding]:
    """What can be judged of a step that joins the reader's running job."""
    parsed = slurm_options.parse("srun", list(words[1:]))
    out = []
    for given in parsed["jobid"]:
        if not JOB_ID.match(str(given)):
            msg = f"srun: error: Invalid job id specified: {given}"
            out.append(Finding(path, line, "srun-jobid", msg))
    if "overlap" not in parsed:
        msg = (
            "srun --jobid without --overlap waits until the job's running step gives up its "
            "CPUs: add --overlap to look at a job while it trains"
        )
        out.append(Finding(path, line, "attach-overlap", msg, "warning"))
    return out
