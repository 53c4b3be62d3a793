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


@pytest.mark.parametrize(
    "line",
    [
        "sacct -j 123456 --format=JobID,JobName,Elapsed,AllocCPUS,TotalCPU,MaxRSS,State",
        "sacct -j 123456.batch,123457_2 -o jobid%20,maxrss",  # a prefix, any case, a width
        "sacct -j $SLURM_JOB_ID --format=ALL",
        "seff 123456",
        "seff -d <jobid>",
    ],
)
def test_accounting_commands_users_run_pass(line):
    assert slurm_query.check("p.md", 3, line.split()) == []


@pytest.mark.parametrize(
    "line,said",
    [
        ("sacct -j 123456 --format=JobID,MaxMemory", 'Invalid field requested: "MaxMemory"'),
        ("sacct --format=ReqGRES", "ReqGRES has been removed, please use ReqTRES"),
        ("sacct -j 12a", "invalid job id '12a'"),
        ("seff", "takes exactly one job id; given 0"),
        ("seff 1 2", "takes exactly one job id; given 2"),
        ("seff -x 1", "unknown option: x"),
        ("seff --verbose 1", "unknown option: -"),
        ("seff job1", "invalid job id 'job1'"),
    ],
)
def test_accounting_mistakes_name_line_and_rule(line, said):
    (finding,) = slurm_query.check("p.md", 3, line.split())
    assert (finding.line, finding.rule) == (3, "query-option")
    assert said in finding.message
