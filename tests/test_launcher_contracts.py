"""The launchers' option tables of the emulator against the launchers' own parsers.

* ``accelerate launch``: accelerate's ``launch_command_parser()`` (accelerate is in the test
  environment), its sub-commands too;
* ``torchrun``: torch's ``torch.distributed.run.get_args_parser()``;
* ``deepspeed``: PyPI has DeepSpeed as sources only, and building it needs torch, so it is not
  installed; its released ``deepspeed/launcher/runner.py`` is read from the source archive
  (``pip download --no-deps``, into a cache folder outside the checkout) with the project's own
  reader of argparse sources, and the test is skipped, with the reason, where the package index
  cannot be reached.

A release that adds, renames or drops an option fails here, naming it.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from clusterkit.emulate import accelerate_launch, deepspeed_launch, torchrun
from clusterkit.grammars import argparse_ast

DEEPSPEED = "0.19.8"
RUNNER = f"deepspeed-{DEEPSPEED}/deepspeed/launcher/runner.py"
PIP_DOWNLOAD = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-build-isolation"]
PIP_DOWNLOAD += ["--disable-pip-version-check"]


def _kind(action: argparse.Action) -> str:
    if isinstance(action, argparse._AppendAction):
        return "append"
    return "flag" if action.nargs == 0 else "value"


def real_table(parser: argparse.ArgumentParser) -> dict[frozenset[str], str]:
    return {
        frozenset(a.option_strings): _kind(a)
        for a in parser._actions
        if a.option_strings and not isinstance(a, argparse._HelpAction)
    }


# --------------------------------------------------------------------------- accelerate
def test_accelerate_launch_table_is_accelerates_own():
    from accelerate.commands.launch import launch_command_parser

    real = real_table(launch_command_parser())
    kinds = {"flag": accelerate_launch.FLAGS, "value": accelerate_launch.VALUES}
    kinds["append"] = accelerate_launch.APPEND
    ours = {
        frozenset(accelerate_launch.option_strings(name)): kind
        for kind, names in kinds.items()
        for name in names
    }
    assert sorted(map(sorted, set(real) - set(ours))) == [], "options accelerate added"
    assert sorted(map(sorted, set(ours) - set(real))) == [], "options accelerate dropped"
    assert ours == real


def test_accelerate_launch_choices_are_accelerates_own():
    from accelerate.commands.launch import launch_command_parser

    real = {
        a.dest: tuple(str(c) for c in a.choices)
        for a in launch_command_parser()._actions
        if a.choices and a.option_strings and a.dest != "dynamo_backend"
    }
    assert real == accelerate_launch.CHOICES


def test_accelerate_subcommands_are_accelerates_own():
    """The sub-commands accelerate's CLI lists when given one it does not have."""
    r = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.accelerate_cli", "no-such-command"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    m = re.search(r"invalid choice: 'no-such-command' \(choose from (.*)\)", r.stderr)
    assert r.returncode == 2 and m, r.stderr
    assert set(re.findall(r"'([^']+)'", m[1])) == set(accelerate_launch.SUBCOMMANDS)


def test_accelerate_launch_reads_lines_as_accelerate_does():
    """The same split into launcher options and the script's own, hyphens or underscores."""
    from accelerate.commands.launch import launch_command_parser

    argv = ["--num-processes=8", "--num_machines", "2", "--multi_gpu", "--rdzv_backend", "c10d"]
    argv += ["-m", "train", "--lr", "1", "--num_processes", "3"]
    real = launch_command_parser().parse_args(argv)
    ns, script = accelerate_launch.parse(argv)
    assert script == [real.training_script, *real.training_script_args]
    assert (ns.num_processes, ns.num_machines, ns.rdzv_backend, ns.module) == (
        str(real.num_processes),
        str(real.num_machines),
        real.rdzv_backend,
        real.module,
    )


# --------------------------------------------------------------------------- torchrun
def test_torchrun_table_is_torchs_own():
    from torch.distributed.run import get_args_parser

    real = real_table(get_args_parser())
    ours = {frozenset(names): "value" if takes else "flag" for names, takes in torchrun.OPTIONS}
    assert ours == real


# --------------------------------------------------------------------------- deepspeed
@pytest.fixture(scope="module")
def runner_py(tmp_path_factory) -> Path:
    """deepspeed/launcher/runner.py of the release, from its source archive on PyPI (kept in a
    cache folder outside the checkout between runs)."""
    cache = Path(os.environ.get("CLUSTERKIT_CACHE", tempfile.gettempdir())) / "clusterkit-pypi"
    archive = cache / f"deepspeed-{DEEPSPEED}.tar.gz"
    if not archive.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(
            [*PIP_DOWNLOAD, "-d", str(cache), f"deepspeed=={DEEPSPEED}"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if r.returncode or not archive.is_file():
            last = (r.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"deepspeed {DEEPSPEED}'s sources could not be downloaded here: {last}")
    out = tmp_path_factory.mktemp("deepspeed") / "runner.py"
    with tarfile.open(archive) as tar:
        out.write_bytes(tar.extractfile(RUNNER).read())
    return out


def test_deepspeed_table_is_the_runners_own(runner_py):
    data = argparse_ast.read_options(runner_py)
    assert data is not None, "runner.py's parser can no longer be read from its source"
    real = {frozenset(o["flags"]): o["takes_value"] for o in data["options"] if o["flags"]}
    ours = {frozenset(names): takes for names, takes in deepspeed_launch.OPTIONS}
    assert sorted(map(sorted, set(real) - set(ours))) == [], "options deepspeed added"
    assert sorted(map(sorted, set(ours) - set(real))) == [], "options deepspeed dropped"
    assert ours == real
    assert data["allow_abbrev"] is True  # deepspeed --num_gpu 4 is --num_gpus 4
    choices = {o["dest"]: tuple(o["choices"]) for o in data["options"] if o["choices"]}
    assert choices == deepspeed_launch.CHOICES
    ints = {o["dest"] for o in data["options"] if o["type"] == "int"}
    assert ints == set(deepspeed_launch.INTEGERS)
    positional = [(o["dest"], o["nargs"]) for o in data["options"] if not o["flags"]]
    assert positional == [("user_script", None), ("user_args", "...")]
