"""Container images against the recorded tag lists; apptainer/singularity command lines."""

from __future__ import annotations

from clusterkit.commands import containers as container_checks
from clusterkit.commands.shell import check_shell_text
from clusterkit.sites import container_images
from clusterkit.sites.profiles import load_site

NGC = "docker://nvcr.io/nvidia/pytorch:24.09-py3"
GH_PAGE = "docs/howto/containers.md"  # the Bede tab builds on a Grace-Hopper (arm64) node


def test_references_are_read_as_docker_reads_them():
    ref = container_images.parse_ref("docker://ubuntu")
    assert (ref.registry, ref.image, ref.tag) == ("docker.io", "library/ubuntu", "latest")
    ref = container_images.parse_ref("docker://rocm/pytorch:latest")
    assert (ref.registry, ref.image) == ("docker.io", "rocm/pytorch")
    ref = container_images.parse_ref("docker://localhost:5000/a/b:1@sha256:00")
    assert (ref.registry, ref.image, ref.tag) == ("localhost:5000", "a/b", "1")
    assert container_images.parse_ref("image.sif") is None


def test_a_tag_that_is_not_recorded_fails_with_its_line():
    (f,) = container_images.check_image(
        "p.md", 9, "docker://nvcr.io/nvidia/pytorch:24.13-py3", "aarch64"
    )
    assert (f.line, f.rule) == (9, "container-tag") and "24.09-py3" in f.message
    (f,) = container_images.check_image("p.md", 9, "docker://example.org/x/y:1", "x86_64")
    assert f.rule == "container-image"


def test_an_image_not_built_for_the_nodes_architecture_fails():
    f, _moving = container_images.check_image("p.md", 3, "docker://rocm/pytorch:latest", "aarch64")
    assert (f.rule, f.level) == ("container-platform", "error") and "aarch64" in f.message
    assert container_images.check_image("p.md", 3, NGC, "aarch64") == []


def test_a_moving_tag_passes_with_a_warning():
    (f,) = container_images.check_image("p.md", 3, "docker://rocm/pytorch:latest", "x86_64")
    assert (f.rule, f.level) == ("container-moving-tag", "warning")


def test_every_recorded_tag_names_its_source():
    for (registry, image), record in container_images.records().items():
        assert record["platforms"], f"{registry}/{image}"
        for tag in record["tags"]:
            src = tag["source"]
            assert src["url"].startswith("https://") and src["retrieved"], tag


def test_refresh_reports_recorded_tags_the_registry_dropped():
    def lister(registry, image):
        return ["24.03-py3"] if image == "nvidia/pytorch" else ["latest", "24.03-tf2-py3"]

    gone = container_images.stale_tags(lister)
    assert "nvcr.io/nvidia/pytorch:24.09-py3" in gone
    assert "nvcr.io/nvidia/pytorch:24.03-py3" not in gone


def test_a_build_is_judged_for_the_node_the_page_builds_on():
    bede = load_site("bede")
    text = "apptainer build rocm.sif docker://rocm/pytorch:latest\n"
    _how, found, _ = check_shell_text(text, GH_PAGE, 20, bede)
    assert [f.rule for f in found if f.level == "error"] == ["container-platform"]
    _how, found, _ = check_shell_text(
        f"apptainer build --writable x.sif {NGC}\n", GH_PAGE, 20, bede
    )
    assert [f.rule for f in found] == ["container-writable"]


def test_pip_inside_a_sandbox_is_read_by_pips_parser():
    bede = load_site("bede")
    text = (
        f"apptainer build --sandbox box/ {NGC}\n"
        "apptainer exec --writable box/ python -m pip install --install-option=x tensorboard\n"
    )
    _how, found, _ = check_shell_text(text, GH_PAGE, 53, bede)
    assert [f.rule for f in found] == ["pip-option"] and found[0].line == 54
    assert container_checks.built_from(text) == {"box": NGC}


def test_sudo_and_sh_dash_c_are_looked_through():
    summit = load_site("summit")
    text = "sudo apptainer exec --writable box/ sh -c 'echo x >> /f; fi'\n"
    _how, found, _ = check_shell_text(text, GH_PAGE, 85, summit)
    assert [f.rule for f in found] == ["bash-syntax"]
