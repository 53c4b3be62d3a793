"""A training program started on GPU nodes in a job that holds none of their GPUs is refused at
its line (rule gpu-not-requested): with --device auto it would train on the CPU without a word.
Each GPU job script of the examples passes as written and fails without its GPU request."""

from __future__ import annotations

import pytest

from clusterkit.emulate.checkjob import check_job_file
from clusterkit.sites.profiles import ROOT, load_site

RULE = "gpu-not-requested"
# (site, job script, its GPU request, the same without it)
WITHOUT_GPUS = [
    ("bede", "examples/bede/pytorch-ddp-gh200-multinode.sbatch", "#SBATCH --gres=gpu:1", "#"),
    ("bede", "examples/bede/pytorch-gh200.sbatch", "#SBATCH --gres=gpu:1\n", ""),
    ("archer2", "examples/archer2/pytorch-1gpu.slurm", "#SBATCH --gpus=1\n", ""),
    ("frontier", "examples/frontier/pytorch-ddp-1node.sbatch", "--gpus-per-task=1 ", ""),
    (
        "isambard-ai",
        "examples/isambard-ai/tensorflow-1node.sbatch",
        "#SBATCH --gpus-per-node=4",
        "#",
    ),
]


def findings(tmp_path, site: str, text: str, rule: str = RULE) -> list:
    path = tmp_path / "job.sh"
    path.write_text(text)
    return [f for f in check_job_file(path, load_site(site)).findings if f.rule == rule]


def command_line(text: str, words: str) -> int:
    """The first line of the command (continued with backslashes) that holds ``words``."""
    lines = text.splitlines()
    n = next(i for i, line in enumerate(lines) if words in line)
    while n and lines[n - 1].rstrip().endswith("\\"):
        n -= 1
    return n + 1


@pytest.mark.parametrize(("site", "script", "request_", "without"), WITHOUT_GPUS)
def test_a_gpu_job_script_needs_its_gpu_request(tmp_path, site, script, request_, without):
    text = (ROOT / script).read_text()
    assert findings(tmp_path, site, text) == []
    assert request_ in text
    changed = text.replace(request_, without, 1)
    (found,) = findings(tmp_path, site, changed)
    assert found.level == "error" and found.line == command_line(changed, "python train_resnet")
    assert "but the job holds none of their GPUs" in found.message
    auto = "--device cuda" not in text and "--device gpu" not in text
    says = "it trains on the CPU" if auto else "it stops at start-up"
    assert says in found.message, found.message


def test_a_run_that_asks_for_the_cpu_by_name_may_use_gpu_nodes_without_gpus(tmp_path):
    text = (ROOT / "examples/bede/pytorch-gh200.sbatch").read_text()
    text = text.replace("#SBATCH --gres=gpu:1\n", "").replace("--device cuda", "--device cpu")
    assert findings(tmp_path, "bede", text) == []


def test_cpu_nodes_need_no_gpu_request(tmp_path):
    text = (ROOT / "examples/archer2/pytorch-ddp-cpu.slurm").read_text()
    assert "python train_resnet.py" in text and "--gpus" not in text
    assert findings(tmp_path, "archer2", text) == []


def test_a_jsrun_resource_set_without_gpus_is_refused(tmp_path):
    summit = load_site("summit")
    text = (
        f"#!/bin/bash\n#BSUB -P {summit.account['example']}\n#BSUB -W 10\n#BSUB -nnodes 1\n"
        "jsrun -r1 -g0 -a6 -c42 python train_resnet.py --batch-size 256\n"
    )
    (found,) = findings(tmp_path, "summit", text)
    assert found.line == 5 and "jsrun -g N" in found.message
    assert findings(tmp_path, "summit", text.replace("-g0", "-g6")) == []
