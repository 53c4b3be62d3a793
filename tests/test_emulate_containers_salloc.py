"""salloc, and the singularity/apptainer stand-ins (no container runtime exists here)."""

from __future__ import annotations

import subprocess

from clusterkit.emulate import containers
from clusterkit.emulate.sbatch import check_slurm_script
from clusterkit.sites.profiles import load_site


def test_salloc_grants_and_runs_the_command(emulated_env):
    env = dict(emulated_env, CLUSTERKIT_SITE="bede")
    r = subprocess.run(
        [
            "salloc",
            "-A",
            "bdXXXYY",
            "-p",
            "gpu",
            "-N1",
            "--gres=gpu:4",
            "bash",
            "-c",
            "srun -n 2 printenv SLURM_PROCID | sort",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "1"]
    assert "Granted job allocation" in r.stderr and "Relinquishing" in r.stderr


def test_salloc_refuses_like_sbatch(emulated_env):
    env = dict(emulated_env, CLUSTERKIT_SITE="bede")
    r = subprocess.run(
        ["salloc", "-A", "bdXXXYY", "-p", "gpu", "--gres=gpu:5", "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "[gpus-per-node]" in r.stderr and "Traceback" not in r.stderr


def test_exec_checks_the_command_inside():
    cmd, findings = containers.check(
        "p", 4, "singularity", ["exec", "--nv", "-B", "/work", "img.sif", "python", "t.py"]
    )
    assert cmd == ["python", "t.py"] and findings == []
    _, findings = containers.check("p", 4, "apptainer", ["exec", "img.sif"])
    assert findings[0].rule == "container-command"


def test_writable_build_is_refused_with_the_replacement():
    _, findings = containers.check(
        "p", 2, "singularity", ["build", "--writable", "x.simg", "docker://ibmcom/x"]
    )
    assert findings[0].rule == "container-writable" and "--sandbox" in findings[0].message
    _, ok = containers.check("p", 2, "apptainer", ["build", "--sandbox", "x/", "docker://x/y"])
    assert ok == []


def test_job_scripts_see_through_containers():
    text = (
        "#!/bin/bash\n#SBATCH -A bdXXXYY\n#SBATCH -p gpu\n#SBATCH --gres=gpu:4\n"
        "srun apptainer exec --nv img.sif torchrun --nproc_per_node=8 t.py\n"
    )
    report = check_slurm_script("j.sbatch", load_site("bede"), text=text)
    assert [f.rule for f in report.errors] == ["nproc-per-gpu"]


def test_the_shim_runs_the_command_directly(emulated_env):
    r = subprocess.run(
        ["singularity", "exec", "--nv", "img.sif", "echo", "inside"],
        env=emulated_env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and r.stdout.strip() == "inside"
    assert "no container runtime here" in r.stderr


def test_a_failed_task_ends_the_steps_other_tasks(emulated_env):
    """A rank that fails at start-up (a port in use, say) must not leave its peers waiting for
    it until the time limit: the emulated srun ends them, as srun --kill-on-bad-exit does."""
    env = dict(emulated_env, CLUSTERKIT_SITE="bede")
    task = 'if [ "$SLURM_PROCID" = 1 ]; then exit 3; fi; sleep 600'
    r = subprocess.run(
        [*"salloc -A bdXXXYY -p gpu -N1 --gres=gpu:2 srun -n 2 bash -c".split(), task],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 3, r.stderr
    assert "task 1 exited with status 3: ending the step's other tasks" in r.stderr
