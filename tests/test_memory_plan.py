"""The memory planner (clusterkit/emulate/memory_plan.py) against the models it counts and the
runs it predicts: parameter counts from the models themselves, LoRA's from peft, and each rank's
peak in tiny runs of train_lm.py on the CPU, measured by torch's memory tracker
(--memory-report), within 25 %. The runs use shapes the planner's activation figures were not
fitted on (width 192, 3 layers, 96 tokens, other micro-batches)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import own_network
import pytest
import tiny_lm

from clusterkit.emulate import memory_plan as M
from clusterkit.runs import trainlog
from clusterkit.sites.profiles import load_site

ROOT = Path(__file__).resolve().parent.parent
TRAINER = ROOT / "examples" / "pytorch" / "train_lm.py"
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_", "OMPI_", "PMI", "MASTER_", "TRAIN_")


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("plan")
    made = {
        kind: tiny_lm.write_model(root / kind, kind, positions=128, width=192, layers=3)
        for kind in ("gpt2", "llama")
    }
    made["text"] = tiny_lm.write_text(root / "text.jsonl", 1200)
    return made


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_parameters_are_counted_from_the_shape(models, kind):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(models[kind], local_files_only=True)
    real = sum(p.numel() for p in model.parameters())
    assert M.Shape.from_file(models[kind]).params() == pytest.approx(real, rel=0.01)


def test_lora_parameters_are_what_peft_trains(models):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(models["llama"], local_files_only=True)
    adapted = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear"))
    trained = sum(p.numel() for p in adapted.parameters() if p.requires_grad)
    assert M.Shape.from_file(models["llama"]).lora_params(4) == trained


def test_the_pages_models_have_their_published_sizes():
    """Qwen's model cards: 7.61 billion parameters, and 0.49 billion."""
    assert M.MODELS["Qwen2.5-7B"].params() == pytest.approx(7.61e9, rel=0.005)
    assert M.MODELS["Qwen2.5-0.5B"].params() == pytest.approx(0.49e9, rel=0.01)


def test_sharding_and_adapters_shrink_a_plan_as_they_should():
    shape = M.MODELS["Qwen2.5-7B"]
    full = M.plan(shape, M.Run("ddp", 1))
    # 16 bytes a parameter: fp32 weights and gradients, AdamW's two moments
    states = full.weights + full.gradients + full.optimizer
    assert states == pytest.approx(16 * shape.params())
    sharded = M.plan(shape, M.Run("fsdp", 8))
    assert sharded.optimizer == pytest.approx(full.optimizer / 8)
    lora = M.plan(shape, M.Run("ddp", 1, lora_rank=16))
    assert lora.optimizer < full.optimizer / 50 and lora.weights > full.weights
    assert M.gpus_needed(shape, M.Run("ddp", 1), 96) is None  # 120 GB of states
    assert M.gpus_needed(shape, M.Run("fsdp", 1, micro_batch=1), 96) == 2


def test_every_gpu_site_in_service_has_a_memory_table():
    for name in ("isambard-ai", "frontier", "bede"):
        rows = M.site_rows(load_site(name))
        assert rows and all(len(r) == len(M.HEADERS) for r in rows), name


def env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCH_VARS)}
    return {**clean, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


RUNS = {
    "llama-ddp-bf16": ("llama", M.Run("ddp", 1, "bf16", 0, 6, 96, scores_in_memory=True)),
    "gpt2-fsdp-fp32-checkpointing": (
        "gpt2",
        M.Run("fsdp", 2, "fp32", 0, 3, 96, activation_checkpointing=True, scores_in_memory=True),
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_plan_is_within_a_quarter_of_the_measured_peak(models, tmp_path, name):
    kind, run = RUNS[name]
    launch = [sys.executable]
    if run.ranks > 1:
        launch = [TORCHRUN, "--standalone", f"--nproc-per-node={run.ranks}"]
    argv = [*launch, str(TRAINER), "--model", str(models[kind]), "--data", str(models["text"])]
    argv += ["--steps", "2", "--seq-len", str(run.seq_len), "--device", "cpu", "--memory-report"]
    argv += ["--global-batch-size", str(run.micro_batch * run.ranks), "--log-every", "1"]
    argv += ["--precision", run.precision, "--parallel", run.parallel, "--checkpoint-every", "9"]
    if run.activation_checkpointing:
        argv.append("--activation-checkpointing")
    r = subprocess.run(
        own_network.command(argv), cwd=tmp_path, env=env(), capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    peaks = [rec.fields["peak_mib"] for rec in trainlog.parse(r.stdout) if rec.kind == "memory"]
    assert len(peaks) == run.ranks, r.stdout
    predicted = M.plan(M.Shape.from_file(models[kind]), run).total / 2**20
    for measured in peaks:
        assert predicted == pytest.approx(measured, rel=0.25), (predicted, measured)
