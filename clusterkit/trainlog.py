"""Read training logs: the trainers' own lines and the lines of the benchmarks the pages cite.

Our trainers (examples/pytorch, examples/tensorflow) print one line per event::

    [train] rank=0/2 epoch=0 step=20 loss=6.912345 lr=0.100000 img_s=123.4
    [summary] ranks=2 steps=40 img_s=246.8 time_s=12.34
    [eval] rank=0/2 epoch=0 top1=0.1234 top5=0.5000 loss=6.9
    [checkpoint] step=20 path=checkpoints/ckpt-step00000020.pt
    [resume] step=20 path=...      [preempted] step=20

Third-party formats read too: the NVIDIA/WMLCE ResNet-50 benchmark's NVLOG lines
(``:::NVLOGv0.2.3 resnet 1605627671.8 (training_hooks.py:101) imgs_per_sec: 4526.8``),
tf_cnn_benchmarks (``total images/sec: 1234.56``) and Horovod's synthetic benchmarks
(``Img/sec per GPU: 123.4 +-1.2``, ``Total img/sec on 12 GPU(s): 1480.8 +-14.4``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

OUR_KINDS = {
    "train": {
        "rank": int,
        "world": int,
        "epoch": int,
        "step": int,
        "loss": float,
        "lr": float,
        "img_s": float,
    },
    "summary": {"ranks": int, "steps": int, "img_s": float, "time_s": float},
    "eval": {"rank": int, "world": int, "epoch": int, "top1": float, "top5": float, "loss": float},
    "checkpoint": {"step": int, "path": str},
    "resume": {"step": int, "path": str},
    "preempted": {"step": int},
}
REQUIRED = {
    "train": {"rank", "step", "loss", "lr", "img_s"},
    "summary": {"ranks", "img_s"},
    "eval": {"top1"},
    "checkpoint": {"step"},
    "resume": {"step"},
    "preempted": {"step"},
}

_OURS = re.compile(r"^\[(?P<kind>[a-z]+)\]\s+(?P<rest>.*)$")
_NVLOG = re.compile(
    r"^:::NVLOGv[\d.]+\s+\S+\s+(?P<ts>[\d.]+)\s+\((?P<src>[^)]*)\)\s+"
    r"(?P<key>[^:]+?)\s*:\s*(?P<value>\S.*?)\s*$"
)
_TF_TOTAL = re.compile(r"^total images/sec:\s*(?P<v>[\d.]+)\s*$")
_TF_STEP = re.compile(
    r"^(?P<step>\d+)\s+images/sec:\s*(?P<v>[\d.]+)\s*\+/-\s*(?P<err>[\d.]+)"
    r"(?:\s*\(jitter = (?P<jitter>[\d.]+)\))?(?:\s+(?P<loss>[\d.]+))?"
)
_HVD_GPU = re.compile(r"^Img/sec per GPU:\s*(?P<v>[\d.]+)\s*\+-\s*(?P<err>[\d.]+)")
_HVD_TOTAL = re.compile(
    r"^Total img/sec on (?P<n>\d+) GPU\(s\):\s*(?P<v>[\d.]+)\s*"
    r"\+-\s*(?P<err>[\d.]+)"
)


_RECORD_START = re.compile(r"(?<=\S)(?=\[(?:{})\] )".format("|".join(OUR_KINDS)))


class TrainLogError(ValueError):
    """A line of a known kind that does not follow its format."""


@dataclass(frozen=True)
class Record:
    kind: str
    fields: dict = field(hash=False)
    line: int = 0


def _number(text: str, conv, where: str):
    try:
        return conv(text)
    except ValueError:
        raise TrainLogError(f"{where}: {text!r} is not a {conv.__name__}") from None


def _ours(kind: str, rest: str, lineno: int) -> Record:
    schema = OUR_KINDS[kind]
    fields: dict = {}
    for token in rest.split():
        key, sep, value = token.partition("=")
        where = f"line {lineno}: [{kind}] {key}"
        if not sep:
            raise TrainLogError(f"line {lineno}: [{kind}] expects key=value, got {token!r}")
        if key == "rank" and "/" in value:
            r, w = value.split("/", 1)
            fields["rank"], fields["world"] = _number(r, int, where), _number(w, int, where)
        elif key in schema:
            fields[key] = _number(value, schema[key], where)
        else:
            fields[key] = value
    missing = REQUIRED[kind] - set(fields)
    if missing:
        raise TrainLogError(f"line {lineno}: [{kind}] lacks {', '.join(sorted(missing))}")
    return Record(kind, fields, lineno)


def _nvlog_key(key: str) -> str:
    key = re.sub(r"[^a-z0-9]+", "_", key.strip().lower()).strip("_")
    return re.sub(r"top_(\d)", r"top\1", key)  # "Top-1 Accuracy" -> top1_accuracy


def parse_line(line: str, lineno: int = 0) -> Record | None:
    text = line.strip()
    m = _OURS.match(text)
    if m and m["kind"] in OUR_KINDS:
        return _ours(m["kind"], m["rest"], lineno)
    m = _NVLOG.match(text)
    if m:
        key = _nvlog_key(m["key"])
        try:
            value: float | str = float(m["value"])
        except ValueError:
            value = m["value"]
        return Record(
            "nvlog", {key: value, "timestamp": float(m["ts"]), "source": m["src"]}, lineno
        )
    m = _TF_TOTAL.match(text)
    if m:
        return Record("tf_cnn", {"total_img_s": float(m["v"])}, lineno)
    m = _TF_STEP.match(text)
    if m:
        fields = {"step": int(m["step"]), "img_s": float(m["v"]), "err": float(m["err"])}
        if m["loss"]:
            fields["loss"] = float(m["loss"])
        return Record("tf_cnn", fields, lineno)
    m = _HVD_GPU.match(text)
    if m:
        return Record(
            "horovod_synthetic", {"img_s_per_gpu": float(m["v"]), "err": float(m["err"])}, lineno
        )
    m = _HVD_TOTAL.match(text)
    if m:
        return Record(
            "horovod_synthetic",
            {"gpus": int(m["n"]), "total_img_s": float(m["v"]), "err": float(m["err"])},
            lineno,
        )
    return None


def parse(text: str) -> list[Record]:
    """Every record in ``text``, in order; lines of no known kind are ignored.

    A prefix added by a launcher (``srun -l`` writes ``0: ``) is removed first.
    """
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"^\s*\d+:\s", "", raw)
        # ranks that share an output file can run two records into one line
        for piece in _RECORD_START.split(line):
            rec = parse_line(piece, n)
            if rec is not None:
                out.append(rec)
    return out


def summarise(records: list[Record]) -> dict:
    """The figures a benchmark table wants from one run's records."""
    out: dict = {}
    train = [r for r in records if r.kind == "train"]
    if train:
        last = max(r.fields["step"] for r in train)
        out["final_loss"] = sum(r.fields["loss"] for r in train if r.fields["step"] == last) / sum(
            1 for r in train if r.fields["step"] == last
        )
        out["steps"] = last
        out["ranks"] = len({r.fields["rank"] for r in train})
    summary = [r for r in records if r.kind == "summary"]
    if summary:
        out["img_s"] = summary[-1].fields["img_s"]
        out["time_s"] = summary[-1].fields.get("time_s")
    nv = [
        r.fields["imgs_per_sec"]
        for r in records
        if r.kind == "nvlog" and "imgs_per_sec" in r.fields
    ]
    if nv:
        out["img_s"] = nv[-1]
    top1 = [
        r.fields.get("top1_accuracy") or r.fields.get("top1")
        for r in records
        if r.kind in {"nvlog", "eval"} and ("top1_accuracy" in r.fields or "top1" in r.fields)
    ]
    if top1:
        out["top1"] = top1[-1]
    tf_total = [
        r.fields["total_img_s"]
        for r in records
        if r.kind in {"tf_cnn", "horovod_synthetic"} and "total_img_s" in r.fields
    ]
    if tf_total:
        out["img_s"] = tf_total[-1]
    return out
