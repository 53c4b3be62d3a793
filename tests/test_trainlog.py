"""clusterkit.runs.trainlog: our trainers' lines and the third-party lines the pages show."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clusterkit.runs import trainlog
from clusterkit.runs.trainlog import Record, TrainLogError

# The WMLCE ResNet-50 output on the Bede page, as printed there: wrapped at 80 columns.
WMLCE_WRAPPED = """\
[WARN DDL-2-17] Not performing connection tests. Cannot find 'mpitool' executabl
e. This could be because you are using a version of mpi that does not ship with
mpitool.
2020-11-17 15:39:49.410620: I tensorflow/stream_executor/platform/default/dso_lo
ader.cc:44] Successfully opened dynamic library libcudart.so.10.2
:::NVLOGv0.2.3 resnet 1605627653.398838758 (training_hooks.py:100) iteration: 0
:::NVLOGv0.2.3 resnet 1605627653.400741577 (training_hooks.py:101) imgs_per_sec:
37.5667719118656
:::NVLOGv0.2.3 resnet 1605627653.402500391 (training_hooks.py:102) cross_entropy
: 9.02121639251709
:::NVLOGv0.2.3 resnet 1605627653.404244661 (training_hooks.py:103) l2_loss: 0.74
98071789741516
:::NVLOGv0.2.3 resnet 1605627653.405992270 (training_hooks.py:104) total_loss: 9
.771023750305176
:::NVLOGv0.2.3 resnet 1605627653.407735109 (training_hooks.py:105) learning_rate
: 0.0
:::NVLOGv0.2.3 resnet 1605627671.803228855 (training_hooks.py:100) iteration: 10
:::NVLOGv0.2.3 resnet 1605627671.805866718 (training_hooks.py:101) imgs_per_sec:
4526.812526349517
:::NVLOGv0.2.3 resnet 1605627671.807682991 (training_hooks.py:102) cross_entropy
: 8.204719543457031
"""

# The same lines as the benchmark printed them, one record per line.
NVLOG = """\
:::NVLOGv0.2.3 resnet 1605627653.398838758 (training_hooks.py:100) iteration: 0
:::NVLOGv0.2.3 resnet 1605627653.400741577 (training_hooks.py:101) imgs_per_sec: 37.5667719118656
:::NVLOGv0.2.3 resnet 1605627653.402500391 (training_hooks.py:102) cross_entropy: 9.02121639251709
:::NVLOGv0.2.3 resnet 1605627653.404244661 (training_hooks.py:103) l2_loss: 0.7498071789741516
:::NVLOGv0.2.3 resnet 1605627653.405992270 (training_hooks.py:104) total_loss: 9.771023750305176
:::NVLOGv0.2.3 resnet 1605627653.407735109 (training_hooks.py:105) learning_rate: 0.0
:::NVLOGv0.2.3 resnet 1605627671.803228855 (training_hooks.py:100) iteration: 10
:::NVLOGv0.2.3 resnet 1605627671.805866718 (training_hooks.py:101) imgs_per_sec: 4526.812526349517
:::NVLOGv0.2.3 resnet 1605627671.807682991 (training_hooks.py:102) cross_entropy: 8.204719543457031
"""

# The end of the run on the same page (these lines were not wrapped there).
NVLOG_END = """\
transpose_before=resnet50_v1.5/input_reshape/transpose pad=resnet50_v1.5/conv2d/Pad transpose_after=resnet50_v1.5/conv2d/conv2d/Conv2D-0-TransposeNCHWToNHWC-LayoutOptimizer
:::NVLOGv0.2.3 resnet 1605641981.781752110 (runner.py:610) Top-1 Accuracy: 75.863
:::NVLOGv0.2.3 resnet 1605641981.782602310 (runner.py:611) Top-5 Accuracy: 92.823
:::NVLOGv0.2.3 resnet 1605641981.783382177 (runner.py:630) Ending Model Evaluation ...
"""  # noqa: E501


def unwrap(text: str, width: int = 80) -> str:
    """Undo a hard wrap at `width` columns: a full-width line goes on in the next line, unless
    that one starts a record of its own."""
    out: list[str] = []
    full = False
    for line in text.splitlines():
        if full and not line.startswith(":::"):
            # the wrap swallowed the blank after "key:"
            out[-1] += (" " if out[-1].endswith(":") else "") + line
        else:
            out.append(line)
        full = len(line) == width
    return "\n".join(out) + "\n"


def test_the_wrapped_page_lines_rejoin_into_the_printed_ones():
    joined = unwrap(WMLCE_WRAPPED)
    assert joined.endswith(NVLOG)
    assert [(r.kind, r.fields) for r in trainlog.parse(joined)] == [
        (r.kind, r.fields) for r in trainlog.parse(NVLOG)
    ]


def test_nvlog_lines():
    recs = trainlog.parse(NVLOG)
    assert [r.kind for r in recs] == ["nvlog"] * 9
    assert [r.line for r in recs] == list(range(1, 10))
    assert recs[0].fields == {
        "iteration": 0,
        "timestamp": 1605627653.398838758,
        "source": "training_hooks.py:100",
        "benchmark": "resnet",
    }
    keys = [next(iter(set(r.fields) - {"timestamp", "source", "benchmark"})) for r in recs]
    assert keys == [
        "iteration",
        "imgs_per_sec",
        "cross_entropy",
        "l2_loss",
        "total_loss",
        "learning_rate",
        "iteration",
        "imgs_per_sec",
        "cross_entropy",
    ]
    assert recs[7].fields["imgs_per_sec"] == 4526.812526349517
    assert recs[5].fields["learning_rate"] == 0.0


def test_nvlog_accuracy_and_message_lines():
    recs = trainlog.parse(NVLOG_END)
    assert [r.kind for r in recs] == ["nvlog"] * 3 and recs[0].line == 2
    assert recs[0].fields["top1_accuracy"] == 75.863
    assert recs[1].fields["top5_accuracy"] == 92.823
    assert recs[2].fields["message"] == "Ending Model Evaluation ..."


def test_summary_of_the_wmlce_run():
    s = trainlog.summarise(trainlog.parse(NVLOG + NVLOG_END))
    assert s["img_s"] == 4526.812526349517  # the first report is warm-up and left out
    assert s["top1"] == pytest.approx(0.75863) and s["top5"] == pytest.approx(0.92823)


TF_CNN = """\
Done warm up
Step\tImg/sec\ttotal_loss
1\timages/sec: 280.9 +/- 0.0 (jitter = 0.0)\t8.221
10\timages/sec: 281.3 +/- 0.3 (jitter = 1.1)\t8.082
100\timages/sec: 1121.7 +/- 1.8 (jitter = 12.4)\t7.812\t0.001\t0.006
----------------------------------------------------------------
total images/sec: 8941.79
----------------------------------------------------------------
Accuracy @ 1 = 0.7521 Accuracy @ 5 = 0.9254 [50000 examples]
"""


def test_tf_cnn_benchmarks_lines():
    recs = trainlog.parse(TF_CNN)
    assert [r.kind for r in recs] == ["tf_cnn"] * 5
    assert recs[0].fields == {"step": 1, "img_s": 280.9, "err": 0.0, "jitter": 0.0, "loss": 8.221}
    assert recs[2].fields["top5"] == 0.006 and recs[2].line == 5
    assert recs[3].fields == {"total_img_s": 8941.79}
    assert recs[4].fields == {"top1": 0.7521, "top5": 0.9254, "examples": 50000}
    s = trainlog.summarise(recs)
    assert s["img_s"] == 8941.79 and s["top1"] == 0.7521  # not the per-step accuracy
    # the aggregated form several GPUs print, with spaces for tabs as pages show it
    assert trainlog.parse_line("20 images/sec: 1480.2 7.9").fields == {
        "step": 20,
        "img_s": 1480.2,
        "loss": 7.9,
    }


HOROVOD = """\
Model: ResNet50
Batch size: 64
Number of GPUs: 12
Running warmup...
Running benchmark...
Iter #0: 123.9 img/sec per GPU
Iter #1: 124.2 img/sec per GPU, iteration time 515.296 ms
Img/sec per GPU: 123.4 +-1.2
Total img/sec on 12 GPU(s): 1480.8 +-14.4
"""


def test_horovod_synthetic_benchmark_lines():
    recs = trainlog.parse(HOROVOD)
    assert [r.kind for r in recs] == ["horovod_synthetic"] * 4
    assert recs[0].fields == {"iteration": 0, "img_s_per_device": 123.9, "device": "GPU"}
    assert recs[1].fields["iteration"] == 1
    assert recs[2].fields == {"device": "GPU", "img_s_per_device": 123.4, "err": 1.2}
    assert recs[3].fields == {"devices": 12, "device": "GPU", "total_img_s": 1480.8, "err": 14.4}
    s = trainlog.summarise(recs)
    assert s["img_s"] == 1480.8 and s["ranks"] == 12
    cpu = trainlog.parse_line("Total img/sec on 2 CPU(s): 20.1 +-0.4")
    assert cpu.fields["device"] == "CPU" and cpu.fields["devices"] == 2


OURS = """\
resnet50: 2 rank(s) (srun), device cpu, backend gloo, batch 4 per rank
0: [resume] step=2 path=/scratch/my run/checkpoints/ckpt-step00000002.pt
0: [train] rank=0/2 epoch=0 step=3 loss=6.950646 lr=0.003125 img_s=9.4
1: [train] rank=1/2 epoch=0 step=3 loss=7.206017 lr=0.003125 img_s=9.6
0: [checkpoint] step=3 path=checkpoints/ckpt-step00000003.pt
0: [eval] rank=0/2 epoch=0 top1=0.0012 top5=0.0050 loss=6.912345
[train] rank=0/2 epoch=1 step=4 loss=5.0 lr=0.002 img_s=7.2[train] rank=1/2 epoch=1 step=4 \
loss=6.0 lr=0.002 img_s=7.4
[1,0]<stdout>:[preempted] step=4
[default0]:[summary] ranks=2 steps=4 img_s=14.4 time_s=2.82
"""


def test_horovodrun_prefixes():
    """horovodrun tags each line with the rank and stream, after the time with
    --prefix-timestamp."""
    lines = [
        "[1]<stdout>:[train] rank=1/2 epoch=0 step=2 loss=6.9 lr=0.003 img_s=9.6",
        "Mon Nov 23 22:41:07 2026[0]<stdout>:[preempted] step=3",
    ]
    first, second = (trainlog.parse_line(line) for line in lines)
    assert (first.kind, first.fields["rank"], first.fields["step"]) == ("train", 1, 2)
    assert (second.kind, second.fields) == ("preempted", {"step": 3})
    assert [r.kind for r in trainlog.parse("\n".join(lines))] == ["train", "preempted"]


def test_our_lines_with_launcher_prefixes_and_run_together_ranks():
    recs = trainlog.parse(OURS)
    assert [(r.kind, r.line) for r in recs] == [
        ("resume", 2),
        ("train", 3),
        ("train", 4),
        ("checkpoint", 5),
        ("eval", 6),
        ("train", 7),
        ("train", 7),
        ("preempted", 8),
        ("summary", 9),
    ]
    assert recs[0].fields == {"step": 2, "path": "/scratch/my run/checkpoints/ckpt-step00000002.pt"}
    assert recs[1].fields == {
        "rank": 0,
        "world": 2,
        "epoch": 0,
        "step": 3,
        "loss": 6.950646,
        "lr": 0.003125,
        "img_s": 9.4,
    }
    assert recs[4].fields["top5"] == 0.005 and recs[4].fields["world"] == 2
    assert recs[6].fields["rank"] == 1 and recs[6].fields["loss"] == 6.0
    assert recs[8].fields == {"ranks": 2, "steps": 4, "img_s": 14.4, "time_s": 2.82}


def test_summary_of_our_run():
    s = trainlog.summarise(trainlog.parse(OURS))
    assert s["img_s"] == 14.4 and s["ranks"] == 2 and s["steps"] == 4 and s["time_s"] == 2.82
    assert s["img_s_per_rank"] == {0: 7.2, 1: 7.4}  # each rank's first line is warm-up
    assert s["final_loss"] == 5.5  # mean over the ranks at the last step
    assert s["top1"] == 0.0012 and s["top5"] == 0.005
    assert s["preempted_at"] == 4 and s["resumed_from"] == 2


def test_summary_without_a_summary_line_adds_up_the_ranks():
    text = "\n".join(
        f"[train] rank={r}/2 epoch=0 step={s} loss=1.0 lr=0.1 img_s={10 * (r + 1)}"
        for s in (1, 2)
        for r in (0, 1)
    )
    s = trainlog.summarise(trainlog.parse(text))
    assert s["img_s"] == 30.0 and s["steps"] == 2 and "time_s" not in s


def test_unknown_lines_are_ignored():
    text = "[WARN DDL-2-17] mpitool\n[info] x\n[trainer] y\nStep\tImg/sec\ttotal_loss\n\n"
    assert trainlog.parse(text) == []
    assert trainlog.parse_line("Img/sec: 3") is None


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("[train] rank=0/2 epoch=0 step=x loss=1 lr=1 img_s=1", "step='x' is not an int"),
        ("[train] rank=0/2 epoch=0 step=1 loss=1", "lacks lr, img_s"),
        ("[train] rank=0 epoch=0 step=1 loss=1 lr=1 img_s=1", "rank='0' is not R/W"),
        ("[train] rank=2/2 epoch=0 step=1 loss=1 lr=1 img_s=1", "rank 2 of 2"),
        ("[summary] ranks=2 steps", "expects key=value, got 'steps'"),
        ("[summary] ranks=2 steps=4 img_s=inf time_s=1", "img_s=inf is not finite"),
        ("[preempted]", "lacks step"),
        ("[eval] rank=0/1 epoch=0 top1=high top5=1 loss=1", "top1='high' is not a number"),
        (":::NVLOGv0.2.3 resnet", "NVLOG line is not"),
        (":::NVLOGv0.2.3 resnet yesterday (a.py:1) x: 1", "timestamp 'yesterday'"),
        ("10\timages/sec: fast", "tf_cnn line is not"),
        ("total images/sec: lots", "tf_cnn line is not 'total images/sec: <n>'"),
        ("Total img/sec on 4 GPU(s): 12.0", "horovod_synthetic line is not"),
    ],
)
def test_malformed_lines_of_known_kinds_name_the_line(line, message):
    with pytest.raises(TrainLogError, match=r"^line 3: ") as exc:
        trainlog.parse("\n\n" + line)
    assert message in str(exc.value)


def test_a_nan_loss_is_a_value_not_an_error():
    rec = trainlog.parse_line("[train] rank=0/1 epoch=0 step=1 loss=nan lr=0.1 img_s=1.0")
    assert math.isnan(rec.fields["loss"])


def test_records_are_frozen():
    rec = trainlog.parse_line("[preempted] step=4")
    with pytest.raises(AttributeError):
        rec.kind = "train"
    assert rec == Record("preempted", {"step": 4}, 0)


# --------------------------------------------------------------------------- round trip
finite = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)


@st.composite
def our_records(draw) -> Record:
    kind = draw(st.sampled_from(sorted(trainlog.OUR_KINDS)))
    world = draw(st.integers(1, 4096))
    values = {
        "rank": draw(st.integers(0, world - 1)),
        "world": world,
        "epoch": draw(st.integers(0, 10**4)),
        "step": draw(st.integers(0, 10**9)),
        "ranks": world,
        "steps": draw(st.integers(0, 10**9)),
        "loss": draw(finite),
        "lr": draw(st.floats(0, 100)),
        "img_s": draw(finite),
        "time_s": draw(finite),
        "top1": draw(st.floats(0, 1)),
        "top5": draw(st.floats(0, 1)),
        "peak_mib": draw(finite),
        "path": draw(
            st.text(st.characters(codec="utf-8", exclude_categories=["C", "Z"]), min_size=1).map(
                lambda s: "ckpt/" + s
            )
        ),
    }
    return Record(kind, {k: values[k] for k in trainlog.OUR_KINDS[kind]})


@given(our_records())
def test_round_trip_of_our_format(record):
    line = trainlog.format_record(record)
    parsed = trainlog.parse_line(line)
    assert parsed.kind == record.kind and parsed.fields.keys() == record.fields.keys()
    digits = {"loss": 6, "lr": 6, "img_s": 1, "time_s": 2, "top1": 4, "top5": 4, "peak_mib": 1}
    for key, value in record.fields.items():
        if key in digits:
            assert parsed.fields[key] == pytest.approx(value, abs=0.6 * 10 ** -digits[key])
        else:
            assert parsed.fields[key] == value
    # and the same once more with a launcher's prefix, inside a longer log
    assert trainlog.parse(f"noise\n0: {line}\n") == [Record(parsed.kind, parsed.fields, 2)]


@given(st.text())
def test_any_text_parses_or_raises_trainlogerror(text):
    try:
        trainlog.parse(text)
    except TrainLogError as exc:
        assert str(exc).startswith("line ")
