"""The deprecation registry and lint: every entry fails where it is not under a historical marker
that names it and its replacement; the real pages and examples pass."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from clusterkit.commands import deprecations as D

ENTRIES = D.registry()
CASES = [(e, ex) for e in ENTRIES for ex in e.examples]


def _id(case) -> str:
    entry, example = case
    return f"{entry.id}:{example[:30]}"


def _marker(entry: D.Entry) -> str:
    return (
        f":::{{admonition}} Historical: {entry.names[0]}\n:class: historical\n"
        f"Kept as a record. Replaced by: {entry.replacement}.\n:::\n\n"
    )


def test_registry_is_valid_and_has_the_required_entries():
    ids = {e.id for e in ENTRIES}
    required = {
        "ddlrun",
        "wmlce-module",
        "powerai-conda",
        "powerai-activate",
        "pip-install-option",
        "torch-distributed-launch",
        "singularity-build-writable",
        "nvprof",
        "python2",
        "tf-contrib",
        "tf1-session",
    }
    assert required <= ids
    for e in ENTRIES:
        assert e.source["url"].startswith("https://") and e.replacement and e.date


def test_schema_refuses_a_bad_entry(tmp_path):
    bad = tmp_path / "reg.yaml"
    bad.write_text(
        "entries:\n  - id: x\n    status: gone\n    date: '2020'\n    replacement: r\n"
        "    source: {title: t, url: 'https://x'}\n    examples: [x]\n"
    )
    with pytest.raises(D.RegistryError) as info:
        D.load_registry(bad)
    text = str(info.value)
    assert "reg.yaml:" in text and "status" in text and "date" in text and "pattern" in text


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_seeded_into_a_page_it_fails_with_line_rule_and_replacement(case, tmp_path):
    entry, example = case
    page = tmp_path / "page.md"
    lang = "python" if entry.id.startswith("tf") and "python " not in example else "bash"
    text = f"# Page\n\nSome text.\n\n```{lang}\necho start\n{example}\n```\n"
    hits = [f for f in D.lint_page(page, text) if f.rule == entry.rule]
    assert [f.line for f in hits] == [7], D.lint_page(page, text)
    shown = str(hits[0])
    assert "page.md:7:" in shown and f"[deprecated:{entry.id}]" in shown
    assert entry.replacement in shown


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_seeded_as_inline_code_it_fails(case, tmp_path):
    entry, example = case
    text = f"# Page\n\nRun `{example}` to start.\n"
    assert [f.line for f in D.lint_page(tmp_path / "p.md", text) if f.rule == entry.rule] == [3]


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_seeded_into_an_example_it_fails(case, tmp_path):
    entry, example = case
    suffix = ".py" if entry.id.startswith("tf") and "python " not in example else ".sbatch"
    script = tmp_path / f"job{suffix}"
    head = "#!/bin/bash\nset -euo pipefail\n" if suffix != ".py" else "import os\n\n"
    found = D.lint_file(script, head + example + "\n")
    assert [f.line for f in found if f.rule == entry.rule] == [3]
    assert entry.replacement in str(found[0])


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_the_same_under_a_historical_marker_passes(case, tmp_path):
    entry, example = case
    body = f"```bash\n{example}\n```\n\nAnd inline: `{example}`.\n"
    page = f"# Page\n\n## Old way\n\n{_marker(entry)}{body}"
    assert D.lint_page(tmp_path / "p.md", page) == []
    header = (
        f"#!/bin/bash\n# HISTORICAL: kept as the record of a {entry.names[0]} run.\n"
        f"# Replaced by: {entry.replacement}\n"
    )
    assert D.lint_file(tmp_path / "old.sbatch", header + example + "\n") == []


@pytest.mark.parametrize(
    "entry,example",
    [(e, c) for e in ENTRIES for c in e.counterexamples],
    ids=lambda x: getattr(x, "id", str(x)[:30]),
)
def test_counterexamples_pass(entry, example, tmp_path):
    assert D.lint_file(tmp_path / "ok.sh", f"#!/bin/bash\n{example}\n") == []
    assert D.lint_page(tmp_path / "ok.md", f"`{example}`\n") == []


def test_a_marker_covers_only_what_it_names_and_only_its_section(tmp_path):
    text = textwrap.dedent("""\
        # Page

        ## Old

        :::{admonition} Historical: ddlrun
        :class: historical
        IBM DDL's launcher. Replaced by: srun starting Horovod ranks.
        :::

        ```bash
        ddlrun python main.py
        pip install --install-option=--prefix=/x horovod
        ```

        ## New

        ```bash
        ddlrun python main.py
        ```
        """)
    found = {(f.line, f.rule) for f in D.lint_page(tmp_path / "p.md", text)}
    assert found == {(12, "deprecated:pip-install-option"), (18, "deprecated:ddlrun")}


def test_a_marker_without_replacement_is_an_error_and_covers_nothing(tmp_path):
    text = ":::{admonition} Historical: ddlrun\n:class: historical\nOld.\n:::\n\n`ddlrun x`\n"
    rules = {f.rule for f in D.lint_page(tmp_path / "p.md", text)}
    assert rules == {"historical-marker", "deprecated:ddlrun"}
    plain_note = ":::{note}\nddlrun is old. Replaced by: srun.\n:::\n\n`ddlrun x`\n"
    assert {f.rule for f in D.lint_page(tmp_path / "p.md", plain_note)} == {"deprecated:ddlrun"}
    header = "#!/bin/bash\n# HISTORICAL: kept as a record (ddlrun).\nddlrun x\n"
    rules = {f.rule for f in D.lint_file(tmp_path / "j.lsf", header)}
    assert rules == {"historical-marker", "deprecated:ddlrun"}


def test_continuation_lines_and_wrappers_point_at_the_flag(tmp_path):
    text = (
        "#!/bin/bash\nHOROVOD_WITH_PYTORCH=1 \\\n  pip install \\\n"
        "    --install-option=x \\\n  horovod\n"
    )
    found = D.lint_file(tmp_path / "j.sh", text)
    assert [(f.line, f.rule) for f in found] == [(4, "deprecated:pip-install-option")]
    text = "#!/bin/bash\nsrun -n 2 \\\n  singularity build \\\n  --writable img docker://x\n"
    assert [f.line for f in D.lint_file(tmp_path / "j.sh", text)] == [4]


def test_comments_and_console_output_are_not_commands(tmp_path):
    script = "#!/bin/bash\n# ddlrun used to do this; now srun does\nsrun python x.py\n"
    assert D.lint_file(tmp_path / "j.sh", script) == []
    console = "```console\n$ srun python x.py\nddlrun: not found\n```\n"
    assert D.lint_page(tmp_path / "p.md", console) == []


def test_registry_file_is_the_documented_shape():
    data = yaml.safe_load(D.REGISTRY.read_text())
    assert D.validate(data) == []
    for e in data["entries"]:
        assert e.get("pattern") or e.get("command")


def test_the_pages_and_examples_have_no_stale_commands():
    found = D.lint_all()
    assert found == [], "\n".join(map(str, found))


def test_a_stale_command_in_prose_fails_outside_historical_markers(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Page\n\nThe ranks are started by python -m torch.distributed.launch here.\n")
    found = D.lint_page(page)
    assert [(f.line, f.rule) for f in found] == [(3, "deprecated:torch-distributed-launch")]
    page.write_text(
        "# Page\n\n:::{admonition} Historical\n:class: historical\n"
        "torch.distributed.launch. Replaced by: torchrun.\n:::\n\n"
        "The ranks were started by python -m torch.distributed.launch then.\n"
    )
    assert D.lint_page(page) == []


def test_a_tools_bare_name_in_prose_is_not_a_command(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Page\n\nnvprof refuses GPUs of compute capability 8.0; see ddlrun.\n")
    assert D.lint_page(page) == []
