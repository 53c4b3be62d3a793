"""Generated job scripts, odd in every way the grammars allow, give findings and never an
exception.

Scripts are built from the option tables the emulator itself parses with (sbatch/srun options,
bsub options, jsrun options, the options of torchrun, accelerate launch and deepspeed), with odd
values (zero, negative, huge, empty, placeholders, shell variables and arithmetic, quotes,
control characters), odd bytes (NUL,
bytes that are not UTF-8, DOS line breaks, binary junk) and odd structure (no shebang,
directives after the first command or with a space after '#', heterogeneous jobs, unclosed
quotes, continuation lines, here-documents, compound commands). Each is judged against every
site profile as ``python -m clusterkit check-job`` judges it, and every finding must name a
file, a line of it and a rule.

The budget is fixed and the examples are derandomized, so CI runs the same inputs every time:
1,000 job scripts and 2,000 command lines of a page, each judged against every profile.
``CLUSTERKIT_FUZZ=long`` selects a profile of ten times as many, drawn afresh on each run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterkit.emulate import (
    accelerate_launch,
    deepspeed_launch,
    lsf_options,
    slurm_options,
    torchrun,
)
from clusterkit.emulate.body import check_command_line
from clusterkit.emulate.checkjob import check_job_file
from clusterkit.emulate.jsrun import check_jsrun_line
from clusterkit.emulate.report import with_ranks
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import all_sites

_COMMON = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}
settings.register_profile("emulate-ci", max_examples=400, derandomize=True, **_COMMON)
settings.register_profile("emulate-long", max_examples=10000, derandomize=False, **_COMMON)
FUZZ = settings.get_profile(
    "emulate-long" if os.environ.get("CLUSTERKIT_FUZZ") == "long" else "emulate-ci"
)

SITES = list(all_sites())
RULE = re.compile(r"^[a-z][a-z0-9:-]*$")

# --------------------------------------------------------------------------- values
ODD_VALUES = [
    "", "0", "-1", "1", "2", "4", "7", "42", "128", "5860", "99999999999999999999", "1-", "3-1",
    "1-2-3", "0-0", "1,2", "4G", "0K", "1T", "gpu", "gpu:0", "gpu:4", "gpu:v100:2", "nvme:1",
    "gpu:a:b:c", "1:00:00", "0:0", "48:00:00", "2-00:00:00", "1-2:3:4:5", "UNLIMITED", "infinite",
    "[budget code]", "<project>", "<PROJECT>", "bdXXXYY", "t01", "ABC123", "$NCORES",
    "$(($NCORES/$NRS))", "$((SLURM_NNODES*4))", "${X:-3}", "${SLURM_CPUS_PER_TASK}", "$(hostname)",
    "'quoted'", '"a b"', "\\", "#", "ALL_HOSTS", "ALL_CPUS", "packed:0", "packed:99", "rs", "none",
    "cyclic", "plane:0", "a,b", "%j.out", "nomultithread", "y", "n", "smt9", "gpumps",
    "1*{select[LN] span[hosts=1]}+42*{select[CN] span[ptile=42]}", "select[", "}{", "standard",
    "gpu,test", "largescale", "ghlogin", "batch", "debug", "killable", "extended", "workq",
    "<projid>", "myproject", "gpu:8", "-S 8", "closest",
]  # fmt: skip
values = st.one_of(
    st.sampled_from(ODD_VALUES),
    st.integers(-10, 10**6).map(str),
    st.text(max_size=8),
)


def _slurm_option(tool: str):
    specs = slurm_options.specs(tool)

    @st.composite
    def option(draw) -> list[str]:
        spec = draw(st.sampled_from(specs))
        if not spec.takes_value:
            return [draw(st.sampled_from([spec.long, spec.short or spec.long, spec.long + "=x"]))]
        value = draw(values)
        form = draw(st.integers(0, 3))
        if form == 0 or not spec.short:
            return [f"{spec.long}={value}"]
        if form == 1:
            return [spec.long, value]
        if form == 2:
            return [f"{spec.short}{value}"]
        return [spec.short, value]

    return option()


sbatch_option = _slurm_option("sbatch")
srun_option = _slurm_option("srun")


@st.composite
def bsub_option(draw) -> list[str]:
    name = draw(st.sampled_from(sorted(lsf_options.BSUB_FLAGS | lsf_options.BSUB_VALUES)))
    if name in lsf_options.BSUB_FLAGS:
        return [f"-{name}"]
    value = draw(values)
    return draw(st.sampled_from([[f"-{name}", value], [f"-{name}{value}"]]))


@st.composite
def jsrun_option(draw) -> list[str]:
    short, long, takes = draw(st.sampled_from(lsf_options.JSRUN_OPTIONS))
    if not takes:
        return [f"--{long}"]
    value = draw(values)
    if short and draw(st.booleans()):
        return [f"-{short}{value}"]
    return [f"--{long}={value}"]


@st.composite
def torchrun_option(draw) -> list[str]:
    names, takes = draw(st.sampled_from(torchrun.OPTIONS))
    name = draw(st.sampled_from(names))
    return [name, draw(values)] if takes else [name]


@st.composite
def accelerate_option(draw) -> list[str]:
    name = draw(st.sampled_from(accelerate_launch.ALL))
    flag = draw(st.sampled_from(accelerate_launch.option_strings(name)))
    return [flag] if name in accelerate_launch.FLAGS else [flag, draw(values)]


@st.composite
def deepspeed_option(draw) -> list[str]:
    names, takes = draw(st.sampled_from(deepspeed_launch.OPTIONS))
    name = draw(st.sampled_from(names))
    return [name, draw(values)] if takes else [name]


def _words(option, most: int = 4):
    return st.lists(option, max_size=most).map(lambda groups: [w for g in groups for w in g])


PROGRAMS = [
    ["python", "train_resnet.py", "--epochs", "1"],
    ["python", "train_resnet.py", "--no-such-flag"],
    ["python3", "-m", "torch.distributed.run", "--nproc_per_node=4", "train_resnet.py"],
    ["python", "-c", "print(1)"],
    ["./a.out"],
    ["hostname"],
    ["singularity", "exec", "--nv", "image.sif", "python", "train_resnet.py"],
    ["apptainer", "build", "--writable", "x.simg", "docker://x"],
    ["ddlrun", "--accelerators", "6", "python", "x.py"],
    ["bede-mpirun", "--bede-par", "1ppg", "./a.out"],
    [],
]


@st.composite
def command(draw) -> str:
    kind = draw(st.integers(0, 9))
    program = draw(st.sampled_from(PROGRAMS))
    if kind == 0:
        words = ["srun", *draw(_words(srun_option)), *program]
    elif kind == 1:
        words = ["srun", *draw(_words(srun_option, 2)), "hostname", ":"]
        words += [*draw(_words(srun_option, 2)), "hostname"]
    elif kind == 2:
        words = ["jsrun", *draw(_words(jsrun_option())), *program]
    elif kind == 3:
        words = ["torchrun", *draw(_words(torchrun_option())), "train_resnet.py"]
    elif kind == 4:
        words = ["module", draw(st.sampled_from(["load", "swap", "purge", "frob"]))]
        words += draw(st.lists(st.sampled_from(["cuda", "cuda/12.4.1", "nosuch/1", "open-ce"])))
    elif kind == 5:
        words = ["export", f"SRUN_CPUS_PER_TASK={draw(values)}"]
    elif kind == 6:
        words = ["bsub", *draw(_words(bsub_option(), 2)), *program]
    elif kind == 7:
        words = ["srun", "accelerate", "launch", *draw(_words(accelerate_option())), "x.py"]
    elif kind == 8:
        words = ["deepspeed", *draw(_words(deepspeed_option())), "train_resnet.py"]
    else:
        words = program or ["true"]
    text = " ".join(draw(st.sampled_from([shlex.quote(w), w])) for w in words)
    return draw(
        st.sampled_from(
            [
                text,
                f"if true; then\n  {text}\nfi",
                f"for i in 1 2; do {text}; done",
                f"{text} &",
                text.replace(" ", " \\\n    ", 1),
                f"cat <<EOF\n{text}\nEOF",
                f"X=$({text})",
                f"{text} 'unclosed",
            ]
        )
    )


@st.composite
def directive(draw) -> str:
    kind = draw(st.integers(0, 2))
    words = draw(_words(bsub_option() if kind == 2 else sbatch_option, 3))
    prefix = draw(
        st.sampled_from(
            ["#SBATCH ", "#SBATCH ", "#SBATCH ", "# SBATCH ", "  #SBATCH ", "#SBATCH", "#SLURM ",
             "#BSUB ", "#BSUB ", "# BSUB "]
        )
    )  # fmt: skip
    if kind == 1:
        return "#SBATCH hetjob"
    text = " ".join(draw(st.sampled_from([shlex.quote(w), w])) for w in words)
    return prefix + text + draw(st.sampled_from(["", "", "  # a comment", " \\"]))


@st.composite
def script_bytes(draw) -> bytes:
    lines = []
    if draw(st.integers(0, 9)):
        lines.append(draw(st.sampled_from(["#!/bin/bash", "#!/bin/sh", "#! /usr/bin/env bash"])))
    lines += draw(st.lists(directive(), max_size=8))
    body = draw(st.lists(command(), max_size=5))
    late = draw(st.lists(directive(), max_size=2))
    cut = draw(st.integers(0, len(body)))
    lines += body[:cut] + late + body[cut:]
    eol = draw(st.sampled_from(["\n", "\n", "\n", "\r\n"]))
    data = eol.join(lines).encode("utf-8", errors="surrogateescape")
    odd = draw(st.integers(0, 7))
    if odd == 1:
        data += b"\x00\x01\xff\xfe binary \x80"
    elif odd == 2:
        pos = draw(st.integers(0, len(data)))
        data = data[:pos] + draw(st.binary(max_size=16)) + data[pos:]
    elif odd == 3:
        data = draw(st.binary(max_size=200))
    return data


# --------------------------------------------------------------------------- the property
def _assert_findings(findings: list[Finding], text_lines: int) -> None:
    for f in findings:
        assert isinstance(f, Finding), f
        assert RULE.match(f.rule), f
        assert f.level in {"error", "warning"}, f
        assert isinstance(f.line, int) and 0 <= f.line <= text_lines + 1, f
        assert str(f)


@pytest.fixture(scope="module")
def job_file(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "job.sh"


@FUZZ
@given(data=script_bytes())
def test_generated_scripts_give_only_findings(data, job_file):
    job_file.write_bytes(data)
    for site in SITES:
        report = check_job_file(job_file, site)
        _assert_findings(report.findings, data.count(b"\n"))
        assert not report.unusable
        json.dumps(with_ranks(report, 3))  # the plan a reader asks for can be written


@settings(FUZZ, max_examples=2 * FUZZ.max_examples)
@given(words=st.one_of(command().map(lambda c: c.split()), _words(srun_option, 6)))
def test_page_command_lines_give_only_findings(words):
    for site in SITES:
        report = check_command_line("page.md", 3, words or ["true"], site)
        _assert_findings(report.findings, 3)
        if site.scheduler == "lsf":
            _assert_findings(check_jsrun_line("page.md", 3, ["jsrun", *words], site), 3)
