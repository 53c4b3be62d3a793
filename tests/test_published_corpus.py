"""The sites' own published job scripts (tests/corpus/published) through the emulator.

Every script of the corpus is judged with ``check_slurm_script`` or ``check_lsf_script`` and
compared with the manifest's expected verdict (the real Slurm's, re-checked by
tests/slurm/test_published_scripts.py; for Summit, reasoned from its documented limits). No
script may crash the emulator; every disagreement must be listed with its reason; agreement
must reach 95 %. The page docs/reference/published-scripts.md must be the one the manifest
gives.
"""

from __future__ import annotations

import re
import textwrap

import pytest

from clusterkit.grammars.page_blocks import page_blocks
from clusterkit.pages import published_check as C
from clusterkit.pages import published_collect, published_page
from clusterkit.sites import published as P
from clusterkit.sites import published_manifest as M
from clusterkit.sites.profiles import load_site

MANIFEST = M.load()
ENTRIES = MANIFEST["scripts"]
# entries whose text is here: the kept ones, and the rebuilt ones benchmarks/collect_corpus.py
# has written from the documentation repositories' snapshots
HERE = C.available(ENTRIES)
NOT_REBUILT = f"the script's text is not kept here; rebuild it: {M.rebuild_command()}"


def text_of(entry: dict) -> str:
    path = M.script_path(entry)
    if entry.get("rebuilt") and not path.is_file():
        pytest.skip(NOT_REBUILT)
    return path.read_text(encoding="utf-8")


# --------------------------------------------------------------------------- the manifest
def test_every_corpus_file_has_one_entry():
    files = {p.relative_to(M.CORPUS).as_posix() for p in M.CORPUS.glob("*/*") if p.is_file()}
    listed = [e["file"] for e in ENTRIES]
    kept = {e["file"] for e in ENTRIES if not e.get("rebuilt")}
    assert len(listed) == len(set(listed)), "a file is listed twice"
    assert files == kept, {"unlisted": files - kept, "missing": kept - files}


def test_the_text_of_rebuilt_entries_is_not_kept():
    rebuilt = [e for e in ENTRIES if e.get("rebuilt")]
    assert {e["site"] for e in rebuilt} == P.REBUILT_SITES
    assert not [e for e in rebuilt if (M.CORPUS / e["file"]).exists()]


def test_corpus_covers_the_sites():
    count = {
        site: sum(e["site"] == site for e in ENTRIES)
        for site in ("bede", "archer2", "summit", "perlmutter")
    }
    assert all(n >= 5 for n in count.values()), count
    assert count["perlmutter"] >= 6, count


def test_perlmutter_scripts_include_a_cpu_job_and_a_shifter_job():
    texts = [text_of(e) for e in ENTRIES if e["site"] == "perlmutter"]
    assert any(re.search(r"^#SBATCH -C cpu\b", t, re.M) for t in texts)
    assert any(re.search(r"^#SBATCH --image=", t, re.M) for t in texts)


