"""examples/pytorch/train_lm.py: tiny runs on the CPU, offline.

Every run here starts from a tiny GPT-2 or Llama written by tests/tiny_lm.py with
save_pretrained, with HF_HUB_OFFLINE=1, and (where this user may make one: root, as in CI) in a
network namespace that holds only a loopback device, so a call to the Hugging Face hub would
fail. Two-rank runs use torchrun with gloo, DDP and FSDP2 (torch's fully_shard). The tests
marked ``stack`` also run under each software stack whose pages run the program
(``nox -s stacks``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import own_network
import pytest

from clusterkit.runs import trainlog

ROOT = Path(__file__).resolve().parent.parent
TRAINER = ROOT / "examples" / "pytorch" / "train_lm.py"
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_", "OMPI_", "PMI", "MASTER_", "TRAIN_")
TORCHRUN = str(Path(sys.executable).parent / "torchrun")

pytestmark = pytest.mark.program_lines


def env(steps: int) -> dict[str, str]:
    """No launcher's variables; offline; --tiny runs of `steps` steps."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCH_VARS)}
    offline = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return {**clean, **offline, "TRAIN_TINY_STEPS": str(steps)}


def train(cwd: Path, *args: str, steps: int, ranks: int = 1, timeout: int = 600):
    """A --tiny run of train_lm.py on `ranks` CPU ranks (torchrun above one), in a network of
    its own."""
    launch = [sys.executable]
    if ranks > 1:
        launch = [TORCHRUN, "--standalone", f"--nproc-per-node={ranks}"]
    argv = own_network.command([*launch, str(TRAINER), "--tiny", *args])
    return subprocess.run(
        argv, cwd=cwd, env=env(steps), capture_output=True, text=True, timeout=timeout
    )


def records(out: str, kind: str) -> list[dict]:
    return [r.fields for r in trainlog.parse(out) if r.kind == kind]


def losses(out: str) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in records(out, "train")}


def ok(result) -> str:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def gpt2(tiny_lm) -> list[str]:
    """The GPT-2 runs' options: each rank's two sequences a step in micro-batches of one, so that
    gradients accumulate and DDP averages once a step."""
    model = ["--model", str(tiny_lm["gpt2"]), "--data", str(tiny_lm["text"])]
    return [*model, "--lr", "3e-3", "--micro-batch-size", "1"]


@pytest.fixture(scope="module")
def ddp_run(tiny_lm, tmp_path_factory):
    """Two DDP ranks, 6 steps of GPT-2, a checkpoint every 2: the reference for resuming."""
    cwd = tmp_path_factory.mktemp("ddp")
    more = ["--keep", "3", "--output", "trained"]
    return cwd, ok(train(cwd, *gpt2(tiny_lm), *more, steps=6, ranks=2))


# not under every stack (nox -s stacks): DDP's API is stable; the FSDP2 run below, with its
# sharded checkpoint, is the one that tells torch versions apart
def test_ddp_two_ranks_loss_falls_and_the_model_is_saved(ddp_run):
    cwd, out = ddp_run
    loss = losses(out)
    assert sorted(loss) == [1, 2, 3, 4, 5, 6]
    assert loss[6] < loss[1] - 0.1, loss
    summary = records(out, "summary")[0]
    assert summary["ranks"] == 2 and summary["steps"] == 6 and summary["tokens_s"] > 0
    assert "2 rank(s) (torchrun), ddp" in out
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(cwd / "trained", local_files_only=True)
    assert saved.config.model_type == "gpt2"
    assert (cwd / "trained" / "tokenizer.json").is_file()


@pytest.mark.stack
def test_fsdp_two_ranks_loss_falls(tiny_lm, tmp_path):
    out = ok(
        train(
            tmp_path,
            "--model",
            str(tiny_lm["llama"]),
            "--data",
            str(tiny_lm["text"]),
            "--lr",
            "3e-3",
            "--parallel",
            "fsdp",
            "--activation-checkpointing",
            steps=5,
            ranks=2,
        )
    )
    loss = losses(out)
    assert loss[5] < loss[1] - 0.1, loss
    assert "2 rank(s) (torchrun), fsdp" in out
    # each rank wrote its own shards of the last checkpoint
    shards = sorted(p.name for p in (tmp_path / "checkpoints" / "step-00000005").glob("*.distcp"))
    assert len(shards) == 2, shards


