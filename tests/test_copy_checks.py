"""tar and rsync on a page: their options through the real tools between stand-in folders, the
cluster-side paths against the profile, and a copy started by srun checked the same way."""

from __future__ import annotations

import pytest

from clusterkit.commands.shell import check_shell_text
from clusterkit.sites.profiles import load_site

REMOTE = '"$USER@LOGIN-NODE:/nobackup/projects/bdXXXYY/data/"'


def _found(text: str) -> list[tuple[int, str]]:
    _how, findings, _detail = check_shell_text(text + "\n", "page.md", 12, load_site("bede"))
    return [(f.line, f.rule) for f in findings if f.level == "error"]


@pytest.mark.parametrize(
    "text",
    [
        "tar -C /data/imagenet -cf imagenet-train.tar train",
        f"rsync --partial --progress imagenet-train.tar {REMOTE}",
        "rsync -a src/ dst/",
        "srun --pty bash",  # a shell inside salloc's allocation: nothing in it to check
        "stage=${TMPDIR:-/tmp}/$SLURM_JOB_ID\n"
        'srun --ntasks-per-node=1 mkdir -p "$stage"\n'
        'srun --ntasks-per-node=1 tar -C "$stage" -xf /nobackup/projects/bdXXXYY/data/x.tar',
    ],
)
def test_the_copies_pass(text):
    assert _found(text) == []


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("tar -C /data/imagenet --create --fille=x.tar train", [(12, "tar-option")]),
        (f"echo copy\nrsync --partiall imagenet-train.tar {REMOTE}", [(13, "rsync-option")]),
        (f"rsync --partial x.tar {REMOTE.replace('projects', 'project')}", [(12, "path-unknown")]),
        ('srun --ntasks-per-node=1 tar -C "$stage" -xqf x.tar', [(12, "tar-option")]),
        ("srun -N 1 tar -xf /nobackup/project/bdXXXYY/x.tar", [(12, "path-unknown")]),
        ("srun --ntasks-per-node=1 mkdir -p /nobackup/project/x", [(12, "path-unknown")]),
    ],
)
def test_a_wrong_option_or_path_fails_at_its_line(text, found):
    assert _found(text) == found
