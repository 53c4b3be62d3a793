"""reframe, git, nsys and rocprof command lines on pages: each read by its own tool's parser
or by a grammar from its documentation; the program a profiler starts is checked too."""

from __future__ import annotations

import shutil

import pytest

from clusterkit.commands.shell import check_shell_text


def _rules(text: str):
    _how, found, detail = check_shell_text(text, "p.md", 3, None)
    return [(f.line, f.rule) for f in found if f.level == "error"], detail


def test_reframe_command_lines_go_through_reframes_own_parser():
    ok = "reframe -C config/c.py -c reframe_checks/ --system bede:gpu -r --report-file r.json\n"
    assert _rules(ok) == ([], "reframe")
    assert _rules("reframe -C c.py --sytem bede -r\n")[0] == [(3, "reframe-option")]
    # one of ReFrame's actions (-r, --dry-run, -l, ...) is required
    assert _rules("reframe -C c.py --system bede\n")[0] == [(3, "reframe-option")]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_refuses_what_git_refuses_and_clones_name_a_kept_repository():
    text = "git switch -c r\ngit add x.yaml\ngit commit -m 'm'\ngit push -u origin r\n"
    assert _rules(text) == ([], "git, git, git, git")
    assert _rules("git push --set-upstrem origin r\n")[0] == [(3, "git-option")]
    assert _rules("git clone https://github.com/mlcommons/hpc.git h\n")[0] == []
    assert _rules("git clone https://github.com/example/other.git\n")[0] == [(3, "git-repo")]


def test_nsys_and_rocprof_options_then_the_program_they_start():
    nsys = "nsys profile --trace=cuda,nvtx --output='r-%q{SLURM_PROCID}' python -c 'pass'\n"
    assert _rules(nsys) == ([], "nsys")
    assert _rules("nsys profile --trace=cuda,nvtxx python -c 'pass'\n")[0] == [
        (3, "profiler-option")
    ]
    assert _rules("nsys profile -t cuda -o out python -c 'pass'\n") == ([], "nsys")
    assert _rules("rocprof --stats --hip-trace python -c 'pass'\n") == ([], "rocprof")
    assert _rules("rocprof --stat python -c 'pass'\n")[0] == [(3, "profiler-option")]
    trainer = "rocprof --stats python examples/pytorch/train_resnet.py --batch-sise 8\n"
    assert _rules(trainer)[0] == [(3, "script-flag-unknown")]
