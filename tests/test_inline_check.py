"""Inline code is part of the page: wrong commands and options in sentences fail with the page,
the line and the rule, each made in the page it would come from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from clusterkit.grammars import prose
from clusterkit.pages import inline_check

ROOT = Path(__file__).resolve().parent.parent


def _judge_page(page: str, old: str, new: str):
    """Every span's result on ``page`` with ``old`` replaced by ``new`` (which must occur)."""
    path = ROOT / page
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{page} no longer says {old!r}: move this test's sentence"
    changed = text.replace(old, new, 1)
    line = changed[: changed.index(new)].count("\n") + 1
    ctx = inline_check.PageContext(path, changed)
    results = [(s, inline_check.judge(ctx, s)) for s in ctx.spans]
    return line, results


def _errors_near(results, line: int) -> list:
    return [f for s, r in results for f in r.errors if line <= f.line <= line + 2]


# (page, sentence as the page has it, the same sentence with the mistake, rules expected)
MISTAKES = [
    (
        "docs/howto/archer2/pytorch-gpu.md",
        "change the `srun` line to `--ntasks=8 --ntasks-per-node=4`",
        "change the `srun` line to `--ntasks=9 --ntasks-per-node=4`",
        # srun ignores --ntasks-per-node (a warning) and puts 5 ranks of 8 cores on a node
        {"step-cpus"},
    ),
    (
        "docs/howto/bede/pytorch-ddp-one-node.md",
        "- `--gres=gpu:4` takes every GPU",
        "- `--gres=gpu:5` takes every GPU",
        {"gpus-per-node"},
    ),
    (
        "docs/howto/bede/pytorch-ddp-one-node.md",
        "`torchrun --nproc_per_node=4` starts\n  the four workers",
        "`torchrun --nproc_per_node=16` starts\n  the four workers",
        {"nproc-per-gpu"},
    ),
    (
        "docs/howto/archer2/pytorch-gpu.md",
        "- Every ARCHER2 job names a QoS.",
        "- Every ARCHER2 job names a QoS: `--qos=gpu-excl` takes a whole node.",
        {"qos-exists"},
    ),
    (
        "docs/benchmarks/summit.md",
        "`jsrun -n 1 -a 6 -c 42 -g 6 -r 1 singularity exec --nv IMAGE ./run-benchmark.sh`",
        "`jsrun -n 1 -a 6 -c 48 -g 7 -r 1 ...`",
        {"rs-cores", "rs-gpus"},
    ),
    # a placeholder (the image) leaves the resource set judged: 6 tasks x 8 cores > 42
    (
        "docs/benchmarks/summit.md",
        "`jsrun -n 1 -a 6 -c 42 -g 6 -r 1 singularity exec --nv IMAGE ./run-benchmark.sh`",
        "`jsrun -n 1 -a 6 -c 42 -g 6 -r 1 -bpacked:8 singularity exec --nv IMAGE "
        "./run-benchmark.sh`",
        {"bind-cores"},
    ),
    # --tasks-per-node is srun's other name for --ntasks-per-node; 10 ranks on the job's two
    # nodes put five on one, more CPUs than the job holds there
    (
        "docs/howto/archer2/pytorch-gpu.md",
        "change the `srun` line to `--ntasks=8 --ntasks-per-node=4`",
        "change the `srun` line to `--ntasks=10 --tasks-per-node=4`",
        {"step-cpus"},
    ),
    (
        "docs/howto/distributed.md",
        "The launchers differ in which of these they provide.",
        "The launchers differ in which of these they provide, as do ranks started by "
        "`python -m torch.distributed.launch`.",
        {"deprecated:torch-distributed-launch"},
    ),
    # pip's own parser: an option pip removed, told as current, gets the registry's rule
    (
        "docs/howto/troubleshooting.md",
        "For build\nsettings, use `--config-settings KEY=VALUE`",
        "For build\nsettings, use `--global-option=KEY`",
        {"deprecated:pip-global-option"},
    ),
    # ... and one pip never had is wrong in a sentence about the past too
    (
        "docs/howto/troubleshooting.md",
        "removed `--install-option`, and",
        "removed `--instal-option`, and",
        {"option-unknown"},
    ),
    # venv's own options
    (
        "docs/howto/environment.md",
        "`--system-site-packages` lets the",
        "`--system-packages` lets the",
        {"option-unknown"},
    ),
    # NVIDIA's main.py, named by the table's column header, by its recorded contract
    (
        "docs/benchmarks/resnet50.md",
        "| `--lr_init=0.256` |",
        "| `--lr_initial=0.256` |",
        {"option-unknown"},
    ),
    (
        "docs/benchmarks/resnet50.md",
        "| `--num_iter=50 --iter_unit=epoch` |",
        "| `--num_iter=50 --iter_unit=epochs` |",
        {"script-flag-value"},
    ),
    # a choices option the trainer has: by name it passes, with a value not among them it fails
    (
        "docs/howto/troubleshooting.md",
        "takes `--mp-start-method` to choose",
        "takes `--mp-start-method=thread` to choose",
        {"script-flag-value"},
    ),
    # site facts are substituted before the span is judged
    (
        "docs/howto/bede/grace-hopper.md",
        "- `--cpus-per-task={{ bede_gh_cores }}`",
        "- `--cpus-per-task={{ bede_gh_core }}`",
        {"substitution"},
    ),
    # the options of the command the section runs (python -m clusterkit.reframe.config)
    (
        "docs/howto/site-staff/run-reframe.md",
        "`--include-historical` adds the others",
        "`--include-retired` adds the others",
        {"option-unknown"},
    ),
    # ddlrun's option table
    (
        "docs/howto/distributed.md",
        "`--nodes 18 --racks 4 --aisles 2`",
        "`--nodes 18 --racks 4 --isles 2`",
        {"option-unknown"},
    ),
]


