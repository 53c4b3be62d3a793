"""nox -s stacks: it catches a trainer that needs an API the stack's framework lacks, naming the
trainer, the stack and the API; and the trainer with its fallbacks passes where only the APIs
of an older release (PyTorch 2.1) are there.

A stack's framework is stood in for by this interpreter with a ``sitecustomize`` module that
deletes APIs after importing PyTorch, so no second PyTorch has to be installed for the test.
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from clusterkit.runs import stack_ci
from clusterkit.sites import stacks as S
from clusterkit.sites.profiles import ROOT, Stack, load_profile

TRAINER = ROOT / "examples" / "pytorch" / "train_resnet.py"
TWO_RANKS = "test_two_ranks_under_torchrun"  # the program's two-rank tiny run


def stack_lacking(name: str, hide: list[str]) -> Stack:
    raw = {
        "title": f"PyTorch without {', '.join(hide)}",
        "status": "current",
        "node_types": ["grace-hopper"],
        "python": "3.11",
        "frameworks": {"torch": "2.14.1", "torchvision": "0.29.1"},
        "accelerator": {"kind": "cpu"},
        "install": {"pip": {"packages": ["torch", "torchvision"]}},
        "ci": {"pip": [f"torch-without-{name}"]},  # what names its environment here
        "sources": [{"title": "t", "url": "https://example.org", "retrieved": "2026-11-23"}],
    }
    return Stack("test", name, raw)


def fake_environment(tmp_path: Path, stack: Stack, hide: list[str]) -> Path:
    """The stack's environment, ready: this interpreter, with ``hide`` deleted from torch."""
    site = tmp_path / "hide"
    site.mkdir()
    lines = ["import torch"]
    for api in hide:
        owner, _, attr = api.rpartition(".")
        lines.append(f"del {owner}.{attr}")
    (site / "sitecustomize.py").write_text("\n".join(lines) + "\n")
    env = stack_ci.Environment.for_route(S.ci_route(stack), tmp_path)
    (env.path / "bin").mkdir(parents=True)
    path = f'PYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}"'
    env.python.write_text(f'#!/bin/sh\n{path} exec "{sys.executable}" "$@"\n')
    env.python.chmod(0o755)
    (env.path / stack_ci.STAMP).write_text("\n".join(env.packages))
    assert env.ready
    return tmp_path


