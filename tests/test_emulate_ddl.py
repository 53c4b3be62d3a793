"""IBM DDL launchers (ddlrun, bede-ddlrun; historical) and Bede's bede-mpirun."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterkit.emulate import ddl, launcher_options, registry
from clusterkit.emulate.launch_env import NodeSet
from clusterkit.emulate.lsf import check_lsf_script
from clusterkit.emulate.sbatch import check_slurm_script
from clusterkit.runs import shimdir
from clusterkit.sites.profiles import load_site

ROOT = Path(__file__).resolve().parent.parent
BEDE = load_site("bede")
SUMMIT = load_site("summit")
ARCHER2 = load_site("archer2")
GPU = BEDE.partitions["gpu"]
GPU_NODE = GPU.node_type
GH = next(p for p in BEDE.partitions.values() if p.node_type.threads_per_core == 1)

SEED_144 = (
    "--nodes 18 --racks 4 --aisles 2 python $CONDA_PREFIX/tf_cnn_benchmarks/tf_cnn_benchmarks.py "
    "--variable_update=horovod --model=resnet50 --num_gpus=1 --batch_size=256"
).split()


def _bede_job(body: str, gpus: int = GPU_NODE.gpus, nodes: int = 1) -> str:
    return (
        f"#!/bin/bash\n#SBATCH -A bdXXXYY\n#SBATCH -p gpu\n#SBATCH --gres=gpu:{gpus}\n"
        f"#SBATCH -N{nodes}\n#SBATCH -t 0:10:00\n{body}\n"
    )


# --------------------------------------------------------------------------- ddlrun
def test_ddlrun_takes_the_first_unknown_word_as_the_program():
    parsed, problems = launcher_options.parse_ddlrun("ddlrun", SEED_144)
    assert problems == []
    assert parsed.values == {"nodes": "18", "racks": "4", "aisles": "2"}
    assert parsed.command[:2] == ["python", "$CONDA_PREFIX/tf_cnn_benchmarks/tf_cnn_benchmarks.py"]
    single, _ = launcher_options.parse_ddlrun(
        "ddlrun", ["-H", "h1,h2", "-mode", "p", "--tcp", "a.out"]
    )
    assert single.values == {"hosts": "h1,h2", "mode": "p", "tcp": "1"}
    assert single.command == ["a.out"]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["-", "--"]), st.sampled_from(["H", "host"]), st.booleans())
def test_ddlrun_options_take_one_or_two_dashes(dash, name, equals):
    words = [f"{dash}{name}=h1,h2"] if equals else [f"{dash}{name}", "h1,h2"]
    parsed, problems = launcher_options.parse_ddlrun("ddlrun", [*words, "-v", "prog", "-x"])
    assert problems == [] and parsed.values["hosts"] == "h1,h2"
    assert parsed.command == ["prog", "-x"]


def test_unknown_ddlrun_option_would_become_the_program():
    _, problems = launcher_options.parse_ddlrun("ddlrun", ["--gpus", "4", "python", "x.py"])
    assert problems and "would run it as the program" in problems[0]


def test_ddlrun_topology_must_describe_the_job():
    nodes = NodeSet.of("n", 144)
    findings, step = ddl.check_ddl_step("p", 3, "ddlrun", SEED_144, SUMMIT, nodes,
                                        SUMMIT.default_partition.node_type.gpus)  # fmt: skip
    assert findings == [] and step["ntasks"] == 144 * SUMMIT.default_partition.node_type.gpus
    assert step["notice"] and SUMMIT.launcher("ddlrun")["replacement"] in step["notice"]
    findings, _ = ddl.check_ddl_step("p", 3, "ddlrun", SEED_144, SUMMIT, nodes.head(72), 6)
    assert [f.rule for f in findings] == ["ddl-topology"] and "144 nodes" in findings[0].message


def test_launchers_are_registered_by_name():
    judges = registry.commands()
    assert judges["bede-mpirun"].judge is ddl.judge_bede_mpirun
    assert {"ddlrun", "bede-ddlrun", "singularity", "apptainer", "srun", "jsrun"} <= set(judges)
    assert (judges["srun"].scheduler, judges["jsrun"].scheduler) == ("slurm", "lsf")


def test_bede_ddlrun_is_historical_and_names_its_replacement():
    script = ROOT / "examples" / "bede" / "resnet50-wmlce-historical.sbatch"
    report = check_slurm_script(script, BEDE)
    assert report.errors == [], "\n".join(map(str, report.errors))
    notes = [f for f in report.findings if f.rule == "launcher-historical"]
    assert notes and BEDE.launcher("bede-ddlrun")["replacement"] in notes[0].message


def test_ddlrun_elsewhere_is_not_a_launcher():
    text = (
        "#!/bin/bash\n#SBATCH -A t01\n#SBATCH -p standard\n#SBATCH -q standard\n"
        "#SBATCH -N1\n#SBATCH -t 0:10:00\nddlrun hostname\n"
    )
    report = check_slurm_script("j.slurm", ARCHER2, text=text)
    assert "launcher-unknown" in [f.rule for f in report.findings]


# --------------------------------------------------------------------------- bede-mpirun
@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(launcher_options.RANK_DISTRIB),
    st.one_of(st.none(), st.sampled_from(launcher_options.THREAD_DISTRIB)),
    st.booleans(),
    st.sampled_from([[], ["-np", "4"], ["--np=4"], ["-x", "A=1"], ["--mca", "btl", "self"]]),
)
def test_bede_par_grammar(ranks, threads, equals, extra):
    par = ranks if threads is None else f"{ranks}:{threads}"
    words = [f"--bede-par={par}"] if equals else ["--bede-par", par]
    parsed, problems = launcher_options.parse_bede_mpirun([*words, *extra, "./a.out", "-n", "3"])
    assert problems == []
    assert (parsed.ranks, parsed.threads) == (ranks, threads or "1tpt")
    assert parsed.command == ["./a.out", "-n", "3"]
    assert parsed.np == (4 if "4" in " ".join(extra) else None)


@pytest.mark.parametrize("par", ["1ppx", "2ppg", "1ppg:2tpc", "ppn", ""])
def test_bad_bede_par_is_refused(par):
    parsed, problems = launcher_options.parse_bede_mpirun(["--bede-par", par, "./a.out"])
    assert parsed is None and [r for r, _lvl, _m in problems] == ["bede-par"] * len(problems)


def test_bede_mpirun_defaults_and_unknown_mpirun_flags():
    parsed, problems = launcher_options.parse_bede_mpirun(["--weird", "./a.out"])
    assert (parsed.ranks, parsed.threads) == ("1ppc", "1tpt")
    assert [(r, lvl) for r, lvl, _m in problems] == [("mpirun-option", "warning")]


@pytest.mark.parametrize("ranks", launcher_options.RANK_DISTRIB)
def test_ranks_per_node_follow_the_node_type(ranks):
    for node in (GPU_NODE, GH.node_type):
        n = launcher_options.ranks_per_node(ranks, node, node.gpus, node.usable_cores)
        expected = {"1ppn": 1, "1ppg": node.gpus, "1ppc": node.usable_cores,
                    "1ppt": node.usable_cores * node.threads_per_core}[ranks]  # fmt: skip
        assert n == expected
    # Bede: on aarch64 (no SMT) 1ppt is the same as 1ppc
    gh = GH.node_type
    assert launcher_options.ranks_per_node("1ppt", gh, gh.gpus, gh.usable_cores) == gh.usable_cores
    per = launcher_options.ranks_per_node(ranks, GPU_NODE, GPU_NODE.gpus, GPU_NODE.usable_cores)
    threads = launcher_options.threads_per_rank("1tpt", GPU_NODE, GPU_NODE.usable_cores, per)
    assert threads * per <= GPU_NODE.usable_cores * GPU_NODE.threads_per_core


def test_job_scripts_see_through_bede_mpirun():
    bad = check_slurm_script("j.sbatch", BEDE, text=_bede_job("bede-mpirun --bede-par 1pp ./a"))
    assert [f.rule for f in bad.errors] == ["bede-par"]
    text = _bede_job(
        f"bede-mpirun --bede-par 1ppn torchrun --nproc_per_node={GPU_NODE.gpus + 1} -m m"
    )
    report = check_slurm_script("j.sbatch", BEDE, text=text)
    assert [f.rule for f in report.errors] == ["nproc-per-gpu"]
    other = check_lsf_script(
        "j.lsf", SUMMIT, text="#BSUB -P ABC123\n#BSUB -W 9\n#BSUB -nnodes 1\nbede-mpirun ./a\n"
    )
    assert "launcher-unknown" in [f.rule for f in other.errors]


# --------------------------------------------------------------------------- run mode
@pytest.fixture
def bede_shims(emulated_env, tmp_path):
    """The project's shims plus bede-mpirun (written the way shimdir writes the others)."""
    extra = tmp_path / "extra-shims"
    extra.mkdir()
    shim = extra / "bede-mpirun"
    shim.write_text(
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT)!r})\n"
        "from clusterkit.runs.entry import main\nmain('bede-mpirun')\n"
    )
    shim.chmod(0o755)
    # the thread counts as bede-mpirun sets them, not as fitted to this machine's cores
    env = dict(emulated_env, CLUSTERKIT_SITE="bede", PYTHONUNBUFFERED="1")
    env["CLUSTERKIT_KEEP_THREADS"] = "1"
    env["PATH"] = f"{extra}:{shimdir.ensure()}:{env['PATH']}"
    return env


