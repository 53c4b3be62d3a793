"""Profile refresh from live output (real Slurm 22.05 and Lmod captures in tests/fixtures/refresh):
parsing, the reviewed diff, the proposal, and pages failing once a refreshed profile lands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from clusterkit.commands import inventories as I
from clusterkit.emulate.sbatch import check_slurm_script
from clusterkit.grammars import myst as P
from clusterkit.sites import refresh as R
from clusterkit.sites import stack_refresh as S
from clusterkit.sites.profiles import ROOT, load_profile, load_yaml

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
    if "Available versions:" in text:
        assert S.parse_pip_index(text)
    elif text.startswith("Loading channels"):
        assert S.parse_conda_search(text)
    elif "PartitionName=" in text:
        assert R.parse_scontrol(text, "PartitionName")
    elif "NodeName=" in text:
        assert R.parse_scontrol(text, "NodeName")
    elif text.startswith("Name|") or "accounting" in text:
        R.read_live(qos=text)
    else:
        assert R.parse_modules(text)


# --------------------------------------------------------------------------- software stacks
def _conda_json(**versions: str) -> str:
    """The recorded conda search output, with some packages' versions replaced."""
    data = json.loads(fixture("opence-current-conda-search.json"))
    for name, version in versions.items():
        for build in data[name]:
            build["version"] = version
    return json.dumps(data)


def test_pip_index_and_conda_search_outputs_parse():
    pip = S.parse_pip_index(fixture("pypi-aarch64-py311.txt"))
    assert pip["torch"][0] == "2.15.0" and "2.14.1" in pip["torch"]
    assert pip["torchvision"][0] == "0.29.2"
    assert S.parse_pip_index(fixture("pypi-aarch64-py39.txt"))["torch"][0] == "2.8.0"
    builds = S.parse_conda_search(fixture("opence-current-conda-search.json"))
    assert {b["name"] for b in builds} >= {"pytorch-base", "tensorflow-base", "keras"}
    table = S.parse_conda_search(fixture("opence-current-conda-search.txt"))
    assert {b["build"] for b in table} >= {"cuda12.2_py311_pb4.21.12_9"}
    assert S.parse_conda_search('{"error": "PackagesNotFoundError"}') == []


def test_a_channel_that_agrees_with_the_stacks_proposes_nothing(tmp_path):
    live = R.read_live(conda=[fixture("opence-current-conda-search.json")])
    changes, diff, _ = R.refresh("bede", live, tmp_path)
    assert [c for c in changes if c.section == "stacks"] == []
    assert "no differences" in diff.read_text()


def test_a_newer_framework_in_the_channel_is_proposed(tmp_path):
    live = R.read_live(conda=[_conda_json(**{"pytorch-base": "2.3.0"})])
    _changes, diff, proposal = R.refresh("bede", live, tmp_path)
    assert "~ stacks.opence-1.11-pytorch.frameworks.torch: 2.1.2 -> 2.3.0" in diff.read_text()
    site = load_profile(proposal)
    assert site.stacks["opence-1.11-pytorch"].frameworks["torch"] == "2.3.0"
    assert site.stacks["opence-1.11-tensorflow"].frameworks["tensorflow"] == "2.14.1"


def test_a_channel_without_the_stacks_python_is_reported(tmp_path):
    """Bede's own page makes a python=3.9 environment: the channel has no build for it."""
    data = yaml.safe_load((ROOT / "sites" / "bede.yaml").read_text())
    data["stacks"]["opence-1.11-pytorch"]["python"] = "3.9"
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "bede.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    live = R.read_live(conda=[fixture("opence-current-conda-search.txt")])
    changes, diff, _ = R.refresh("bede", live, tmp_path / "out", sites)
    assert [(c.name, c.kind) for c in changes] == [("opence-1.11-pytorch", "notice")]
    assert "no torch build for Python 3.9 on linux-ppc64le" in diff.read_text()


def test_pip_index_versions_report_pins_and_move_unpinned_stacks(tmp_path):
    live = R.read_live(pip=[(S.PYPI, fixture("pypi-aarch64-py311.txt"))])
    changes, diff, _ = R.refresh("bede", live, tmp_path / "a")
    text = diff.read_text()
    assert "! stacks.gh200-pypi-pytorch" in text and "torch 2.15.0 is out" in text
    assert all(c.kind == "notice" for c in changes), "pinned stacks are not moved"
    # an unpinned install follows the index: the cu124 route read as if from that index
    index = "https://download.pytorch.org/whl/cu124"
    live = R.read_live(pip=[(index, fixture("pypi-aarch64-py39.txt"))])
    _changes, diff, proposal = R.refresh("bede", live, tmp_path / "b")
    assert "~ stacks.gh200-pip-cu124-pytorch.frameworks.torch: 2.4.0 -> 2.8.0" in diff.read_text()
    assert load_profile(proposal).stacks["gh200-pip-cu124-pytorch"].frameworks["torch"] == "2.8.0"


def test_a_framework_module_leaving_module_avail_retires_its_stack(tmp_path):
    """Captured from Lmod with tensorflow/2.13.0 replaced by tensorflow/2.15.0."""
    rc = R.main(
        [
            "--site",
            "archer2",
            "--module-avail",
            str(FIX / "archer2-module-avail-tf215.txt"),
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 0
    text = (tmp_path / "archer2.diff.txt").read_text()
    assert "~ stacks.tensorflow-2.13.0-cpu.status: current -> historical" in text
    assert "! stacks.tensorflow/2.15.0" in text and "no stack describes" in text
    assert "validates" in text
    site = load_profile(tmp_path / "archer2.yaml")
    assert site.stacks["tensorflow-2.13.0-cpu"].status == "historical"
    assert site.find_module("tensorflow/2.13.0")[0].status == "removed"


def test_the_cli_takes_conda_and_pip_outputs(tmp_path, capsys):
    conda = tmp_path / "conda.json"
    conda.write_text(_conda_json(keras="2.15.0"))
    rc = R.main(
        [
            "--site",
            "bede",
            "--conda-search",
            str(conda),
            "--pip-index-versions",
            str(FIX / "pypi-aarch64-py311.txt"),
            "--out",
            str(tmp_path / "out"),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "[stacks]" in out
    assert "~ stacks.opence-1.11-tensorflow.frameworks.keras: 2.14.0 -> 2.15.0" in out


def test_output_that_is_not_what_the_option_expects_is_a_finding(tmp_path, capsys):
    broken = tmp_path / "conda.json"
    broken.write_text('{"pytorch-base": [\n  {"version": "2.1.2",\n}')
    wrong = tmp_path / "pip.txt"
    wrong.write_text(fixture("archer2-module-avail.txt"))
    rc = R.main(
        [
            "--site",
            "bede",
            "--conda-search",
            str(broken),
            "--pip-index-versions",
            f"{S.PYPI}={wrong}",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert "conda.json:3: [conda-search-output]" in err
    assert "pip.txt:1: [pip-index-output]" in err
