"""Fragments of DeepCam's code shown on a page, checked against the upstream functions."""

from __future__ import annotations

import textwrap

import pytest

from clusterkit.pages import fragments

COMM = "deepcam/src/deepCam/utils/comm.py:init"
TRAINER = "deepcam/src/deepCam/driver/trainer.py:train_epoch"
MPI_BRANCH = textwrap.indent(
    'elif method == "mpi":\n'
    '    rank = int(os.getenv("SLURM_PROCID"))\n'
    '    world_size = int(os.getenv("SLURM_NTASKS"))\n'
    '    dist.init_process_group(backend="mpi", rank=rank, world_size=world_size)\n',
    "    ",
)


def _rules(code: str, marker: str, line: int = 10):
    found, _detail = fragments.check("p.md", line, code, marker)
    return [(f.line, f.rule) for f in found if f.level == "error"]


def test_the_pages_mpi_branch_binds_to_torch_distributed():
    found, detail = fragments.check("p.md", 10, MPI_BRANCH, COMM)
    assert found == [] and "2c627d457004" in detail


def test_a_name_the_upstream_function_lacks_fails_on_its_line():
    code = MPI_BRANCH.replace("method ==", "wireup ==")
    assert _rules(code, COMM) == [(11, "fragment-name")]


def test_a_keyword_the_real_function_does_not_take_fails():
    code = MPI_BRANCH.replace("world_size=world_size)", "size=world_size)")
    assert _rules(code, COMM) == [(14, "fragment-call")]


def test_an_added_object_is_bound_to_its_type():
    pytest.importorskip("tensorboard", reason="tensorboard is installed by requirements/ml.txt")
    marker = f"{TRAINER} adds writer=torch.utils.tensorboard.SummaryWriter"
    good = '    writer.add_scalar("Loss/train", loss_avg_train, epoch + 1)\n'
    assert _rules(good, marker) == []
    assert _rules(good.replace("loss_avg_train", "loss_train"), marker) == [(11, "fragment-name")]
    assert _rules(good, TRAINER) == [(11, "fragment-name")]  # writer is not DeepCam's
    bad = '    writer.add_scalars("Loss/train", loss_avg_train, epoch + 1, 3, 4, 5)\n'
    assert _rules(bad, marker) == [(11, "fragment-call")]


def test_markers_say_what_is_wrong_with_them():
    assert _rules("x = 1\n", "utils/comm.py") == [(10, "fragment-marker")]
    assert _rules("x = 1\n", "no/such.py:f") == [(10, "fragment-marker")]