@pytest.mark.parametrize("page,old,new,rules", MISTAKES, ids=[m[2][:40] for m in MISTAKES])
def test_a_mistake_in_a_sentence_fails_with_page_line_and_rule(page, old, new, rules):
    line, results = _judge_page(page, old, new)
    errors = _errors_near(results, line)
    assert rules <= {f.rule for f in errors}, [str(f) for f in errors]
    assert all(str(f).startswith(f"{page}:") for f in errors)


@pytest.mark.parametrize("page,old,new,rules", MISTAKES, ids=[m[2][:40] for m in MISTAKES])
def test_the_sentence_as_the_page_has_it_passes(page, old, new, rules):
    line, results = _judge_page(page, old, old)
    assert not [f for f in _errors_near(results, line) if f.rule in rules]


def test_sbatch_options_of_a_sentence_apply_together_with_its_srun_options():
    # "--nodes=2 and --gpus=8" go to the batch script, so 8 tasks at 4 per node fit
    page = "docs/howto/archer2/pytorch-gpu.md"
    line, results = _judge_page(page, "`--nodes=2`", "`--nodes=2`")
    spans = {s.code: r for s, r in results if s.line in (line, line + 1)}
    assert spans["--nodes=2"].detail.startswith("sbatch")
    assert spans["--ntasks=8 --ntasks-per-node=4"].detail.startswith("srun")
    assert not _errors_near(results, line)


def test_an_unknown_option_of_the_tool_named_before_it_fails():
    line, results = _judge_page(
        "docs/howto/bede/pytorch-ddp-multinode.md",
        "`--signal=USR1@120` (without `B:`)",
        "the `srun` option `--signl=USR1@120` (without `B:`)",
    )
    assert "option-unknown" in {f.rule for f in _errors_near(results, line)}


def test_inside_a_historical_admonition_stale_commands_are_notices():
    text = textwrap.dedent("""\
        # Page

        :::{admonition} Historical: torch.distributed.launch
        :class: historical
        PyTorch's old launcher. Replaced by: torchrun.
        :::

        Ranks were started by `python -m torch.distributed.launch --nproc_per_node=4 x.py`.
        """)
    ctx = inline_check.PageContext(ROOT / "docs" / "howto" / "page.md", text)
    (span,) = [s for s in ctx.spans if s.kind == "command"]
    result = inline_check.judge(ctx, span)
    assert not result.errors
    assert any(f.rule.startswith("deprecated:") for f in result.findings)