@pytest.fixture
def plain_env(monkeypatch):
    for key in ("CLUSTERKIT_STACK", "TRAIN_TINY", "TRAIN_TINY_STEPS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


@pytest.mark.slow
def test_a_missing_api_fails_the_stack_naming_trainer_stack_and_api(tmp_path, plain_env):
    stack = stack_lacking("no-autocast", ["torch.autocast"])
    envs = fake_environment(tmp_path, stack, ["torch.autocast"])
    report = stack_ci.check_stack(stack, [TRAINER], envs_dir=envs, select=TWO_RANKS)
    text = "\n".join(report.lines)
    assert report.status == "fail", text
    failures = [line for line in report.lines if line.strip().startswith("FAIL")]
    assert failures == [
        "  FAIL examples/pytorch/train_resnet.py under test/no-autocast: AttributeError: "
        f"module 'torch' has no attribute 'autocast' [{TWO_RANKS}]"
    ], text
    assert "(reused)" in text and "0 passed, 1 failed" in text


@pytest.mark.slow
def test_the_trainer_passes_with_only_the_apis_of_pytorch_2_1(tmp_path, plain_env):
    """torch.amp.GradScaler and torch.OutOfMemoryError came with PyTorch 2.3: the trainer falls
    back to what 2.1 has. (The same trainer without its fallbacks fails on these.)"""
    hide = ["torch.amp.GradScaler", "torch.OutOfMemoryError"]
    stack = stack_lacking("like-2.1", hide)
    envs = fake_environment(tmp_path, stack, hide)
    select = f"{TWO_RANKS} or loss_scaler"
    report = stack_ci.check_stack(stack, [TRAINER], envs_dir=envs, select=select)
    text = "\n".join(report.lines)
    assert report.status == "pass", text
    assert "ran:          examples/pytorch/train_resnet.py" in text
    assert "2 passed, 0 failed" in text


def test_stacks_sharing_an_environment_share_one_run_and_its_failures(tmp_path, monkeypatch):
    """Two stacks that install the same packages get the same environment: their tests run once
    and the result, a failure included, stands for both."""
    first, second = stack_lacking("a", []), stack_lacking("a", [])
    second = Stack("other", "a", second.raw)
    envs = fake_environment(tmp_path, first, [])
    calls = []

    def one_failing_run(stack_key, python, programs, **kw):
        calls.append(stack_key)
        run = stack_ci.TestRun(ran=[stack_ci._rel(p) for p in programs])
        run.failures.append(stack_ci.Failure(run.ran[0], "test_x", "AttributeError: y"))
        return run

    monkeypatch.setattr(stack_ci, "run_tests", one_failing_run)
    earlier = stack_ci.SharedRuns()
    reports = [
        stack_ci.check_stack(s, [TRAINER], envs_dir=envs, earlier=earlier) for s in (first, second)
    ]
    assert calls == ["test/a"]
    assert [r.status for r in reports] == ["fail", "fail"]
    text = "\n".join(reports[1].lines)
    assert (
        "same run:     as test/a" in text
        and "FAIL examples/pytorch/train_resnet.py under other/a" in text
    )


def test_a_stack_runs_only_the_programs_no_stack_of_its_environment_ran(tmp_path, monkeypatch):
    """Stacks of one environment whose pages name different programs (Perlmutter's PyTorch
    pages run no skeleton; Frontier's do): each program's tests run once in the environment,
    whatever the order of the pages' programs, and a stack takes the runs made for another."""
    first, second = stack_lacking("a", []), Stack("other", "a", stack_lacking("a", []).raw)
    envs = fake_environment(tmp_path, first, [])
    twin = ROOT / "examples" / "pytorch" / "train_resnet_hvd.py"
    skeleton = ROOT / "examples" / "skeletons" / "ddp_skeleton.py"
    calls = []

    def passing_run(stack_key, python, programs, **kw):
        calls.append((stack_key, [p.name for p in programs]))
        return stack_ci.TestRun(ran=[stack_ci._rel(p) for p in programs], passed=2, seconds=1.0)

    monkeypatch.setattr(stack_ci, "run_tests", passing_run)
    earlier = stack_ci.SharedRuns()
    one = stack_ci.check_stack(first, [TRAINER, twin], envs_dir=envs, earlier=earlier)
    two = stack_ci.check_stack(second, [twin, skeleton, TRAINER], envs_dir=envs, earlier=earlier)
    assert calls == [
        ("test/a", ["train_resnet.py"]),
        ("test/a", ["train_resnet_hvd.py"]),
        ("other/a", ["ddp_skeleton.py"]),
    ]
    assert one.status == two.status == "pass"
    text = "\n".join(two.lines)
    assert "same run:     as test/a for examples/pytorch/train_resnet_hvd.py, " in text, text
    assert "PASS: 6 passed, 0 failed in 1 s" in text, text


# --------------------------------------------------------------------------- pieces
@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (  # pytest's long report of a failed assert on a trainer's output: its traceback's end
            "AssertionError: [train] ...\nTraceback (most recent call last):\n"
            "  File \"train_resnet.py\", line 3\nAttributeError: module 'torch.amp' has no "
            "attribute 'GradScaler'\nE   assert 1 == 0",
            "AttributeError: module 'torch.amp' has no attribute 'GradScaler'",
        ),
        (  # the trainer's own one-line error
            "E   AssertionError: error: train_resnet.py needs torch 2.1 or newer; this "
            "environment has 2.0.1\nerror: train_resnet.py needs torch 2.1 or newer; this "
            "environment has 2.0.1",
            "error: train_resnet.py needs torch 2.1 or newer; this environment has 2.0.1",
        ),
        (  # torchrun marks each rank's lines
            "E   AssertionError: resnet50: 2 rank(s)\n[rank1]: Traceback (most recent call last):\n"
            "[rank1]: AttributeError: module 'torch' has no attribute 'autocast'\n"
            "E   assert 1 == 0",
            "AttributeError: module 'torch' has no attribute 'autocast'",
        ),
        (  # from the repr() of a list of outputs: quotes come escaped
            "E   AssertionError: [(1, 'Traceback...\nAttributeError: \\'EagerTensor\\' object has "
            "no attribute \\'path\\'\n')]",
            "AttributeError: 'EagerTensor' object has no attribute 'path'",
        ),
        (
            "E   ModuleNotFoundError: No module named 'torchvision'",
            "ModuleNotFoundError: No module named 'torchvision'",
        ),
        ("assert [1, 2] == [1, 2, 3]", "assert [1, 2] == [1, 2, 3]"),
    ],
)
def test_the_reason_of_a_failure_is_the_line_that_says_why(text, reason):
    assert stack_ci.reason_of(text) == reason


