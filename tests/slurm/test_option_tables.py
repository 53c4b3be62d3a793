"""The emulator's sbatch, srun and salloc options against the Slurm installed here.

``clusterkit/emulate/slurm_option_table.py`` is generated from Slurm's sources for each release
(``ci/slurm/option_table.py``). Here the rows of the installed release are compared with the
installed tools' manual pages: an option the manual documents that the emulator lacks, or one
the emulator gives this release that the manual does not document (other than the aliases and
internal options the table lists as undocumented), fails, and so does a short letter that
differs. The version compared is printed, so that the CI log records it.
"""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from clusterkit.emulate import slurm_options
from clusterkit.emulate.slurm_option_table import UNDOCUMENTED

TOOLS = ("sbatch", "srun", "salloc")


def installed_release(tmp_path: Path) -> str:
    """``22.05`` from ``srun --version`` (run with a minimal configuration, so that no
    controller is needed)."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nSlurmctldHost=localhost\nNodeName=n1 CPUs=1\n"
                    "PartitionName=p Nodes=n1\n")  # fmt: skip
    out = subprocess.run(
        ["srun", "--version"], capture_output=True, text=True, env={"SLURM_CONF": str(conf),
                                                                     "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    m = re.search(r"(\d+)\.(\d+)\.\d+", out.stdout + out.stderr)
    assert m, f"srun --version said: {out.stdout}{out.stderr}"
    print(f"installed Slurm: {m[0]}")
    return f"{m[1]}.{m[2]}"


def manual(tool: str) -> str:
    where = subprocess.run(["man", "-w", tool], capture_output=True, text=True).stdout.strip()
    candidates = [Path(where)] if where else []
    candidates += [Path(f"/usr/share/man/man1/{tool}.1.gz"), Path(f"/usr/share/man/man1/{tool}.1")]
    for path in candidates:
        if path.is_file():
            raw = path.read_bytes()
            return (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode(errors="replace")
    pytest.fail(f"no manual page of {tool} is installed (slurm-client ships them; an image that "
                "leaves out /usr/share/man cannot run this test)")  # fmt: skip


def documented(man: str) -> dict[str, str | None]:
    """Long option -> its short letter, for every entry of the manual (``.TP`` then the
    option's line)."""
    out: dict[str, str | None] = {}
    lines = man.split("\n")
    for i, line in enumerate(lines[:-1]):
        if not line.startswith(".TP"):
            continue
        plain = re.sub(r"\\f[BIRP]", "", lines[i + 1]).replace("\\-", "-")
        longs = re.findall(r"(?:^|[\s,])--([A-Za-z][\w-]*)", plain)
        short = re.match(r"^-([A-Za-z]),", plain)
        for name in longs:
            out[name] = short[1] if short else None
    return out


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> str:
    if shutil.which("srun") is None:
        pytest.fail("srun is not installed (apt-get install slurm-client)")
    return installed_release(tmp_path_factory.mktemp("conf"))


@pytest.mark.parametrize("tool", TOOLS)
def test_options_match_the_installed_manual(tool, release):
    man = documented(manual(tool))
    ours = {spec.long[2:]: spec for spec in slurm_options.specs(tool, release) if spec.releases}
    # an option the table marks undocumented (in some release) may be missing from the manual
    lacking = sorted(set(man) - set(ours))
    extra = sorted(n for n in set(ours) - set(man) if f"{tool} --{n}" not in UNDOCUMENTED)
    assert not lacking, f"Slurm {release} {tool} documents options the emulator lacks: {lacking}"
    assert not extra, (
        f"the emulator gives {tool} options Slurm {release} does not document: {extra}"
    )
    letters = {
        name: (man[name], (ours[name].short or "-")[1:] or None)
        for name in man
        if man[name] and man[name] != ((ours[name].short or "-")[1:] or None)
    }
    assert not letters, f"short letters differ (manual, emulator): {letters}"
