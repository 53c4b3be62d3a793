"""Recorded channel manifests (contracts/channels): loading, checking, and channel_has."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from clusterkit.sites import channels as C
from clusterkit.sites.errors import CheckError
from clusterkit.sites.profiles import all_sites
from clusterkit.sites.stack_refresh import CONDA_NAMES

OPENCE = "https://ftp.osuosl.org/pub/open-ce/current/"
CU124 = "https://download.pytorch.org/whl/cu124"


def test_every_manifest_loads_with_sources_and_a_refresh_command():
    found = C.manifests()
    assert {m.data["kind"] for m in found} == {"conda", "pip", "container"}
    for m in found:
        assert m.data["sources"] and m.data["refresh"]
        assert m.listing_seen or len(m.data["listing"]["why"]) > 20


def test_open_ce_offers_its_release_for_python_3_10_and_3_11_only():
    answer = C.channel_has(OPENCE, "pytorch-base", "2.1.2", "3.11", "linux-ppc64le")
    assert answer and answer.basis == "release-config" and not answer.listing_seen
    assert answer.entries[0]["cuda"] == ["11.8", "12.2"]
    old = C.channel_has(OPENCE, "pytorch-base", "2.1.2", "3.9", "ppc64le")
    assert not old and "Python 3.10, 3.11 only" in old.why
    assert not C.channel_has(OPENCE, "pytorch-base", "2.1.2", "3.11", "aarch64")
    newer = C.channel_has(OPENCE, "pytorch-base", "2.3.0", "3.11", "ppc64le")
    assert not newer and "recorded: 2.1.2" in newer.why


def test_wheel_indexes_and_images_by_platform_spelling():
    assert C.channel_has(CU124, "torch", "2.4.0", "3.9", "manylinux_2_28_aarch64")
    assert not C.channel_has(CU124, "torch", "2.4.0", "3.9", "x86_64")
    rocm = C.channel_has(
        "https://download.pytorch.org/whl/rocm6.3/", "torch", "2.9.1", "3.11", "x86_64"
    )
    assert rocm and rocm.entries[0]["rocm"] == ["6.3"]
    image = "nvcr.io/nvidia/pytorch:24.09-py3"
    assert C.channel_has(image, "torch", "2.5.0a0+b465a5843b", "3.10", "linux/arm64")
    assert not C.channel_has(image, "torch", "2.3.0a0+40ec155e58", "3.10", "aarch64")
    assert not C.channel_has("https://example.org/simple", "torch", "2.4.0", "3.9", "aarch64")


def test_local_labels_match_as_pip_matches_them(tmp_path):
    assert C._version_matches("2.9.1+rocm6.3", "2.9.1")
    assert not C._version_matches("2.9.1", "2.9.2")
    assert C.arch_of("linux-64") == "x86_64" and C.arch_of("linux/arm64") == "aarch64"
    with pytest.raises(ValueError):
        C.arch_of("win-64")


def _stack_queries():
    """(stack key, channel, package, version, python, arch) for stacks CI cannot install from."""
    for site in all_sites():
        for stack in site.stacks.values():
            arch = site.node_types[stack.raw["node_types"][0]].arch
            how = stack.install
            if stack.route == "conda":  # what the command asks the channel for
                for package in how["packages"]:
                    fw = next(f for f, names in CONDA_NAMES.items() if package in names)
                    for channel in how["channels"]:
                        yield stack.key, channel, package, stack.frameworks[fw], stack.python, arch
                continue
            for fw, version in stack.frameworks.items():
                if stack.route == "pip" and "index" in how:
                    yield stack.key, how["index"], fw, version, stack.python, arch
                elif stack.route == "container":
                    yield stack.key, how["image"], fw, version, stack.python, arch


@pytest.mark.parametrize("query", list(_stack_queries()), ids=lambda q: f"{q[0]}:{q[2]}")
def test_every_stack_on_an_unreachable_channel_is_recorded(query):
    key, channel, package, version, python, arch = query
    answer = C.channel_has(channel, package, version, python, arch)
    assert answer, f"{key}: {answer.why}"


def _bad(tmp_path: Path, edit) -> list[str]:
    data = yaml.safe_load((C.CHANNELS_DIR / "osu-open-ce-current.yaml").read_text())
    edit(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(CheckError) as exc:
        C.load_manifest(path)
    for f in exc.value.findings:
        assert f.line > 0 and str(path.name) in str(f)
    return [f.rule for f in exc.value.findings]


def test_an_unseen_listing_must_say_why(tmp_path):
    assert _bad(tmp_path, lambda d: d["listing"].pop("why")) == ["channel-schema:required"]


def test_an_entry_cannot_claim_a_listing_nobody_read(tmp_path):
    def claim(d):
        d["packages"][0]["basis"] = "listing"

    assert _bad(tmp_path, claim) == ["channel-basis"]


def test_image_entries_need_a_tag_and_others_none(tmp_path):
    def tag(d):
        d["packages"][0]["tag"] = "1.11"

    assert _bad(tmp_path, tag) == ["channel-tag"]


def test_a_bad_platform_is_refused_with_its_line(tmp_path):
    def windows(d):
        d["packages"][0]["platforms"] = ["win-64"]

    assert _bad(tmp_path, windows) == ["channel-schema:pattern"]
