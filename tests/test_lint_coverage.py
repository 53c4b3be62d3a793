"""The code-block coverage report: every block is listed, untested ones and tests that checked
nothing fail, and the generated page builds (tables only)."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from clusterkit.grammars import myst as P
from clusterkit.pages import coverage as COV
from clusterkit.sites.profiles import ROOT

PAGE = textwrap.dedent("""\
    ---
    site: bede
    ---
    # P

    ````{tab} Bede
    ```bash
    sbatch x.sbatch
    ```
    ````

    ```{literalinclude} EXAMPLES/bede/pytorch-ddp-1node.sbatch
    :language: bash
    ```

    % test: skip needs a login node and the network
    ```bash
    conda create -n x
    ```

    ```text
    some output
    ```

    ````markdown
    ```python
    not a block: inside a markdown fence
    ```
    ````
    """)


@pytest.fixture
def docs(tmp_path):
    d = tmp_path / "docs"
    d.mkdir()
    examples = os.path.relpath(ROOT / "examples", d)
    (d / "p.md").write_text(PAGE.replace("EXAMPLES", examples))
    return d


def _rec(page, line, how, detail="x", kind="shell"):
    return {"page": P.rel(page), "line": line, "kind": kind, "how": how, "detail": detail}


def test_every_block_is_found_even_inside_tabs_and_directives(docs):
    blocks = COV.all_blocks(docs)
    assert [(b.line, b.kind) for b in blocks] == [
        (7, "bash"),
        (12, "literalinclude"),
        (17, "bash"),
        (21, "text"),
        (25, "markdown"),
    ]


def test_a_block_without_result_or_reason_fails(docs):
    page = docs / "p.md"
    records = [
        _rec(page, 8, "command-checked", "sbatch"),
        _rec(page, 12, "emulated-job", "examples/bede/pytorch-ddp-1node.sbatch", "include"),
        _rec(page, 17, "skipped", "needs a login node and the network"),
        _rec(page, 25, "skipped", "shows Markdown source"),
    ]
    rows, orphans = COV.match(COV.all_blocks(docs), records)
    found = COV.problems(rows)
    assert len(found) == 1 and "p.md:21: [block-untested]" in found[0]
    assert orphans == []


@pytest.mark.parametrize(
    "how,detail,rule",
    [
        ("command-checked", "", "block-ran-nothing"),
        ("contract-checked", "", "block-ran-nothing"),
        ("output-parsed", "0 record(s)", "block-ran-nothing"),
        ("skipped", "later", "skip-reason"),
        ("looked-at", "x", "block-how-unknown"),
    ],
)
def test_a_test_that_ran_nothing_while_passing_fails(docs, how, detail, rule):
    page = docs / "p.md"
    records = [_rec(page, line, "skipped", "a good reason here") for line in (7, 12, 17, 21, 25)]
    records[0] = _rec(page, 8, how, detail)
    rows, _ = COV.match(COV.all_blocks(docs), records)
    found = COV.problems(rows)
    assert len(found) == 1 and f"p.md:7: [{rule}]" in found[0]


def test_static_routes_predict_the_page_tests(docs):
    rows = COV.static_rows(docs)
    assert [r.hows for r in rows] == [
        ["command-checked"],
        ["emulated-job"],
        ["skipped"],
        [],
        [],
    ]
    found = COV.problems(rows, static=True)
    assert [f.split(": [")[0].rsplit(":", 1)[1] for f in found] == ["21", "25"]


def test_the_cli_writes_a_page_of_tables_and_fails_on_problems(docs, tmp_path, capsys):
    page = docs / "p.md"
    log = tmp_path / "log.jsonl"
    records = [
        _rec(page, 8, "command-checked", "sbatch"),
        _rec(page, 12, "emulated-job", "examples/x|y_{{z}}*", "include"),
        _rec(page, 17, "skipped", "needs a login node and the network"),
    ]
    log.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    out = tmp_path / "cov.md"
    rc = COV.main(["--log", str(log), "--write", str(out), "--docs", str(docs), "--check"])
    assert rc == 1
    text = out.read_text()
    assert "| how tested |" in text and "untested" in text
    assert "x\\|y\\_\\{\\{z\\}\\}\\*" in text  # escaped for MyST tables and substitutions
    assert P.scan_page(out).blocks == []  # the report holds no code blocks itself
    assert "[block-untested]" in capsys.readouterr().err
    assert COV.main(["--log", str(log), "--docs", str(docs)]) == 0  # report only, no --check


def test_records_from_several_runs_are_merged(docs, tmp_path):
    page = docs / "p.md"
    a = [_rec(page, 12, "emulated-job", "examples/bede/x.sbatch", "include")]
    b = [
        {
            "page": "examples/bede/pytorch-ddp-1node.sbatch",
            "line": 0,
            "kind": "include",
            "how": "real-slurm",
            "detail": "sbatch --test-only accepted it",
        }
    ]
    rows, _ = COV.match(COV.all_blocks(docs), a + b)
    row = next(r for r in rows if r.block.line == 12)
    assert row.hows == ["emulated-job", "real-slurm"]


def test_the_site_pages_route_every_block():
    found = COV.problems(COV.static_rows(), static=True)
    assert found == [], "\n".join(found)
