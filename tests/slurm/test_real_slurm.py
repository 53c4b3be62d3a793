"""A real Slurm, configured from the site profiles, judges the same scripts as the emulator.

Run by ``nox -s slurm`` (root; it installs Debian's Slurm). Each Slurm site gets its own
throw-away cluster (ci/slurm/start.sh): every job script in examples/<site>/ must pass
``sbatch --test-only``, and on a corpus of good and broken scripts the emulator's verdict must
equal Slurm's. A disagreement is a bug in the emulator or in the profile.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterkit.emulate.jobcheck import check_slurm_script
from clusterkit.profiles import load_site

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = os.environ.get("CLUSTERKIT_REQUIRE_SLURM") == "1"
HAVE = os.geteuid() == 0 and all(shutil.which(t) for t in ("slurmctld", "slurmd", "sbatch"))
if not HAVE:
    if REQUIRED:
        raise RuntimeError(
            "CLUSTERKIT_REQUIRE_SLURM=1 but Slurm is not installed or we are "
            "not root: run `nox -s slurm` as root"
        )
    pytest.skip(
        "a real Slurm needs root and Debian's slurmctld/slurmd (nox -s slurm installs them)",
        allow_module_level=True,
    )

SITES = ["bede", "archer2"]


@pytest.fixture(scope="module", params=SITES)
def cluster(request, tmp_path_factory):
    site = request.param
    state = tmp_path_factory.mktemp(f"slurm-{site}")
    env = dict(os.environ, PYTHON=sys.executable)
    r = subprocess.run(
        ["bash", str(ROOT / "ci/slurm/start.sh"), site, str(state)],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if r.returncode:
        subprocess.run(["bash", str(ROOT / "ci/slurm/stop.sh"), str(state)])
        pytest.fail(f"could not start Slurm for {site}:\n{r.stdout}\n{r.stderr}")
    yield site, dict(os.environ, SLURM_CONF=str(state / "etc" / "slurm.conf"))
    subprocess.run(["bash", str(ROOT / "ci/slurm/stop.sh"), str(state)], capture_output=True)


def _real_verdict(script: Path, env: dict[str, str], extra=()) -> tuple[bool, str]:
    r = subprocess.run(
        ["sbatch", "--test-only", *extra, str(script)],
        env=env,
        capture_output=True,
        text=True,
        cwd=script.parent,
    )
    return r.returncode == 0, (r.stdout + r.stderr).strip()


def _scaled(site: str, path: Path) -> list[str]:
    """Command-line options that fit the job onto the two logical nodes per node type."""
    report = check_slurm_script(path, load_site(site))
    nodes = len(report.plan.get("nodes", []))
    return ["--nodes=2"] if nodes > 2 else []


def test_every_example_passes_sbatch_test_only(cluster):
    site, env = cluster
    scripts = [
        p
        for p in sorted((ROOT / "examples" / site).iterdir())
        if p.is_file() and "#SBATCH" in p.read_text()
    ]
    assert scripts, f"no Slurm scripts in examples/{site}"
    for path in scripts:
        ok, out = _real_verdict(path, env, _scaled(site, path))
        assert ok, f"{path.relative_to(ROOT)} refused by Slurm: {out}"


# (site, description, edit applied to the site's base script) -- expected verdicts are NOT
# written here: Slurm decides, and the emulator must agree with it.
BASE = {
    "bede": (
        "#!/bin/bash\n#SBATCH --account=bdXXXYY\n#SBATCH --partition=gpu\n"
        "#SBATCH --nodes=1\n#SBATCH --gres=gpu:4\n#SBATCH --time=01:00:00\nhostname\n"
    ),
    "archer2": (
        "#!/bin/bash\n#SBATCH --account=t01\n#SBATCH --partition=standard\n"
        "#SBATCH --qos=standard\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=8\n"
        "#SBATCH --cpus-per-task=16\n#SBATCH --time=01:00:00\nhostname\n"
    ),
}
EDITS = {
    "bede": [
        ("as written", None),
        ("five GPUs", ("--gres=gpu:4", "--gres=gpu:5")),
        ("unknown partition", ("--partition=gpu", "--partition=gpu-big")),
        ("over the time limit", ("--time=01:00:00", "--time=3-00:00:00")),
        ("bad time syntax", ("--time=01:00:00", "--time=1:00:00:00")),
        ("unknown option", ("--nodes=1", "--nodes=1 --frobnicate")),
        ("no account", ("#SBATCH --account=bdXXXYY\n", "")),
        ("too many CPUs per task", ("--gres=gpu:4", "--gres=gpu:4 --cpus-per-task=161")),
        (
            "Grace-Hopper test partition, 20 minutes",
            (
                "gpu\n#SBATCH --nodes=1\n#SBATCH --gres=gpu:4\n#SBATCH --time=01:00:00",
                "ghtest\n#SBATCH --nodes=1\n#SBATCH --gres=gpu:1\n#SBATCH --time=00:20:00",
            ),
        ),
        (
            "Grace-Hopper test partition, 1 hour",
            (
                "gpu\n#SBATCH --nodes=1\n#SBATCH --gres=gpu:4",
                "ghtest\n#SBATCH --nodes=1\n#SBATCH --gres=gpu:1",
            ),
        ),
    ],
    "archer2": [
        ("as written", None),
        ("unknown QoS", ("--qos=standard", "--qos=premium")),
        ("QoS of another partition", ("--qos=standard", "--qos=gpu-exc")),
        ("no QoS", ("#SBATCH --qos=standard\n", "")),
        ("short QoS over its time", ("--qos=standard", "--qos=short")),
        (
            "short QoS within its time",
            (
                "--qos=standard\n#SBATCH --nodes=2",
                "--qos=short\n#SBATCH --nodes=2\n#SBATCH --time=00:10:00",
            ),
        ),
        ("too many CPUs per node", ("--cpus-per-task=16", "--cpus-per-task=33")),
        ("over the partition time", ("--time=01:00:00", "--time=3-00:00:00")),
        ("GPUs on CPU nodes", ("--nodes=2", "--nodes=2\n#SBATCH --gpus=4")),
        ("unknown account", ("--account=t01", "--account=Bad Account")),
    ],
}
CASES = [(site, what, edit) for site, edits in EDITS.items() for what, edit in edits]


def test_emulator_agrees_with_slurm(cluster, tmp_path):
    site, env = cluster
    disagreements = []
    for case_site, what, edit in CASES:
        if case_site != site:
            continue
        text = BASE[site]
        if edit:
            assert edit[0] in text, f"{site}/{what}: edit does not apply"
            text = text.replace(*edit)
        path = tmp_path / f"{what.replace(' ', '-').replace(',', '')}.sbatch"
        path.write_text(text)
        real_ok, real_out = _real_verdict(path, env)
        report = check_slurm_script(path, load_site(site))
        shim_ok = not report.errors
        if real_ok != shim_ok:
            disagreements.append(
                f"{site} / {what}: Slurm {'accepts' if real_ok else 'refuses'}"
                f" ({real_out}); emulator "
                f"{'accepts' if shim_ok else 'refuses'} "
                f"({'; '.join(map(str, report.errors))})"
            )
    assert not disagreements, "\n".join(disagreements)


def test_a_two_node_job_really_runs(cluster, tmp_path):
    site, env = cluster
    if site != "bede":
        pytest.skip("one real multi-node run (on the Bede-shaped cluster) is enough")
    script = tmp_path / "two-nodes.sbatch"
    script.write_text(
        "#!/bin/bash\n#SBATCH --account=bdXXXYY\n#SBATCH --partition=gpu\n"
        "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --gres=gpu:1\n"
        "#SBATCH --time=00:02:00\n#SBATCH --output=out-%j.txt\n"
        "srun bash -c 'echo rank=$SLURM_PROCID node=$SLURM_NODEID "
        "gpus=$CUDA_VISIBLE_DEVICES'\n"
    )
    r = subprocess.run(
        ["sbatch", "--parsable", str(script)], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().split(";")[0]
    out = tmp_path / f"out-{job}.txt"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = subprocess.run(
            ["scontrol", "show", "job", job], env=env, capture_output=True, text=True
        ).stdout
        if "JobState=COMPLETED" in state or "JobState=FAILED" in state:
            break
        time.sleep(0.5)
    assert "JobState=COMPLETED" in state, state
    lines = sorted(out.read_text().split())
    assert "rank=0" in lines and "rank=1" in lines and "node=1" in lines, out.read_text()


# Examples that run for real under Slurm, scaled down: (site, script, trainer, options that
# shrink the job, ranks expected).
REAL_RUNS = [
    ("bede", "pytorch-ddp-1node.sbatch", "pytorch/train_resnet.py", ["--time=00:10:00"], 4),
    ("archer2", "pytorch-ddp-gpu.slurm", "pytorch/train_resnet.py", ["--time=00:10:00"], 4),
]


def _wait(job: str, env: dict[str, str], seconds: int) -> str:
    deadline = time.monotonic() + seconds
    state = ""
    while time.monotonic() < deadline:
        state = subprocess.run(
            ["scontrol", "show", "job", job], env=env, capture_output=True, text=True
        ).stdout
        if any(f"JobState={s}" in state for s in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")):
            return state
        time.sleep(1)
    return state


def test_examples_run_for_real(cluster, tmp_path):
    """The job scripts users copy run under the real Slurm, with TRAIN_TINY=1 payloads."""
    from clusterkit import trainlog
    from clusterkit.emulate import shimdir
    from clusterkit.lmod import ensure_modulefiles

    site, env = cluster
    runs = [r for r in REAL_RUNS if r[0] == site]
    assert runs, f"no real run for {site}"
    for _, script, trainer, extra, ranks in runs:
        job_dir = tmp_path / script
        job_dir.mkdir()
        shutil.copy(ROOT / "examples" / site / script, job_dir)
        shutil.copy(ROOT / "examples" / trainer, job_dir)
        run_env = dict(
            env,
            TRAIN_TINY="1",
            OMP_NUM_THREADS="1",
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
            CONDA_ROOT=str(shimdir.conda_root(shimdir.ensure())),
            BASH_ENV="/usr/share/lmod/lmod/init/bash",
            MODULEPATH=str(ensure_modulefiles(load_site(site))),
        )
        r = subprocess.run(
            ["sbatch", "--parsable", *extra, script],
            env=run_env,
            capture_output=True,
            text=True,
            cwd=job_dir,
        )
        assert r.returncode == 0, r.stderr
        job = r.stdout.strip().split(";")[0]
        state = _wait(job, env, 300)
        outs = sorted(job_dir.glob("*.out"))
        out = outs[-1].read_text() if outs else "(no output file)"
        assert "JobState=COMPLETED" in state, f"{script}: {state}\n{out}"
        records = trainlog.parse(out)
        seen = {rec.fields["rank"] for rec in records if rec.kind == "train"}
        assert seen == set(range(ranks)), f"{script}:\n{out}"
