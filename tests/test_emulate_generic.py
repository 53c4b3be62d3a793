"""``check-job --site generic`` and the rules it applies to a script of any Slurm site: options
from the real tools, placeholders, the shell's own reading (bash -n), lines that run in the
wrong place, jobs that launch nothing, steps larger than their job; and ``check-job`` over many
files with one exit status."""

from __future__ import annotations

import shutil
import textwrap

import pytest

from clusterkit.cli import main
from clusterkit.emulate.checkjob import check_job_file
from clusterkit.sites.profiles import load_site

GENERIC = load_site("generic")
FRONTIER = load_site("frontier")
needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on PATH")


def judge(tmp_path, text: str, site=GENERIC, name: str = "job.sbatch"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return check_job_file(path, site)


def rules(report, level: str = "error") -> list[tuple[int, str]]:
    return [(f.line, f.rule) for f in report.findings if f.level == level]


# --------------------------------------------------------------------------- any Slurm site
def test_site_facts_are_not_applied(tmp_path):
    report = judge(
        tmp_path,
        """
        #!/bin/bash
        #SBATCH --partition=small-g --account=project_462000002 --qos=whatever
        #SBATCH --nodes=200 --gres=gpu:mi250:8,nvme:1 --time=7-00:00:00 --mem=2000G
        module load LUMI/24.03 partition/G
        srun --ntasks-per-node=8 hostname
        """,
    )
    assert report.errors == [] and report.warnings == [], report.findings


def test_a_misspelt_option_is_still_an_error_and_a_plugin_option_a_warning(tmp_path):
    report = judge(
        tmp_path,
        """
        #!/bin/bash
        #SBATCH --partion=gpu
        #SBATCH --uenv=prgenv-gnu/24.11:v1 --view=default
        srun --environment=./env.toml hostname
        """,
    )
    [error] = report.errors
    assert (error.line, error.rule) == (2, "sbatch-option")
    assert "unrecognized option '--partion=gpu'" in error.message
    assert "did you mean --partition" in error.message
    plugins = [f for f in report.warnings if f.rule == "plugin-option"]
    assert [(f.line, f.message.split(" is ")[0]) for f in plugins] == [
        (3, "sbatch: --uenv"),
        (3, "sbatch: --view"),
        (4, "srun: --environment"),
    ]


def test_a_plugin_option_is_an_error_on_a_profiled_site(tmp_path):
    report = judge(tmp_path, "#!/bin/bash\n#SBATCH -A ABC123\n#SBATCH --uenv=x\nsrun hostname\n",
                   FRONTIER)  # fmt: skip
    assert (3, "sbatch-option") in rules(report)


@pytest.mark.parametrize("line", ["srun -u python train.py", "srun -ul python train.py",
                                  "srun --unbuffered -l python train.py"])  # fmt: skip
def test_srun_u_is_unbuffered(tmp_path, line):
    report = judge(tmp_path, f"#!/bin/bash\n#SBATCH -N 1\n{line}\n")
    assert report.errors == [], report.errors
    assert report.plan["steps"][0]["command"] == ["python", "train.py"]


def test_an_optional_argument_is_taken_only_attached(tmp_path):
    # getopt_long: --exclusive takes =user, never the next word
    report = judge(tmp_path, "#!/bin/bash\n#SBATCH -N 1\nsrun --exclusive hostname -x\n")
    assert report.errors == [] and report.plan["steps"][0]["command"] == ["hostname", "-x"]


def test_hint_values_are_slurms(tmp_path):
    report = judge(tmp_path, "#!/bin/bash\n#SBATCH -N 1\n#SBATCH --hint=exclusive\nsrun x\n")
    [f] = report.errors
    assert f.line == 3 and 'unrecognized --hint argument "exclusive"' in f.message


# --------------------------------------------------------------------------- placeholders
@pytest.mark.parametrize(
    ("directive", "option"),
    [
        ("-A XXXYYY", "--account"),
        ("-A <proj>", "--account"),
        ("-A bdXXXYY", "--account"),
        ("--account=project_xxx", "--account"),
        ("--account=your_project", "--account"),
        ("-p <partition>", "--partition"),
        ("-t <timelimit>", "--time"),
        ("-c <thread>", "--cpus-per-task"),
        ("--ntasks-per-node <#sockets * s>", "--ntasks-per-node"),
        ("-o /scratch/<project>/out.txt", "--output"),
        ("-J <jobname>", "--job-name"),
    ],
)
@pytest.mark.parametrize("site", [GENERIC, FRONTIER], ids=["generic", "frontier"])
def test_a_placeholder_is_one_fill_in_warning(tmp_path, directive, option, site):
    report = judge(tmp_path, f"#!/bin/bash\n#SBATCH {directive}\n#SBATCH -N 1\nsrun hostname\n",
                   site)  # fmt: skip
    notes = [f for f in report.warnings if f.rule == "placeholder"]
    assert [(f.line, f.message.split(":")[0]) for f in notes] == [(2, f"fill in {option}")]
    assert not [f for f in report.errors if f.line == 2], report.errors


def test_a_skeleton_line_is_filled_in_not_refused(tmp_path):
    report = judge(tmp_path, "#!/bin/bash\n#SBATCH ...\n#SBATCH -N 1\nsrun hostname\n")
    assert report.errors == [] and rules(report, "warning") == [(2, "placeholder")]


@needs_bash
def test_a_placeholder_command_is_not_a_syntax_error(tmp_path):
    report = judge(
        tmp_path,
        """
        #!/bin/bash
        #SBATCH -N 1
        export WANDB_API_KEY=<api key>
        srun <application> <args>
        """,
    )
    assert report.errors == [], report.errors


# --------------------------------------------------------------------------- the shell
@needs_bash
def test_a_syntax_error_in_a_bash_c_string_through_srun(tmp_path):
    report = judge(
        tmp_path,
        """
        #!/bin/bash
        #SBATCH -N 1
        srun -n 1 bash -c "
          if [ -d /tmp ]; then
            echo yes
          fi; elif true; then echo no; fi"
        """,
    )
    [f] = report.errors
    assert f.rule == "bash-syntax" and "unexpected token `elif'" in f.message
    assert f.line == 6  # the string's line 4, which starts on the script's line 3
    assert "bash-parse" not in {g.rule for g in report.findings}


@needs_bash
def test_a_syntax_error_of_the_script_is_an_error_at_its_line(tmp_path):
    report = judge(tmp_path, "#!/bin/bash\n#SBATCH -N 1\nfor x in 1 2; do\n  echo $x\ndone\nfi\n")
    assert rules(report) == [(6, "bash-syntax")]


@needs_bash
def test_bashlex_trouble_is_silent_where_bash_reads_the_script(tmp_path):
    # bashlex cannot read a case statement with ;;& nor this nesting, bash can
    text = "#!/bin/bash\n#SBATCH -N 1\ncase $1 in a) echo a ;;& *) echo b ;; esac\nsrun hostname\n"
    report = judge(tmp_path, text)
    assert report.errors == [] and "bash-parse" not in {f.rule for f in report.findings}


def test_a_comment_on_the_shebang_line(tmp_path):
    report = judge(tmp_path, "#!/bin/bash -l  # <--- keep -l\n#SBATCH -N 1\nsrun hostname\n")
    [f] = report.errors
    assert (f.line, f.rule) == (1, "shebang-argument") and "'-l  # <--- keep -l'" in f.message


def test_blanks_after_a_continuation_backslash(tmp_path):
    report = judge(tmp_path, "#!/bin/bash\n#SBATCH -N 1\nsrun -n 2 \\ \n  python train.py\n")
    assert (3, "continuation-blank") in rules(report)
    assert "line 4 (python train.py) runs as a command of its own" in report.errors[0].message


def test_a_job_whose_every_launch_is_commented_out(tmp_path):
    text = "#!/bin/bash\n#SBATCH -N 1\nmodule load x\n#srun -n 2 python a.py\n# srun b\n"
    report = judge(tmp_path, text)
    assert report.errors == [] and rules(report, "warning") == [(4, "no-launch")]
    report = judge(tmp_path, text + "python c.py\n")
    assert "no-launch" not in {f.rule for f in report.findings}


def test_an_assignment_with_blanks_runs_a_command(tmp_path):
    report = judge(tmp_path, "#!/bin/bash\n#SBATCH -N 1\nOUT = /scratch/x\nsrun hostname\n")
    assert rules(report) == [(3, "assignment-blanks")]


def test_arithmetic_on_a_variable_the_job_does_not_get(tmp_path):
    text = (
        "#!/bin/bash\n#SBATCH -N 1\n{c}export PPN=$(($SLURM_CPUS_PER_TASK-1))\nsrun x +ppn $PPN\n"
    )
    report = judge(tmp_path, text.format(c=""))
    assert rules(report) == [(3, "unset-variable")]
    report = judge(tmp_path, text.format(c="#SBATCH -c 8\n"))
    assert report.errors == []


# --------------------------------------------------------------------------- steps and jobs
def test_a_step_inherits_cpus_per_task_and_outgrows_its_job(tmp_path):
    # srun --ntasks=8 in a 1-node job of 4 tasks x 8 CPUs: 8 x 8 = 64 CPUs, the job holds 32
    text = (
        "#!/bin/bash\n#SBATCH -N 1\n#SBATCH --ntasks-per-node=4\n#SBATCH -c 8\nsrun --ntasks=8 x\n"
    )
    report = judge(tmp_path, text)
    [f] = report.errors
    assert (f.line, f.rule) == (5, "step-cpus") and "More processors requested" in f.message


def test_a_step_of_more_tasks_than_its_nodes_hold(tmp_path):
    text = "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=4\n"
    text += "srun --ntasks=10 --tasks-per-node=4 x\n"
    report = judge(tmp_path, text)
    assert (4, "step-cpus") in rules(report)


def test_an_unshaped_job_is_not_judged_by_cpus(tmp_path):
    # only --nodes: many sites give whole nodes, whose size is not known here
    report = judge(tmp_path, "#!/bin/bash\n#SBATCH --nodes=1\nsrun --ntasks=4 x\n")
    assert report.errors == []


def test_ibrun_needs_hostfile_entries_of_the_job(tmp_path):
    report = judge(tmp_path, "#!/bin/bash\n#SBATCH -n 1\nibrun -N 6 -n 12 a.out\n")
    assert rules(report) == [(3, "step-tasks")]
    report = judge(tmp_path, "#!/bin/bash\n#SBATCH -N 2 -n 8\nibrun -n 4 -o 4 a.out\n")
    assert report.errors == []


# --------------------------------------------------------------------------- the command
def _run(capsys, *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main(["check-job", *argv])
    _out, err = capsys.readouterr()
    assert "Traceback" not in err
    return exc.value.code, err


def test_many_files_and_globs_one_exit_status(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ok.sbatch").write_text("#!/bin/bash\n#SBATCH -N 1\nsrun hostname\n")
    (tmp_path / "bad.sbatch").write_text("#!/bin/bash\n#SBATCH --nodes=0\nsrun hostname\n")
    (tmp_path / "warn.sbatch").write_text("#!/bin/bash\n#SBATCH -A <proj>\nsrun hostname\n")
    code, err = _run(capsys, "--site", "generic", "ok.sbatch", "warn.sbatch")
    assert code == 0 and err.splitlines()[0].startswith("warn.sbatch:2: warning: [placeholder]")
    code, err = _run(capsys, "--site", "generic", "*.sbatch")  # quoted: not the shell's glob
    assert code == 1
    lines = err.splitlines()
    assert lines[0].startswith("bad.sbatch:2: error: [node-count] sbatch: error:")
    assert lines[-1] == "3 scripts judged against a Slurm site (generic: no site facts)"
    code, err = _run(capsys, "--site", "generic", "ok.sbatch", "none*.sh", "gone.sbatch")
    assert code == 2 and "gone.sbatch: error: [script-readable]" in err


def test_an_unknown_site_names_generic(capsys, tmp_path):
    code, err = _run(capsys, "--site", "nosuch", str(tmp_path / "x"))
    assert code == 1 and "generic" in err


def test_a_job_on_a_retired_file_system(tmp_path):
    text = """
    #!/bin/bash
    #SBATCH -A ABC123
    #SBATCH -N 1
    #SBATCH -t 10
    cd /gpfs/alpine/<proj>/scratch
    srun -n 1 hostname
    """
    report = judge(tmp_path, text, FRONTIER)
    [f] = report.errors
    assert (f.line, f.rule) == (5, "path-retired")
    assert "/gpfs/alpine/<proj>/scratch is on Alpine" in f.message
    assert "use /lustre/orion" in f.message


def test_a_module_one_letter_from_a_known_one_is_an_error_in_a_partial_inventory():
    from clusterkit.emulate.modules import check_module

    archer2 = load_site("archer2")
    assert archer2.data["module_inventory"]["coverage"] == "partial"
    [f] = check_module("job.slurm", 7, "pyytorch", archer2)
    assert f.level == "error" and f.rule == "module-known" and "did you mean pytorch?" in f.message
    [g] = check_module("job.slurm", 7, "gromacs", archer2)  # far from every listed name
    assert g.level == "warning" and g.rule == "module-unlisted"
