"""Node-local storage and sbcast: the profiles' storage facts, the rule that a job using
Frontier's NVMe asks for it, sbcast's options as the real tool reads them, and the stand-ins an
emulated job gets for node-local paths."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from clusterkit.emulate.body import check_command_line
from clusterkit.emulate.sbatch import check_slurm_script
from clusterkit.grammars import sbcast_cli
from clusterkit.runs import run_storage
from clusterkit.runs.runtime import ALLOC_VAR, LMOD_INIT
from clusterkit.sites import lmod
from clusterkit.sites.profiles import Site, check_consistency, load_site

FRONTIER, ISAMBARD, CIRRUS = load_site("frontier"), load_site("isambard-ai"), load_site("cirrus")

JOB = """#!/bin/bash
#SBATCH -A ABC123
#SBATCH -N 2
#SBATCH -t 00:30:00
{extra}set -euo pipefail
STAGE=/mnt/bb/$USER/shards
srun --ntasks-per-node=1 mkdir -p "$STAGE/train"
sbcast -pf shard.tar "$STAGE/train/shard.tar"
"""


def findings(text: str, site: Site = FRONTIER) -> list[tuple[int, str, str]]:
    report = check_slurm_script(Path("job.sbatch"), site, text=text)
    return [(f.line, f.rule, f.level) for f in report.findings]


# --------------------------------------------------------------------------- the -C nvme rule
def test_a_job_that_uses_the_nvme_path_without_asking_for_it_is_refused_at_its_first_use():
    report = check_slurm_script(Path("job.sbatch"), FRONTIER, text=JOB.format(extra=""))
    [f] = report.errors
    assert (f.line, f.rule) == (7, "path-needs-constraint")
    assert "/mnt/bb/$USER/shards/train" in f.message and "#SBATCH -C nvme" in f.message
    assert str(f).startswith("job.sbatch:7: [path-needs-constraint]")


@pytest.mark.parametrize(
    "asked",
    ["#SBATCH -C nvme\n", "#SBATCH --constraint=nvme\n", "#SBATCH --constraint='nvme&other'\n"],
)
def test_asking_for_the_nvme_feature_lets_the_job_use_it(asked):
    assert findings(JOB.format(extra=asked)) == []


def test_the_command_line_constraint_counts_and_a_snippet_is_not_judged():
    report = check_slurm_script(
        Path("job.sbatch"), FRONTIER, argv=["-C", "nvme"], text=JOB.format(extra="")
    )
    assert report.errors == []
    # a command on its own: the job it runs in is not known, so its request is not either
    line = check_command_line("page.md", 3, ["mkdir", "-p", "/mnt/bb/$USER/x"], FRONTIER)
    assert line.errors == []


def test_paths_that_need_no_feature_are_not_held_to_one():
    text = JOB.format(extra="").replace(
        "/mnt/bb/$USER/shards", "/lustre/orion/abc123/proj-shared/x"
    )
    rules = {rule for _, rule, _ in findings(text)}
    assert "path-needs-constraint" not in rules
    # sbcast to a parallel file system: every node would write the same file
    assert "sbcast-dest" in rules


def test_every_staging_path_of_a_site_in_service_says_its_kind_and_source():
    for site in (FRONTIER, ISAMBARD, CIRRUS, load_site("bede")):
        for place in site.places.values():
            assert place.kind in {"parallel", "network", "node-local", "memory-backed"}
            if place.staging:
                assert place.raw["sources"], (site.name, place.name)
    assert FRONTIER.places["node_nvme"].constraint == "nvme"
    assert ISAMBARD.places["local"].variable == "LOCALDIR"
    assert not any(p.staging for p in load_site("bede").places.values())


def test_the_profile_check_refuses_a_constraint_off_node_local_storage_and_no_sources():
    data = copy.deepcopy(FRONTIER.data)
    data["paths"]["member_work"]["constraint"] = "nvme"
    del data["paths"]["node_nvme"]["sources"]
    rules = [f.rule for f in check_consistency(FRONTIER.path, data)]
    assert sorted(rules) == ["path-constraint", "path-sources"]


# --------------------------------------------------------------------------- sbcast's options
def sbcast_findings(*args: str) -> list[tuple[str, str, str]]:
    text = JOB.format(extra="#SBATCH -C nvme\n") + f"sbcast {' '.join(args)}\n"
    report = check_slurm_script(Path("job.sbatch"), FRONTIER, text=text)
    return [(f.rule, f.level, f.message) for f in report.findings if f.line == 10]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("--bogus a /mnt/bb/u/a", "sbcast: unrecognized option '--bogus'"),
        ("-x a /mnt/bb/u/a", "sbcast: invalid option -- 'x'"),
        ("--fo=2 a /mnt/bb/u/a", "sbcast: option '--force' doesn't allow an argument"),
        ("a /mnt/bb/u/a -s", "sbcast: option requires an argument -- 's'"),
        ("--s=1 a /mnt/bb/u/a", "sbcast: option '--s' is ambiguous; possibilities:"),
        # an optional value must be attached: the next word is a file name
        ("-C lz4 a /mnt/bb/u/a", "Need two file names, have 3 names"),
        ("a", "Need two file names, have 1 names"),
    ],
)
def test_sbcast_refuses_what_getopt_refuses_with_the_real_message(args, message):
    [(rule, level, text)] = sbcast_findings(args)
    assert (rule, level) == ("sbcast-option", "error")
    assert text.startswith(message)


@pytest.mark.parametrize(
    "args",
    [
        "-pf a /mnt/bb/u/a",
        "a /mnt/bb/u/a --force --preserve",
        "-Clz4 --send-libs=no -F 8 -s 1m -t 30 -j 12+1.3 a /mnt/bb/u/a",
        "--compress --exclude=NONE --send-libs a /mnt/bb/u/a",
        "--pres --fan 2 a /mnt/bb/u/a",  # unique prefixes
    ],
)
def test_sbcast_takes_what_the_real_one_takes(args):
    assert sbcast_findings(args) == []


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ("-Czlib a /mnt/bb/u/a", "--compress=zlib"),
        ("-F 65 a /mnt/bb/u/a", "largest fanout of sbcast in Slurm 25.11 is 64"),
        ("-s 1g a /mnt/bb/u/a", "--size=1g"),
        ("--exclude=lib a /mnt/bb/u/a", "--exclude=lib"),
    ],
)
def test_sbcast_values_are_checked(args, fragment):
    [(rule, _, text)] = sbcast_findings(args)
    assert rule == "sbcast-option" and fragment in text


@pytest.mark.parametrize("args", ["--treewidth=32 a /mnt/bb/u/a", "-F off a /mnt/bb/u/a",
                                  "-w frontier[00001-00002] a /mnt/bb/u/a"])  # fmt: skip
def test_frontier_sbcast_is_that_of_its_slurm_release(args):
    # Frontier runs Slurm 25.11 (sites/frontier.yaml): options sbcast gained after 22.05 pass
    assert FRONTIER.slurm_release == "25.11"
    assert sbcast_findings(args) == []
    # 22.05's sbcast (the shim's, Debian 12's slurm-client) takes none of them
    assert _refused_by_22_05(args.split())


def _refused_by_22_05(argv: list[str]) -> bool:
    try:
        return bool(sbcast_cli.value_problems(sbcast_cli.parse(argv)))
    except sbcast_cli.SbcastUsageError:
        return True


def test_an_unknown_sbcast_option_names_the_release_judged():
    [(_, _, text)] = sbcast_findings("--bogus a /mnt/bb/u/a")
    assert "sbcast of Slurm 25.11" in text
    assert sbcast_cli.value_problems(sbcast_cli.parse(["-F", "12", "a", "/b"])) == [
        "--fanout=12: the largest fanout of sbcast in Slurm 22.05 is 8 (sbcast(1))"
    ]


def test_sbcast_warns_of_a_relative_dest_and_of_running_in_a_step():
    [(rule, level, _)] = sbcast_findings("a relative.tar")
    assert (rule, level) == ("sbcast-dest", "warning")
    text = JOB.format(extra="#SBATCH -C nvme\n") + "srun -n 1 sbcast a /mnt/bb/u/a\n"
    assert (10, "sbcast-in-step", "warning") in findings(text)


def test_the_option_table_is_the_one_sbcast_help_prints():
    """Every option --help lists is in the table with its short letter and its kind of value,
    and nothing else is."""
    listed = {}
    for m in re.finditer(r"^\s+(?:-(\w), )?--([\w-]+)(\[?=)?", sbcast_cli.HELP, re.M):
        short, name, value = m.groups()
        listed[name] = (short, {None: "none", "=": "required", "[=": "optional"}[value])
    assert listed == sbcast_cli.OPTIONS


# --------------------------------------------------------------------------- the sbcast shim
@pytest.fixture
def in_job(monkeypatch):
    alloc = {"site": "frontier", "run_nodes": ["localhost", "127.0.0.2"], "plan": {}}
    monkeypatch.setenv(ALLOC_VAR, json.dumps(alloc))
    monkeypatch.setenv("SLURM_JOB_ID", "1000")


def test_the_shim_copies_once_and_keeps_times_with_p(in_job, tmp_path, capsys):
    src = tmp_path / "shard.tar"
    src.write_bytes(b"x" * 100)
    os.utime(src, (1_000_000, 1_000_000))
    dest = tmp_path / "node" / "shard.tar"
    dest.parent.mkdir()
    assert run_storage.sbcast(["-p", str(src), str(dest)]) == 0
    assert dest.read_bytes() == src.read_bytes() and dest.stat().st_mtime == 1_000_000
    assert "2 node(s)" in capsys.readouterr().err
    # the file is there now: without -f, slurmd refuses to replace it
    assert run_storage.sbcast([str(src), str(dest)]) == 1
    assert "REQUEST_FILE_BCAST(localhost): File exists" in capsys.readouterr().err
    assert run_storage.sbcast(["-f", str(src), str(dest)]) == 0


def test_the_shim_fails_as_sbcast_does(in_job, tmp_path, capsys, monkeypatch):
    src = tmp_path / "shard.tar"
    src.write_bytes(b"x")
    assert run_storage.sbcast([str(src), str(tmp_path / "no-dir" / "x")]) == 1
    assert "REQUEST_FILE_BCAST(localhost): No such file or directory" in capsys.readouterr().err
    assert run_storage.sbcast([str(tmp_path / "missing"), str(tmp_path / "x")]) == 255
    assert "Can't open" in capsys.readouterr().err
    assert run_storage.sbcast(["--bogus", "a", "b"]) == 1
    err = capsys.readouterr().err
    assert err == "sbcast: unrecognized option '--bogus'\n" + sbcast_cli.TRY + "\n"
    monkeypatch.delenv("SLURM_JOB_ID")
    assert run_storage.sbcast([str(src), str(tmp_path / "y")]) == 1
    assert "Need a job id" in capsys.readouterr().err


# --------------------------------------------------------------------------- stand-ins
def test_frontier_nvme_is_mapped_into_the_job_scratch(tmp_path):
    env = {"USER": "auser"}
    scratch, mapping, notes = run_storage.prepare(FRONTIER, env, "ABC123", 7)
    try:
        here = Path(mapping["/mnt/bb"])
        assert here.parent == scratch and (here / "auser").is_dir()
        assert env[run_storage.SCRATCH_VAR] == str(scratch)
        script = tmp_path / "job.sbatch"
        script.write_text("STAGE=/mnt/bb/$USER/x\nls /mnt/bbx /mnt/bb\n")
        copy_ = run_storage.mapped_script(script, mapping, scratch)
        assert copy_.read_text() == f"STAGE={here}/$USER/x\nls /mnt/bbx {here}\n"
        assert "/mnt/bb/<user>" in notes[0]
    finally:
        run_storage.cleanup(scratch)
    assert not scratch.exists()


def test_a_variable_no_module_sets_is_set_in_the_job():
    env = {"USER": "auser"}
    scratch, mapping, _ = run_storage.prepare(CIRRUS, env, "t01", 7)
    try:
        assert mapping == {}  # /tmp and /dev/shm are here
        assert Path(env["TMPDIR"]) == scratch / "job_tmpdir" and Path(env["TMPDIR"]).is_dir()
    finally:
        run_storage.cleanup(scratch)


@pytest.mark.skipif(not LMOD_INIT.is_file(), reason="needs Lmod (nox installs it as root)")
def test_brics_modules_load_side_by_side_and_localdir_is_the_jobs(tmp_path):
    root = lmod.ensure_modulefiles(ISAMBARD, tmp_path)
    scratch = tmp_path / "job"
    env = dict(os.environ, MODULEPATH=str(root), CLUSTERKIT_JOB_SCRATCH=str(scratch))
    script = (
        f"source {LMOD_INIT}; module load brics/userenv; module load brics/nccl; "
        'echo "LOCALDIR=$LOCALDIR NCCL=$NCCL_SOCKET_IFNAME"'
    )
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    assert f"LOCALDIR={scratch}/local NCCL=hsn" in out.stdout, out.stderr
