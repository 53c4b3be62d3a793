"""The page-block routing: every block is found, tested by kind, or refused without a reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from clusterkit.pages.pagetest import AnyFenceParser, strip_prompts

ROOT = Path(__file__).resolve().parent.parent


class _Doc:
    def __init__(self, text: str):
        self.text = text
        self.path = "page.md"


def test_fences_inside_directives_are_found():
    text = textwrap.dedent("""\
        ````{tab} Bede
        ```text
        inside
        ```
        ````

        ```yaml
        a: 1
        ```

        ```python
        print(1)
        ```
        """)
    regions = list(AnyFenceParser()(_Doc(text)))
    assert [r.parsed for r in regions] == [("text", "inside\n"), ("yaml", "a: 1\n")]


def test_a_fence_inside_a_code_block_is_text():
    text = "````markdown\n```text\nnot a block\n```\n````\n"
    regions = list(AnyFenceParser()(_Doc(text)))
    assert [r.parsed[0] for r in regions] == ["markdown"]


def test_console_prompts_are_stripped_and_output_dropped():
    src = "$ module load cuda\nLoading cuda\n(env) $ srun -n 2 \\\n    hostname\nnode1\n"
    assert strip_prompts(src) == "module load cuda\n\nsrun -n 2 \\\n    hostname\n\n"


def _run_pages(tmp_path: Path, page: str) -> subprocess.CompletedProcess:
    """Run Sybil over one page in a scratch docs tree, recording block results."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "conftest.py").write_text((ROOT / "docs" / "conftest.py").read_text())
    (docs / "page.md").write_text(page)
    log = tmp_path / "blocks.jsonl"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(docs)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "CLUSTERKIT_COVERAGE_LOG": str(log)},
    )


def _log(tmp_path: Path) -> list[dict]:
    log = tmp_path / "blocks.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_blocks_are_routed_and_recorded(tmp_path):
    page = textwrap.dedent("""\
        ---
        site: bede
        ---
        # Page

        ```python
        assert 1 + 1 == 2
        ```

        ```bash
        module load cuda/0.0-nosuch
        ```

        % test: skip needs a Bede login node and the network
        ```bash
        git clone https://example.org/repo.git
        ```

        ```bash
        ffmpeg -i talk.mp4 talk.webm
        ```

        ```text
        some output nobody parses
        ```

        % test: output trainlog
        ```text
        [summary] ranks=2 steps=6 img_s=43.1 time_s=2.95
        ```
        """)
    r = _run_pages(tmp_path, page)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "[module-known]" in out
    assert "no checker for `ffmpeg`" in out
    assert "[block-untested]" in out and "(text)" not in out
    assert "2 passed" in out and "1 skipped" in out and "3 failed" in out, out
    hows = sorted(rec["how"] for rec in _log(tmp_path))
    assert hows == ["executed", "output-parsed", "skipped"]


def test_a_skip_needs_a_reason(tmp_path):
    page = "% test: skip\n```bash\ngit status\n```\n"
    r = _run_pages(tmp_path, page)
    assert r.returncode == 1
    assert "[block-untested]" in r.stdout or "[skip-reason]" in r.stdout


def test_salloc_lines_are_judged_like_batch_jobs():
    from clusterkit.commands import registry
    from clusterkit.sites.profiles import load_site

    bede = load_site("bede")
    check = registry.command("salloc")
    ok = "salloc --account=bdXXXYY --partition=test --gres=gpu:1 --time=00:30:00".split()
    assert check("p.md", 3, ok, bede) == []
    too_many = "salloc --account=bdXXXYY --partition=test --nodes=3 --time=00:30:00".split()
    found = check("p.md", 3, too_many, bede)
    assert found and all(f.line == 3 for f in found)
    assert [f.rule for f in check("p.md", 3, ["salloc", "--no-such-option"], bede)] == [
        "salloc-option"
    ]


def test_a_run_block_runs_from_the_repository_root(tmp_path):
    page = textwrap.dedent("""\
        % test: run
        ```console
        $ python -m clusterkit profiles
        ```

        % test: run
        ```bash
        python -c "raise SystemExit(3)"
        ```
        """)
    r = _run_pages(tmp_path, page)
    out = r.stdout + r.stderr
    assert "1 passed" in out and "1 failed" in out, out
    assert "page.md:8: [block-run] exited with 3" in out
    (rec,) = _log(tmp_path)
    assert rec["how"] == "executed" and rec["line"] == 3
    assert rec["detail"].startswith("bash from the repository root")


def test_a_block_after_a_closed_tab_group_has_the_page_site_not_the_last_tab():
    from types import SimpleNamespace

    from clusterkit.pages.pagetest import site_for

    text = textwrap.dedent("""\
        ---
        site: bede
        ---
        `````{tabs}
        ````{group-tab} Summit
        ```bash
        jsrun -n 1 hostname
        ```
        ````
        `````

        ```bash
        srun hostname
        ```
        """)
    doc = _Doc(text)

    def example(fence_line: int):
        start = sum(len(ln) + 1 for ln in text.splitlines()[: fence_line - 1])
        return SimpleNamespace(
            path="page.md", document=doc, region=SimpleNamespace(start=start, parsed=None)
        )

    lines = text.splitlines()
    inside = lines.index("```bash") + 1
    after = len(lines) - lines[::-1].index("```bash")
    assert site_for(example(inside)).name == "summit"
    assert site_for(example(after)).name == "bede"
