"""The Slurm emulator: option grammar, value grammars, and verdicts against the Bede profile."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clusterkit.emulate import slurm, slurm_options, slurm_request
from clusterkit.emulate.report import with_ranks
from clusterkit.emulate.sbatch import check_slurm_script
from clusterkit.sites.profiles import load_site

ROOT = Path(__file__).resolve().parent.parent
SLICE = ROOT / "examples" / "bede" / "pytorch-ddp-1node.sbatch"


# --------------------------------------------------------------------------- grammar
@pytest.mark.parametrize(
    "argv",
    [
        ["-N2", "-pgpu", "--gres=gpu:4"],
        ["-N", "2", "-p", "gpu", "--gres", "gpu:4"],
        ["--nodes=2", "--partition=gpu", "--gres=gpu:4"],
        ["--nodes=2", "--parti", "gpu", "--gres=gpu:4"],  # a unique prefix, as getopt_long allows
    ],
)
def test_option_forms_agree(argv):
    parsed = slurm_options.parse("sbatch", argv)
    assert parsed["nodes"] == ["2"]
    assert parsed["partition"] == ["gpu"]
    assert parsed["gres"] == ["gpu:4"]


def test_unknown_and_ambiguous_options_are_refused():
    with pytest.raises(slurm_options.OptionError, match="unrecognized"):
        slurm_options.parse("sbatch", ["--gpus-per-nod3=2"])
    with pytest.raises(slurm_options.OptionError, match="ambiguous"):
        slurm_options.parse("sbatch", ["--mem-per=1G"])  # --mem-per-cpu or --mem-per-gpu


def test_srun_only_options_are_not_sbatch_options():
    assert slurm_options.parse("srun", ["--cpu-bind=cores", "hostname"])["cpu_bind"]
    with pytest.raises(slurm_options.OptionError):
        slurm_options.parse("sbatch", ["--cpu-bind=cores"])


@given(
    st.sampled_from(["nodes", "ntasks", "cpus_per_task", "ntasks_per_node"]),
    st.integers(min_value=1, max_value=9999),
    st.sampled_from(["short-attached", "short-space", "long-eq", "long-space"]),
)
def test_integer_options_parse_in_every_form(dest, value, form):
    spec = next(s for s in slurm_options.specs("sbatch") if s.dest == dest)
    if form.startswith("short") and not spec.short:
        form = "long-eq"
    argv = {
        "short-attached": [f"{spec.short}{value}"],
        "short-space": [spec.short, str(value)],
        "long-eq": [f"{spec.long}={value}"],
        "long-space": [spec.long, str(value)],
    }[form]
    assert slurm_options.parse("sbatch", argv)[dest] == [str(value)]


@given(st.integers(0, 30), st.integers(0, 23), st.integers(0, 59), st.integers(0, 59))
def test_time_formats(days, hours, minutes, seconds):
    def secs(n: int) -> int | None:
        return n or None  # "A time limit of zero requests that no time limit be imposed"

    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    assert slurm_options.slurm_time(f"{days}-{hours}:{minutes:02d}:{seconds:02d}") == secs(total)
    assert slurm_options.slurm_time(f"{days}-{hours}:{minutes:02d}") == secs(total - seconds)
    assert slurm_options.slurm_time(f"{days}-{hours}") == secs((days * 24 + hours) * 3600)
    hms = total - days * 86400
    assert slurm_options.slurm_time(f"{hours}:{minutes:02d}:{seconds:02d}") == secs(hms)
    assert slurm_options.slurm_time(str(minutes)) == secs(minutes * 60)  # a bare number is minutes
    assert slurm_options.slurm_time(f"{minutes}:{seconds:02d}") == secs(minutes * 60 + seconds)


@pytest.mark.parametrize("bad", ["1:2:3:4", "abc", "1-2-3", "-5", "1h"])
def test_bad_times_are_refused(bad):
    with pytest.raises(slurm_options.SlurmValueError):
        slurm_options.slurm_time(bad)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu", (None, 1)),
        ("gpu:4", (None, 4)),
        ("gpu:v100:2", ("v100", 2)),
    ],
)
def test_gres(text, expected):
    assert slurm_options.gres_gpus(text) == expected


@pytest.mark.parametrize("text", ["nvme:1", "nvme:1,gpu:3", "gpu:v100:x", "gpu:1:2:3"])
def test_gres_slurm_refuses(text):
    # the profiles (and the gres.conf made from them) describe GPUs only
    with pytest.raises(slurm_options.SlurmValueError, match="generic resource"):
        slurm_options.gres_gpus(text)


@given(st.integers(1, 2**20), st.sampled_from(["", "K", "M", "G", "T"]))
def test_memory_units(n, unit):
    scale = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[unit]
    assert slurm_options.slurm_mem_mb(f"{n}{unit}") == pytest.approx(n * scale, abs=1)


# --------------------------------------------------------------------------- verdicts on Bede
def _check(text: str):
    return check_slurm_script("job.sbatch", load_site("bede"), text=text)


def _script(*directives: str, body: str = "srun hostname\n") -> str:
    return "#!/bin/bash\n" + "".join(f"#SBATCH {d}\n" for d in directives) + body


def test_the_slice_script_validates():
    report = check_slurm_script(SLICE, load_site("bede"))
    assert report.errors == [], "\n".join(map(str, report.errors))
    assert report.plan["gpus_per_node"] == 4
    assert report.plan["partition"] == "gpu"


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        (("--gres=gpu:4", "--gres=gpu:5"), "gpus-per-node"),
        (("--partition=gpu", "--partition=gpu-big"), "partition-exists"),
        (("--time=01:00:00", "--time=9-00:00:00"), "time-limit"),
        (("--time=01:00:00", "--time=1:00:00:00"), "time-format"),
        (("--account=bdXXXYY", "--account=my project"), "account-form"),
        (("--nodes=1", "--nodes=1 --frobnicate"), "sbatch-option"),
        (("--nproc_per_node=4", "--nproc_per_node=8"), "nproc-per-gpu"),
        (("--batch-size 256", "--batch-size 256 --no-such-flag"), "script-flag-unknown"),
        (("--precision fp16", "--precision fp8"), "script-flag-value"),
    ],
)
def test_broken_slice_variants_name_file_line_and_rule(change, rule, tmp_path):
    old, new = change
    text = SLICE.read_text()
    assert old in text, f"{old!r} no longer in the slice script: update this test"
    broken = tmp_path / "examples" / "bede" / SLICE.name
    broken.parent.mkdir(parents=True)
    broken.write_text(text.replace(old, new, 1))
    line = next(i for i, raw in enumerate(broken.read_text().splitlines(), 1) if new in raw)
    report = check_slurm_script(broken, load_site("bede"))
    hits = [f for f in report.errors if f.rule == rule]
    assert hits, f"expected [{rule}], got: {[str(f) for f in report.findings]}"
    assert hits[0].line == line
    assert f"{SLICE.name}:{line}: [{rule}]" in str(hits[0])


def test_account_is_required_on_bede():
    report = _check(_script("-p gpu", "--gres=gpu:1", "-t 10"))
    assert [f.rule for f in report.errors] == ["account-required"]


def test_command_line_overrides_directives():
    site = load_site("bede")
    text = _script("-A bdXXXYY", "-p gpu", "--gres=gpu:4", "-t 10")
    ok = check_slurm_script("j.sbatch", site, text=text)
    assert not ok.errors
    bad = check_slurm_script("j.sbatch", site, argv=["--gres=gpu:9"], text=text)
    assert [f.rule for f in bad.errors] == ["gpus-per-node"]
    assert "<command line>" not in str(bad.errors[0]) or bad.errors[0].line == 0


def test_directives_after_the_first_command_are_ignored():
    text = "#!/bin/bash\n#SBATCH -A bdXXXYY\n#SBATCH -p gpu\necho hi\n#SBATCH --gres=gpu:99\n"
    assert not _check(text).errors


def test_cpus_per_node_limit_uses_the_node_type():
    node = load_site("bede").partitions["gpu"].node_type
    ok = _check(_script("-A bdXXXYY", "-p gpu", f"--ntasks-per-node=1 -c {node.cpus}"))
    assert not ok.errors
    bad = _check(_script("-A bdXXXYY", "-p gpu", f"--ntasks-per-node=1 -c {node.cpus + 1}"))
    assert [f.rule for f in bad.errors] == ["cpus-per-node"]
    assert str(node.cpus) in bad.errors[0].message


def test_plan_lists_ranks_with_the_srun_environment():
    report = _check(
        _script(
            "-A bdXXXYY",
            "-p gpu",
            "-N2",
            "--ntasks-per-node=4",
            "--gres=gpu:4",
            body="srun python -c 'print(1)'\n",
        )
    )
    assert "ranks" not in report.plan["steps"][0]  # a plan counts; ranks are written on demand
    step = with_ranks(report)["steps"][0]
    assert step["ntasks"] == 8 and step["nodelist"] == "gpu[001-002]"
    envs = [r["env"] for r in step["ranks"]]
    assert [e["SLURM_PROCID"] for e in envs] == [str(i) for i in range(8)]
    assert [e["SLURM_LOCALID"] for e in envs] == [str(i % 4) for i in range(8)]
    assert [e["SLURM_NODEID"] for e in envs] == ["0"] * 4 + ["1"] * 4
    assert [e["SLURMD_NODENAME"] for e in envs] == ["gpu001"] * 4 + ["gpu002"] * 4
    assert envs[0]["SLURM_STEP_TASKS_PER_NODE"] == "4(x2)"
    assert "ranks_note" not in step


def test_a_whole_machine_plan_counts_and_lists_nothing():
    site = load_site("archer2")
    part = site.partitions["standard"]
    node = part.node_type
    text = _script(
        f"--account={site.account['example']}",
        f"--partition={part.name}",
        "--qos=largescale",
        f"--nodes={part.size}",
        f"--ntasks-per-node={node.usable_cores}",
        "--time=1:00:00",
        body="srun --hint=nomultithread ./app\n",
    )
    report = check_slurm_script("job.sbatch", site, text=text)
    assert report.errors == [], report.errors
    ranks = part.size * node.usable_cores
    assert report.plan["nodes"] == part.size and report.plan["ntasks"] == ranks
    # counts and compressed lists only: the plan is as small as a one-node job's
    assert len(json.dumps(report.plan)) < 4000
    assert report.plan["job_env"]["SLURM_JOB_NODELIST"] == f"standard[0001-{part.size}]"
    assert report.plan["job_env"]["SLURM_TASKS_PER_NODE"] == f"{node.usable_cores}(x{part.size})"
    step = with_ranks(report, limit=3)["steps"][0]
    assert [r["rank"] for r in step["ranks"]] == [0, 1, 2]
    assert f"3 of {ranks} ranks" in step["ranks_note"]


def test_sbatch_shim_dry_run_prints_the_plan(emulated_env, tmp_path):
    env = dict(emulated_env, CLUSTERKIT_SITE="bede")
    r = subprocess.run(
        ["sbatch", "--dry-run", str(SLICE)], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["site"] == "bede" and plan["gpus_per_node"] == 4


def test_sbatch_shim_refuses_like_sbatch(emulated_env, tmp_path):
    script = tmp_path / "bad.sbatch"
    script.write_text(_script("-A bdXXXYY", "-p nosuch", body="hostname\n"))
    env = dict(emulated_env, CLUSTERKIT_SITE="bede")
    r = subprocess.run(
        ["sbatch", str(script)], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert r.returncode == 1
    assert "sbatch: error: invalid partition specified: nosuch" in r.stderr
    assert "bad.sbatch:3: [partition-exists]" in r.stderr
    assert "Traceback" not in r.stderr


def test_scontrol_show_hostnames(emulated_env):
    r = subprocess.run(
        ["scontrol", "show", "hostnames", "gpu[001-003],login1"],
        env=emulated_env,
        capture_output=True,
        text=True,
    )
    assert r.stdout.split() == ["gpu001", "gpu002", "gpu003", "login1"]


# The corpus that tests/slurm/ submits to a real Slurm configured from the profiles: its
# directories hold that Slurm's verdicts, so the emulator is held to them here, on every run.
CORPUS = sorted((ROOT / "tests" / "corpus" / "slurm").glob("*/*/*.sbatch"))


@pytest.mark.parametrize("script", CORPUS, ids=lambda p: "/".join(p.parts[-3:]))
def test_emulator_agrees_with_real_slurm_on_the_corpus(script):
    site, verdict = script.parts[-3], script.parts[-2]
    report = check_slurm_script(script, load_site(site))
    errors = [str(f) for f in report.errors]
    if verdict == "good":
        assert errors == [], "Slurm accepts this script"
    else:
        assert errors, "Slurm refuses this script; the emulator let it through"
        expected = re.findall(r"\[([\w-]+)\]", script.read_text().splitlines()[1])
        assert expected, f"{script}: line 2 must be '# expect: [rule] ...'"
        assert {f.rule for f in report.errors} == set(expected), errors
        # each names the file and a line of it
        assert all(e.startswith(f"{script.relative_to(ROOT)}:") for e in errors), errors


def test_corpus_has_both_verdicts_for_each_slurm_site():
    """Each site's folder of the corpus is a Slurm site's, and holds scripts of both kinds."""
    verdicts = {(p.parts[-3], p.parts[-2]) for p in CORPUS}
    sites = {site for site, _ in verdicts}
    assert {"bede", "archer2"} <= sites
    assert all(load_site(site).scheduler == "slurm" for site in sites)
    assert verdicts == {(s, v) for s in sites for v in ("good", "bad")}


BEDE = load_site("bede")
GPU_NODE = BEDE.partitions["gpu"].node_type  # the facts come from sites/bede.yaml
TEST_MAX = BEDE.partitions["test"].max_nodes


@pytest.mark.parametrize(
    ("directives", "nodes", "tasks_per_node", "gpus_per_node"),
    [
        ([f"--ntasks={2 * GPU_NODE.cpus}"], 2, GPU_NODE.cpus, 0),  # two nodes' worth of CPUs
        (  # two nodes' GPUs and one more: three nodes, the GPUs shared out evenly
            [f"--gpus={2 * GPU_NODE.gpus + 1}"],
            3,
            1,
            -(-(2 * GPU_NODE.gpus + 1) // 3),
        ),
        (["--nodes=2", "--ntasks=1"], 1, 1, 0),  # Slurm: "setting nnodes to 1"
        (
            [f"--gpus-per-node={GPU_NODE.gpus}", "--ntasks-per-gpu=2"],
            1,
            2 * GPU_NODE.gpus,
            GPU_NODE.gpus,
        ),
        # more nodes than test allows: the gpu partition, listed second, takes the job
        (["--partition=test,gpu", f"--nodes={TEST_MAX + 1}"], TEST_MAX + 1, 1, 0),
    ],
)
def test_shape_without_nodes_spreads_like_slurm(directives, nodes, tasks_per_node, gpus_per_node):
    req = slurm_request.JobRequest(Path("job.sbatch"))
    parsed = slurm_options.parse("sbatch", ["--account=bdXXXYY", "--time=1:00:00", *directives])
    slurm_request._merge(req, parsed, 1)
    findings, shape = slurm.check_job(req, BEDE)
    assert [f for f in findings if f.level == "error"] == []
    assert (shape.nodes, shape.tasks_per_node, shape.gpus_per_node) == (
        nodes,
        tasks_per_node,
        gpus_per_node,
    )


def test_srun_shim_runs_each_part_of_an_mpmd_line(emulated_env, tmp_path):
    script = tmp_path / "mpmd.sbatch"
    script.write_text(
        _script(
            "-A bdXXXYY",
            "-p gpu",
            "-N 2",
            "--output=out.txt",
            body="srun -N1 -n1 sh -c 'echo \"a $SLURM_PROCID/$SLURM_NTASKS\"' : "
            "-N1 -n1 sh -c 'echo \"b $SLURM_PROCID/$SLURM_NTASKS\"'\n",
        )
    )
    env = dict(emulated_env, CLUSTERKIT_SITE="bede")
    r = subprocess.run(
        ["sbatch", str(script)], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    lines = sorted((tmp_path / "out.txt").read_text().split("\n"))
    assert [ln for ln in lines if ln[:2] in {"a ", "b "}] == ["a 0/2", "b 1/2"]


@pytest.mark.parametrize("keep", [False, True])
def test_a_run_here_fits_thread_counts_to_this_machine(emulated_env, tmp_path, keep):
    """A job asking for 16 CPUs a task runs here on this machine's cores: the batch shell and
    each rank see the share of the cores their rank has (CLUSTERKIT_KEEP_THREADS=1: as asked)."""
    script = tmp_path / "threads.sbatch"
    script.write_text(
        _script(
            "-A t01",
            "-p standard",
            "--qos=standard",
            "-N 1",
            "--ntasks-per-node=8",
            "--cpus-per-task=16",
            "--output=out.txt",
            body='echo "batch $SLURM_CPUS_PER_TASK"\n'
            "export OMP_NUM_THREADS=16 SRUN_CPUS_PER_TASK=16\n"
            "srun sh -c 'echo \"rank $SLURM_PROCID $OMP_NUM_THREADS $SLURM_CPUS_PER_TASK\"'\n",
        )
    )
    env = dict(emulated_env, CLUSTERKIT_SITE="archer2", CLUSTERKIT_MAX_RANKS="2")
    if keep:
        env["CLUSTERKIT_KEEP_THREADS"] = "1"
    r = subprocess.run(
        ["sbatch", str(script)], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    out = (tmp_path / "out.txt").read_text()
    share = max(1, len(os.sched_getaffinity(0)) // 2)
    batch, ranks = (16, ["rank 0 16 16", "rank 1 16 16"]) if keep else (share, None)
    assert f"batch {batch}\n" in out, out
    expected = ranks or [f"rank {i} {share} {share}" for i in range(2)]
    assert sorted(ln for ln in out.splitlines() if ln.startswith("rank ")) == expected, out
    assert ("thread counts fitted" in r.stderr) is not keep, r.stderr
