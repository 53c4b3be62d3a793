"""conda commands on pages: options, environments made and activated, pinned packages judged
against the recorded channel manifest."""

from __future__ import annotations

from clusterkit.commands import conda as conda_checks
from clusterkit.sites.profiles import ROOT, load_site

OPEN_CE = "https://ftp.osuosl.org/pub/open-ce/current/"
TUTORIAL = "docs/tutorials/first-pytorch-job-bede.md"
BEDE = load_site("bede")


def _check(command: str, snippet: str = "", page: str = "p.md", line: int = 7):
    return conda_checks.check(page, line, command.split(), BEDE, snippet or command)


def test_an_unpinned_package_fails_with_its_line():
    (f,) = _check(f"conda create -y -n t -c {OPEN_CE} python=3.11 pytorch")
    assert (f.line, f.rule) == (7, "conda-unpinned") and "pytorch" in f.message


def test_pins_are_judged_against_the_open_ce_manifest():
    ok = f"conda create -y -n t -c {OPEN_CE} python=3.11 pytorch=2.1 torchvision=0.16"
    assert _check(ok) == []
    (f,) = _check(f"conda create -y -n t -c {OPEN_CE} python=3.11 pytorch=2.5")
    assert f.rule == "conda-version" and "2.1" in f.message
    (f,) = _check(f"conda create -y -n t -c {OPEN_CE} python=3.12 pytorch=2.1")
    assert f.rule == "conda-version" and "Python" in f.message


def test_a_channel_prepended_by_conda_config_is_the_one_judged():
    snippet = f"conda config --prepend channels {OPEN_CE}\nconda create -y -n t tensorflow=2.9\n"
    (f,) = _check("conda create -y -n t tensorflow=2.9", snippet)
    assert f.rule == "conda-version"


def test_open_ce_has_no_aarch64_packages():
    page = "docs/howto/environment.md"
    text = (ROOT / page).read_text().splitlines()
    # the Grace-Hopper environment of the Bede tab: its block names aarch64 above it
    line = next(i for i, t in enumerate(text, 1) if "python=3.12" in t)
    (f,) = _check(f"conda create -y -n t -c {OPEN_CE} pytorch=2.1", page=page, line=line)
    assert f.rule == "conda-platform" and "aarch64" in f.message


def test_a_channel_without_a_manifest_is_unresolvable_here_not_passed():
    (f,) = _check("conda create -y -p ~/envs/x python=3.11")
    assert (f.rule, f.level) == ("install-unresolvable", "warning") and "conda-forge" in f.message


def test_activation_needs_an_environment_the_page_or_a_linked_page_makes():
    assert _check("conda activate pytorch", page=TUTORIAL) == []  # environment.md makes it
    (f,) = _check("conda activate pytroch", page=TUTORIAL)
    assert f.rule == "conda-env-unknown" and "pytorch" in f.message
    snippet = "conda create -y --prefix ~/envs/r python=3.11\nconda activate ~/envs/r/\n"
    assert _check("conda activate ~/envs/r/", snippet) == []


def test_created_in_reads_names_prefixes_and_clones():
    text = (
        "$ conda create --name a python=3.11\n"
        '"$PWD/miniforge3/bin/conda" create --yes --prefix "$PWD/py" python=3.12\n'
        'conda create --name cloned --clone "$CONDA_DEFAULT_ENV"\n'
    )
    assert conda_checks.created_in(text) == {"a", "$PWD/py", "cloned"}


def test_conda_options_and_settings_are_conda_s():
    (f,) = _check("conda create --nmae t python=3.11")
    assert f.rule == "conda-option" and "--nmae" in f.message
    (f,) = _check("conda config --set channel_priority strictest")
    assert f.rule == "conda-config" and "strict" in f.message
    (f,) = _check("conda create -y python=3.11")
    assert f.rule == "conda-env-name"
