"""What judging a job script gives: findings, and a plan of what the job would be.

A plan counts (nodes, tasks, CPUs and GPUs per node, steps) and never lists ranks or node
names, so a whole-machine job is judged as fast as a one-node job. Each step keeps a function
that writes out its first ranks with their environment; :func:`with_ranks` calls them for a
reader who asks (``check-job --plan``, a dry run of the shims).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from clusterkit.emulate.script import UnreadableScript
from clusterkit.sites.errors import Finding

PLAN_RANKS_SHOWN = 64  # ranks with their environment that with_ranks writes out per step
PLAN_HOSTS_SHOWN = 64  # nodes a plan's host lists name one by one (LSF's LSB_HOSTS, ...)


@dataclass
class Report:
    path: Path
    site: str
    findings: list[Finding] = field(default_factory=list)
    plan: dict = field(default_factory=dict)
    text: str = ""  # the script, to point a finding at the continuation line that holds it
    # per step of plan["steps"]: the first N ranks of that step with their environment
    rank_makers: list[Callable[[int], list[dict]]] = field(default_factory=list, repr=False)
    unusable: bool = False  # no script could be read at the path: nothing was judged

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level != "error"]


def add_step(report: Report, step: dict, ranks: Callable[[int], list[dict]] | None) -> None:
    """Append a step to the plan, with the function that writes out its first ranks."""
    report.plan.setdefault("steps", []).append(step)
    report.rank_makers.append(ranks or (lambda _limit: []))


def with_ranks(report: Report, limit: int = PLAN_RANKS_SHOWN) -> dict:
    """The plan with each step's first ``limit`` ranks written out, saying how many it holds."""
    plan = copy.deepcopy(report.plan)
    for step, make in zip(plan.get("steps", []), report.rank_makers, strict=False):
        ranks = make(limit)
        step["ranks"] = ranks
        step["ranks_shown"] = len(ranks)
        total = step.get("ntasks", len(ranks))
        if len(ranks) < total:
            step["ranks_note"] = (
                f"{len(ranks)} of {total} ranks written out (the first nodes' ranks; "
                "the rest follow the same layout)"
            )
    return plan


def unreadable(path: Path, site: str, exc: UnreadableScript, tool: str) -> Report:
    """The report on a path that holds no script: one finding, worded as ``tool`` words it."""
    f = exc.finding
    message = f"{tool}: error: {f.message}" if tool == "sbatch" else f"{tool}: {f.message}"
    finding = Finding(f.path, f.line, f.rule, message, f.level)
    return Report(path, site, findings=[finding], unusable=True)


def shift_lines(report: Report, first_line: int) -> Report:
    """Findings of a snippet that starts on line ``first_line`` of a page, in page lines."""
    if first_line != 1:
        report.findings = [
            Finding(f.path, f.line + first_line - 1 if f.line else 0, f.rule, f.message, f.level)
            for f in report.findings
        ]
    return report
