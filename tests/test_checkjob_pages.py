"""``check-job`` on documentation pages: the job scripts in the code blocks of Markdown,
reStructuredText and HTML pages are judged with the page's own line numbers, and every other
block is listed with the reason it was left alone.

The pages are written here, each with the forms a centre's documentation uses: fenced blocks,
MkDocs content tabs, MyST directives (tab sets, ``code-block`` with options), indented and
``::`` literal blocks, sphinx-tabs, a block that is not a job script, and a job script with a
misspelt option whose line the test knows.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from clusterkit.cli import main
from clusterkit.grammars.page_blocks import job_script, page_blocks

MARKDOWN = textwrap.dedent("""\
    # Running jobs

    A whole script:

    ```bash
    #!/bin/bash
    #SBATCH --nodes=1
    #SBATCH --partion=gpu
    srun hostname
    ```

    === "CPU nodes"

        ```bash
        #!/bin/bash
        #SBATCH --time=10
        srun hostname
        ```

    === "GPU nodes"

        !!! note

            ```bash
            #!/bin/bash
            #SBATCH --time=10
            #SBATCH --gpus=-1
            srun hostname
            ```

    `````{tab-set}
    ````{tab-item} Slurm
    ```{code-block} bash
    :linenos:
    :emphasize-lines: 2

    #!/bin/bash
    #SBATCH --time=10
    srun hostname
    #SBATCH --nodes=2
    ```
    ````
    `````

    Submit it:

    ```console
    $ sbatch job.sh
    ```

    Or indented:

        #!/bin/bash
        #SBATCH --ntasks=2
        srun --ntasks=2 hostname

    ```{literalinclude} job.sbatch
    ```
    """)

RST = textwrap.dedent("""\
    Running jobs
    ============

    A whole script::

        #!/bin/bash
        #SBATCH --nodes=1
        #SBATCH --partion=gpu
        srun hostname

    .. tabs::

       .. tab:: CPU nodes

          .. code-block:: bash
             :linenos:

             #!/bin/bash
             #SBATCH --time=10
             srun hostname

       .. code-tab:: bash GPU nodes

          #!/bin/bash
          #SBATCH --time=10
          #SBATCH --gpus=-1
          srun hostname

    .. note::

       Check the queue with:

       .. code-block:: console

          $ squeue --me

    .. literalinclude:: job.sbatch
    """)

HTML = textwrap.dedent("""\
    <html><body>
    <p>A job script:</p>
    <pre><code>#!/bin/bash
    #SBATCH --partion=gpu
    srun hostname
    </code></pre>
    <pre>$ squeue --me</pre>
    </body></html>
    """)


def _check(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(["check-job", "--site", "generic", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return exc.value.code, out, err


@pytest.fixture
def docs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    (tmp_path / "docs" / "jobs.md").write_text(MARKDOWN, encoding="utf-8")
    (tmp_path / "docs" / "sub" / "jobs.rst").write_text(RST, encoding="utf-8")
    (tmp_path / "docs" / "jobs.html").write_text(HTML, encoding="utf-8")
    return tmp_path / "docs"


def test_markdown_blocks_are_found_at_their_page_lines():
    blocks = page_blocks(MARKDOWN, ".md")
    assert blocks[0].page_line(3) == 8 and blocks[0].page_line(0) == 6  # 0: the whole block
    found = [(b.line, b.kind, job_script(b).judged) for b in blocks]
    assert found == [
        (6, "fence", True),  # a fence: its first line of code
        (15, "fence", True),  # in an MkDocs content tab
        (25, "fence", True),  # in an admonition in a tab
        (37, "directive", True),  # {code-block} in a tab set: its options taken off
        (48, "fence", False),  # a command at a prompt
        (53, "indented", True),
        (57, "include", False),
    ]
    assert blocks[1].text == "#!/bin/bash\n#SBATCH --time=10\nsrun hostname"
    assert blocks[3].text.startswith("#!/bin/bash\n#SBATCH --time=10")
    assert MARKDOWN.splitlines()[36] == "#!/bin/bash"


def test_rst_blocks_are_found_at_their_page_lines():
    blocks = page_blocks(RST, ".rst")
    found = [(b.line, b.kind, b.lang, job_script(b).judged) for b in blocks]
    assert found == [
        (6, "literal", "", True),
        (18, "directive", "bash", True),  # .. code-block:: in a sphinx-tabs tab
        (24, "directive", "bash", True),  # .. code-tab::
        (35, "directive", "console", False),
        (37, "include", "", False),
    ]
    assert RST.splitlines()[17].strip() == "#!/bin/bash"
    assert blocks[2].text.endswith("#SBATCH --gpus=-1\nsrun hostname")


def test_findings_name_the_page_and_its_line(capsys, docs):
    code, _out, err = _check(capsys, "docs/jobs.md", "docs/sub/jobs.rst", "docs/jobs.html")
    assert code == 1
    assert "docs/jobs.md:8: error: [sbatch-option]" in err  # --partion on the page's line 8
    assert "docs/sub/jobs.rst:8: error: [sbatch-option]" in err
    assert "docs/jobs.html:4: error: [sbatch-option]" in err
    # --gpus=-1: on its own line, or on the block's first line where the judge names none
    assert any(f"docs/jobs.md:{n}: error: [option-value]" in err for n in (25, 27)), err
    # a finding whose message names another line of the script names the page's line
    ignored = [ln for ln in err.splitlines() if ln.startswith("docs/jobs.md:40:")]
    assert ignored and "(line 39)" in ignored[0], err
    assert "3 pages: 14 code blocks, 9 job scripts judged, 5 skipped" in err


def test_quoted_globs_are_expanded_by_check_job(capsys, docs):
    code, _out, err = _check(capsys, "docs/**/*.md", "docs/**/*.rst")
    assert code == 1 and "docs/jobs.md:8:" in err and "docs/sub/jobs.rst:8:" in err
    assert "2 pages: 12 code blocks" in err


def test_json_lists_every_block_judged_or_skipped_with_its_reason(capsys, docs):
    code, out, err = _check(capsys, "--format", "json", "docs/jobs.md", "docs/sub/jobs.rst")
    record = json.loads(out)
    assert code == record["status"] == 1 and err == ""
    blocks = [(b["file"], b["line"], b["judged"]) for b in record["blocks"]]
    assert blocks == [
        *(("docs/jobs.md", n, j) for n, j in
          [(6, True), (15, True), (25, True), (37, True), (48, False), (53, True), (57, False)]),
        *(("docs/sub/jobs.rst", n, j) for n, j in
          [(6, True), (18, True), (24, True), (35, False), (37, False)]),
    ]  # fmt: skip
    reasons = {(b["file"], b["line"]): b["reason"] for b in record["blocks"]}
    assert reasons[("docs/jobs.md", 6)] == "#SBATCH directives"
    assert reasons[("docs/jobs.md", 48)] == (
        "no #SBATCH/#PBS/#BSUB directive and no scheduler command"
    )
    assert reasons[("docs/sub/jobs.rst", 37)] == (
        "an include of job.sbatch: pass that file to check-job"
    )
    first = record["scripts"][0]
    assert (first["file"], first["line"], first["status"]) == ("docs/jobs.md", 6, 1)
    assert [(f["line"], f["rule"]) for f in first["findings"]] == [(8, "sbatch-option")]
    assert len(record["scripts"]) == sum(b["judged"] for b in record["blocks"]) == 8
    assert [p["file"] for p in record["pages"]] == ["docs/jobs.md", "docs/sub/jobs.rst"]


def test_github_annotations_point_at_the_page_line(capsys, docs):
    code, out, _err = _check(capsys, "--format", "github", "docs/sub/jobs.rst")
    assert code == 1
    assert out.splitlines()[0].startswith(
        "::error file=docs/sub/jobs.rst,line=8,title=check-job [sbatch-option]::"
    )


def test_a_page_without_job_scripts_passes_and_verbose_says_why(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "README.md").write_text(
        "# Tools\n\n```bash\n#!/bin/bash\nmake clean\n```\n\n```\nsrun --pty bash\n```\n"
    )
    code, _out, err = _check(capsys, "-v", "README.md")
    assert code == 0
    assert "README.md:4: skipped: no #SBATCH/#PBS/#BSUB directive and no scheduler command" in err
    assert "README.md:9: skipped: srun typed at a prompt" in err
    assert "1 page: 2 code blocks, 0 job scripts judged, 2 skipped" in err


def test_a_missing_page_is_exit_status_2(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _out, err = _check(capsys, "nosuch.md")
    assert code == 2 and "nosuch.md: error: [script-readable]" in err


@pytest.mark.parametrize(
    "text",
    [
        "```bash\n#!/bin/bash\n#SBATCH -N 1\n",  # a fence never closed
        "\n".join(['=== "a"'] + ["    " * k + '=== "b"' for k in range(1, 30)]),
        ".. code-block::\n\n",  # a directive with no content
        "+---+\n| ``#!/bin/bash`` |\n+--+\n",  # a broken grid table
        "<pre><pre>#SBATCH -N 1</pre>",  # unbalanced HTML
        "\x00\udcff binary",
    ],
)
def test_odd_pages_give_a_reading_not_a_traceback(capsys, tmp_path, monkeypatch, text):
    monkeypatch.chdir(tmp_path)
    for suffix in (".md", ".rst", ".html"):
        (tmp_path / f"odd{suffix}").write_text(text, encoding="utf-8", errors="surrogateescape")
    code, out, _err = _check(capsys, "--format", "json", "odd.md", "odd.rst", "odd.html")
    record = json.loads(out)
    assert code in (0, 1, 2) and len(record["pages"]) == 3


def test_the_doc_pages_benchmark_records_counts_only(tmp_path, docs):
    """benchmarks/check_doc_pages.py over a checkout of the pages above: the counts of its
    record, and none of the pages' text."""
    import subprocess

    from benchmark_scripts import benchmark_module

    subprocess.run(["git", "init", "-q", str(docs)], check=True)
    out = tmp_path / "record.json"
    bench = benchmark_module("check_doc_pages")
    code = bench.main([f"example/docs={docs}", "--output", str(out)])
    (repo,) = json.loads(out.read_text())["repositories"]
    assert code == 0 and repo["traceback"] is False and repo["exit_status"] == 1
    assert (repo["pages"], repo["blocks"], repo["judged"], repo["skipped"]) == (2, 12, 8, 4)
    assert repo["every_block_has_page_line_and_reason"] is True
    assert repo["findings_by_rule"]["sbatch-option"] == {"error": 2}
    assert "partion" not in out.read_text(), "no text of the pages is recorded"
