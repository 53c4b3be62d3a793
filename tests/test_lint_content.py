"""The content checks: each rule finds what it should (file, line, rule) and passes good text."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from clusterkit.commands import binding, pins, script_envs
from clusterkit.grammars import myst as P
from clusterkit.grammars import trainer_help as H
from clusterkit.pages import cited_headings, content, option_units
from clusterkit.sites.profiles import load_site

ROOT = Path(__file__).resolve().parents[1]
KERAS = ROOT / "examples" / "tensorflow" / "train_resnet_keras.py"
TORCH = ROOT / "examples" / "pytorch" / "train_resnet.py"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- the trainers' help
def test_trainer_help_is_read_from_the_source():
    keras = H.options(KERAS)
    torch = H.options(TORCH)
    assert "per replica" in keras["--batch-size"].help
    assert "per rank" in torch["--batch-size"].help
    assert "per rank" in torch["--workers"].help
    assert keras["--batch-size"].line > 0


def test_units_of_the_help():
    assert option_units.allowed_units("images per GPU (per replica)") == {"device"}
    assert option_units.allowed_units("images per rank per step") == {"process", "device"}
    assert option_units.allowed_units("crop size") == set()


# --------------------------------------------------------------------------- option-unit
def test_job_script_comment_that_splits_a_per_replica_batch(tmp_path):
    script = _write(
        tmp_path,
        "tf.sbatch",
        """
        #!/bin/bash
        # One process, MirroredStrategy over the node's four GPUs (the batch below is split
        # between them).
        #SBATCH --nodes=1
        python train_resnet_keras.py --batch-size 1024
        """,
    )
    found = option_units.check_script(script)
    assert [(f.line, f.rule) for f in found] == [(2, "option-unit")]
    assert "train_resnet_keras.py --help" in found[0].message


def test_job_script_comment_that_agrees_passes(tmp_path):
    script = _write(
        tmp_path,
        "tf.sbatch",
        """
        #!/bin/bash
        # --batch-size is per GPU (per replica): 256 on each V100, 1024 a step on the node.
        #SBATCH --nodes=1
        python train_resnet_keras.py --batch-size 256
        """,
    )
    assert option_units.check_script(script) == []


def test_comment_about_an_option_the_script_does_not_pass_is_not_judged(tmp_path):
    script = _write(
        tmp_path,
        "tf.sbatch",
        """
        #!/bin/bash
        # The batch is per node.
        python train_resnet_keras.py --epochs 1
        """,
    )
    assert option_units.check_script(script) == []


def test_page_sentence_that_names_the_flag(tmp_path):
    page = _write(
        tmp_path,
        "p.md",
        """
        ---
        frameworks: [tensorflow]
        ---
        # A page

        Some text.

        - `--batch-size` is for the whole node here: the strategy splits it between the GPUs.
        - `--epochs` is the number of epochs.
        """,
    )
    found = option_units.check_page(P.scan_page(page))
    assert [(f.line, f.rule) for f in found] == [(8, "option-unit")]


def test_page_with_both_frameworks_judges_a_flag_against_every_trainer(tmp_path):
    # "per rank" is right for the PyTorch trainer, so on a page about both it is not an error
    page = _write(
        tmp_path,
        "p.md",
        """
        # A page

        `--batch-size` counts images per rank.
        """,
    )
    assert option_units.check_page(P.scan_page(page)) == []


def test_page_sentence_per_worker_is_wrong_for_keras(tmp_path):
    page = _write(
        tmp_path,
        "p.md",
        """
        ---
        frameworks: [tensorflow]
        ---
        # A page

        `--batch-size` counts images per worker, that is per node.
        """,
    )
    found = option_units.check_page(P.scan_page(page))
    assert [f.rule for f in found] == ["option-unit"]


# --------------------------------------------------------------------------- cited-heading
def test_cited_heading_must_exist(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    _write(docs, "env.md", "# Environments\n\n## Get the framework\n\nText.\n")
    script = _write(
        tmp_path,
        "job.sbatch",
        """
        #!/bin/bash
        # The conda environment made in "Get the framework".
        # The conda environment made in "Set up the environment" (ppc64le).
        echo hi  # see "Environments"
        """,
    )
    known = cited_headings.headings(docs)
    found = cited_headings.check_file(script, known)
    assert [(f.line, f.rule) for f in found] == [(3, "cited-heading")]
    assert "Set up the environment" in found[0].message


# --------------------------------------------------------------------------- pins
@pytest.mark.parametrize(
    ("line", "rule"),
    [
        ("python -m pip install torch torchvision", "unpinned-install"),
        ("pip3 install --upgrade numpy", "unpinned-install"),
        ("conda install --yes pytorch", "unpinned-install"),
        ("conda create --yes --name tf python=3.11 tensorflow", "unpinned-install"),
        ("singularity build a.sif docker://rocm/pytorch:latest", "unpinned-image"),
        ("apptainer pull docker://nvcr.io/nvidia/pytorch", "unpinned-image"),
    ],
)
def test_unpinned(line, rule):
    found = pins.check_lines("page.md", [(7, line)], console=False)
    assert found and {f.rule for f in found} == {rule}
    assert all(f.line == 7 for f in found)


@pytest.mark.parametrize(
    "line",
    [
        "python -m pip install torch==2.8.0 --index-url https://download.pytorch.org/whl/cu128",
        "pip install --no-build-isolation ./horovod-0.28.1",
        "pip install -r requirements.txt reframe-hpc==4.10.4 -e .",
        "conda create --yes --name pytorch python=3.11 pytorch=2.1.2 torchvision=0.16.2",
        'conda create --name cloned_env --clone "$CONDA_DEFAULT_ENV"',
        "singularity build a.sif docker://rocm/tensorflow:rocm6.3.3-py3.12-tf2.17-dev",
        "apptainer build x.sif docker://nvcr.io/nvidia/pytorch:24.09-py3",
        "apptainer build x.sif docker://ubuntu@sha256:0123abcd",
    ],
)
def test_pinned(line):
    assert pins.check_lines("page.md", [(1, line)], console=False) == []


def test_image_in_a_job_script_comment(tmp_path):
    script = _write(
        tmp_path,
        "job.slurm",
        """
        #!/bin/bash
        # Build the image first:
        #   singularity build rocm-tensorflow.sif docker://rocm/tensorflow:latest
        singularity exec rocm-tensorflow.sif true
        """,
    )
    found = pins.check_file(script)
    assert [(f.line, f.rule) for f in found] == [(3, "unpinned-image")]


def test_definition_file_base_image():
    found = pins.check_lines("x.def", [(1, "Bootstrap: docker"), (2, "From: rocm/pytorch")], False)
    assert [(f.line, f.rule) for f in found] == [(2, "unpinned-image")]


# --------------------------------------------------------------------------- binding-workers
def test_map_cpu_with_loader_workers(tmp_path):
    script = _write(
        tmp_path,
        "job.slurm",
        """
        #!/bin/bash
        srun --ntasks=4 \\
            --cpu-bind=verbose,map_cpu:0,8,16,24 --hint=nomultithread \\
            python train_resnet.py --batch-size 128 --workers 4
        """,
    )
    lines = list(enumerate(script.read_text().splitlines(), 1))
    found = binding.check_lines(script, lines, console=False)
    assert [(f.line, f.rule) for f in found] == [(4, "binding-workers")]
    assert "1 core(s)" in found[0].message


@pytest.mark.parametrize(
    ("srun", "bad"),
    [
        ("srun --cpu-bind=mask_cpu:0x3,0xc python t.py --workers 4", True),
        ("srun --cpus-per-task=2 python t.py --workers 4", True),
        ("srun --cpus-per-task=8 --cpu-bind=cores python t.py --workers 4", False),
        ("srun --cpu-bind=mask_cpu:0xff,0xff00 python t.py --workers 4", False),
        ("srun --cpu-bind=map_cpu:0,8 python t.py --workers 0", False),
        ("srun --cpu-bind=map_cpu:0,8 python train.py --max_inter_threads 1", False),
    ],
)
def test_binding_cases(srun, bad):
    found = binding.check_lines("x.sh", [(1, srun)], console=False)
    assert bool(found) is bad


# --------------------------------------------------------------------------- the tree
def test_the_pages_and_examples_are_clean():
    found = content.lint_all()
    assert not found, "\n".join(map(str, found))


# --------------------------------------------------------------------------- script-envs
def _bede_job(tmp_path: Path, partition: str, arch_dir: str, env: str) -> Path:
    return _write(
        tmp_path,
        "job.sbatch",
        f"""
        #!/bin/bash
        #SBATCH --partition={partition}
        CONDA_ROOT=${{CONDA_ROOT:-/nobackup/projects/bdXXXYY/$USER/{arch_dir}/miniforge3}}
        source "$CONDA_ROOT/etc/profile.d/conda.sh"
        conda activate {env}
        python train_resnet.py
        """,
    )


def _env_page(tmp_path: Path) -> Path:
    return _write(
        tmp_path,
        "env.md",
        """
        # Environment

        ```bash
        conda create --yes --name pytorch python=3.12
        ```
        """,
    )


def test_a_job_script_on_grace_hopper_nodes_with_a_power9_environment(tmp_path):
    bede = load_site("bede")
    script = _bede_job(tmp_path, "gh", "ppc64le", "pytorch")
    found = script_envs.check_script(script, bede, [_env_page(tmp_path)])
    assert [(f.line, f.rule) for f in found] == [(3, "script-env-arch")]
    assert "aarch64 nodes" in found[0].message


def test_a_job_script_activating_an_environment_no_page_creates(tmp_path):
    bede = load_site("bede")
    script = _bede_job(tmp_path, "gh", "aarch64", "torch")
    found = script_envs.check_script(script, bede, [_env_page(tmp_path)])
    assert [(f.line, f.rule) for f in found] == [(5, "script-env-unknown")]
    assert "created there: pytorch" in found[0].message


def test_a_job_script_that_matches_its_node_and_page_passes(tmp_path):
    bede = load_site("bede")
    script = _bede_job(tmp_path, "gh", "aarch64", "pytorch")
    assert script_envs.check_script(script, bede, [_env_page(tmp_path)]) == []
    # the default partition (gpu, POWER9) when the script names none
    text = script.read_text().replace("#SBATCH --partition=gh\n", "").replace("aarch64", "ppc64le")
    script.write_text(text)
    assert script_envs.check_script(script, bede, [_env_page(tmp_path)]) == []


def test_an_environment_in_a_variable_is_not_judged(tmp_path):
    bede = load_site("bede")
    script = _bede_job(tmp_path, "gpu", "ppc64le", '"$TORCH_ENV"')
    assert script_envs.check_script(script, bede, [_env_page(tmp_path)]) == []
