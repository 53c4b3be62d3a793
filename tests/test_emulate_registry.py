"""Judges register by name and the core looks them up: whole scripts by the site's scheduler,
commands by their name, a command shown on its own in the job its site's scheduler gives it."""

from __future__ import annotations

from clusterkit.emulate import registry
from clusterkit.emulate.body import check_command_line
from clusterkit.emulate.checkjob import check_job_file
from clusterkit.sites.profiles import load_site

BEDE, SUMMIT = load_site("bede"), load_site("summit")
GPUS = BEDE.default_partition.node_type.gpus


def test_every_scheduler_of_the_profiles_has_a_judge(tmp_path):
    for site in (BEDE, SUMMIT):
        assert callable(registry.scheduler(site.scheduler))
    path = tmp_path / "job.sh"
    path.write_text("#!/bin/bash\n#BSUB -P ABC123\n#BSUB -W 10\n#BSUB -nnodes 1\njsrun -n1 x\n")
    assert check_job_file(path, SUMMIT).plan["steps"][0]["launcher"] == "jsrun"


def test_a_command_line_on_its_own_is_judged_by_its_launchers_judge():
    line = ["torchrun", f"--nproc_per_node={GPUS + 1}", "train.py"]
    report = check_command_line("page.md", 7, line, BEDE)
    assert [(f.line, f.rule) for f in report.errors] == [(7, "nproc-per-gpu")]
    inner = check_command_line("page.md", 7, ["srun", "-n", "1", *line], BEDE)
    assert [f.rule for f in inner.errors] == ["nproc-per-gpu"]
    assert inner.plan["steps"][0]["launcher"] == "srun"


def test_a_launcher_of_another_scheduler_is_refused_by_name():
    report = check_command_line("page.md", 2, ["srun", "hostname"], SUMMIT)
    [f] = report.errors
    assert f.rule == "scheduler-mismatch"
    assert f.message == "srun is Slurm's; Summit runs LSF: start steps with jsrun"
    assert registry.command("python3.11").name == "python"
    assert registry.command("hostname") is None