@pytest.mark.parametrize(
    "file, partition, node_type, qos",
    [
        ("perlmutter/cpu-run-hello-pm-L1.sbatch", "cpu", "epyc7763-cpu", "debug"),
        ("perlmutter/submit-batch-shifter-L1.sbatch", "gpu", "a100-40gb", "debug"),
        ("perlmutter/submit-pm-L1.sbatch", "gpu-shared", "a100-40gb", "shared"),
        ("perlmutter/scripts-train-perlmutter-L1.sbatch", "gpu", "a100-40gb", "debug"),
    ],
)
def test_perlmutter_scripts_land_where_nersc_means_them_to(file, partition, node_type, qos):
    """Judged as NERSC documents them: by constraint and QoS, Shifter's options taken."""
    from clusterkit.emulate.sbatch import check_slurm_script

    entry = next(e for e in ENTRIES if e["file"] == file)
    text = text_of(entry)
    report = check_slurm_script(M.script_path(entry), load_site("perlmutter"), text=text)
    plan = report.plan
    assert (plan["partition"], plan["node_type"], plan["qos"]) == (partition, node_type, qos)
    assert not [f for f in report.findings if f.rule in {"sbatch-option", "plugin-option"}]


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["file"] for e in ENTRIES])
def test_entry_is_complete(entry):
    text = text_of(entry)
    for key in ("repo", "commit", "path", "line", "site", "scheduler", "form", "digest"):
        assert entry.get(key) not in (None, ""), key
    assert re.fullmatch(r"[0-9a-f]{40}", entry["commit"])
    assert entry["digest"] == P.Published("", "", "", 0, text).digest, "the file was edited"
    assert entry["expected"] in M.VERDICTS
    record = entry.get(entry["scheduler"])
    assert record and record["verdict"] == entry["expected"], "no recorded scheduler verdict"
    assert record.get("says" if entry["scheduler"] == "slurm" else "reasoning")
    if entry["expected"] == "refuse":
        assert entry.get("errors") and entry.get("cause") in {"script", "excerpt", "profile"}
    for err in entry.get("errors", []) + entry.get("run_errors", []):
        assert err["rules"] and len(err["what"]) > 10, err
        assert 0 <= err["line"] <= len(text.splitlines()), err
    if entry.get("reason"):
        assert entry.get("causes") and entry.get("emulator_today"), "say what differs and why"


def test_placeholders_are_filled_with_the_profiles_example():
    site = load_site("archer2")
    text = "#!/bin/bash\n#SBATCH --account=[budget code]\n#SBATCH -A <project>\n"
    filled, what = M.fill_placeholders(text, site)
    assert filled == "#!/bin/bash\n#SBATCH --account=t01\n#SBATCH -A t01\n"
    assert what == {"[budget code]": "t01", "<project>": "t01"}
    real = "#SBATCH --account=e123-abc\n"
    assert M.fill_placeholders(real, site) == (real, {})


# --------------------------------------------------------------------------- extraction
def test_extraction_finds_blocks_of_both_page_formats():
    """The corpus is gathered with check-job's reader of pages: the scripts (blocks with
    directives) of a Markdown and a reStructuredText page, at their lines."""
    md = textwrap.dedent("""\
        Text.

        ```bash
        #!/bin/bash
        #SBATCH --nodes=1
        ```

        === "Tab"

            ```
            #SBATCH -p gpu
            ```

        ```./rclone copy a b```

            #!/bin/bash
            #SBATCH -t 5
        """)
    blocks = published_collect.scripts_in(md, ".md")
    assert [n for n, _, _ in blocks] == [4, 11, 16]  # the one-line ```...``` is inline code
    assert blocks[1][1] == "#SBATCH -p gpu"  # the tab's indentation taken off
    assert blocks[2][1] == "#!/bin/bash\n#SBATCH -t 5"
    rst = textwrap.dedent("""\
        .. code-block:: bash
           :linenos:

           #!/bin/bash
           #BSUB -W 10

        Plain::

            #SBATCH -N 2

        +------------------+------------------+
        | ``#!/bin/bash``  | ``#!/bin/bash``  |
        +------------------+------------------+
        | ``#BSUB -P xxx`` | ``#BSUB -P yyy`` |
        +------------------+------------------+
        """)
    blocks = published_collect.scripts_in(rst, ".rst")
    assert [(n, c) for n, _, c in blocks] == [(4, 0), (9, 0), (12, 1), (12, 2)]
    assert blocks[3][1] == "#!/bin/bash\n#BSUB -P yyy"
    (column,) = [b for b in page_blocks(rst, ".rst") if b.column == 2]
    assert column.lines == (12, 14), "each line of a table's script is on its own row"
    assert published_collect.scripts_in("#!/bin/bash\n#SBATCH -N 1\n", ".sbatch")[0][0] == 1
    assert published_collect.scripts_in("#!/bin/bash\necho helper\n", ".sh") == []