def test_file_names_variables_and_values_are_left_alone():
    text = "# Page\n\nRun `train_resnet.py` with `MASTER_PORT=29500` set; `gpu` is the partition.\n"
    ctx = inline_check.PageContext(ROOT / "docs" / "howto" / "page.md", text)
    kinds = {s.code: s.kind for s in ctx.spans}
    assert kinds == {"train_resnet.py": "other", "MASTER_PORT=29500": "other", "gpu": "other"}
    assert {inline_check.judge(ctx, s).how for s in ctx.spans} == {"not-a-command"}


def test_spans_are_classified():
    assert prose.classify("srun --ntasks=8 python x.py") == "command"
    assert prose.classify("srun") == "tool"
    assert prose.classify("python -m torch.distributed.launch") == "command"
    assert prose.classify("--gres=gpu:4") == "option"
    assert prose.classify("-g 6") == "option"
    assert prose.classify("$SLURM_PROCID") == "other"


def test_the_page_tests_fail_a_wrong_span_and_record_inline_results(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "conftest.py").write_text((ROOT / "docs" / "conftest.py").read_text())
    (docs / "page.md").write_text(
        "---\nsite: bede\n---\n# Page\n\n"
        "Ask for a node's GPUs with `sbatch --gres=gpu:5 job.sbatch`; see `job.sbatch`.\n"
    )
    log = tmp_path / "blocks.jsonl"
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(docs)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "CLUSTERKIT_COVERAGE_LOG": str(log)},
    )
    assert r.returncode == 1, r.stdout
    assert "page.md:6" in r.stdout
    records = [json.loads(x) for x in log.read_text().splitlines()]
    assert [(x["kind"], x["line"], x["code"]) for x in records] == [
        ("inline", 6, "sbatch --gres=gpu:5 job.sbatch")
    ]


def test_a_substituted_site_fact_is_judged_against_the_profile():
    line, results = _judge_page(
        "docs/howto/bede/grace-hopper.md",
        "- `--cpus-per-task={{ bede_gh_cores }}`",
        "- `--cpus-per-task={{ bede_gh_cores }}0`",
    )
    errors = _errors_near(results, line)
    assert errors and all(f.rule != "substitution" for f in errors), [str(f) for f in errors]
    assert any("720" in f.message for f in errors), [str(f) for f in errors]


def test_a_removed_option_in_a_sentence_about_the_past_is_a_notice():
    line, results = _judge_page(
        "docs/howto/troubleshooting.md", "removed `--install-option`", "removed `--install-option`"
    )
    (result,) = [r for s, r in results if s.line == line and s.code == "--install-option"]
    assert result.how == "option-checked" and not result.errors
    assert [f.rule for f in result.findings] == ["deprecated:pip-install-option"]


def test_a_table_column_header_names_whose_options_the_column_lists():
    line, results = _judge_page(
        "docs/benchmarks/resnet50.md", "| `--precision=fp16", "| `--precision=fp16"
    )
    details = {s.code: r.detail for s, r in results if s.line == line}
    assert details["--precision=fp16 --loss_scale=1024 --use_static_loss_scaling"].startswith(
        "main.py"
    )
    assert details["--precision fp16"].startswith("train_resnet.py")


def test_inline_code_shows_the_site_fact_it_names():
    from docutils.core import publish_doctree
    from myst_parser.parsers.docutils_ import Parser

    from clusterkit.pages.sphinxext import substitute_code

    doc = publish_doctree(
        "Use `--cpus-per-task={{ cores }}` and `{{ nothing }}`.\n",
        parser=Parser(),
        settings_overrides={"report_level": 5},
    )
    bad = substitute_code(doc, {"cores": "72"})
    texts = [n.astext() for n in doc.findall(lambda n: n.tagname == "literal")]
    assert texts == ["--cpus-per-task=72", "{{ nothing }}"]
    assert [n.astext() for n in bad] == ["{{ nothing }}"]


def test_an_option_of_a_module_that_is_not_here_is_not_taken_for_its():
    from clusterkit.commands import tool_options

    found = tool_options.check("python -m no_such_module_here", "page.md", 3, ["--flag"])
    assert [f.rule for f in found] == ["script-flags"]
    assert tool_options.check("python -m venv", "page.md", 3, ["--system-site-packages"]) == []
