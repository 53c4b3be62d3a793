"""``shifter`` in a job script: its options as NERSC/shifter's getopt reads them, and the
command it runs inside the image judged where it runs."""

from __future__ import annotations

import subprocess

import pytest

from clusterkit.emulate import shifter
from clusterkit.emulate.sbatch import check_slurm_script
from clusterkit.sites.profiles import load_site


@pytest.mark.parametrize(
    "args, opts, command",
    [
        (["python", "t.py"], {}, ["python", "t.py"]),
        (["--image=ubuntu:22.04", "bash"], {"image": ["ubuntu:22.04"]}, ["bash"]),
        (["-V", "/a:/b", "--env", "A=1", "python", "-V"], {"V": ["/a:/b"], "env": ["A=1"]},
         ["python", "-V"]),
        (["--entry", "--", "-x"], {"entry": [""]}, ["-x"]),
        (["--vol=/a:/b", "-Ev", "true"], {"volume": ["/a:/b"], "E": [""], "v": [""]}, ["true"]),
    ],
)  # fmt: skip
def test_options_are_read_as_shifters_getopt_reads_them(args, opts, command):
    assert shifter.parse(args) == (opts, command)


@pytest.mark.parametrize(
    "args, rule",
    [
        (["-x", "true"], "shifter-option"),
        (["--image"], "shifter-option"),
        (["--clearenv=1", "true"], "shifter-option"),
        (["--volume=/a", "true"], "shifter-volume"),
        (["--image=ubuntu"], "shifter-command"),
    ],
)
def test_bad_shifter_lines_are_refused(args, rule):
    _command, findings = shifter.check("job.sbatch", 3, args)
    assert [f.rule for f in findings] == [rule]


def test_the_command_inside_the_image_is_judged_where_srun_runs_it():
    text = (
        "#!/bin/bash\n#SBATCH -C gpu\n#SBATCH -N 1\n#SBATCH --ntasks-per-node=4\n"
        "#SBATCH --gpus-per-node=4\n#SBATCH --image=nersc/pytorch:25.06.01\n"
        "#SBATCH --module=gpu,nccl-plugin\n"
        "srun shifter --env A=1 python train_resnet.py --no-such-flag\n"
    )
    report = check_slurm_script("job.sbatch", load_site("perlmutter"), text=text)
    assert [(f.line, f.rule) for f in report.errors] == [(8, "script-flag-unknown")]
    assert report.warnings == []  # --image and --module are the Shifter plugin's options


def test_the_shifter_shim_runs_the_command_with_its_variables(emulated_env):
    """The shim a job's ``srun shifter ...`` reaches: a good line runs its command here, with
    the variables ``--env`` sets and a note that no image is used; a bad one stops, as
    shifter does, before running anything."""

    def shifter_(*args):
        cmd = ["shifter", *args]
        return subprocess.run(cmd, env=emulated_env, capture_output=True, text=True)

    r = shifter_("--image=nersc/pytorch:25.06.01", "-V", "/a:/b", "--env", "X=1", "sh", "-c",
                 "echo X=$X")  # fmt: skip
    assert (r.returncode, r.stdout) == (0, "X=1\n"), r.stderr
    assert "running sh directly, not in image nersc/pytorch:25.06.01" in r.stderr
    assert "volumes not bound here: /a:/b" in r.stderr
    r = shifter_("--bogus", "echo", "ran")
    assert r.returncode == 1 and "unrecognized option '--bogus'" in r.stderr and not r.stdout
    r = shifter_("--env", "X=1")
    assert r.returncode == 1 and "no command to run in the image" in r.stderr
    assert "Traceback" not in r.stderr


# ----------------------------------------------------------------------------- podman-hpc
@pytest.mark.parametrize(
    "args, inner, rules",
    [
        (["run", "--rm", "--gpu", "-e", "A=1", "img:1", "python", "-V"], ["python", "-V"], []),
        (["--squash-dir", "/s", "shared-run", "--mpi", "img", "./a.out"], ["./a.out"], []),
        (["pull", "img:1"], [], []),
        (["runn", "img"], [], ["podman-hpc-command"]),
        (["run", "--gpu"], [], ["podman-hpc-command"]),
        (["run", "--oom-score-adj", "5", "img", "true"], [], ["podman-hpc-option"]),
    ],
)
def test_podman_hpc_lines_are_read_and_followed(args, inner, rules):
    from clusterkit.emulate import podman_hpc

    command, findings = podman_hpc.check("job.sbatch", 2, args)
    assert (command, [f.rule for f in findings]) == (inner, rules)