def test_junit_reports_are_read_into_passes_and_failures():
    xml = (
        '<testsuites><testsuite><testcase name="a"/><testcase name="b"><failure message="boom">'
        "tests.py:3: in b\nE   KeyError: 'x'</failure></testcase>"
        '<testcase name="c"><skipped message="no"/></testcase></testsuite></testsuites>'
    )
    assert stack_ci._junit(xml, "") == (1, [("b", "KeyError: 'x'")])
    assert stack_ci._junit("<testsuites/>", "ERROR: file not found: x.py") == (
        0,
        [("(collection)", "no test ran: ERROR: file not found: x.py")],
    )


def test_a_stack_ci_cannot_run_is_skipped_with_its_reason(tmp_path):
    stack = stack_lacking("skipped", [])
    stack.raw["ci"] = {"skip": "no wheel of these versions for Python 3.11"}
    report = stack_ci.check_stack(stack, [TRAINER], envs_dir=tmp_path)
    assert report.status == "skip"
    assert any("no wheel of these versions for Python 3.11" in line for line in report.lines)
    assert not list(tmp_path.iterdir())  # nothing built


def test_an_unsupported_stack_is_reported_and_not_run(tmp_path):
    stack = stack_lacking("old", [])
    stack.raw["frameworks"] = {"torch": "1.7.1", "torchvision": "0.8.2"}
    report = stack_ci.check_stack(stack, [TRAINER], envs_dir=tmp_path)
    text = "\n".join(report.lines)
    assert report.status == "skip" and "every program of its pages needs newer" in text
    assert "train_resnet.py: torch 1.7.1 is older than" in text and "stops at start-up" in text


def _bede_with(tmp_path: Path, stack: str, **changes) -> Stack:
    """Bede's profile with ``changes`` made to one of its stacks, loaded as CI loads it."""
    data = yaml.safe_load((ROOT / "sites" / "bede.yaml").read_text(encoding="utf-8"))
    data["stacks"][stack].update(changes)
    path = tmp_path / "bede.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return load_profile(path).stacks[stack]


def test_a_stack_fact_changed_in_the_profile_changes_what_ci_installs_and_runs(tmp_path):
    """The profile is what the stacks session reads: a new framework version there is a new
    environment with that version; an older one than the trainer supports is a trainer refused
    by name, with nothing installed; today's versions are left to the tests session."""
    key = "opence-1.11-pytorch"
    as_recorded = stack_ci.environment_needed(_bede_with(tmp_path, key), [TRAINER], tmp_path)
    assert as_recorded is not None and "torch==2.1.2" in as_recorded.packages

    newer = {"torch": "2.2.2", "torchvision": "0.17.2", "numpy": "1.26"}
    moved = _bede_with(tmp_path, key, frameworks=newer)
    moved = stack_ci.environment_needed(moved, [TRAINER], tmp_path)
    assert moved is not None
    assert {"torch==2.2.2", "torchvision==0.17.2"} <= set(moved.packages)
    assert "torch==2.1.2" not in moved.packages and moved.path.name != as_recorded.path.name

    older = _bede_with(tmp_path, key, frameworks={"torch": "2.0.1", "torchvision": "0.15.2"})
    assert stack_ci.environment_needed(older, [TRAINER], tmp_path) is None
    report = stack_ci.check_stack(older, [TRAINER], envs_dir=tmp_path)
    text = "\n".join(report.lines)
    oldest = S.minimum_versions(TRAINER)["torch"]
    assert report.status == "skip" and f"torch 2.0.1 is older than {oldest}" in text, text

    pins = sorted(p for p in stack_ci.pinned() if p.startswith(("torch==", "torchvision==")))
    today = {p.split("==")[0]: p.split("==")[1] for p in pins}
    same = _bede_with(tmp_path, key, frameworks=today)
    assert stack_ci.environment_needed(same, [TRAINER], tmp_path) is None
    report = stack_ci.check_stack(same, [TRAINER], envs_dir=tmp_path)
    assert "pins the same versions" in "\n".join(report.lines)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("_stack-")]  # none built


def test_every_training_program_has_tests_registered():
    from clusterkit.runs import stack_pages

    for program in stack_pages.training_programs().values():
        rel = str(program.relative_to(ROOT))
        if rel in stack_ci.NOT_TESTED:  # said why, in words
            assert rel not in stack_ci.TESTS and len(stack_ci.NOT_TESTED[rel]) > 40
            continue
        assert rel in stack_ci.TESTS, rel
        assert (ROOT / stack_ci.TESTS[rel]).is_file()