@pytest.mark.parametrize("ranks", [2, 1])  # in the tests session: see the DDP run above
def test_a_two_rank_checkpoint_resumes_on_two_and_on_one_rank(ddp_run, tmp_path, tiny_lm, ranks):
    """The step after the checkpoint has the uninterrupted run's loss: bit for bit on the same
    number of ranks; on one rank to the last digits of a float sum taken in another order."""
    cwd, reference = ddp_run
    shutil.copytree(cwd / "checkpoints" / "step-00000004", tmp_path / "ck" / "step-00000004")
    result = train(tmp_path, *gpt2(tiny_lm), "--checkpoint-dir", "ck", steps=6, ranks=ranks)
    out = ok(result)
    assert records(out, "resume")[0]["step"] == 4
    before, after = losses(reference), losses(out)
    assert sorted(after) == [5, 6]
    if ranks == 2:
        assert after == {5: before[5], 6: before[6]}
    else:
        assert after[5] == pytest.approx(before[5], rel=1e-5, abs=1e-6)
        assert "checkpoint written by 2 rank(s), now 1" in result.stderr


def test_lora_trains_only_the_adapters(tiny_lm, tmp_path):
    out = ok(
        train(
            tmp_path,
            "--model",
            str(tiny_lm["llama"]),
            "--data",
            str(tiny_lm["text"]),
            "--lr",
            "1e-2",
            "--lora-rank",
            "4",
            "--output",
            "adapter",
            steps=4,
        )
    )
    line = re.search(r"([\d,]+) parameters, ([\d,]+) trained", out)
    total, trained = (int(g.replace(",", "")) for g in line.groups())
    assert 0 < trained < total / 10
    from safetensors.torch import load_file

    saved = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    assert saved and all("lora_" in name for name in saved), sorted(saved)[:5]
    # LoRA's B matrices start at zero: trained adapters are no longer zero
    assert any(t.abs().sum() > 0 for name, t in saved.items() if "lora_B" in name)
    # the checkpoint holds the adapters and their optimizer state, not the frozen weights
    import torch.distributed.checkpoint as dcp

    meta = dcp.FileSystemReader(str(tmp_path / "checkpoints" / "step-00000004")).read_metadata()
    weights = [k for k in meta.state_dict_metadata if k.startswith("model.")]
    assert weights and all("lora_" in k for k in weights), weights[:5]


def test_sigusr1_checkpoints_and_exits_cleanly(tiny_lm, tmp_path):
    argv = [sys.executable, str(TRAINER), "--model", str(tiny_lm["gpt2"])]
    argv += ["--data", str(tiny_lm["text"]), "--tiny"]
    proc = subprocess.Popen(
        own_network.command(argv), cwd=tmp_path, env=env(100000), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    out = []
    for line in proc.stdout:
        out.append(line)
        if line.startswith("[train]"):
            proc.send_signal(signal.SIGUSR1)
            break
    rest, err = proc.communicate(timeout=300)
    text = "".join(out) + rest
    assert proc.returncode == 0, err
    stopped = records(text, "preempted")[0]["step"]
    assert records(text, "checkpoint")[-1]["step"] == stopped < 100000


# --------------------------------------------------------------------------- one-line errors
@pytest.fixture(scope="module")
def trainer():
    """The trainer as a module, for errors found before any training (job_runtime beside it)."""
    sys.path.insert(0, str(TRAINER.parent))
    try:
        spec = importlib.util.spec_from_file_location("train_lm", TRAINER)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(TRAINER.parent))
    return module


