"""Profile refresh from live output (real Slurm 22.05 and Lmod captures in tests/fixtures/refresh):
parsing, the reviewed diff, the proposal, and pages failing once a refreshed profile lands."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.emulate.sbatch import check_slurm_script
from clusterkit.lint import inventories as I
from clusterkit.lint import pages as P
from clusterkit.lint import refresh as R
from clusterkit.profiles import ROOT, load_profile, load_yaml

FIX = ROOT / "tests" / "fixtures" / "refresh"


def fixture(name: str) -> str:
    return (FIX / name).read_text()


# --------------------------------------------------------------------------- parsing
def test_scontrol_partitions_and_nodes_from_a_real_slurm():
    live = R.read_live(fixture("bede-scontrol-partitions.txt"), fixture("bede-scontrol-nodes.txt"))
    assert set(live.partitions) == {"gpu", "test", "infer", "ghlogin", "gh", "ghtest"}
    gpu, test = live.partitions["gpu"], live.partitions["test"]
    assert gpu["max_walltime_s"] == 2 * 86400 and gpu["default"] and gpu["max_nodes"] is None
    assert test["max_walltime_s"] == 1800 and test["max_nodes"] == 2
    assert gpu["node_names"] == ["bede0n1", "bede0n2"]
    shapes = {n["name"]: n for n in live.nodes}
    assert shapes["bede0n1"]["sockets"] == 2 and shapes["bede0n1"]["threads_per_core"] == 4
    assert shapes["bede0n1"]["gpus"] == 4 and shapes["bede0n1"]["memory_gb"] == 512.0
    assert shapes["bede2n1"]["partitions"] == ["ghlogin", "gh", "ghtest"]


def test_production_node_lines_with_spaces_and_typed_gpus():
    nodes = [
        R.node_shape(r)
        for r in R.parse_scontrol(fixture("node-with-arch-and-reason.txt"), "NodeName")
    ]
    assert [n["arch"] for n in nodes] == ["x86_64", "x86_64"]
    assert [n["gpus"] for n in nodes] == [0, 4]
    row = R.parse_scontrol(fixture("node-with-arch-and-reason.txt"), "NodeName")[0]
    assert row["Reason"] == "Kill task failed [root@2026-11-20T09:01:00]"
    assert row["OS"].startswith("Linux 5.14.21")


def test_sacctmgr_qos_and_its_absence():
    live = R.read_live(qos=fixture("archer2-sacctmgr-qos.txt"))
    assert live.qos["short"] == {
        "max_walltime_s": 1200,
        "max_nodes": 32,
        "max_gpus": None,
        "min_nodes": None,
    }
    assert live.qos["largescale"]["min_nodes"] == 1025
    assert live.qos["standard"]["max_walltime_s"] == 86400
    none = R.read_live(qos=fixture("sacctmgr-no-accounting.txt"))
    assert none.qos is None and "not refreshed" in none.notes[0]


def test_lmod_terse_listings():
    avail = R.parse_modules(fixture("bede-module-avail.txt"))
    assert ("cuda", "10.1.243") in avail and ("slurm", "dflt") in avail
    assert R.parse_modules(fixture("bede-module-spider.txt")) == avail
    big = R.parse_modules(fixture("bigsite-module-spider.txt"))
    assert ("cray-mpich", "8.1.27") in big and ("craype-x86-rome", None) in big
    assert not any(n.startswith(".") for n, _ in big)
    assert R.parse_modules("cuda/12.4.1(default)\ngcc/(D)\n/opt/mods:\n") >= {("cuda", "12.4.1")}


# --------------------------------------------------------------------------- the diff
def test_a_cluster_made_from_the_profile_agrees_with_it(tmp_path):
    """The capture comes from a Slurm configured from sites/bede.yaml: only what the test
    cluster leaves out (node counts, default times) may differ."""
    live = R.read_live(
        fixture("bede-scontrol-partitions.txt"),
        fixture("bede-scontrol-nodes.txt"),
        fixture("sacctmgr-no-accounting.txt"),
        [fixture("bede-module-avail.txt"), fixture("bede-module-spider.txt")],
    )
    changes, diff, proposal = R.refresh("bede", live, tmp_path)
    assert {(c.section, c.field) for c in changes} <= {
        ("partitions", "nodes"),
        ("partitions", "default_walltime"),
        ("node_types", "count"),
    }
    assert "validates" in diff.read_text()
    load_profile(proposal)


def test_qos_changes_are_listed_and_proposed(tmp_path):
    live = R.read_live(qos=fixture("archer2-sacctmgr-qos-changed.txt"))
    _changes, diff, proposal = R.refresh("archer2", live, tmp_path)
    text = diff.read_text()
    assert "~ qos.short.max_walltime: 00:20:00 -> 00:15:00" in text
    assert "- qos.largescale" in text and "+ qos.reservation" in text
    assert "~ qos.gpu-exc.max_nodes: 2 -> 4" in text
    site = load_profile(proposal)
    assert "largescale" not in site.qos and "largescale" not in site.partitions["standard"].qos
    assert site.qos["short"]["max_walltime"] == "00:15:00"
    # comments and layout of the profile are kept
    assert (ROOT / "sites" / "archer2.yaml").read_text().count("#") <= proposal.read_text().count(
        "#"
    )


def test_the_cli_writes_the_diff_and_the_proposal(tmp_path, capsys):
    rc = R.main(
        [
            "--site",
            "bede",
            "--module-avail",
            str(FIX / "bede-module-avail-changed.txt"),
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "- modules.cuda/10.1.243" in out and "+ modules.cuda/12.8.0" in out
    data = load_yaml(tmp_path / "bede.yaml")
    old = next(m for m in data["modules"] if m.get("version") == "10.1.243")
    assert old["status"] == "removed" and old["replacement"] == "cuda/12.8.0"
    assert any(m.get("version") == "12.8.0" for m in data["modules"])


# --------------------------------------------------------------------------- pages fail
def _pages_including(example: Path) -> list[str]:
    out = []
    for page in P.scan_pages():
        if any(b.is_include and b.include_path() == example.resolve() for b in page.blocks):
            out.append(page.rel)
    return out


def test_a_lowered_partition_time_fails_the_pages_that_rely_on_it(tmp_path):
    lowered = fixture("bede-scontrol-partitions.txt").replace(
        "PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL "
        "Default=YES QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 "
        "Hidden=NO MaxNodes=UNLIMITED MaxTime=2-00:00:00",
        "PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL "
        "Default=YES QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 "
        "Hidden=NO MaxNodes=UNLIMITED MaxTime=00:45:00",
    )
    assert lowered != fixture("bede-scontrol-partitions.txt")
    _changes, diff, proposal = R.refresh("bede", R.read_live(lowered), tmp_path / "out")
    assert "~ partitions.gpu.max_walltime: 2-00:00:00 -> 00:45:00" in diff.read_text()
    site = load_profile(proposal)
    example = ROOT / "examples" / "bede" / "pytorch-ddp-1node.sbatch"
    assert check_slurm_script(example, load_profile(ROOT / "sites" / "bede.yaml")).errors == []
    errors = check_slurm_script(example, site).errors
    assert errors and any("00:45:00" in f.message or "time" in f.rule for f in errors), errors
    assert "docs/howto/bede/pytorch-ddp-one-node.md" in _pages_including(example)


def test_a_removed_module_version_fails_the_pages_that_load_it(tmp_path):
    avail = fixture("archer2-module-avail.txt").replace("tensorflow/2.13.0\n", "")
    _changes, diff, proposal = R.refresh("archer2", R.read_live(modules=[avail]), tmp_path / "out")
    assert "- modules.tensorflow/2.13.0" in diff.read_text()
    sites = R.proposal_sites(proposal, tmp_path / "sites")
    errors = [f for f in I.lint_all(sites_dir=sites) if f.rule == "module-removed"]
    failing = {P.rel(f.path) for f in errors}
    assert {
        "examples/archer2/tensorflow-cpu.slurm",
        "examples/archer2/cosmoflow-cpu.slurm",
    } <= failing
    assert all("tensorflow/2.12.0" in f.message for f in errors)
    assert not {P.rel(f.path) for f in I.lint_all() if f.level == "error"} & failing
    example = ROOT / "examples" / "archer2" / "tensorflow-cpu.slurm"
    assert _pages_including(example)
    emulated = check_slurm_script(example, load_profile(proposal)).errors
    assert [f.rule for f in emulated] == ["module-removed"]


@pytest.mark.parametrize("name", sorted(p.name for p in FIX.glob("*.txt")))
def test_every_fixture_parses(name):
    text = fixture(name)
    if "PartitionName=" in text:
        assert R.parse_scontrol(text, "PartitionName")
    elif "NodeName=" in text:
        assert R.parse_scontrol(text, "NodeName")
    elif text.startswith("Name|") or "accounting" in text:
        R.read_live(qos=text)
    else:
        assert R.parse_modules(text)
