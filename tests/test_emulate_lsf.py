"""LSF (bsub) and JSM (jsrun) emulation against the Summit profile."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clusterkit.emulate.lsf import LsfShape, check_jsrun, check_lsf_script, parse_rstring
from clusterkit.profiles import load_site

ROOT = Path(__file__).resolve().parent.parent
SUMMIT = load_site("summit")
NODE = SUMMIT.partitions["batch"].node_type
EXAMPLES = sorted((ROOT / "examples" / "summit").glob("*.lsf"))


def _shape(nodes: int = 2) -> LsfShape:
    return LsfShape("batch", nodes, 600, NODE.usable_cores, NODE.gpus)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_summit_examples_validate(path):
    report = check_lsf_script(path, SUMMIT)
    assert report.errors == [], "\n".join(map(str, report.errors))


def test_seed_jsrun_line_fits_a_summit_node():
    c, g = NODE.usable_cores, NODE.gpus
    words = ["-r1", f"-g{g}", f"-a{g}", f"-c{c}", f"-bpacked:{c // g}", "python", "t.py"]
    findings, step, command = check_jsrun("p", 1, words, _shape(), {})
    assert findings == []
    assert step["ntasks"] == 2 * g and command == ["python", "t.py"]


@pytest.mark.parametrize(
    ("change", "rule"),
    [(("-c", 1), "rs-cores"), (("-g", 1), "rs-gpus"), (("-b", 1), "bind")],
)
def test_jsrun_arithmetic_is_judged(change, rule):
    c, g = NODE.usable_cores, NODE.gpus
    values = {"-r": 1, "-g": g, "-a": g, "-c": c, "-b": c // g}
    opt, extra = change
    values[opt] += extra
    words = [
        f"-r{values['-r']}",
        f"-g{values['-g']}",
        f"-a{values['-a']}",
        f"-c{values['-c']}",
        f"-bpacked:{values['-b']}",
        "python",
        "t.py",
    ]
    findings, _, _ = check_jsrun("p", 3, words, _shape(), {})
    assert [f.rule for f in findings] == [rule], findings
    assert findings[0].line == 3


@given(st.integers(1, 6), st.integers(1, 42), st.integers(0, 6), st.integers(1, 8))
def test_jsrun_forms_agree_and_match_a_simple_model(rs, cores, gpus, nodes):
    long_form = [
        "--rs_per_host",
        str(rs),
        "--cpu_per_rs",
        str(cores),
        "--gpu_per_rs",
        str(gpus),
        "hostname",
    ]
    short_form = [f"-r{rs}", f"-c{cores}", f"-g{gpus}", "hostname"]
    a = check_jsrun("p", 1, long_form, _shape(nodes), {})
    b = check_jsrun("p", 1, short_form, _shape(nodes), {})
    assert [f.rule for f in a[0]] == [f.rule for f in b[0]]
    fits = rs * cores <= NODE.usable_cores and rs * gpus <= NODE.gpus
    assert (a[0] == []) == fits


@given(st.integers(1, 200), st.integers(1, 42), st.integers(1, 18))
def test_rstring_round_trip(nodes, ptile, racks):
    text = (
        f"1*{{select[((LN)&&(type==any))]order[r15s:pg]span[hosts=1]"
        f"cu[type=rack:pref=config]}}+{nodes * ptile}*{{select[((CN)&&(type==any))]"
        f"order[r15s:pg]span[ptile={ptile}]cu[type=rack:maxcus={racks}]}}"
    )
    terms = parse_rstring(text)
    assert [t.count for t in terms] == [1, nodes * ptile]
    assert terms[1].ptile == ptile and terms[1].maxcus == racks and terms[0].hosts == 1


GOOD = """#!/bin/bash
#BSUB -P ABC123
#BSUB -W 0:10
#BSUB -nnodes 2
#BSUB -q batch
jsrun -r1 -g6 -a6 -c42 -bpacked:7 python train.py
"""

# (description, edit of GOOD, expected rule, the line the finding must name)
BAD = [
    ("no project", ("#BSUB -P ABC123\n", ""), "project-required", 0),
    ("bad project", ("-P ABC123", "-P my-project"), "project-form", 2),
    ("unknown queue", ("-q batch", "-q nosuch"), "queue-exists", 5),
    ("walltime over the queue limit", ("-W 0:10", "-W 48:00"), "walltime-limit", 3),
    ("bad walltime", ("-W 0:10", "-W ten"), "walltime-format", 3),
    ("no node count", ("#BSUB -nnodes 2\n", ""), "nnodes-required", 0),
    ("nnodes in expert mode", ("-nnodes 2", "-nnodes 2\n#BSUB -csm y"), "expert-nnodes", 4),
    ("too many cores per resource set", ("-c42", "-c43"), "rs-cores", 6),
    ("unknown bsub option", ("-q batch", "-q batch -Z 1"), "bsub-option", 5),
]


@pytest.mark.parametrize(("what", "edit", "rule", "line"), BAD, ids=[b[0] for b in BAD])
def test_bad_scripts_fail_with_their_rule_and_line(what, edit, rule, line):
    text = GOOD.replace(*edit)
    assert text != GOOD
    report = check_lsf_script("job.lsf", SUMMIT, text=text)
    hits = [f for f in report.errors if f.rule == rule]
    assert hits, f"{what}: expected [{rule}], got {[str(f) for f in report.findings]}"
    assert hits[0].line == line


def test_expert_mode_slot_counts_must_add_up():
    text = GOOD.replace(
        "#BSUB -nnodes 2\n",
        "#BSUB -csm y\n#BSUB -n 86\n#BSUB -R "
        '"1*{select[LN]span[hosts=1]}+84*{select[CN]span[ptile=42]}"\n',
    )
    report = check_lsf_script("job.lsf", SUMMIT, text=text)
    assert [f.rule for f in report.errors] == ["expert-slot-count"]
    ok = check_lsf_script("job.lsf", SUMMIT, text=text.replace("-n 86", "-n 85"))
    assert ok.errors == []


def test_bsub_shim_dry_run_and_refusal(emulated_env, tmp_path):
    env = dict(emulated_env, CLUSTERKIT_SITE="summit")
    good = tmp_path / "good.lsf"
    good.write_text(GOOD)
    r = subprocess.run(["bsub", "--dry-run", str(good)], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["steps"][0]["ntasks"] == 12
    bad = tmp_path / "bad.lsf"
    bad.write_text(GOOD.replace("-c42", "-c43"))
    r = subprocess.run(["bsub", str(bad)], env=env, capture_output=True, text=True)
    assert r.returncode == 255 and "[rs-cores]" in r.stderr and "Traceback" not in r.stderr


def test_bsub_runs_the_job_with_jsm_ranks(emulated_env, tmp_path):
    script = tmp_path / "job.lsf"
    script.write_text(
        GOOD.replace(
            "python train.py",
            "python -c "
            '\'import os; print("rank", os.environ["OMPI_COMM_WORLD_RANK"],'
            ' os.environ["JSM_NAMESPACE_SIZE"])\'',
        )
    )
    env = dict(emulated_env, CLUSTERKIT_SITE="summit")
    # buffered output: each rank writes its line at once, so the two ranks' lines stay whole
    env.pop("PYTHONUNBUFFERED", None)
    r = subprocess.run(
        ["bsub", str(script)], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert sorted(line for line in r.stdout.splitlines() if line.startswith("rank")) == [
        "rank 0 2",
        "rank 1 2",
    ]
