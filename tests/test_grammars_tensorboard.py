"""tensorboard command lines read by TensorBoard's own parser."""

from __future__ import annotations

import pytest

from clusterkit.commands.shell import check_shell_text

pytest.importorskip("tensorboard", reason="tensorboard is installed by requirements/ml.txt")


def test_the_pages_tensorboard_command_parses_and_a_misspelt_flag_fails():
    how, found, detail = check_shell_text(
        "tensorboard --logdir runs --port 6006\n", "p.md", 5, None
    )
    assert (how, found, detail) == ("command-checked", [], "tensorboard")
    _how, found, _ = check_shell_text("tensorboard --logdir runs --prot 6006\n", "p.md", 5, None)
    assert [(f.line, f.rule) for f in found] == [(5, "tensorboard-option")]
    assert "6006" in found[0].message
