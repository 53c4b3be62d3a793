"""singularity/apptainer stand-ins: Apptainer's option grammar, exec, build, shell."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterkit.emulate import container_options, containers
from clusterkit.emulate.lsf import check_lsf_script
from clusterkit.emulate.sbatch import check_slurm_script
from clusterkit.sites.profiles import ROOT, load_site

SUMMIT = load_site("summit")
BEDE = load_site("bede")
S_NODE = SUMMIT.default_partition.node_type


def _rules(findings):
    return [f.rule for f in findings]


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(["singularity", "apptainer"]),
    st.lists(st.sampled_from(["/work", "/a:/b", "/a:/b:ro", "/x,/y:/z"]), max_size=2),
    st.sampled_from(["short", "long", "equals"]),
    st.sets(st.sampled_from(["nv", "rocm", "cleanenv", "contain", "writable-tmpfs"])),
    st.sampled_from(["img.sif", "docker://nvcr.io/nvidia/pytorch:24.01-py3", "sandbox/"]),
)
def test_exec_forms_give_the_same_command(tool, binds, form, bools, image):
    words = ["exec"]
    for b in binds:
        words += {"short": ["-B", b], "long": ["--bind", b], "equals": [f"--bind={b}"]}[form]
    words += [f"--{b}" for b in sorted(bools)]
    command, findings = containers.check("p", 1, tool, [*words, image, "python", "-u", "t.py"])
    assert findings == [] and command == ["python", "-u", "t.py"]
    parsed = container_options.parse(tool, [*words, image, "python"])
    assert parsed.flags.get("bind", []) == binds and set(parsed.flags) - {"bind"} == bools


def test_global_options_and_short_clusters():
    cmd, findings = containers.check("p", 1, "apptainer", ["-q", "exec", "-ec", "i.sif", "ls"])
    assert cmd == ["ls"] and findings == []
    parsed = container_options.parse("apptainer", ["exec", "-ec", "i.sif", "ls"])
    assert set(parsed.flags) == {"cleanenv", "contain"}


@pytest.mark.parametrize(
    ("args", "rule", "text"),
    [
        (["exec", "img.sif"], "container-command", "no command after the image"),
        (["exec", "--gpu", "img.sif", "ls"], "container-option",
         'Error for command "exec": unknown flag: --gpu'),
        (["exec", "-B", "/a:/b:rx", "img.sif", "ls"], "container-bind", "src[:dest[:ro|rw|"),
        (["build", "--writable", "x.simg", "docker://ibmcom/powerai"], "container-writable",
         "--sandbox"),
        (["build", "x.sif"], "container-option", "requires exactly 2 arg(s)"),
        (["frobnicate"], "container-option", 'unknown command "frobnicate"'),
        ([], "container-command", "no sub-command"),
    ],
)  # fmt: skip
def test_refusals(args, rule, text):
    _, findings = containers.check("p", 7, "singularity", args)
    assert _rules(findings) == [rule] and text in findings[0].message
    assert findings[0].line == 7


def test_builds_and_shells():
    ok = [
        ["build", "--sandbox", "powerai/", "docker://ibmcom/powerai:1.5.3-all-ubuntu16.04"],
        ["build", "--fakeroot", "pytorch.sif", "pytorch.def"],
        ["build", "-F", "--nv", "x.sif", "docker://x/y"],
        ["shell", "--nv", "-B", "/gpfs", "x.sif"],
    ]
    for args in ok:
        assert containers.check("p", 1, "apptainer", args) == ([], [])
    image_mount = ["exec", "-B", "data.sqsh:/data:image-src=/", "x.sif", "ls"]
    assert containers.check("p", 1, "apptainer", image_mount) == (["ls"], [])
    _, warn = containers.check("p", 1, "singularity", ["shell", "--writable", "powerai.simg"])
    assert {f.rule for f in warn} == {"container-writable"}
    assert all(f.level == "warning" for f in warn)


@pytest.mark.parametrize("image", ["powerai.simg", "old.img", "new.sif"])
def test_an_image_is_run_whatever_its_name(image):
    # Apptainer tells SIF, squashfs (Singularity 2.4's .simg) and ext3 apart by content
    assert containers.check("p", 1, "apptainer", ["exec", image, "python", "x.py"]) == (
        ["python", "x.py"],
        [],
    )
    _, notes = containers.check("p", 1, "apptainer", ["build", "x.simg", "docker://x/y"])
    assert [f.rule for f in notes] == ["container-simg"] and "SIF" in notes[0].message


def test_job_scripts_see_through_containers():
    gpus = S_NODE.gpus
    text = (
        "#!/bin/bash\n#BSUB -P ABC123\n#BSUB -W 10\n#BSUB -nnodes 1\n"
        f"jsrun -r1 -a1 -c{S_NODE.usable_cores} -g{gpus} singularity exec --nv img.sif "
        f"torchrun --nproc_per_node={gpus + 1} -m mod\n"
    )
    report = check_lsf_script("j.lsf", SUMMIT, text=text)
    assert _rules(report.errors) == ["nproc-per-gpu"]
    bede = BEDE.partitions["gpu"].node_type
    text = (
        "#!/bin/bash\n#SBATCH -A bdXXXYY\n#SBATCH -p gpu\n#SBATCH --gres=gpu:1\n"
        "srun apptainer exec --nv img.sif torchrun "
        f"--nproc_per_node={bede.gpus} -m mod\n"
    )
    assert _rules(check_slurm_script("j.sbatch", BEDE, text=text).errors) == ["nproc-per-gpu"]


def test_the_shims(emulated_env):
    def run(*args):
        return subprocess.run(list(args), env=emulated_env, capture_output=True, text=True)

    r = run("singularity", "exec", "--nv", "-B", "/tmp", "img.sif", "echo", "inside")
    assert r.returncode == 0 and r.stdout.strip() == "inside"
    assert "no container runtime here" in r.stderr
    r = run("apptainer", "build", "--writable", "x.simg", "docker://x/y")
    assert r.returncode == 255 and "[container-writable]" in r.stderr
    r = run("apptainer", "exec", "--bogus", "img.sif", "true")
    assert r.returncode == 1 and "unknown flag: --bogus" in r.stderr
    r = run("apptainer", "run", "--nv", "img.sif", "echo", "inside run")
    assert r.returncode == 0 and r.stdout.strip() == "inside run"
    r = run("singularity", "shell", "--nv", "img.sif")
    assert r.returncode == 0 and "would start an interactive shell in img.sif" in r.stderr
    r = run("apptainer", "build", "--sandbox", "box/", "docker://x/y")
    assert r.returncode == 0 and "would build sandbox directory box/" in r.stderr
    assert all("Traceback" not in x for x in (r.stderr, r.stdout))


def test_run_is_followed_into_the_container_like_exec(tmp_path):
    """``apptainer run IMAGE python ...`` (as LUMI's guide writes it): the command after the
    image is judged as exec's is, so a typo in the trainer's options and a missing GPU request
    are found; the example as written, with run for exec, passes."""
    from clusterkit.emulate.checkjob import check_job_file

    original = (ROOT / "examples/bede/pytorch-container-gh200.sbatch").read_text()
    text = original.replace('apptainer exec --nv "$IMAGE"', 'apptainer run --nv "$IMAGE"')
    assert text != original

    def errors(body: str) -> list:
        path = tmp_path / "job.sbatch"
        path.write_text(body)
        return [f for f in check_job_file(path, BEDE).findings if f.level == "error"]

    assert errors(text) == []
    typo = errors(text.replace("--batch-size 256", "--batch-sise 256"))
    assert [f.rule for f in typo] == ["script-flag-unknown"] and "--batch-sise" in typo[0].message
    no_gpu = errors(text.replace("#SBATCH --gres=gpu:1\n", ""))
    assert [f.rule for f in no_gpu] == ["gpu-not-requested"]
    # run with nothing after the image runs the image's own run script: nothing to follow
    assert containers.check("j", 1, "apptainer", ["run", "img.sif"]) == ([], [])
