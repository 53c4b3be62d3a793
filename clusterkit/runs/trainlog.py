"""Read training logs: our trainers' lines and those of the benchmarks the pages cite.

Our trainers (``examples/pytorch``, ``examples/tensorflow``) print one line per event, each a
``[kind]`` tag and ``key=value`` fields::

    [train] rank=0/2 epoch=0 step=20 loss=6.912345 lr=0.100000 img_s=123.4
    [eval] rank=0/2 epoch=0 top1=0.1234 top5=0.5000 loss=6.900000
    [checkpoint] step=20 path=checkpoints/ckpt-step00000020.pt
    [resume] step=20 path=checkpoints/ckpt-step00000020.pt
    [preempted] step=20
    [summary] ranks=2 steps=40 img_s=246.8 time_s=12.34

The language-model trainer gives its throughput as ``tokens_s`` where the image trainers give
``img_s``; a [train] or [summary] line holds one of the two.

Third-party formats, as kinds of their own:

``nvlog``
    NVIDIA's (and IBM WMLCE's) ResNet-50 benchmark:
    ``:::NVLOGv0.2.3 resnet 1605627671.805866718 (training_hooks.py:101) imgs_per_sec: 4526.8``.
    The key is normalised (``Top-1 Accuracy`` becomes ``top1_accuracy``); a line without
    ``key: value`` is kept as ``message``.
``tf_cnn``
    tf_cnn_benchmarks: ``10\\timages/sec: 312.4 +/- 0.8 (jitter = 2.1)\\t7.876`` per step,
    ``total images/sec: 1234.56`` at the end, ``Accuracy @ 1 = 0.7500 Accuracy @ 5 = ...``.
``horovod_synthetic``
    Horovod's synthetic benchmarks: ``Iter #3: 123.4 img/sec per GPU``,
    ``Img/sec per GPU: 123.4 +-1.2``, ``Total img/sec on 12 GPU(s): 1480.8 +-14.4``.

A line that is recognisably of one of these kinds but does not follow its format raises
:class:`TrainLogError` naming the line; any other line is ignored. Only the standard library is
used.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from statistics import fmean

__all__ = [
    "OUR_KINDS",
    "Record",
    "TrainLogError",
    "format_record",
    "parse",
    "parse_line",
    "summarise",
]

Value = float | int | str

# The fields of our kinds, in the order the trainers print them, with their types.
# `rank=R/W` is one token that gives two fields, rank and world.
OUR_KINDS: dict[str, dict[str, type]] = {
    "train": {
        "rank": int,
        "world": int,
        "epoch": int,
        "step": int,
        "loss": float,
        "lr": float,
        "img_s": float,
    },
    "eval": {"rank": int, "world": int, "epoch": int, "top1": float, "top5": float, "loss": float},
    "checkpoint": {"step": int, "path": str},
    "resume": {"step": int, "path": str},
    "preempted": {"step": int},
    "summary": {"ranks": int, "steps": int, "img_s": float, "time_s": float},
    # the language-model trainer's --memory-report: a rank's peak, in MiB
    "memory": {"rank": int, "world": int, "peak_mib": float},
}


# The throughput of [train] and [summary]: images/s, or tokens/s; a line holds one of them.
RATES = ("img_s", "tokens_s")


def rate_key(fields: dict) -> str:
    """The throughput field a record holds (img_s or tokens_s)."""
    return next((key for key in RATES if key in fields), RATES[0])


class TrainLogError(ValueError):
    """A line of a known kind that does not follow its format."""


@dataclass(frozen=True)
class Record:
    """One event: its kind, its fields (numbers typed), and the line it came from (1-based;
    0 when parsed alone)."""

    kind: str
    fields: dict[str, Value] = field(hash=False)
    line: int = 0


# --------------------------------------------------------------------------- our format
_OURS = re.compile(r"^\[(?P<kind>[a-z_]+)\](?:\s+(?P<rest>.*))?$")
# Ranks that share one output file can run two records into one line: split before a tag.
_RUN_TOGETHER = re.compile(r"(?<=\S)(?=\[(?:{})\]\s)".format("|".join(OUR_KINDS)))
# What launchers put in front of a line: `srun -l` ("0: ", " 12: "), `mpirun --tag-output`
# ("[1,0]<stdout>:"), horovodrun ("[1]<stdout>:", after the time with --prefix-timestamp),
# torchrun --tee ("[default0]:").
_LAUNCHER_PREFIX = re.compile(
    r"^(?:\s*\d+:\s|\[\d+,\d+\]<std(?:out|err)>:\s?|\[default\d+\]:"
    r"|(?:\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4})?\[\d+\]<std(?:out|err)>:)"
)


def _convert(text: str, kind: type, lineno: int, tag: str, key: str) -> Value:
    try:
        value = kind(text)
    except ValueError:
        what = "an int" if kind is int else "a number"
        raise TrainLogError(f"line {lineno}: [{tag}] {key}={text!r} is not {what}") from None
    if kind is float and math.isinf(value) and key != "loss":
        raise TrainLogError(f"line {lineno}: [{tag}] {key}={text} is not finite")
    return value


def _number_or_text(text: str) -> Value:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _ours(tag: str, rest: str, lineno: int) -> Record:
    schema = OUR_KINDS[tag]
    fields: dict[str, Value] = {}
    tokens = rest.split()
    for i, token in enumerate(tokens):
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise TrainLogError(f"line {lineno}: [{tag}] expects key=value, got {token!r}")
        if key == "path":  # the last field: a path may hold spaces
            fields[key] = " ".join([value, *tokens[i + 1 :]])
            break
        if key == "rank" and "world" in schema:
            rank, slash, world = value.partition("/")
            if not slash:
                raise TrainLogError(f"line {lineno}: [{tag}] rank={value!r} is not R/W")
            fields["rank"] = _convert(rank, int, lineno, tag, "rank")
            fields["world"] = _convert(world, int, lineno, tag, "world")
        elif key in schema:
            fields[key] = _convert(value, schema[key], lineno, tag, key)
        else:  # a field added later: kept, typed as best we can
            fields[key] = _number_or_text(value)
    has_rate = any(key in fields for key in RATES)
    missing = [k for k in schema if k not in fields and not (k in RATES and has_rate)]
    if missing:
        raise TrainLogError(f"line {lineno}: [{tag}] lacks {', '.join(missing)}")
    if "world" in fields and not 0 <= fields["rank"] < fields["world"]:
        raise TrainLogError(f"line {lineno}: [{tag}] rank {fields['rank']} of {fields['world']}")
    return Record(tag, fields, lineno)


def format_record(record: Record) -> str:
    """The line a trainer prints for `record` (our kinds only): the inverse of parse_line."""
    f = dict(record.fields)
    parts = []
    if "world" in f:
        parts.append(f"rank={f.pop('rank')}/{f.pop('world')}")
    path = f.pop("path", None)
    digits = {
        "loss": 6,
        "lr": 6,
        "img_s": 1,
        "tokens_s": 1,
        "time_s": 2,
        "top1": 4,
        "top5": 4,
        "peak_mib": 1,
    }
    for key, value in f.items():
        text = f"{value:.{digits[key]}f}" if key in digits and isinstance(value, float) else value
        parts.append(f"{key}={text}")
    if path is not None:
        parts.append(f"path={path}")
    return f"[{record.kind}] " + " ".join(parts)


# --------------------------------------------------------------------------- NVLOG
_NVLOG_START = ":::NVLOG"
_NVLOG = re.compile(
    r"^:::NVLOGv(?P<version>[\d.]+)\s+(?P<bench>\S+)\s+(?P<ts>\S+)\s+\((?P<src>[^)]*)\)"
    r"\s*(?P<body>.*?)\s*$"
)
_NVLOG_KV = re.compile(r"^(?P<key>[A-Za-z][^:]*?)\s*:\s*(?P<value>\S.*)$")


def _nvlog_key(key: str) -> str:
    key = re.sub(r"[^a-z0-9]+", "_", key.strip().lower()).strip("_")
    return re.sub(r"\btop_(\d)", r"top\1", key)  # "Top-1 Accuracy" -> top1_accuracy


def _nvlog(text: str, lineno: int) -> Record:
    m = _NVLOG.match(text)
    if not m:
        raise TrainLogError(
            f"line {lineno}: NVLOG line is not ':::NVLOGv<version> <benchmark> <timestamp> "
            f"(<file>:<line>) <key>: <value>': {text[:80]!r}"
        )
    try:
        timestamp = float(m["ts"])
    except ValueError:
        raise TrainLogError(f"line {lineno}: NVLOG timestamp {m['ts']!r} is not a number") from None
    fields: dict[str, Value] = {"timestamp": timestamp, "source": m["src"], "benchmark": m["bench"]}
    kv = _NVLOG_KV.match(m["body"])
    if kv:
        fields[_nvlog_key(kv["key"])] = _number_or_text(kv["value"].strip())
    else:
        fields["message"] = m["body"]
    return Record("nvlog", fields, lineno)


# --------------------------------------------------------------------------- tf_cnn_benchmarks
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"
_TF_STEP_START = re.compile(r"^\d+\s+images/sec:")
_TF_STEP = re.compile(
    rf"^(?P<step>\d+)\s+images/sec:\s*(?P<img_s>{_NUM})"
    rf"(?:\s*\+/-\s*(?P<err>{_NUM})\s*\(jitter\s*=\s*(?P<jitter>{_NUM})\))?"
    rf"(?:\s+(?P<loss>{_NUM}))?(?:\s+(?P<top1>{_NUM})\s+(?P<top5>{_NUM}))?\s*$"
)
_TF_TOTAL_START = re.compile(r"^total images/sec:", re.IGNORECASE)
_TF_TOTAL = re.compile(rf"^total images/sec:\s*(?P<total_img_s>{_NUM})\s*$", re.IGNORECASE)
_TF_ACC_START = re.compile(r"^Accuracy @ 1\b")
_TF_ACC = re.compile(
    rf"^Accuracy @ 1 = (?P<top1>{_NUM}) Accuracy @ 5 = (?P<top5>{_NUM})"
    r"(?: \[(?P<examples>\d+) examples\])?\s*$"
)

# --------------------------------------------------------------------------- Horovod synthetic
_HVD_ITER_START = re.compile(r"^Iter #\d+:")
_HVD_ITER = re.compile(
    rf"^Iter #(?P<iteration>\d+):\s*(?P<img_s_per_device>{_NUM}) img/sec per (?P<device>\w+)"
)
_HVD_MEAN_START = re.compile(r"^Img/sec per \w+:")
_HVD_MEAN = re.compile(
    rf"^Img/sec per (?P<device>\w+):\s*(?P<img_s_per_device>{_NUM})\s*\+-\s*(?P<err>{_NUM})\s*$"
)
_HVD_TOTAL_START = re.compile(r"^Total img/sec on \d+")
_HVD_TOTAL = re.compile(
    rf"^Total img/sec on (?P<devices>\d+) (?P<device>\w+)\(s\):\s*(?P<total_img_s>{_NUM})"
    rf"\s*\+-\s*(?P<err>{_NUM})\s*$"
)

# (kind, how a line of the kind starts, its full pattern, what the pattern describes)
_OTHERS = [
    ("tf_cnn", _TF_STEP_START, _TF_STEP, "<step> images/sec: <n> +/- <n> (jitter = <n>) <loss>"),
    ("tf_cnn", _TF_TOTAL_START, _TF_TOTAL, "total images/sec: <n>"),
    ("tf_cnn", _TF_ACC_START, _TF_ACC, "Accuracy @ 1 = <n> Accuracy @ 5 = <n> [<n> examples]"),
    ("horovod_synthetic", _HVD_ITER_START, _HVD_ITER, "Iter #<n>: <n> img/sec per <device>"),
    ("horovod_synthetic", _HVD_MEAN_START, _HVD_MEAN, "Img/sec per <device>: <n> +-<n>"),
    (
        "horovod_synthetic",
        _HVD_TOTAL_START,
        _HVD_TOTAL,
        "Total img/sec on <n> <device>(s): <n> +-<n>",
    ),
]


def _typed(groups: dict[str, str | None]) -> dict[str, Value]:
    out: dict[str, Value] = {}
    for key, text in groups.items():
        if text is None:
            continue
        if key == "device":
            out[key] = text
        elif key in {"step", "iteration", "devices", "examples"}:
            out[key] = int(text)
        else:
            out[key] = float(text)
    return out


# --------------------------------------------------------------------------- entry points
def parse_line(line: str, lineno: int = 0) -> Record | None:
    """The record on one line, or None for a line of no known kind.

    Raises TrainLogError for a line that starts like a known kind but breaks its format.
    """
    text = _LAUNCHER_PREFIX.sub("", line.rstrip("\r\n"), count=1).strip()
    m = _OURS.match(text)
    if m and m["kind"] in OUR_KINDS:
        return _ours(m["kind"], m["rest"] or "", lineno)
    if text.startswith(_NVLOG_START):
        return _nvlog(text, lineno)
    for kind, start, full, shape in _OTHERS:
        if start.match(text):
            m = full.match(text)
            if not m:
                raise TrainLogError(f"line {lineno}: {kind} line is not '{shape}': {text[:80]!r}")
            return Record(kind, _typed(m.groupdict()), lineno)
    return None


def parse(text: str) -> list[Record]:
    """Every record in `text`, in order; lines of no known kind are ignored."""
    out = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _LAUNCHER_PREFIX.sub("", raw, count=1)
        for piece in _RUN_TOGETHER.split(line):
            record = parse_line(piece, lineno)
            if record is not None:
                out.append(record)
    return out


def summarise(records: list[Record]) -> dict[str, Value | dict[int, float]]:
    """The figures a results table wants from one run's records.

    Keys, where the records give them (``tokens_s`` in place of ``img_s`` for the language-model
    trainer): ``img_s`` (global images/s: the [summary] line, else
    Horovod's or tf_cnn_benchmarks' total, else NVLOG's mean imgs_per_sec after its first
    (warm-up) report), ``img_s_per_rank`` ({rank: mean [train] img_s, leaving out each rank's
    first line when it has more}), ``ranks``, ``steps``, ``time_s``, ``final_loss`` (mean over
    ranks at the last logged step), ``top1``/``top5`` (the last evaluation, as fractions:
    NVLOG's percentages are divided by 100), ``preempted_at`` and ``resumed_from``.
    """
    out: dict = {}
    by_kind: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        by_kind[r.kind].append(r)

    train = by_kind["train"]
    if train:
        per_rank: dict[int, list[float]] = defaultdict(list)
        rate = rate_key(train[0].fields)
        for r in train:
            per_rank[r.fields["rank"]].append(r.fields[rate_key(r.fields)])
        out[f"{rate}_per_rank"] = {
            rank: fmean(rates[1:] if len(rates) > 1 else rates)
            for rank, rates in sorted(per_rank.items())
        }
        last = max(r.fields["step"] for r in train)
        out["steps"] = last
        out["ranks"] = len(per_rank)
        out["final_loss"] = fmean(r.fields["loss"] for r in train if r.fields["step"] == last)
        out[rate] = sum(out[f"{rate}_per_rank"].values())  # replaced by a measured total

    nv_rates = [r.fields["imgs_per_sec"] for r in by_kind["nvlog"] if "imgs_per_sec" in r.fields]
    if nv_rates:
        out["img_s"] = fmean(nv_rates[1:] if len(nv_rates) > 1 else nv_rates)
    totals = [
        r.fields["total_img_s"]
        for r in by_kind["tf_cnn"] + by_kind["horovod_synthetic"]
        if "total_img_s" in r.fields
    ]
    if totals:
        out["img_s"] = totals[-1]
    for r in by_kind["horovod_synthetic"]:
        if "devices" in r.fields:
            out["ranks"] = r.fields["devices"]

    if by_kind["summary"]:
        last_summary = by_kind["summary"][-1].fields
        rate = rate_key(last_summary)
        out[rate] = last_summary[rate]
        out.update(
            ranks=last_summary["ranks"],
            steps=last_summary["steps"],
            time_s=last_summary["time_s"],
        )

    accuracy: dict[str, float] = {}
    for r in sorted(by_kind["eval"] + by_kind["nvlog"] + by_kind["tf_cnn"], key=lambda r: r.line):
        for key, scale in (
            ("top1", 1),
            ("top5", 1),
            ("top1_accuracy", 100),
            ("top5_accuracy", 100),
        ):
            if key in r.fields and (r.kind != "tf_cnn" or "step" not in r.fields):
                accuracy[key[:4]] = r.fields[key] / scale
    out.update(accuracy)

    if by_kind["preempted"]:
        out["preempted_at"] = by_kind["preempted"][-1].fields["step"]
    if by_kind["resume"]:
        out["resumed_from"] = by_kind["resume"][0].fields["step"]
    return out