def one_line_error(trainer, capsys, cwd: Path, argv) -> tuple[int, str]:
    before = time.time()
    try:
        code = trainer.run(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    written = [p for p in cwd.rglob("*") if p.stat().st_mtime >= before]
    assert written == [], written  # nothing written
    return code, err[-1]


@pytest.mark.stack
@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("no-model", "--model {tmp}/nosuch: no such directory. Download the model"),
        ("no-data", "--data {tmp}/nosuch.jsonl: no such file or directory"),
        ("broken-json", "{tmp}/bad.jsonl:2: not a JSON record"),
        ("no-field", '{tmp}/bad.jsonl:1: no text field "text" (see --text-field)'),
        ("wrong-suffix", "--data {tmp}/bad.csv: not .txt, .jsonl, .json or .parquet"),
        ("too-long", "--seq-len 65 is longer than gpt2's 64 positions"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    trainer, tiny_lm, tmp_path, capsys, monkeypatch, case, message
):
    monkeypatch.chdir(tmp_path)
    for key in list(os.environ):
        if key.startswith(LAUNCH_VARS):
            monkeypatch.delenv(key)
    model, data, extra = str(tiny_lm["gpt2"]), str(tiny_lm["text"]), []
    bad = tmp_path / "bad.jsonl"
    if case == "no-model":
        model = str(tmp_path / "nosuch")
    elif case == "no-data":
        data = str(tmp_path / "nosuch.jsonl")
    elif case == "broken-json":
        bad.write_text('{"text": "one"}\n{"text": broken\n')
        data = str(bad)
    elif case == "no-field":
        bad.write_text('{"body": "one"}\n')
        data = str(bad)
    elif case == "wrong-suffix":
        data = str(tmp_path / "bad.csv")
        Path(data).write_text("text\none\n")
    else:
        extra = ["--seq-len", "65"]
    time.sleep(0.01)  # files made above are older than the run
    argv = ["--model", model, "--data", data, *extra, "--checkpoint-dir", str(tmp_path / "ck")]
    code, last = one_line_error(trainer, capsys, tmp_path, argv)
    assert code == 2
    assert message.format(tmp=tmp_path) in last, last


def tiny_lm_documents() -> list[str]:
    import tiny_lm

    return tiny_lm.documents(200)


def test_pretraining_from_a_config_reports_mfu(tiny_lm, tmp_path):
    """--scratch builds new weights from the model's config; plain text is one document a line;
    with a peak rate to divide by, the summary gives a model FLOPs utilisation."""
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(tiny_lm_documents()))
    model = ["--model", str(tiny_lm["llama"]), "--scratch", "--data", str(text)]
    out = ok(train(tmp_path, *model, "--peak-tflops", "0.001", steps=2))
    assert "llama new:" in out
    summary = records(out, "summary")[0]
    assert 0 < float(summary["mfu"]) < 10, summary


@pytest.mark.parametrize("form", ["parquet", "save_to_disk"])
def test_tokenize_only_reads_hub_and_datasets_formats(trainer, tiny_lm, tmp_path, form):
    """A data set as the Hub holds it (Parquet) or as datasets saves it, tokenised into the
    cache beside it by --tokenize-only, which trains nothing."""
    import datasets

    table = datasets.Dataset.from_dict({"text": tiny_lm_documents(), "label": [0] * 200})
    data = tmp_path / ("train.parquet" if form == "parquet" else "saved")
    if form == "parquet":
        table.to_parquet(str(data))
    else:
        datasets.DatasetDict({"train": table}).save_to_disk(str(data))
    argv = ["--model", str(tiny_lm["gpt2"]), "--data", str(data), "--tokenize-only"]
    argv += ["--seq-len", "32", "--checkpoint-dir", str(tmp_path / "ck")]
    assert trainer.run(argv) == 0
    (cache,) = (tmp_path / f"{data.name}.tokens").iterdir()
    blocks = datasets.load_from_disk(str(cache))
    assert len(blocks) > 10 and len(blocks[0]["input_ids"]) == 32
    assert not (tmp_path / "ck").exists()


def test_blocks_are_compiled_one_by_one(trainer, tiny_lm):
    """--compile compiles each transformer block (on its first call, which is not made here)."""
    import torch

    argv = ["--model", str(tiny_lm["gpt2"]), "--data", str(tiny_lm["text"]), "--compile"]
    args = trainer.parse_args([*argv, "--seq-len", "32"])
    model, classes = trainer.build_model(args, trainer.read_config(args))
    model = trainer.parallelize(args, model, classes, torch.device("cpu"), 1)
    blocks = trainer.blocks_of(model, classes)
    assert len(blocks) == 2 and all(b._compiled_call_impl is not None for b in blocks)


