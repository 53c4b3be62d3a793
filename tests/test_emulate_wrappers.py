"""Bede's ghlogin, ghbatch and ghrun: stand-ins registered by name that take the options of the
Slurm client they wrap and judge the job on the Grace-Hopper partitions."""

from __future__ import annotations

import pytest

from clusterkit.commands.shell import check_shell_text
from clusterkit.emulate import registry
from clusterkit.emulate.allocation import job_options
from clusterkit.emulate.wrappers import wrapper_names
from clusterkit.sites.profiles import check_consistency, load_site


@pytest.fixture(scope="module")
def bede():
    return load_site("bede")


def _rules(text: str, site) -> list[tuple[str, int, str]]:
    _how, findings, _detail = check_shell_text(text + "\n", "page.md", 7, site)
    return [(str(f.path), f.line, f.rule) for f in findings if f.level == "error"]


def test_the_wrappers_are_judged_by_the_names_the_profile_gives(bede):
    assert wrapper_names() == ["ghbatch", "ghlogin", "ghrun"]
    for name in wrapper_names():
        assert registry.command(name, bede).scheduler == "slurm"
        assert registry.command(name) is None, "a site's own command, on that site only"
        assert registry.command(name, load_site("frontier")) is None


@pytest.mark.parametrize(
    "line",
    [
        "ghlogin -A bdXXXYY",
        "ghlogin -A bdXXXYY --time 4:00:00 -c 8 --mem 24G",
        "ghbatch pytorch-gh200.sbatch",
        "ghbatch --partition=ghtest --time=00:30:00 pytorch-ddp-gh200-multinode.sbatch",
        "ghrun -A bdXXXYY --partition=ghtest --gres=gpu:1 --time=00:10:00 nvidia-smi",
    ],
)
def test_what_bede_documents_passes(bede, line):
    assert _rules(line, bede) == []


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        ("ghlogin -A bdXXXYY --no-such-option", "wrapper-option"),
        ("ghlogin -A bdXXXYY nvidia-smi", "wrapper-command"),
        ("ghlogin", "account-required"),
        ("ghlogin -A bdXXXYY --time 9:00:00", "time-limit"),  # ghlogin's partition: 8 hours
        ("ghlogin -A bdXXXYY --partition=gh", "wrapper-partition"),
        ("ghbatch pytorch-ddp-1node.sbatch", "wrapper-partition"),  # a POWER9 job
        ("ghbatch --partition=gpu pytorch-gh200.sbatch", "wrapper-partition"),
        ("ghbatch nosuch.sbatch", "submit-file"),
        ("ghbatch --partition=ghtest --time=00:50:00 pytorch-gh200.sbatch", "time-limit"),
        ("ghrun -A bdXXXYY --gres=gpu:1 --time=00:10:00 nvidia-smi", "wrapper-partition"),
        ("ghrun -A bdXXXYY --partition=ghtest --gres=gpu:2 nvidia-smi", "gpus-per-node"),
        ("ghrun -A bdXXXYY --partition=ghtest --pty", "step-command"),
        ("ghrun -A bdXXXYY --partitoin=ghtest hostname", "wrapper-option"),
    ],
)
def test_a_wrong_option_fails_at_the_page_line(bede, line, rule):
    assert ("page.md", 7, rule) in _rules(line, bede)


def test_another_site_has_no_such_command():
    archer2 = load_site("archer2")
    assert [r for _p, _l, r in _rules("ghbatch pytorch-gh200.sbatch", archer2)] == [
        "block-untested"
    ]


def test_only_the_allocation_options_of_srun_reach_the_job():
    argv = ["-A", "x", "--pty", "--overlap", "-c", "8", "--exclusive", "--cpu-bind=cores", "sh"]
    assert job_options(argv) == ["--account=x", "--cpus-per-task=8", "--exclusive"]


def test_a_wrapper_must_serve_partitions_the_site_has(bede):
    data = dict(bede.data)
    data["tools"] = {"ghrun": {**bede.data["tools"]["ghrun"], "partitions": ["gh", "nosuch"]}}
    found = check_consistency(bede.path, data)
    assert [f.rule for f in found] == ["tool-partition"]
