"""Line coverage of the example programs: measured in spawned processes, copies counted for
their program, and every unrun line either listed in the reasons file or reported."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from clusterkit.pages import coverage as COV
from clusterkit.runs import line_reasons as LR
from clusterkit.runs import lines_hook
from clusterkit.runs import program_lines as PL
from clusterkit.sites.profiles import ROOT

PROGRAM = textwrap.dedent("""\
    import sys


    def main(gpu):
        if gpu:
            print("cuda")
            print("more cuda")
        else:
            print("cpu")
        try:
            return 0
        except OSError:
            return 1


    class Flag:
        def raised(self):
            return False


    if __name__ == "__main__":
        sys.exit(main("--gpu" in sys.argv))
    """)
# statement lines of PROGRAM
IMPORT, DEF_MAIN, IF, CUDA1, CUDA2, CPU, TRY, RET0, EXCEPT, RET1 = 1, 4, 5, 6, 7, 9, 10, 11, 12, 13
CLASS, DEF_RAISED, RET_FALSE, MAIN_IF, EXIT = 16, 17, 18, 21, 22


@pytest.fixture
def tree(tmp_path) -> Path:
    (tmp_path / "examples" / "demo").mkdir(parents=True)
    (tmp_path / "examples" / "demo" / "prog.py").write_text(PROGRAM)
    return tmp_path


def program(tree: Path) -> Path:
    return tree / "examples" / "demo" / "prog.py"


def save(data_dir: Path, measured: str, lines: list[int], suffix: str) -> None:
    from coverage import CoverageData

    data = CoverageData(basename=str(data_dir / PL.DATA_NAME), suffix=suffix)
    data.add_lines({measured: lines})
    data.write()


def measure(tree: Path, data_dir: Path) -> PL.Measurement:
    return PL.measure(data_dir, [program(tree)], root=tree)


def reasons(tree: Path, text: str) -> tuple[list[LR.Reason], list]:
    path = tree / "tests" / "coverage-reasons.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return LR.load(path, root=tree)


def hooked_env(tmp_path: Path, config: Path) -> dict[str, str]:
    """The environment of a measured test run, with the start-up line of the hook run from a
    sitecustomize module (the tests session puts the same line in a .pth file instead)."""
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(lines_hook.PTH_LINE)
    return dict(os.environ, CLUSTERKIT_LINES=str(config), PYTHONPATH=f"{hook}:{ROOT}")


def test_spawned_processes_are_measured_and_copies_count_for_their_program(tree, tmp_path):
    """What the tests session does: CLUSTERKIT_LINES reaches a child process that runs a
    program (here a copy of it in another directory, as the job-script tests make), and the
    hook measures it with no change to the command."""
    data_dir = tmp_path / "data"
    config = PL.start(data_dir, [program(tree)])
    job = tmp_path / "job"
    job.mkdir()
    (job / "prog.py").write_text(PROGRAM)
    env = hooked_env(tmp_path, config)
    for argv in ([], ["--gpu"]):
        r = subprocess.run(
            [sys.executable, "prog.py", *argv], cwd=job, env=env, capture_output=True, text=True
        )
        assert r.returncode == 0 and r.stderr == "", r.stderr  # no warnings from coverage
    (measured,) = measure(tree, data_dir).programs
    assert measured.processes == 2
    assert measured.missing == [EXCEPT, RET1, RET_FALSE]
    assert measured.covered == len(measured.statements) - 3


def test_the_hook_line_written_to_site_packages_starts_the_measurement(tree, tmp_path):
    """install_hook's .pth line, read by site.addsitedir in a `python -c` wrapper that runs
    the program with runpy (a wrapper names the program among its arguments)."""
    data_dir = tmp_path / "data"
    config = PL.start(data_dir, [program(tree)])
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    PL.install_hook(site_dir)
    wrapper = (
        f"import runpy, site, sys; site.addsitedir({str(site_dir)!r}); "
        "runpy.run_path(sys.argv[1], run_name='__main__')"
    )
    env = dict(os.environ, CLUSTERKIT_LINES=str(config), PYTHONPATH=str(ROOT))
    r = subprocess.run(
        [sys.executable, "-c", wrapper, str(program(tree))], env=env, capture_output=True,
        text=True,
    )  # fmt: skip
    assert r.returncode == 0 and r.stderr == "", r.stderr
    (measured,) = measure(tree, data_dir).programs
    assert measured.processes == 1 and measured.missing == [CUDA1, CUDA2, EXCEPT, RET1, RET_FALSE]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/job/train_resnet.py", "--tiny"], True),  # python train_resnet.py, a rank, a copy
        (["-c", "traced", "/x/train_resnet_keras.py"], True),  # a runpy wrapper
        (["/t/mpi_standin.py", "/x/train_resnet.py", "--backend", "mpi"], True),  # a stand-in
        (["-c", "--multiprocessing-fork", "tracker_fd=5"], True),  # a spawned loader worker
        (["/env/bin/torchrun", "--nproc_per_node=2", "train_resnet.py"], False),  # its workers
        (["/shims/srun", "python", "train_resnet.py"], False),  # the ranks it starts
        (["-c", "import sys;exec(eval(sys.stdin.readline()))"], False),  # a pytest worker
        (["-m"], False),
        ([], False),
    ],
)
def test_only_processes_that_run_a_program_are_measured(argv, expected):
    names = {"train_resnet.py", "train_resnet_keras.py"}
    assert lines_hook.wanted(argv, names) is expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            '"""doc"""\nfrom __future__ import annotations\nimport os\nimport torch\n'
            "from torch.utils.data import DataLoader\nimport torchvision\nX = 1\nimport numpy\n",
            ["torch", "torch.utils.data", "torchvision"],  # up to the first other statement
        ),
        (
            "import os\nos.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1')\nimport tensorflow\n",
            [("setdefault", "TF_CPP_MIN_LOG_LEVEL", "1"), "tensorflow"],
        ),
        ("import os\nos.environ['A'] = '1'\nimport tensorflow\n", []),  # not a default
        ("import os\nos.environ.setdefault('A', os.getcwd())\nimport torch\n", []),
        ("import torch\nimport job_runtime\nimport torchvision\n", ["torch"]),  # its own module
        ("import torch\nfrom . import x\n", ["torch"]),
        ("def broken(:\n", []),
    ],
)
def test_only_a_program_s_leading_framework_imports_come_before_the_measurement(
    tmp_path, source, expected
):
    program = tmp_path / "program.py"
    program.write_text(source)
    steps = [("import", x) if isinstance(x, str) else x for x in expected]
    assert lines_hook.leading_imports(str(program)) == steps


def test_the_measurement_starts_before_the_trainers_own_code():
    """The trainers' frameworks are loaded before the measurement, with the defaults they set
    first; a module of their own (job_runtime, measured) is not."""
    examples = ROOT / "examples"
    resnet = lines_hook.leading_imports(str(examples / "pytorch" / "train_resnet.py"))
    assert ("import", "torchvision") in resnet and ("import", "job_runtime") not in resnet
    keras = lines_hook.leading_imports(str(examples / "tensorflow" / "train_resnet_keras.py"))
    assert keras[0] == ("setdefault", "TF_CPP_MIN_LOG_LEVEL", "1")
    assert ("import", "tensorflow") in keras
    lm = lines_hook.leading_imports(str(examples / "pytorch" / "train_lm.py"))
    assert lm[0] == ("setdefault", "HF_HUB_OFFLINE", "1") and ("import", "torch") in lm


def test_a_test_process_measures_what_it_runs_in_a_measured_block(tree, tmp_path):
    """A pytest worker is not measured as a whole; a test that runs a program in-process
    measures that stretch, and its lines are saved although the process also calls measure()
    (coverage.py stops saving a process's own data when a Coverage object is created in a
    process measured from its start)."""
    data_dir = tmp_path / "data"
    config = PL.start(data_dir, [program(tree)])
    other = tmp_path / "other"
    other.mkdir()
    script = textwrap.dedent(f"""\
        import runpy
        from pathlib import Path
        from clusterkit.runs import lines_hook, program_lines as PL
        runpy.run_path({str(program(tree))!r})  # outside the block: not measured
        PL.measure(Path({str(other)!r}), [Path({str(program(tree))!r})], root=Path({str(tree)!r}))
        with lines_hook.measured():
            runpy.run_path({str(program(tree))!r})
        """)
    env = hooked_env(tmp_path, config)
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    (measured,) = measure(tree, data_dir).programs
    assert measured.processes == 1
    # imported, not run as __main__: the definitions ran, nothing inside them
    ran = [IMPORT, DEF_MAIN, CLASS, DEF_RAISED, MAIN_IF]
    assert sorted(set(measured.statements) - set(measured.missing)) == ran


def test_a_process_that_runs_no_program_records_nothing_and_says_nothing(tree, tmp_path):
    config = PL.start(tmp_path / "data", [program(tree)])
    env = hooked_env(tmp_path, config)
    r = subprocess.run([sys.executable, "-c", "print(1)"], env=env, capture_output=True, text=True)
    assert (r.returncode, r.stdout, r.stderr) == (0, "1\n", "")
    assert not list((tmp_path / "data").glob(".coverage.*"))


def test_a_copy_that_differs_from_the_program_is_left_out(tree, tmp_path):
    save(tmp_path, str(program(tree)), [IMPORT, DEF_MAIN], "a")
    save(tmp_path, "/elsewhere/prog.py", [2, 3], "b")  # blank lines of the original
    m = measure(tree, tmp_path)
    assert m.programs[0].processes == 1
    assert len(m.problems) == 1 and "the copy differs from the program" in m.problems[0]


def test_anchors_cover_a_statement_and_its_body_not_its_other_branches(tree):
    found, findings = reasons(
        tree,
        """\
        examples/demo/prog.py:
          - function: main
            code: "if gpu:"
            reason: needs a GPU, which CI has not
          - function: main
            code: "except OSError"
            reason: a failure CI cannot cause
          - function: Flag.raised
            code: return False
            reason: nothing calls it here
        """,
    )
    assert findings == []
    spans = [(r.function, r.first, r.last) for r in found]
    assert spans == [("main", IF, CUDA2), ("main", EXCEPT, RET1), ("Flag.raised", 18, 18)]


def test_through_extends_an_entry_to_a_later_statement(tree):
    (found,), findings = reasons(
        tree,
        """\
        examples/demo/prog.py:
          - {function: main, code: print("cuda"), through: print("cpu"), reason: several lines}
        """,
    )
    assert findings == [] and (found.first, found.last) == (CUDA1, CPU)


@pytest.mark.parametrize(
    ("entry", "rule", "says"),
    [
        ("{function: nowhere, code: x, reason: a reason here}", "reason-anchor", "no function"),
        ("{function: main, code: absent(, reason: a reason here}", "reason-anchor", "no statement"),
        ("{function: main, code: print(, reason: a reason here}", "reason-anchor", "3 statements"),
        ("{function: main, code: 'if gpu:', reason: GPU}", "reasons-format", "says nothing"),
        ("{function: main, code: 'if gpu:'}", "reasons-format", "needs function, code and"),
        ("{function: main, code: 'if', reason: xxxxxxxxx, line: 3}", "reasons-format", "unknown"),
    ],
)
def test_bad_entries_are_findings_with_the_line(tree, entry, rule, says):
    _, findings = reasons(tree, f"examples/demo/prog.py:\n  - {entry}\n")
    assert findings and findings[-1].rule == rule and says in findings[-1].message
    assert findings[-1].line == 2 and Path(findings[-1].path).name == "coverage-reasons.yaml"


def test_an_unknown_program_is_a_finding(tree):
    _, (finding,) = reasons(tree, "examples/demo/gone.py:\n  - {}\n")
    assert finding.rule == "reasons-format" and finding.line == 1


def test_unrun_lines_without_a_reason_and_reasons_for_lines_that_ran(tree, tmp_path):
    ran = [IMPORT, DEF_MAIN, IF, CPU, TRY, RET0, CLASS, DEF_RAISED, MAIN_IF, EXIT]
    save(tmp_path, str(program(tree)), ran, "a")
    found, findings = reasons(
        tree,
        """\
        examples/demo/prog.py:
          - {function: main, code: "if gpu:", reason: "needs a GPU, which CI has not"}
          - {function: main, code: "return 0", reason: "stale; this line ran"}
        """,
    )
    assert findings == []
    m = measure(tree, tmp_path)
    findings = LR.check(m, found, tree / "tests" / "coverage-reasons.yaml")
    by_rule = {}
    for f in findings:
        by_rule.setdefault(f.rule, []).append(f)
    # the GPU lines have their reason; the except branch and Flag.raised have none
    assert [(f.line, f.message.split(" (")[0]) for f in by_rule["line-uncovered"]] == [
        (EXCEPT, f"lines {EXCEPT}-{RET1}"),
        (RET_FALSE, f"line {RET_FALSE}"),
    ]
    assert "Flag.raised" in by_rule["line-uncovered"][1].message
    (stale,) = by_rule["reason-stale"]
    assert stale.line == 3 and "'return 0'" in stale.message
    (low,) = by_rule["coverage-low"]
    assert "10 of 15 statements ran" in low.message


def test_a_program_with_a_floor_warns_of_unrun_lines_and_fails_below_it(
    tree, tmp_path, monkeypatch
):
    save(tmp_path, str(program(tree)), [IMPORT, DEF_MAIN, IF, CPU, TRY, RET0], "a")
    m = measure(tree, tmp_path)  # 6 of 15 statements: 40 %
    monkeypatch.setattr(LR, "FLOORS", {"examples/demo/prog.py": 40.0})
    findings = LR.check(m, [], tree / "tests" / "coverage-reasons.yaml")
    assert findings and {f.rule for f in findings} == {"line-uncovered"}
    assert {f.level for f in findings} == {"warning"}
    monkeypatch.setattr(LR, "FLOORS", {"examples/demo/prog.py": 41.0})
    (low,) = [f for f in LR.check(m, [], tree) if f.rule == "coverage-low"]
    assert low.level == "error" and "below 41 %" in low.message


def test_the_page_lists_each_program_and_its_unrun_lines_with_reasons(tree, tmp_path):
    save(tmp_path, str(program(tree)), [IMPORT, DEF_MAIN, IF, CPU, TRY, RET0], "a")
    found, _ = reasons(
        tree,
        """\
        examples/demo/prog.py:
          - {function: main, code: "if gpu:", reason: "needs a GPU, which CI has not"}
        """,
    )
    m = measure(tree, tmp_path)
    text = "\n".join(COV.program_lines_section(COV.LineReport(m, LR.runs(m, found))))
    assert "| examples/demo/prog.py | 15 | 6 | 40.0 | 95 | 1 |" in text.replace("\\_", "_")
    assert f'| {CUDA1}-{CUDA2} | main | print("cuda") | needs a GPU, which CI has not |' in text
    assert (
        f"| {DEF_RAISED}-{RET_FALSE} | Flag.raised | def raised(self): | no reason given |" in text
    )


def test_the_reasons_file_of_this_repository_resolves():
    """Every anchor of tests/coverage-reasons.yaml names one statement of its program."""
    _, findings = LR.load()
    assert findings == [], "\n".join(map(str, findings))


def test_example_programs_have_distinct_names():
    names = [p.name for p in PL.programs()]
    assert names and len(names) == len(set(names))
    assert all(p.is_relative_to(ROOT / "examples") for p in PL.programs())


def test_a_program_tested_in_a_session_of_its_own_is_judged_only_where_it_can_run(
    tree, tmp_path, monkeypatch
):
    """The Horovod twins run under `nox -s horovod`: where the distribution they need is not
    installed, none of their lines is judged (tests that load them with stand-ins run a few);
    where it is, they are judged as any other program."""
    found, _ = reasons(
        tree,
        """\
        examples/demo/prog.py:
          - {function: main, code: "if gpu:", reason: "needs a GPU, which CI has not"}
        """,
    )
    save(tmp_path, str(program(tree)), [IMPORT, DEF_MAIN, IF, CPU, TRY, RET0], "b")
    absent = {"examples/demo/prog.py": ("no-such-distribution-here", "nox -s elsewhere")}
    monkeypatch.setattr(LR, "ELSEWHERE", absent)
    assert LR.tested_elsewhere("examples/demo/prog.py") == "nox -s elsewhere"
    assert LR.check(measure(tree, tmp_path), found, tree) == []
    present = {"examples/demo/prog.py": ("pytest", "nox -s elsewhere")}  # installed here
    monkeypatch.setattr(LR, "ELSEWHERE", present)
    assert LR.tested_elsewhere("examples/demo/prog.py") is None
    assert {f.rule for f in LR.check(measure(tree, tmp_path), found, tree)} >= {"coverage-low"}