def test_a_checkpoint_of_another_model_is_refused(ddp_run, tiny_lm, tmp_path):
    cwd, _ = ddp_run
    shutil.copytree(cwd / "checkpoints" / "step-00000004", tmp_path / "ck" / "step-00000004")
    model = ["--model", str(tiny_lm["llama"]), "--data", str(tiny_lm["text"])]
    r = train(tmp_path, *model, "--checkpoint-dir", "ck", steps=6)
    assert r.returncode == 1, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: checkpoint ck/step-00000004 does not fit this model"), last
    assert "Traceback" not in r.stderr


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def broken_model(tmp_path: Path, tiny_lm, what: str) -> str:
    """A copy of the tiny GPT-2 with one part broken: its config, its tokenizer, its weights."""
    copy = tmp_path / f"model-{what}"
    shutil.copytree(tiny_lm["gpt2"], copy)
    if what == "config":
        (copy / "config.json").write_text("{not json")
    elif what == "tokenizer":
        for f in copy.glob("tokenizer*"):
            f.unlink()
    elif what == "damaged-tokenizer":  # JSON, but not a tokenizer's
        (copy / "tokenizer.json").write_text('{"version": "1.0", "model": 3}')
    elif what == "no-eos":
        config = json.loads((copy / "tokenizer_config.json").read_text())
        for key in ("eos_token", "bos_token"):
            config.pop(key, None)
        (copy / "tokenizer_config.json").write_text(json.dumps(config))
    else:
        for f in copy.glob("*.safetensors"):
            f.unlink()
    return str(copy)


def dataset_folder(tmp_path: Path, splits: dict[str, list[str]], column: str = "text") -> str:
    import datasets

    out = tmp_path / "saved"
    tables = {k: datasets.Dataset.from_dict({column: v}) for k, v in splits.items()}
    datasets.DatasetDict(tables).save_to_disk(str(out))
    return str(out)


def parquet(tmp_path: Path, column: str) -> str:
    import datasets

    out = tmp_path / "data.parquet"
    datasets.Dataset.from_dict({column: tiny_lm_documents()}).to_parquet(str(out))
    return str(out)


# (case) -> (argv beyond --model/--data, the exit status, the start of the one line)
MORE_ERRORS = {
    "zero-seq-len": (["--seq-len", "0"], 2, "--seq-len must be at least 1"),
    "zero-batch": (["--global-batch-size", "0"], 2, "--global-batch-size must be at least 1"),
    "negative-lora": (["--lora-rank", "-1"], 2, "--lora-rank and --warmup-steps cannot be"),
    "bad-config": (["MODEL=config"], 2, "error: --model {tmp}/model-config: "),
    "no-tokenizer": (["MODEL=tokenizer"], 2, "error: --model {tmp}/model-tokenizer: no usable"),
    "no-weights": (["MODEL=weights"], 2, "error: --model {tmp}/model-weights: cannot load"),
    "damaged-tokenizer": (
        ["MODEL=damaged-tokenizer"],
        2,
        "error: --model {tmp}/model-damaged-tokenizer: no usable tokenizer (KeyError",
    ),
    "no-eos": (["MODEL=no-eos"], 2, "error: --model {tmp}/model-no-eos: its tokenizer has no end"),
    "bad-lora-targets": (["--lora-rank", "4", "--lora-targets", "x"], 2, "error: --lora-targets"),
    "not-parquet": (["DATA=junk.parquet"], 2, "error: --data {tmp}/junk.parquet: not a Parquet"),
    "parquet-column": (["DATA=parquet:body"], 2, "error: --data {tmp}/data.parquet: no column"),
    "json-list": (["DATA=list.json"], 2, "error: {tmp}/list.json:1: not JSON"),
    "not-a-saved-set": (["DATA=emptydir"], 2, "error: --data {tmp}/emptydir: not a save_to_disk"),
    "no-train-split": (["DATA=saved:test"], 2, "error: --data {tmp}/saved: no train split"),
    "saved-column": (["DATA=saved:train:body"], 2, "error: --data {tmp}/saved: no column"),
    "folder-and-file": (["DATA=folder+file"], 2, "error: --data {tmp}/saved: a folder must be"),
    "too-little-text": (["DATA=short.txt"], 2, "error: --data holds fewer than --seq-len 32"),
    "uneven-batch": (
        ["--global-batch-size", "3", "--micro-batch-size", "2"],
        2,
        "error: --global-batch-size 3 is not a multiple",
    ),
    "fewer-than-a-batch": (["--global-batch-size", "4096"], 2, "error: --data holds"),
    "unwritable-cache": (["--token-cache", "{tmp}/afile/c"], 1, "error: cannot write the token"),
    "unwritable-checkpoints": (["--checkpoint-dir", "{tmp}/afile/ck"], 1, "error: cannot write"),
    "diverges": (["--lr", "1e30"], 1, "error: loss is"),
}


