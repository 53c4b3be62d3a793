"""Read the body of a job script as its shell would run it, and judge each command.

The body is read, not run: variables it sets are followed (``export``, ``X=...``), and each
command goes to the judge registered for its name (:mod:`clusterkit.emulate.registry`), after
the paths it names are held to the job's request (:mod:`clusterkit.emulate.storage`):
``srun``/``jsrun`` judge a step against the allocation and hand the program they start back
here, with where it runs (:class:`Placement`); wrappers (``singularity exec``, ``ddlrun``) do
the same; ``module`` is judged against the inventory; Python programs against their own
command-line contract. A launcher the profile marks historical is said to be so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterkit.emulate import registry, storage
from clusterkit.emulate.launch_env import NodeSet
from clusterkit.emulate.report import Report
from clusterkit.emulate.script import JobScript, expand
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import Partition, Site

SCHEDULERS = {"slurm": "Slurm", "lsf": "LSF"}


@dataclass(frozen=True)
class Placement:
    """Where a launcher starts a command: its ranks on each node, the GPUs each sees, and the
    partition (for a heterogeneous job's component) when it is not the job's first."""

    launcher: str
    ranks_per_node: int
    gpus: int
    partition: Partition | None = None
    # GPUs per node the step asks for itself (srun --gpus-per-task, ...; None: none named). In a
    # job that holds whole nodes without naming GPUs, these are the GPUs the step gets.
    gpus_asked: int | None = None
    nodes: int | None = None  # the nodes it starts the command on (None: not known)


@dataclass
class Context:
    """What the judges of a script's commands need to know about the job."""

    site: Site
    report: Report
    allocation: list[Any]  # the scheduler's own view (Slurm: a Shape per component)
    nodes: list[NodeSet]  # per component
    partition: Partition  # of the first component: its node type
    gpus_per_node: int  # the job holds, on each node of the first component
    env: dict[str, str] = field(default_factory=dict)
    launch_node: str | None = None  # where the batch script runs when it is no compute node
    step_id: int = 0  # of the next step
    # node features the job asked for (-C/--constraint); None: not known (a command on its own)
    features: frozenset[str] | None = None
    told: set[str] = field(default_factory=set)  # once-per-script findings already given
    # the variables the scheduler sets that this job may lack (Slurm: SLURM_CPUS_PER_TASK
    # without --cpus-per-task): arithmetic on one that env does not hold computes with 0
    conditional: frozenset[str] = frozenset()
    said: set[str] = field(default_factory=set)  # of those, the ones already reported

    @property
    def path(self) -> Path:
        return self.report.path

    def add(self, line: int, rule: str, message: str, level: str = "error") -> None:
        self.report.findings.append(Finding(self.path, line, rule, message, level))

    def extend(self, findings: list[Finding]) -> None:
        self.report.findings.extend(findings)

    def expanded(self, words: list[str]) -> list[str]:
        return [expand(w, self.env) for w in words]

    def judge(self, line: int, words: list[str], placement: Placement | None = None) -> None:
        """Judge a command found at ``line`` (started by a launcher when ``placement``)."""
        judge_command(self, line, words, placement)


def walk(script: JobScript, ctx: Context) -> None:
    """Every command of the body, in order, with the variables set before it."""
    for cmd in script.commands:
        unset_in_arithmetic(ctx, cmd.line, [*cmd.assignments, *cmd.words])
        retired_paths(ctx, cmd.line, [*cmd.assignments, *cmd.words])
        for a in cmd.assignments:
            name, _, value = a.partition("=")
            ctx.env[name] = expand(value, ctx.env)
        if not cmd.words:
            continue
        if Path(cmd.name).name == "export":
            for w in cmd.words[1:]:
                if "=" in w:
                    name, _, value = w.partition("=")
                    ctx.env[name] = expand(value, ctx.env)
            continue
        ctx.judge(cmd.line, list(cmd.words))


_ARITH = re.compile(r"\$\(\((.*?)\)\)")


def unset_in_arithmetic(ctx: Context, line: int, words: list[str]) -> None:
    """``$(($SLURM_CPUS_PER_TASK - 1))`` in a job that sets no --cpus-per-task: bash computes
    with an empty value (0), and the program gets -1."""
    for word in words:
        for m in _ARITH.finditer(word):
            names = set(re.findall(r"[A-Za-z_]\w*", m[1]))
            for name in sorted(names & ctx.conditional - set(ctx.env) - ctx.said):
                ctx.add(
                    line,
                    "unset-variable",
                    f"{name} is not set in this job (it asks for nothing that sets it): "
                    f"$(({m[1]})) computes with 0 in its place",
                )
                ctx.said.add(name)


_ABSOLUTE = re.compile(r"(?:^|[=:\s])(/[^\s:;'\"]+)")


def retired_paths(ctx: Context, line: int, words: list[str]) -> None:
    """A path on a file system the site has taken out of service: the job fails there."""
    for word in ctx.expanded(words):
        for m in _ABSOLUTE.finditer(word):
            fs = ctx.site.retired_path(m[1])
            if fs is not None:
                ctx.add(
                    line,
                    "path-retired",
                    f"{m[1]} is on {fs['name']}, which {ctx.site.title} took out of service on "
                    f"{fs['retired']}: use {fs['successor']}",
                )
                return


def check_command_line(path: Path | str, line: int, words: list[str], site: Site) -> Report:
    """A command shown on its own (a page snippet), judged in the job the site's scheduler
    gives such snippets (one node of the default partition, ...)."""
    report = Report(Path(path), site.name, plan={"steps": []})
    ctx = registry.snippet_job(site.scheduler)(site, report)
    ctx.judge(line, list(words))
    return report


def judge_command(ctx: Context, line: int, words: list[str], placement: Placement | None) -> None:
    if not words:
        return
    storage.check_places(ctx, line, words)
    name, site = Path(words[0]).name, ctx.site
    launcher = site.launcher(name)
    if launcher and launcher["status"] != "current":
        ctx.add(
            line,
            "launcher-historical",
            f"{name} is {launcher['status']} on {site.title}; use {launcher['replacement']}",
            level="warning" if launcher["status"] == "historical" else "error",
        )
    found = registry.command(name, site)
    if found is None:
        return
    if found.scheduler and found.scheduler != site.scheduler and launcher is None:
        current = [x["name"] for x in site.data["launchers"] if x["status"] == "current"]
        ctx.add(
            line,
            "scheduler-mismatch",
            f"{name} is {SCHEDULERS[found.scheduler]}'s; {site.title} runs "
            f"{SCHEDULERS[site.scheduler]}: start steps with {' or '.join(current)}",
        )
        return
    found.judge(ctx, line, list(words), placement)
