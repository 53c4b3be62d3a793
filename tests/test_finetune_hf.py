"""examples/pytorch/finetune_hf.py: Hugging Face's Trainer on CPU ranks, offline, and its errors.

A tiny GPT-2 and its byte-level tokenizer, written with save_pretrained into a scratch folder
(the tiny_lm fixture, tests/tiny_lm.py; nothing is downloaded), are the model, and every run has
HF_HUB_OFFLINE=1 and HF_HOME in scratch. The distributed runs start two CPU ranks the ways the
pages do: ``accelerate launch`` with the example configurations (ACCELERATE_USE_CPU=1, what
accelerate's own ``--cpu`` sets: without a GPU, processes that are not told so form no group)
and ``torchrun``. The FSDP2 configuration gets its own test: accelerate runs FSDP only on GPUs
(see tests/fixtures/fsdp2_probe.py), so the Trainer runs it here as data parallel.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_lm import documents

pytestmark = pytest.mark.program_lines

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "pytorch" / "finetune_hf.py"
CONFIGS = ROOT / "examples" / "accelerate"
PROBE = ROOT / "tests" / "fixtures" / "fsdp2_probe.py"
TIMEOUT = 420
LAUNCH_VARS = ("SLURM_", "OMPI_", "PMI", "TORCHELASTIC_", "MASTER_", "RANK", "WORLD_SIZE")
LAUNCH_VARS += ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "TRAIN_TINY", "ACCELERATE_")
LAUNCH_VARS += ("CUDA_VISIBLE_DEVICES", "FSDP_", "HF_")


@pytest.fixture(scope="module")
def files(tiny_lm, tmp_path_factory) -> dict[str, Path]:
    """The tiny GPT-2, its text as .jsonl and as .txt (one document a line), a cache folder."""
    top = tmp_path_factory.mktemp("hf")
    text = top / "train.txt"
    text.write_text("".join(d + "\n" for d in documents()), encoding="utf-8")
    return {"model": tiny_lm["gpt2"], "txt": text, "jsonl": tiny_lm["text"], "home": top / "hf"}


def env_for(files: dict[str, Path], **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCH_VARS)}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(files["home"]), OMP_NUM_THREADS="1")
    env.update(extra)
    return env


def launcher(name: str) -> list[str]:
    beside = Path(sys.executable).with_name(name)
    modules = {
        "accelerate": "accelerate.commands.accelerate_cli",
        "torchrun": "torch.distributed.run",
    }
    return [str(beside)] if beside.exists() else [sys.executable, "-m", modules[name]]


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    return r


def losses(stdout: str) -> list[float]:
    """The Trainer's log lines (rank 0 prints them: {'loss': '5.52', ...})."""
    out = []
    for line in stdout.splitlines():
        if line.startswith("{'loss'"):
            out.append(float(ast.literal_eval(line)["loss"]))
    return out


def summary(stdout: str) -> dict[str, str]:
    (line,) = [x for x in stdout.splitlines() if x.startswith("[finetune] ")]
    return dict(word.split("=", 1) for word in line.split()[1:])