def test_stacks_with_the_shared_environment_versions_are_left_to_the_tests_session(tmp_path):
    pins = sorted(p for p in stack_ci.pinned() if p.startswith(("torch==", "torchvision==")))
    assert len(pins) == 2, pins  # requirements/ml.txt pins torch and torchvision
    today = stack_lacking("today", [])
    today.raw["ci"] = {"pip": pins}
    report = stack_ci.check_stack(today, [TRAINER], envs_dir=tmp_path)
    text = "\n".join(report.lines)
    assert report.status == "pass" and "pins the same versions: nox -s tests runs" in text
    assert not list(tmp_path.iterdir())  # no second copy of the shared environment
    older = stack_lacking("older", [])
    older.raw["ci"] = {"pip": ["torch==2.1.2", "torchvision==0.16.2"]}
    assert not stack_ci.covered_by_tests_session(S.ci_route(older))


def test_stacks_no_page_names_are_reported_and_left_alone(tmp_path):
    report = stack_ci.check_stack(stack_lacking("unnamed", []), None, envs_dir=tmp_path)
    assert report.status == "skip" and "no page names this stack" in "\n".join(report.lines)
    assert not list(tmp_path.iterdir())


def test_the_session_stops_on_a_page_naming_an_unknown_stack(monkeypatch, capsys):
    from clusterkit.runs import stack_pages
    from clusterkit.sites.errors import Finding

    finding = Finding("docs/x.md", 3, "stack-exists", "no stack 'bede/nope'")
    monkeypatch.setattr(stack_pages, "check_all", lambda: [finding])
    assert stack_ci.main([]) == 1
    assert "docs/x.md:3: [stack-exists] no stack 'bede/nope'" in capsys.readouterr().out


def test_a_warning_on_a_page_is_printed_and_the_stacks_are_still_tested(monkeypatch, capsys):
    """A historical stack older than a trainer's minimum is a notice, not a stop."""
    from clusterkit.runs import stack_pages
    from clusterkit.sites.errors import Finding

    notice = Finding("docs/x.md", 2, "stack-minimum", "older than needed", level="warning")
    monkeypatch.setattr(stack_pages, "check_all", lambda: [notice])
    tested = []
    monkeypatch.setattr(stack_ci.S, "all_stacks", lambda: tested.append(1) or {})
    kept = []  # with no stacks, every environment would look unused: none is removed here
    monkeypatch.setattr(stack_ci, "unused_environments", lambda used: kept.append(used) or [])
    assert stack_ci.main([]) == 0
    assert tested and kept and "docs/x.md:2: warning: [stack-minimum]" in capsys.readouterr().out


def test_a_run_under_way_for_another_stack_is_waited_for_not_repeated():
    runs, started = stack_ci.SharedRuns(), []

    def slow_run():
        started.append(1)
        time.sleep(0.3)
        return stack_ci.TestRun(passed=3)

    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda k: runs.run_once(("env", "prog"), k, slow_run), ["a/x", "a/y"]))
    assert started == [1]
    assert [first for first, _ in got] == ["a/x", "a/x"]
    assert got[0][1] is got[1][1] and got[0][1].passed == 3


def test_a_run_past_its_time_is_stopped_and_its_cpu_time_counted(tmp_path):
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    finished, _, cpu = stack_ci.run_measured(
        [sys.executable, "-c", burn + "print('burnt', flush=True)"],
        tmp_path,
        {},
        60,
        tmp_path / "a",
    )
    assert finished and cpu >= 0.25
    began = time.monotonic()
    finished, output, _ = stack_ci.run_measured(
        [sys.executable, "-c", "print('started', flush=True); import time; time.sleep(60)"],
        tmp_path,
        {},
        1,
        tmp_path / "b",
    )
    assert not finished and "started" in output
    assert time.monotonic() - began < 10


def test_a_stack_environment_gets_the_import_gc_start_up_line(tmp_path):
    """nox -s stacks sets CLUSTERKIT_IMPORT_GC=paused; the line that reads it is written into
    each environment's site-packages before its tests run."""
    from clusterkit.runs import import_gc

    env = stack_ci.Environment.for_route(S.ci_route(stack_lacking("gc", [])), tmp_path)
    site = env.path / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    env.hook_imports()
    assert (site / import_gc.PTH_NAME).read_text() == import_gc.PTH_LINE


def test_the_stacks_of_a_site_out_of_service_are_a_record_not_tested():
    stacks = S.all_stacks()
    ended = stack_ci.route_for(stacks["archer2/pytorch-2.9.1-gpu"], None)
    assert not ended.runs and "ARCHER2 is end of service (since 2026-11-21)" in ended.skip
    retired = stack_ci.route_for(stacks["summit/open-ce-1.10.0-py39"], None)
    assert not retired.runs and "Summit is retired" in retired.skip
    assert stack_ci.route_for(stacks["frontier/pytorch-rocm"], None).runs
