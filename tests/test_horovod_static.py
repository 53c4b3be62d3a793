"""Horovod examples, checked without Horovod: they compile, and they log in the documented
format (tests/horovod runs them, with the Horovod the tests session builds)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HVD = sorted(ROOT.glob("examples/*/*_hvd.py"))


@pytest.mark.parametrize("path", HVD, ids=lambda p: p.name)
def test_horovod_example_compiles_and_uses_the_log_format(path):
    tree = ast.parse(path.read_text(), str(path))
    imports = {
        n.names[0].name if isinstance(n, ast.Import) else n.module
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
    }
    assert any(m and m.startswith("horovod") for m in imports)
    text = path.read_text()
    for tag in ("[train] rank=", "[summary] ranks=", "[preempted] step="):
        assert tag in text, f"{path.name} does not print {tag}"


def test_there_is_a_horovod_example():
    assert HVD
