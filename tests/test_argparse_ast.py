"""The trainers' options read from their source (clusterkit.grammars.argparse_ast) are the options
their parsers take, so check-job needs neither PyTorch nor TensorFlow to judge them."""

from __future__ import annotations

import importlib.util
import re
import textwrap
from pathlib import Path

import pytest

from clusterkit.emulate.checkjob import check_job_file
from clusterkit.grammars import argparse_ast
from clusterkit.grammars.trainer_help import trainer_files
from clusterkit.pages.pagetest import horovod_installed
from clusterkit.sites import contracts
from clusterkit.sites.profiles import ROOT, load_site

PROGRAMS = sorted(
    p for p in (ROOT / "examples").rglob("*.py") if "add_argument(" in p.read_text("utf-8")
)
FIELDS = ("flags", "dest", "takes_value", "nargs", "type", "required")


def _by_flags(options: list[dict]) -> dict[tuple, dict]:
    return {tuple(o["flags"]) or (o["dest"],): o for o in options}


def _needs_horovod(path: Path):
    """The Horovod twins' running parsers need Horovod, which nox -s horovod builds."""
    text = path.read_text("utf-8")
    if re.search(r"^import horovod|^from horovod", text, re.M) and not horovod_installed():
        return [pytest.mark.skip(reason="Horovod is not installed (nox -s horovod builds it)")]
    return []


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=_needs_horovod(p), id=str(p.relative_to(ROOT))) for p in PROGRAMS],
)
def test_the_source_gives_the_options_the_running_parser_takes(path):
    framework = next((f for f in ("torch", "tensorflow") if f"import {f}" in path.read_text()), "")
    if framework and importlib.util.find_spec(framework) is None:
        pytest.skip(f"the running parser of {path.name} needs {framework}, not installed here")
    real = _by_flags(contracts.introspect(path)["options"])
    read = _by_flags(argparse_ast.read_options(path)["options"])
    assert set(read) == set(real)
    for flags, opt in read.items():
        assert {f: opt[f] for f in FIELDS} == {f: real[flags][f] for f in FIELDS}, flags
        if opt["choices"] is not None:
            assert opt["choices"] == real[flags]["choices"], flags
        else:  # left open only where the parser computes its choices while it runs: the models
            assert real[flags]["choices"] is None or flags == ("--arch",), flags


def test_every_trainer_is_read_from_its_source():
    assert trainer_files()
    for path in trainer_files():
        data = argparse_ast.read_options(path)
        assert data is not None, f"{path}: its parser can no longer be read from the source"
        flags = {f for o in data["options"] for f in o["flags"]}
        assert "--tiny" in flags and flags & {"--batch-size", "--global-batch-size"}, path


def test_forms_the_reader_follows_and_those_it_leaves_to_the_running_parser(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""\
            import argparse
            MODES = ("fast", "exact")
            p = argparse.ArgumentParser(allow_abbrev=False)
            p.add_argument("data", nargs="?")
            p.add_argument("--mode", choices=MODES, default="fast")
            p.add_argument("--model", choices=sorted(registry()))
            p.add_argument("-v", "--verbose", action="count")
            p.add_argument("--amp", action=argparse.BooleanOptionalAction)
            p.add_argument("--lr", type=float, required=True, dest="learning_rate")
            """)
    )
    data = argparse_ast.read_options(script)
    opts = _by_flags(data["options"])
    assert data["allow_abbrev"] is False
    assert opts[("--mode",)]["choices"] == ["fast", "exact"]
    assert opts[("--model",)]["choices"] is None
    assert opts[("-v", "--verbose")]["takes_value"] is False
    assert opts[("--amp", "--no-amp")]["takes_value"] is False
    assert opts[("--lr",)]["dest"] == "learning_rate" and opts[("--lr",)]["type"] == "float"
    contract = contracts.Contract("train.py", data["options"], str(script), False)
    good = ["--lr", "1", "--no-amp", "--model", "x"]
    assert contracts.check_invocation(script, 1, contract, good) == []
    (bad,) = contracts.check_invocation(script, 1, contract, ["--lr", "1", "--mode", "slow"])
    assert bad.rule == "script-flag-value"

    for body in (
        "p = argparse.ArgumentParser()\nsub = p.add_subparsers()\n",
        "p = argparse.ArgumentParser()\np.add_argument(*FLAGS)\n",
        "p = argparse.ArgumentParser()\np.add_argument('--x', action=MyAction)\n",
        "print('no parser')\n",
        "def broken(:\n",
        # options added where this file does not show them
        "import common\np = argparse.ArgumentParser()\ncommon.add_arguments(p)\n",
        "p = argparse.ArgumentParser(parents=[base])\np.add_argument('--x')\n",
        "import common\np = argparse.ArgumentParser()\ng = p.add_argument_group('io')\n"
        "common.fill(g)\n",
    ):
        script.write_text("import argparse\n" + body)
        assert argparse_ast.read_options(script) is None, body
    # ... but a function of the same file, and a variable of another function sharing the
    # name of a parser's group, leave the source readable
    script.write_text(
        textwrap.dedent("""\
            import argparse, io
            def add_io(parser):
                parser.add_argument("--out")
            def build():
                p = argparse.ArgumentParser()
                data = p.add_argument_group("data")
                data.add_argument("--dir")
                add_io(p)
                return p
            def load(data):
                return io.BytesIO(data)
            """)
    )
    read = argparse_ast.read_options(script)
    assert read is not None and {o["flags"][0] for o in read["options"]} == {"--out", "--dir"}


def test_a_job_script_beside_its_own_training_program_is_judged_without_running_it(tmp_path):
    """A centre's job script that starts its own train.py: the flags come from that file's
    source; the program, which would import a framework, is not run."""
    (tmp_path / "train.py").write_text(
        "import torch\nimport argparse\np = argparse.ArgumentParser()\n"
        "p.add_argument('--epochs', type=int)\nargs = p.parse_args()\n"
    )
    job = tmp_path / "job.sbatch"
    job.write_text(
        "#!/bin/bash\n#SBATCH --account=abc123\n#SBATCH --nodes=1\n#SBATCH --time=00:10:00\n"
        "#SBATCH --gpus-per-node=8\nset -euo pipefail\n"
        "srun --ntasks=1 python train.py --epoch 3 --lr 0.1\n"
    )
    report = check_job_file(job, load_site("frontier"))
    flagged = [f for f in report.findings if f.rule.startswith("script-")]
    assert [f.rule for f in flagged] == ["script-flag-unknown"], report.findings
    assert "--lr" in flagged[0].message
