"""``python -m clusterkit check-job`` on input that is not a well-formed job script: a finding
naming file, line and rule (or a clean verdict), never a traceback; exit status 1 when the
script would be refused, 2 when there is no script to read."""

from __future__ import annotations

import pytest

from clusterkit.cli import main


def _check_job(capsys, path, site: str = "bede", *extra: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(["check-job", "--site", site, *extra, str(path)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return exc.value.code, out, err


@pytest.mark.parametrize(
    ("name", "content", "status", "expected"),
    [
        (  # the IndexError of the environment builder, once
            "nodes0.sbatch",
            b"#!/bin/bash\n#SBATCH -A bdXXXYY\n#SBATCH --nodes=0\nsrun hostname\n",
            1,
            "nodes0.sbatch:3: error: [node-count] sbatch: error: Batch job submission failed: Node "
            "count specification invalid",
        ),
        (
            "latin1.sbatch",
            b"#!/bin/bash\n#SBATCH -A bdXXXYY\necho caf\xe9\n",
            0,
            "latin1.sbatch:3: warning: [script-encoding] bytes that are not UTF-8 (e9)",
        ),
        (
            "empty.sbatch",
            b"",
            1,
            "empty.sbatch: error: [script-empty] sbatch: error: Batch script is ",
        ),
        (
            "blank.sbatch",
            b"  \n\t\n",
            1,
            "blank.sbatch:1: error: [script-empty] sbatch: error: Batch script contains only "
            "whitespace!",
        ),
        (  # sbatch's first refusal of binary junk: no "#!" on the first line
            "junk.bin",
            b"\x7fELF\x02\x01\x01\x00\x00\x00\xff\xfe\n\x00\x10",
            1,
            "junk.bin:1: error: [script-shebang] sbatch: error: This does not look like a batch "
            "script.",
        ),
        (
            "nul.sbatch",
            b"#!/bin/bash\n#SBATCH -A bdXXXYY\necho \x00\n",
            1,
            "nul.sbatch:3: error: [script-null] sbatch: error: The Slurm controller does not allow "
            "scripts that contain a NULL character",
        ),
    ],
)
def test_odd_files_give_findings(capsys, tmp_path, monkeypatch, name, content, status, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_bytes(content)
    code, _out, err = _check_job(capsys, name)
    assert code == status, err
    assert expected in err


@pytest.mark.parametrize("site", ["bede", "summit"])
def test_no_script_to_read_is_exit_status_2(capsys, tmp_path, monkeypatch, site):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    code, _out, err = _check_job(capsys, "nosuch.sh", site)
    assert code == 2 and "nosuch.sh: error: [script-readable]" in err and "no such file" in err
    code, _out, err = _check_job(capsys, "adir", site)
    assert code == 2 and "adir: error: [script-readable]" in err and "a directory" in err


def test_plan_says_how_many_ranks_it_writes_out(capsys, tmp_path, monkeypatch):
    import json

    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.sbatch").write_text(
        "#!/bin/bash\n#SBATCH -A bdXXXYY\n#SBATCH -N 32\n#SBATCH --ntasks-per-node=4\n"
        "#SBATCH --gres=gpu:4\nsrun hostname\n"
    )
    code, out, _err = _check_job(capsys, "job.sbatch", "bede", "--plan", "--ranks", "5")
    step = json.loads(out)["steps"][0]
    assert code == 0 and step["ntasks"] == 128 and len(step["ranks"]) == 5
    assert step["ranks_note"].startswith("5 of 128 ranks written out")


def test_formats_json_and_github_carry_the_same_findings(capsys, tmp_path, monkeypatch):
    import json

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.sbatch").write_text(
        "#!/bin/bash\n#SBATCH -A bdXXXYY\n#SBATCH -p nosuch\n#SBATCH --time=10\nsrun hostname\n"
    )
    (tmp_path / "good.sbatch").write_text(
        "#!/bin/bash\n#SBATCH -A bdXXXYY\n#SBATCH -p gpu\n#SBATCH --gres=gpu:1\n"
        "#SBATCH --time=10\nsrun hostname\n"
    )

    def check(*extra):
        return _check_job(capsys, "good.sbatch", "bede", *extra, "bad.sbatch")

    code, _out, err = check()
    assert code == 1 and "bad.sbatch:3: error: [partition-exists]" in err

    code, out, err = check("--format", "json")
    record = json.loads(out)
    assert code == 1 and record["status"] == 1 and err == ""
    bad, good = record["scripts"]
    assert (bad["file"], bad["status"], good["file"], good["status"]) == (
        "bad.sbatch", 1, "good.sbatch", 0
    )  # fmt: skip
    assert [(f["line"], f["level"], f["rule"]) for f in bad["findings"]] == [
        (3, "error", "partition-exists")
    ]
    assert "nosuch" in bad["findings"][0]["message"] and good["findings"] == []

    code, out, err = check("--format", "github")
    (line,) = out.splitlines()
    assert code == 1 and err == ""
    assert line.startswith("::error file=bad.sbatch,line=3,title=check-job [partition-exists]::")


def test_github_annotations_escape_what_the_workflow_command_reads():
    from clusterkit.cli import github_annotation
    from clusterkit.sites.errors import Finding

    f = Finding("a,b:c.sh", 0, "r", "100% sure\nsecond line", "warning")
    assert github_annotation(f) == (
        "::warning file=a%2Cb%3Ac.sh,title=check-job [r]::100%25 sure%0Asecond line"
    )
