"""Site profiles: every profile is valid, and a broken one is reported with file, line and rule."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from clusterkit.sites.errors import ProfileError
from clusterkit.sites.profiles import (
    all_sites,
    duration_seconds,
    load_profile,
    load_site,
    profile_paths,
)

ROOT = Path(__file__).resolve().parent.parent
SITES = [p.stem for p in profile_paths()]


def test_the_sites_have_profiles():
    assert {"bede", "summit", "archer2", "frontier", "isambard-ai"} <= set(SITES)


@pytest.mark.parametrize("name", SITES)
def test_profile_is_valid(name):
    site = load_site(name)
    assert site.partitions, "a site needs partitions"
    for part in site.partitions.values():
        # no limit of its own only where the site gives its limits per QoS
        assert (part.max_walltime_s is None and site.qos) or part.max_walltime_s > 0


def test_lifecycles_match_the_sites_history():
    assert load_site("summit").data["lifecycle"]["retired"] == "2024-11-15"
    assert load_site("summit").status == "retired"
    assert load_site("archer2").status in {"end-of-service", "retired"}
    assert load_site("bede").is_current
    arches = {nt.arch for nt in load_site("bede").node_types.values()}
    assert {"ppc64le", "aarch64"} <= arches, "Bede has POWER9 and Grace-Hopper nodes"
    assert load_site("summit").data["lifecycle"]["successor"].startswith("Frontier")
    assert load_site("frontier").is_current and load_site("isambard-ai").is_current


def test_where_summit_and_archer2_users_went_has_the_nodes_their_docs_describe():
    """Frontier: one 64-core EPYC, 8 of whose cores the system keeps, and four MI250X seen as
    eight GPUs; Isambard-AI: four GH200 superchips of 72 Arm cores and one H100 each."""
    fr = load_site("frontier").partitions["batch"].node_type
    assert (fr.arch, fr.sockets, fr.cores, fr.usable_cores) == ("x86_64", 1, 64, 56)
    assert (fr.gpus, fr.gpu_vendor) == (8, "amd")
    ia = load_site("isambard-ai").partitions["workq"].node_type
    assert (ia.arch, ia.sockets, ia.cores_per_socket, ia.threads_per_core) == ("aarch64", 4, 72, 1)
    assert (ia.gpus, ia.gpu_vendor) == (4, "nvidia")
    assert {load_site(s).scheduler for s in ("frontier", "isambard-ai")} == {"slurm"}


def _copy(tmp_path: Path, name: str, edit) -> Path:
    src = ROOT / "sites" / f"{name}.yaml"
    dst = tmp_path / f"{name}.yaml"
    shutil.copy(src, dst)
    text = dst.read_text()
    dst.write_text(edit(text))
    return dst


def _line_of(path: Path, needle: str, after: str = "") -> int:
    """The first line holding ``needle`` (below the first line holding ``after``)."""
    lines = path.read_text().splitlines()
    start = next(i for i, raw in enumerate(lines) if after in raw) if after else 0
    return next(i for i, raw in enumerate(lines[start:], start + 1) if needle in raw)


def test_unknown_node_type_is_reported_with_its_line(tmp_path):
    site = load_site("bede")
    part = next(iter(site.partitions.values()))
    old = f"node_type: {part.raw['node_type']}"
    path = _copy(tmp_path, "bede", lambda t: t.replace(old, "node_type: nosuch", 1))
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    finding = exc.value.findings[0]
    assert finding.rule == "partition-node-type"
    assert finding.line == _line_of(path, "node_type: nosuch")
    assert f"{path.name}:{finding.line}: [partition-node-type]" in str(exc.value)


def test_schema_errors_name_the_line(tmp_path):
    path = _copy(
        tmp_path,
        "bede",
        lambda t: re.sub(
            r"max_walltime: ['\"]?[^\n'\"]+['\"]?", "max_walltime: two days", t, count=1
        ),
    )
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    f = exc.value.findings[0]
    assert f.rule == "schema:pattern"
    assert f.line == _line_of(path, "max_walltime: two days")


def test_unknown_keys_are_refused(tmp_path):
    path = _copy(tmp_path, "archer2", lambda t: t + "\nfavourite_colour: blue\n")
    with pytest.raises(ProfileError, match="additionalProperties"):
        load_profile(path)


def test_removed_module_needs_a_replacement(tmp_path):
    data = yaml.safe_load((ROOT / "sites" / "bede.yaml").read_text())
    data["modules"].append({"name": "oldthing", "version": "1.0", "status": "removed"})
    path = tmp_path / "bede.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    assert exc.value.findings[0].rule == "module-replacement"


def test_yaml_syntax_error_is_a_finding_not_a_traceback(tmp_path):
    path = tmp_path / "bede.yaml"
    path.write_text("name: bede\npartitions: [unclosed\n")
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    assert exc.value.findings[0].rule == "yaml-syntax"


def test_cli_validates_and_reports(tmp_path):
    ok = subprocess.run(
        ["python", "-m", "clusterkit", "profiles"], capture_output=True, text=True, cwd=ROOT
    )
    assert ok.returncode == 0, ok.stderr
    bad = tmp_path / "bede.yaml"
    bad.write_text("name: bede\n")
    r = subprocess.run(
        ["python", "-m", "clusterkit", "profiles", str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 1
    assert "[schema:required]" in r.stderr and "Traceback" not in r.stderr


def test_durations():
    assert duration_seconds("2-00:00:00") == 172800
    assert duration_seconds("00:20") == 1200
    with pytest.raises(ValueError):
        duration_seconds("forever")


def test_every_module_resolves_by_its_full_name():
    for site in all_sites():
        for mod in site.modules:
            found, _ = site.find_module(mod.full_name)
            assert found == mod


# --------------------------------------------------------------------------- software stacks
def _with_stack(tmp_path: Path, site: str, name: str, edit) -> Path:
    """A copy of a profile whose stack ``name`` has been changed by ``edit(stack)``."""
    data = yaml.safe_load((ROOT / "sites" / f"{site}.yaml").read_text())
    edit(data["stacks"][name])
    path = tmp_path / f"{site}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _rules(path: Path) -> list[str]:
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    return [f.rule for f in exc.value.findings]


@pytest.mark.parametrize("name", SITES)
def test_every_site_lists_stacks_with_sources(name):
    site = load_site(name)
    assert site.stacks, f"{name} lists no software stacks"
    for stack in site.stacks.values():
        assert stack.raw["sources"] and stack.frameworks
        arches = {site.node_types[nt].arch for nt in stack.raw["node_types"]}
        assert len(arches) == 1


def test_stacks_carry_the_versions_the_sources_give():
    bede = load_site("bede").stacks
    assert bede["opence-1.11-pytorch"].frameworks["torch"] == "2.1.2"
    assert bede["opence-1.11-tensorflow"].frameworks["keras"].startswith("2.14")
    assert bede["opence-1.11-tensorflow"].install["channels"] == [
        "https://ftp.osuosl.org/pub/open-ce/current/"
    ]
    assert bede["gh200-pip-cu124-pytorch"].python == "3.9"
    assert bede["gh200-pip-cu124-pytorch"].accelerator == "cuda 12.4"
    archer2 = load_site("archer2").stacks
    assert archer2["tensorflow-2.13.0-cpu"].frameworks["keras"].startswith("2.")
    assert archer2["pytorch-2.9.1-gpu"].accelerator == "rocm 6.3"
    assert all(s.status == "historical" for s in load_site("summit").stacks.values())


def test_a_stack_on_a_node_type_the_site_lacks_is_refused(tmp_path):
    path = _with_stack(
        tmp_path, "bede", "opence-1.11-pytorch", lambda s: s.update(node_types=["nosuch"])
    )
    assert "stack-node-type" in _rules(path)


def test_one_stack_cannot_span_two_architectures(tmp_path):
    path = _with_stack(
        tmp_path,
        "bede",
        "opence-1.11-pytorch",
        lambda s: s.update(node_types=["power9-v100", "grace-hopper"]),
    )
    assert _rules(path) == ["stack-arch"]


def test_a_gpu_build_gives_its_toolkit_version_or_says_why_not(tmp_path):
    def drop(stack):
        stack["accelerator"] = {"kind": "cuda"}

    assert _rules(_with_stack(tmp_path, "bede", "gh200-pip-cu124-pytorch", drop)) == [
        "stack-accelerator"
    ]

    def both(stack):
        stack["accelerator"] = {"kind": "cuda", "version": "12.4", "unknown": "not said anywhere"}

    assert _rules(_with_stack(tmp_path, "bede", "gh200-pip-cu124-pytorch", both)) == [
        "stack-accelerator"
    ]


def test_a_module_stack_names_a_module_of_the_profile_built_for_its_nodes(tmp_path):
    def rename(stack):
        stack["install"] = {"module": {"name": "tensorflow/9.9.9"}}

    assert _rules(_with_stack(tmp_path, "archer2", "tensorflow-2.13.0-cpu", rename)) == [
        "stack-module"
    ]

    def to_gpu(stack):
        stack["node_types"] = ["epyc7543p-4mi210"]

    assert _rules(_with_stack(tmp_path, "archer2", "tensorflow-2.13.0-cpu", to_gpu)) == [
        "stack-module"
    ]


def test_a_retired_site_has_no_current_stack(tmp_path):
    path = _with_stack(
        tmp_path, "summit", "open-ce-1.10.0-py39", lambda s: s.update(status="current")
    )
    assert _rules(path) == ["stack-status"]


def test_a_version_pypi_lacks_needs_a_ci_route(tmp_path):
    path = _with_stack(tmp_path, "bede", "ngc-pytorch-24.09", lambda s: s.pop("ci"))
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    (finding,) = exc.value.findings
    assert finding.rule == "stack-ci" and "2.5.0a0+b465a5843b" in finding.message
    assert finding.line == _line_of(path, "frameworks:", after="ngc-pytorch-24.09:")


def test_stack_schema_errors_name_the_line(tmp_path):
    path = _with_stack(
        tmp_path,
        "bede",
        "opence-1.11-pytorch",
        lambda s: s["install"].update(pip={"packages": ["torch"]}),
    )
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    f = exc.value.findings[0]
    assert f.rule == "schema:maxProperties" and "stacks.opence-1.11-pytorch.install" in f.message
    assert f.line == _line_of(path, "install:", after="opence-1.11-pytorch:")


def test_a_profile_without_stacks_is_refused(tmp_path):
    data = yaml.safe_load((ROOT / "sites" / "bede.yaml").read_text())
    del data["stacks"]
    path = tmp_path / "bede.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ProfileError, match="'stacks' is a required property"):
        load_profile(path)


def test_a_current_stack_cannot_rest_on_a_removed_module(tmp_path):
    data = yaml.safe_load((ROOT / "sites" / "archer2.yaml").read_text())
    mod = next(m for m in data["modules"] if m["name"] == "tensorflow" and m["version"] == "2.13.0")
    mod.update(status="removed", replacement="tensorflow/2.12.0")
    path = tmp_path / "archer2.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert _rules(path) == ["stack-module"]
    data["stacks"]["tensorflow-2.13.0-cpu"]["status"] = "historical"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert load_profile(path).stacks["tensorflow-2.13.0-cpu"].status == "historical"


def test_ci_requirements_follow_the_stack_or_its_ci_route():
    bede, archer2 = load_site("bede").stacks, load_site("archer2").stacks
    assert bede["opence-1.11-tensorflow"].ci_pip == [
        "tensorflow-cpu==2.14.1",
        "keras==2.14.0",
        "numpy==1.26.*",
    ]
    assert archer2["tensorflow-2.13.0-cpu"].ci_pip == ["tensorflow-cpu==2.13.0", "keras==2.13.1"]
    assert archer2["pytorch-2.9.1a0-cpu"].ci_pip == ["torch==2.9.1", "torchvision==0.24.1"]
    skipped = load_site("summit").stacks["open-ce-1.1.3-py38"]
    assert skipped.ci_pip is None and "torch 1.7.1" in skipped.ci_skip