@pytest.mark.parametrize("case", sorted(MORE_ERRORS))
def test_more_bad_input_ends_in_one_line(trainer, tiny_lm, tmp_path, capsys, monkeypatch, case):
    """Each of these ends the run with one line naming what is wrong, no traceback: options
    (exit 2), a model folder or data that cannot be read (2), storage that cannot be written
    and a loss that diverges (1)."""
    extra, status, start = MORE_ERRORS[case]
    for key in list(os.environ):
        if key.startswith(LAUNCH_VARS):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("a file where a folder is wanted")
    model, data, rest = str(tiny_lm["gpt2"]), [str(tiny_lm["text"])], []
    for word in extra:
        if word.startswith("MODEL="):
            model = broken_model(tmp_path, tiny_lm, word[6:])
        elif word.startswith("DATA="):
            data = special_data(tmp_path, word[5:])
        else:
            rest.append(word.format(tmp=tmp_path))
    # small runs, without --tiny (which would replace the sizes some cases give)
    small = ["--seq-len", "32", "--global-batch-size", "4", "--steps", "2", "--log-every", "1"]
    argv = ["--model", model, "--data", *data, *small, "--checkpoint-every", "1", *rest]
    if "--checkpoint-dir" not in rest:
        argv += ["--checkpoint-dir", str(tmp_path / "ck")]
    try:
        code = trainer.run(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == status, err
    assert start.format(tmp=tmp_path) in err[-1] and "error: " in err[-1], err[-1]
    assert not any("Traceback" in line for line in err)


def special_data(tmp_path: Path, what: str) -> list[str]:
    if what == "junk.parquet":
        return [write(tmp_path / "junk.parquet", "not parquet at all")]
    if what.startswith("parquet:"):
        return [parquet(tmp_path, what.split(":")[1])]
    if what == "list.json":
        return [write(tmp_path / "list.json", "[{broken")]
    if what == "emptydir":
        (tmp_path / "emptydir").mkdir()
        return [str(tmp_path / "emptydir")]
    if what.startswith("saved:"):
        split, _, column = what[6:].partition(":")
        return [dataset_folder(tmp_path, {split: tiny_lm_documents()}, column or "text")]
    if what == "folder+file":
        folder = dataset_folder(tmp_path, {"train": tiny_lm_documents()})
        return [folder, write(tmp_path / "more.txt", "more text\n")]
    return [write(tmp_path / "short.txt", "too short\n")]


def test_a_json_list_and_an_already_finished_run(ddp_run, trainer, tiny_lm, tmp_path, capsys):
    """A .json file holding a list of records is read like JSON lines; a run whose newest
    checkpoint is already at its last step says so and trains nothing."""
    import json

    records = [{"text": t} for t in tiny_lm_documents()]
    data = write(tmp_path / "list.json", json.dumps(records))
    cwd, _ = ddp_run
    shutil.copytree(cwd / "checkpoints" / "step-00000006", tmp_path / "ck" / "step-00000006")
    argv = ["--model", str(tiny_lm["gpt2"]), "--data", data, "--tiny", "--lr", "3e-3"]
    os.environ["TRAIN_TINY_STEPS"] = "6"
    try:
        assert trainer.run([*argv, "--checkpoint-dir", str(tmp_path / "ck")]) == 0
    finally:
        del os.environ["TRAIN_TINY_STEPS"]
    out = capsys.readouterr().out
    assert "already trained for 6 steps (of 6): nothing to do" in out


def test_memory_report_says_why_a_lora_run_is_not_measured(trainer, tiny_lm, tmp_path, capsys):
    argv = ["--model", str(tiny_lm["llama"]), "--data", str(tiny_lm["text"]), "--tiny"]
    argv += ["--lora-rank", "4", "--memory-report", "--checkpoint-dir", str(tmp_path / "ck")]
    assert trainer.run(argv) == 0
    err = capsys.readouterr().err
    assert "--memory-report on a CPU cannot measure a LoRA run" in err


def test_help_gives_each_option_and_its_default(trainer):
    text = trainer.build_parser().format_help()
    assert "--seq-len" in text and "--lora-rank" in text and "--checkpoint-dir" in text
    assert "(default: 2e-05)" in text  # --lr
    assert "(default: False)" not in text  # a flag's default goes unsaid
