"""The training-log parser: our trainers' lines and the third-party lines the pages show."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clusterkit import trainlog

# The WMLCE ResNet-50 lines of the Bede seed page (wrapped there at 80 columns; joined here).
NVLOG = """\
:::NVLOGv0.2.3 resnet 1605627653.400741577 (training_hooks.py:101) imgs_per_sec: 37.5667719118656
:::NVLOGv0.2.3 resnet 1605627671.805866718 (training_hooks.py:101) imgs_per_sec: 4526.812526349517
:::NVLOGv0.2.3 resnet 1605627671.807682991 (training_hooks.py:102) cross_entropy: 8.204719543457031
:::NVLOGv0.2.3 resnet 1605641981.781752110 (runner.py:610) Top-1 Accuracy: 75.863
:::NVLOGv0.2.3 resnet 1605641981.782602310 (runner.py:611) Top-5 Accuracy: 92.823
"""


def test_nvlog_lines():
    recs = trainlog.parse(NVLOG)
    assert [r.kind for r in recs] == ["nvlog"] * 5
    assert recs[1].fields["imgs_per_sec"] == pytest.approx(4526.8125)
    assert recs[3].fields["top1_accuracy"] == 75.863
    summary = trainlog.summarise(recs)
    assert summary["img_s"] == pytest.approx(4526.8125) and summary["top1"] == 75.863


def test_tf_cnn_benchmarks_and_horovod_lines():
    text = (
        "10\timages/sec: 312.4 +/- 0.8 (jitter = 2.1)\t7.876\n"
        "total images/sec: 1234.56\n"
        "Img/sec per GPU: 123.4 +-1.2\n"
        "Total img/sec on 12 GPU(s): 1480.8 +-14.4\n"
    )
    recs = trainlog.parse(text)
    assert [r.kind for r in recs] == ["tf_cnn", "tf_cnn", "horovod_synthetic", "horovod_synthetic"]
    assert recs[0].fields == {"step": 10, "img_s": 312.4, "err": 0.8, "loss": 7.876}
    assert recs[3].fields["gpus"] == 12


def test_srun_labels_and_run_together_lines():
    text = (
        "0: [train] rank=0/2 epoch=0 step=2 loss=2.5 lr=0.1 img_s=3.6\n"
        "[train] rank=1/2 epoch=0 step=2 loss=2.4 lr=0.1 img_s=4.1[summary] ranks=2 "
        "steps=2 img_s=7.4 time_s=6.00\n"
    )
    kinds = [(r.kind, r.fields.get("rank")) for r in trainlog.parse(text)]
    assert kinds == [("train", 0), ("train", 1), ("summary", None)]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("[train] rank=0/2 step=x loss=1 lr=1 img_s=1", "'x' is not a int"),
        ("[train] rank=0/2 step=1 loss=1", "lacks img_s, lr"),
        ("[summary] ranks=2 steps", "expects key=value"),
    ],
)
def test_malformed_lines_name_the_line(line, message):
    with pytest.raises(trainlog.TrainLogError, match="line 3") as exc:
        trainlog.parse("\n\n" + line)
    assert message in str(exc.value)


@given(
    st.integers(0, 63),
    st.integers(1, 64),
    st.integers(0, 10**6),
    st.floats(0, 100, allow_nan=False),
    st.floats(0, 10, allow_nan=False),
    st.floats(0, 1e6, allow_nan=False),
)
def test_round_trip_of_our_format(rank, world, step, loss, lr, rate):
    line = (
        f"[train] rank={rank}/{world} epoch=0 step={step} loss={loss:.6f} lr={lr:.6f} "
        f"img_s={rate:.1f}"
    )
    rec = trainlog.parse_line(line)
    assert rec.fields["rank"] == rank and rec.fields["world"] == world
    assert rec.fields["step"] == step
    assert rec.fields["loss"] == pytest.approx(loss, abs=1e-6)
    assert rec.fields["img_s"] == pytest.approx(rate, abs=0.05)
