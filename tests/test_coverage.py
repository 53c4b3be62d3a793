"""The coverage check finds every block, including ones no test collected."""

from __future__ import annotations

import json

from clusterkit import coverage


def test_blocks_are_found_inside_tabs_and_directives(tmp_path):
    text = (
        "# P\n\n````{tab} Bede\n```bash\nsbatch x\n```\n````\n\n"
        "```{literalinclude} ../x.py\n```\n\n```text\nout\n```\n\n"
        "````markdown\n```python\nnot a block\n```\n````\n"
    )
    blocks = coverage.blocks_of(tmp_path / "p.md", text)
    assert [(b.line, b.kind) for b in blocks] == [
        (4, "bash"),
        (9, "literalinclude"),
        (12, "text"),
        (16, "markdown"),
    ]


def test_untested_and_empty_results_are_problems(tmp_path):
    page = tmp_path / "p.md"
    blocks = coverage.blocks_of(page, "```bash\nsbatch x\n```\n\n```python\n1\n```\n")
    records = [
        {"page": str(page), "line": 2, "kind": "shell", "how": "command-checked", "detail": ""}
    ]
    found = coverage.problems(coverage.match(blocks, records))
    assert any("[block-ran-nothing]" in p for p in found)
    assert any("[block-untested]" in p and ":5:" in p for p in found)
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in records))
    assert coverage.read_log(log) == records
