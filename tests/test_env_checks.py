"""Environment settings on a page: names the tool reads, values it takes, paths on the site's
file systems, and a block of settings that bash runs."""

from __future__ import annotations

import pytest

from clusterkit.commands import env as env_checks
from clusterkit.commands.shell import check_shell_text
from clusterkit.sites.profiles import load_site


def _found(text: str, site=None) -> list[tuple[int, str]]:
    _how, findings, _detail = check_shell_text(text + "\n", "page.md", 4, site)
    return [(f.line, f.rule) for f in findings if f.level == "error"]


@pytest.mark.parametrize(
    "text",
    [
        "export NCCL_DEBUG=INFO\nexport NCCL_DEBUG_SUBSYS=INIT,NET",
        "export NCCL_DEBUG=info NCCL_DEBUG_SUBSYS=^INIT",
        "export NCCL_SOCKET_IFNAME=hsn",
    ],
)
def test_settings_nccl_reads_pass(text):
    assert _found(text) == []


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("export NCCL_DEBUG=INFOO", [(4, "env-value")]),
        ("export NCCL_DEBUG_SUBSYS=INIT,NETWORK", [(4, "env-value")]),
        ("echo start\nexport NCCL_DEBUGG=INFO", [(5, "env-unknown")]),
        ("export NCCL_DEBUG = INFO", [(4, "env-run")]),
    ],
)
def test_a_wrong_setting_fails_with_line_and_rule(text, found):
    assert _found(text) == found


def test_a_cache_directory_must_be_on_the_site_file_systems():
    bede = load_site("bede")
    ok = "export APPTAINER_CACHEDIR=/nobackup/projects/bdXXXYY/$USER/apptainer-cache"
    assert _found(ok, bede) == []
    typo = "export APPTAINER_CACHEDIR=/nobackup/project/bdXXXYY/$USER/apptainer-cache"
    assert _found(typo, bede) == [(4, "path-unknown")]
    assert _found("export APPTAINER_CACHE=/nobackup/projects/bdXXXYY", bede) == [(4, "env-unknown")]


def test_an_unrecorded_variable_alone_is_not_a_check():
    assert _found("export LD_LIBRARY_PATH=/opt/lib") == [(4, "block-untested")]


def test_every_tool_gives_its_sources():
    for tool in env_checks.tools():
        assert tool["variables"] and tool["prefix"].endswith("_")
        assert tool["sources"] and all(
            {"title", "url", "retrieved"} <= set(s) for s in tool["sources"]
        )
