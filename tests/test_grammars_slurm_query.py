"""squeue, sacct and scontrol command lines against their grammars (Slurm's manual pages)."""

from __future__ import annotations

import pytest

from clusterkit.grammars import slurm_query


@pytest.mark.parametrize(
    "line",
    [
        "squeue --me",
        "squeue -u alice -t PENDING,RUNNING -o %i",
        "squeue --partition=gpu --long",
        "sacct -j 1234 --format=JobID,Elapsed,State -X",
        "sacct --starttime 2024-01-01 -P",
        "scontrol show hostnames gpu[001-002]",
        "scontrol show job 1234",
        "scontrol requeue 1234",
    ],
)
def test_commands_users_run_pass(line):
    assert slurm_query.check("p.md", 3, line.split()) == []


@pytest.mark.parametrize(
    "line,said",
    [
        ("squeue --mine", "unrecognized arguments"),
        ("squeue -u", "expected one argument"),
        ("sacct --jobid 12", "unrecognized arguments"),
        ("scontrol show hostname gpu001", "invalid entity"),
        ("scontrol cancel 12", "invalid keyword"),
    ],
)
def test_mistakes_name_line_and_rule(line, said):
    (finding,) = slurm_query.check("p.md", 3, line.split())
    assert (finding.line, finding.rule) == (3, "query-option")
    assert said in finding.message
