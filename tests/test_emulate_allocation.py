"""``srun`` typed at a login node: a shell of its own (judged as the allocation it makes) or a
step that joins the reader's running job (its options and job id)."""

from __future__ import annotations

import pytest

from clusterkit.commands.shell import check_shell_text
from clusterkit.emulate.allocation import outside_job
from clusterkit.sites.profiles import load_site


def _found(text: str, site: str) -> list[tuple[int, str, str]]:
    _how, findings, _detail = check_shell_text(text + "\n", "page.md", 9, load_site(site))
    return [(f.line, f.rule, f.level) for f in findings]


@pytest.mark.parametrize(
    ("words", "how"),
    [
        ("srun --account=bdXXXYY --partition=test --pty bash", "allocates"),
        ("srun --pty bash", None),  # inside salloc's allocation
        ("srun --overlap --jobid=123456 --pty bash", "joins"),
        ("srun -n 2 python train.py", None),
    ],
)
def test_which_srun_lines_are_outside_a_job(words, how):
    assert outside_job(words.split()) == how


@pytest.mark.parametrize(
    ("line", "site"),
    [
        ("srun --account=bdXXXYY --partition=test --gres=gpu:1 --time=00:30:00 --pty bash", "bede"),
        ("srun --overlap --jobid=123456 nvidia-smi", "bede"),
        ("srun --overlap --jobid=123456 --pty bash", "bede"),
        ("srun --overlap --jobid=123456 rocm-smi", "archer2"),
    ],
)
def test_the_interactive_page_lines_pass(line, site):
    assert _found(line, site) == []


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        ("srun --account=bdXXXYY --partition=tset --time=00:30:00 --pty bash", "partition-exists"),
        ("srun --account=bdXXXYY --partition=test --time=01:30:00 --pty bash", "time-limit"),
        ("srun --partition=test --gres=gpu:1 --time=00:30:00 --pty bash", "account-required"),
        ("srun --account=bdXXXYY --partition=test --gres=gpu:5 --pty bash", "gpus-per-node"),
        ("srun --overlap --jobid=abc --pty bash", "srun-jobid"),
        ("srun --overlapp --jobid=123456 nvidia-smi", "srun-option"),
    ],
)
def test_a_wrong_option_fails_at_the_page_line(line, rule):
    assert (9, rule, "error") in _found(line, "bede")


def test_joining_without_overlap_is_a_warning():
    assert _found("srun --jobid=123456 nvidia-smi", "bede") == [(9, "attach-overlap", "warning")]
