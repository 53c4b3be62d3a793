"""Module inventories: module commands in pages and examples name what the site profile lists."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import yaml

from clusterkit.commands import inventories as I
from clusterkit.sites.profiles import ROOT, load_site


def _rules(found) -> list[tuple[int, str]]:
    return [(f.line, f.rule) for f in found]


def test_a_misspelt_version_fails_with_the_versions_that_exist(tmp_path):
    page = "---\nsite: archer2\n---\n\n# P\n\n```bash\nmodule load tensorflow/2.13\n```\n"
    found = I.lint_page(tmp_path / "p.md", text=page)
    assert _rules(found) == [(8, "module-known")]
    assert "tensorflow/2.13.0" in found[0].message and "p.md:8:" in str(found[0])


def test_a_removed_module_fails_with_its_replacement(tmp_path):
    page = "---\nsite: archer2\n---\n\n`module load tensorflow/2.9.3`\n"
    found = I.lint_page(tmp_path / "p.md", text=page)
    assert _rules(found) == [(5, "module-removed")]
    assert "tensorflow/2.13.0" in found[0].message


def test_the_site_comes_from_the_tab_or_a_marker(tmp_path):
    page = textwrap.dedent("""\
        # P

        `````{tabs}
        ````{group-tab} Bede
        ```bash
        module load cuda/12.6.1
        ```
        ````
        ````{group-tab} ARCHER2
        ```bash
        module load cuda/12.6.1
        ```
        ````
        `````

        % test: site summit
        ```console
        $ module use /sw/aaims/summit/modulefiles
        $ module load dlprof
        ```

        ```bash
        module load cuda
        ```
        """)
    found = [f for f in I.lint_page(tmp_path / "p.md", text=page) if f.rule != "module-historical"]
    # ARCHER2's inventory is partial: a module it does not list is a warning, not an error
    assert _rules(found) == [(11, "module-unlisted"), (23, "module-site")]
    assert [f.level for f in found] == ["warning", "error"]


def test_module_use_must_name_a_listed_module_path(tmp_path):
    page = "---\nsite: summit\n---\n\n```bash\nmodule use /sw/elsewhere/modulefiles\n```\n"
    found = I.lint_page(tmp_path / "p.md", text=page)
    assert _rules(found) == [(6, "module-use")]
    assert "/sw/aaims/summit/modulefiles" in found[0].message


def test_an_example_is_judged_against_its_site_and_partition(tmp_path):
    job = tmp_path / "job.sbatch"
    job.write_text(
        "#!/bin/bash\n#SBATCH --partition=gpu\n#SBATCH --account=bdXXXYY\n"
        "module load cuda/12.6.1\nmodule load cuda/12.4.1\nml gcc/99\n"
    )
    found = I.lint_file(job, site="bede")
    assert _rules(found) == [(4, "module-node-type"), (6, "module-known")]
    assert "grace-hopper" in found[0].message
    assert "gcc/14.2" in found[1].message


def test_an_example_gets_its_site_from_its_directory():
    found = I.lint_file(ROOT / "examples" / "archer2" / "tensorflow-cpu.slurm")
    assert found == []


def test_historical_modules_warn_but_do_not_fail(tmp_path):
    page = "---\nsite: summit\n---\n\n```bash\nmodule load open-ce/1.1.3-py38-0\n```\n"
    found = I.lint_page(tmp_path / "p.md", text=page)
    assert [f.level for f in found] == ["warning"]


def test_a_refreshed_profile_that_removes_a_module_fails_the_page(tmp_path):
    sites = tmp_path / "sites"
    shutil.copytree(ROOT / "sites", sites)
    data = yaml.safe_load((sites / "archer2.yaml").read_text())
    for m in data["modules"]:
        if m["name"] == "tensorflow" and m.get("version") == "2.13.0":
            m["status"] = "removed"
            m["replacement"] = "tensorflow/2.12.0"
    data["stacks"]["tensorflow-2.13.0-cpu"]["status"] = "historical"  # as refresh proposes
    (sites / "archer2.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    found = I.lint_all(sites_dir=sites)
    hits = [f for f in found if f.rule == "module-removed"]
    assert hits and all("tensorflow/2.12.0" in f.message for f in hits)
    assert {Path(f.path).name for f in hits} >= {"tensorflow-cpu.slurm", "cosmoflow-cpu.slurm"}


def test_placeholders_in_prose_are_not_modules(tmp_path):
    page = "# P\n\nAlways `module load NAME/VERSION`, or `module load <name>/<version>`.\n"
    assert I.lint_page(tmp_path / "p.md", text=page) == []


def test_module_words_are_parsed_as_lmod_does():
    site = load_site("bede")
    assert I.check_words("x", 1, ["module", "purge"], site) == []
    assert I.check_words("x", 1, ["module", "-q", "load", "cuda/12.4.1"], site) == []
    assert _rules(I.check_words("x", 1, ["ml", "nosuch"], site)) == [(1, "module-unlisted")]
    assert _rules(I.check_words("x", 1, ["ml", "cuda/0.1"], site)) == [(1, "module-known")]
    assert _rules(I.check_words("x", 1, ["module", "frobnicate", "x"], site)) == [
        (1, "module-subcommand")
    ]


def test_the_pages_and_examples_name_only_listed_modules():
    errors = [f for f in I.lint_all() if f.level == "error"]
    assert errors == [], "\n".join(map(str, errors))


def test_a_module_load_in_a_sentence_is_held_to_the_inventory():
    """A ``module load`` span in prose is judged as a block's would be: a name one letter from a
    module the profile lists is an error with "did you mean", though ARCHER2's inventory is
    partial; the right name passes."""
    page = ROOT / "docs/howto/archer2/pytorch-gpu.md"
    text = page.read_text(encoding="utf-8")
    anchor = "- Every ARCHER2 job names a QoS."
    assert anchor in text, "the page no longer has the sentence this test extends"
    module = next(m for m in load_site("archer2").modules if m.name == "pytorch")

    def findings(name: str) -> list:
        changed = text.replace(anchor, f"{anchor} Load `module load {name}` first.", 1)
        return I.lint_page(page, text=changed)

    assert findings(f"pytorch/{module.version}") == []
    (bad,) = findings(f"pyytorch/{module.version}")
    assert bad.level == "error" and bad.rule == "module-known"
    assert bad.line == text[: text.index(anchor)].count("\n") + 1
    assert "did you mean pytorch?" in bad.message