PRINT_RANK = (
    'python -c \'import os; print("r", os.environ["OMPI_COMM_WORLD_RANK"], '
    'os.environ["OMPI_COMM_WORLD_SIZE"], os.environ.get("OMP_NUM_THREADS"))\''
)


def test_bede_mpirun_starts_scaled_ranks(bede_shims, tmp_path):
    job = tmp_path / "job.sbatch"
    job.write_text(_bede_job(f"#SBATCH -o out.txt\nbede-mpirun --bede-par 1ppg:1tpc {PRINT_RANK}"))
    r = subprocess.run(
        ["sbatch", job.name], cwd=tmp_path, env=bede_shims, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    out = (tmp_path / "out.txt").read_text()
    assert r.returncode == 0, r.stderr + out
    threads = GPU_NODE.usable_cores // GPU_NODE.gpus
    assert sorted(line for line in out.splitlines() if line.startswith("r ")) == [
        f"r 0 2 {threads}",
        f"r 1 2 {threads}",
    ], out
    assert f"{GPU_NODE.gpus} rank(s) requested" in out


def test_ddlrun_runs_under_bsub_with_its_notice(emulated_env, tmp_path):
    job = tmp_path / "job.lsf"
    job.write_text(
        "#!/bin/bash\n#BSUB -P ABC123\n#BSUB -W 10\n#BSUB -nnodes 2\n"
        f"ddlrun --nodes 2 {PRINT_RANK}\n"
    )
    env = dict(emulated_env, CLUSTERKIT_SITE="summit", PYTHONUNBUFFERED="1")
    r = subprocess.run(
        ["bsub", job.name], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert SUMMIT.launcher("ddlrun")["replacement"] in r.stderr and "Traceback" not in r.stderr
    assert sorted(x for x in r.stdout.splitlines() if x.startswith("r ")) == [
        "r 0 2 None",
        "r 1 2 None",
    ]
    dry = subprocess.run(
        ["bsub", "--dry-run", job.name], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert json.loads(dry.stdout)["steps"][0]["launcher"] == "ddlrun"