def test_a_script_in_an_html_comment_is_not_published():
    """A page's HTML comment is not shown to readers: the scripts in it are not the site's."""
    md = "<!--\n```bash\n#!/bin/bash\n#SBATCH -N 1\n```\n-->\n\n```bash\n#SBATCH -N 2\n```\n"
    assert [n for n, _, _ in published_collect.scripts_in(md, ".md")] == [9]


def test_the_repository_is_named_by_its_origin_or_its_snapshot_folder(tmp_path):
    import subprocess

    snap = tmp_path / "ARCHER2-HPC+archer2-docs" / "repo"
    snap.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(snap)], check=True)
    assert published_collect.repo_of(snap) == "ARCHER2-HPC/archer2-docs"
    url = "git@github.com:N8-CIR-Bede/documentation.git"
    subprocess.run(["git", "-C", str(snap), "remote", "add", "origin", url], check=True)
    assert published_collect.repo_of(snap) == "N8-CIR-Bede/documentation"


# --------------------------------------------------------------------------- comparing
def test_a_refusal_agrees_only_for_an_expected_reason():
    entry = {
        "expected": "refuse",
        "errors": [{"line": 3, "rules": ["sbatch-option"], "what": "misspelt option"}],
    }
    assert C.disagreement(entry, C.Outcome("refuse", [(3, "sbatch-option")])) is None
    assert C.disagreement(entry, C.Outcome("refuse", [(3, "other-name")])) is None  # same line
    assert "another reason" in C.disagreement(entry, C.Outcome("refuse", [(0, "account-form")]))
    assert "expected refuse" in C.disagreement(entry, C.Outcome("accept"))
    assert "still judging" in C.disagreement(entry, C.Outcome("timeout", seconds=15))


def test_agreement_counts_reasons_and_crashes():
    entries = [
        {"file": "a", "expected": "accept"},
        {"file": "b", "expected": "accept", "reason": "known"},
        {"file": "c", "expected": "accept"},
        {"file": "d", "expected": "accept", "reason": "was known"},
    ]
    outcomes = {
        "a": C.Outcome("accept"),
        "b": C.Outcome("refuse", [(1, "x")]),
        "c": C.Outcome("crash", messages=["IndexError: ..."]),
        "d": C.Outcome("accept"),
    }
    result = C.compare(entries, outcomes)
    assert (result.agreed, result.judged) == (2, 4)
    assert result.unexplained == ["c"] and result.crashes == ["c"] and result.stale == ["d"]


# --------------------------------------------------------------------------- the emulator
@pytest.fixture(scope="module")
def agreement() -> C.Agreement:
    outcomes = C.judge_all(HERE)
    return C.compare(HERE, outcomes)


@pytest.mark.slow
def test_no_script_crashes_the_emulator(agreement):
    assert not agreement.crashes, "\n".join(agreement.lines())


@pytest.mark.slow
def test_every_disagreement_is_listed_with_its_reason(agreement, capsys):
    with capsys.disabled():
        print("\npublished scripts: " + agreement.lines()[0])
    assert not agreement.unexplained, "\n".join(agreement.lines())


@pytest.mark.slow
def test_no_reason_outlives_its_disagreement(agreement):
    assert not agreement.stale, (
        "the emulator agrees now on entries listed as disagreeing: run "
        "`python -m clusterkit.pages.published_check --update`\n" + "\n".join(agreement.stale)
    )


@pytest.mark.slow
def test_agreement_reaches_the_threshold(agreement):
    assert agreement.rate >= C.THRESHOLD, agreement.lines()[0]


# --------------------------------------------------------------------------- the page
def test_page_is_the_one_the_manifest_gives():
    page = published_page.PAGE
    assert page.is_file(), "run python -m clusterkit.pages.published_page --write"
    assert page.read_text(encoding="utf-8") == published_page.render(MANIFEST), (
        "stale: run python -m clusterkit.pages.published_page --write"
    )


def test_page_lists_the_misspelt_partition_option():
    text = published_page.PAGE.read_text(encoding="utf-8")
    assert "sbatch\\_resnet50base.sh:3" in text and "--partion" in text