def check_saved(out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert model.config.n_layer == 2 and tokenizer("a job script")["input_ids"]


# --------------------------------------------------------------------------- two ranks
def test_accelerate_launch_two_ranks_ddp_config(files, tmp_path):
    """The DDP configuration, two ranks, eight steps: one group, a falling loss, a model saved
    in save_pretrained layout that loads again."""
    argv = [*launcher("accelerate"), "launch", "--config_file", str(CONFIGS / "ddp.yaml")]
    argv += ["--num_processes", "2", "--mixed_precision", "no", str(SCRIPT)]
    argv += ["--model", str(files["model"]), "--data", str(files["txt"])]
    argv += ["--output-dir", "out", "--lr", "5e-3"]
    env = env_for(files, TRAIN_TINY="1", TRAIN_TINY_STEPS="8", ACCELERATE_USE_CPU="1")
    r = run(argv, tmp_path, env)
    got = summary(r.stdout)
    assert (got["ranks"], got["parallel"], got["steps"]) == ("2", "MULTI_CPU", "8"), r.stdout
    logged = losses(r.stdout)
    assert len(logged) == 8 and all(math.isfinite(x) for x in logged)
    assert sum(logged[-3:]) < sum(logged[:3]), logged  # it learns the repeated text
    check_saved(tmp_path / "out")


def test_torchrun_two_ranks_resumes_from_its_checkpoint(files, tmp_path):
    """torchrun, JSON lines, gradient checkpointing: a 2-step run, then a 4-step run of the same
    command that starts from the first one's checkpoint and trains steps 3 and 4 only."""
    argv = [*launcher("torchrun"), "--standalone", "--nproc-per-node=2", str(SCRIPT), "--tiny"]
    argv += ["--model", str(files["model"]), "--data", str(files["jsonl"])]
    argv += ["--output-dir", "out", "--gradient-checkpointing"]
    first = run(argv, tmp_path, env_for(files, TRAIN_TINY_STEPS="2", ACCELERATE_USE_CPU="1"))
    assert summary(first.stdout)["steps"] == "2" and len(losses(first.stdout)) == 2
    assert (tmp_path / "out" / "checkpoint-2").is_dir()
    again = run(argv, tmp_path, env_for(files, TRAIN_TINY_STEPS="4", ACCELERATE_USE_CPU="1"))
    got = summary(again.stdout)
    assert (got["ranks"], got["steps"]) == ("2", "4")
    assert len(losses(again.stdout)) == 2, again.stdout  # steps 3 and 4
    assert all(math.isfinite(x) for x in losses(again.stdout))
    check_saved(tmp_path / "out")


def test_fsdp2_config_with_accelerate(files, tmp_path):
    """examples/accelerate/fsdp2.yaml: the launcher reads it (FSDP2, one unit per transformer
    block, full state dict); accelerate itself picks plain data parallel on CPUs (MULTI_CPU);
    with that one GPU-only switch stood in, its FSDP2 code shards GPT-2 block by block, trains
    and gathers the whole model. (finetune_hf.py under this file, on two CPU ranks, is what the
    job scripts run in tests/test_examples_run.py.)"""
    argv = [*launcher("accelerate"), "launch", "--config_file", str(CONFIGS / "fsdp2.yaml")]
    argv += ["--num_processes", "2", "--mixed_precision", "no"]
    env = env_for(files, ACCELERATE_USE_CPU="1")
    saved = tmp_path / "full.safetensors"
    r = run([*argv, str(PROBE), str(files["model"]), str(saved)], tmp_path, env)
    lines = r.stdout.splitlines()
    assert lines.count("chosen=MULTI_CPU") == 2, r.stdout
    (env_line,) = {x for x in lines if x.startswith("env=")}
    settings = set(env_line.removeprefix("env=").split(","))
    assert {
        "ACCELERATE_USE_FSDP=true",
        "FSDP_VERSION=2",
        "FSDP_AUTO_WRAP_POLICY=TRANSFORMER_BASED_WRAP",
        "FSDP_RESHARD_AFTER_FORWARD=true",
        "FSDP_STATE_DICT_TYPE=FULL_STATE_DICT",
    } <= settings, env_line
    ranks = sorted(x.split()[0] for x in lines if x.startswith("rank="))
    assert ranks == ["rank=0", "rank=1"]
    assert all("version=2" in x and "GPT2Block" in x for x in lines if x.startswith("rank="))
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    full = load_file(saved)
    expected = AutoModelForCausalLM.from_pretrained(files["model"]).state_dict()
    assert {k: tuple(v.shape) for k, v in full.items()} == {
        k: tuple(v.shape) for k, v in expected.items() if k in full
    }
    assert set(expected) - set(full) <= {"lm_head.weight"}  # tied to the embedding


def test_ranks_without_a_group_stop_with_one_line(files, tmp_path):
    """Two processes on a machine without GPUs, not told to use the CPU: each would train alone
    and both write the same folder; the script stops them instead."""
    argv = [*launcher("torchrun"), "--standalone", "--nproc-per-node=2", str(SCRIPT), "--tiny"]
    argv += ["--model", str(files["model"]), "--data", str(files["txt"]), "--output-dir", "out"]
    r = subprocess.run(argv, cwd=tmp_path, env=env_for(files), capture_output=True, text=True,
                       timeout=TIMEOUT)  # fmt: skip
    assert r.returncode != 0
    errors = [x for x in r.stderr.splitlines() if x.startswith("finetune_hf.py: error:")]
    assert len(errors) == 2 and "formed no group" in errors[0] and "ACCELERATE_USE_CPU" in errors[0]
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- bad input
@pytest.fixture
def program(files, monkeypatch):
    """The script as a module, run in this process with its cache in scratch."""
    spec = importlib.util.spec_from_file_location("finetune_hf", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", files["home"] / "datasets")
    for name in [k for k in os.environ if k.startswith(LAUNCH_VARS)]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # The libraries' log handlers write to the sys.stderr of the test that first logged in
    # this worker, a capture file closed since ("--- Logging error ---" and a traceback when
    # datasets logs a bad JSON line): here they write to the stderr of the test running now.
    for name in ("datasets", "transformers"):
        for handler in logging.getLogger(name).handlers:
            if type(handler) is logging.StreamHandler:  # not pytest's own handlers
                monkeypatch.setattr(handler, "stream", _CurrentStderr())
    return module


class _CurrentStderr:
    """sys.stderr as it is when written to."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def bad_inputs(top: Path, files: dict[str, Path]) -> dict[str, tuple[Path, Path, str]]:
    """name -> (--model, --data, what the one line says)."""
    (top / "empty").mkdir()
    broken = top / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    (top / "notes.csv").write_text("text\nhello\n")
    (top / "bad.jsonl").write_text('{"text": "fine"}\n{"text": \n')
    (top / "other.jsonl").write_text(json.dumps({"body": "a line"}) + "\n")
    (top / "short.txt").write_text("too short\n")
    model, data = files["model"], files["txt"]
    return {
        "no such model folder": (top / "nowhere", data, "config.json"),
        "a folder that is no model": (top / "empty", data, "config.json"),
        "a broken config": (broken, data, str(broken)),
        "no such data file": (model, top / "nope.txt", ".txt or .jsonl"),
        "data of another kind": (model, top / "notes.csv", "not a .txt"),
        "a bad JSON line": (model, top / "bad.jsonl", "bad.jsonl"),
        "no text field": (model, top / "other.jsonl", "no 'text' field"),
        "less than one block": (model, top / "short.txt", "one block"),
    }


CASES = [
    "no such model folder",
    "a folder that is no model",
    "a broken config",
    "no such data file",
    "data of another kind",
    "a bad JSON line",
    "no text field",
    "less than one block",
]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_and_status_2(program, files, tmp_path, capsys, case):
    model, data, says = bad_inputs(tmp_path, files)[case]
    out = tmp_path / "out"
    status = program.main(
        ["--model", str(model), "--data", str(data), "--output-dir", str(out), "--tiny"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    error_lines = [x for x in err if x.startswith("finetune_hf.py: error: ")]
    assert status == 2 and len(error_lines) == 1 and says in error_lines[0], err
    assert "Traceback" not in "\n".join(err)
    assert not out.exists()


def test_old_framework_is_refused(program, files, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(program.MINIMUM_VERSIONS, "transformers", "999.0")
    argv = ["--model", str(files["model"]), "--data", str(files["txt"]), "--tiny"]
    assert program.main([*argv, "--output-dir", str(tmp_path / "out")]) == 2
    assert "needs transformers 999.0 or newer" in capsys.readouterr().err


def test_runs_with_no_network_lookup(program, files):
    """local_files_only: a model named like a hub repository that is not a folder here is an
    error at once, not a download."""
    assert program.main(["--model", "gpt2", "--data", str(files["txt"]), "--tiny"]) == 2


def test_the_cases_cover_each_check(files, tmp_path):
    assert set(bad_inputs(tmp_path, files)) == set(CASES)
