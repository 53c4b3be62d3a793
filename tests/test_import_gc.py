"""clusterkit/runs/import_gc.py: the frameworks' first imports with the garbage collector
paused, in the processes of the tests session, and nothing else changed."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.runs import import_gc

ROOT = Path(__file__).resolve().parent.parent
# A stand-in named like a framework, on PYTHONPATH ahead of the real one: it says whether the
# collector ran while it and the submodule it imports (as a framework's package does) were
# imported. The program then says whether it runs afterwards.
FAKE = "import gc\nprint('importing, collector on:', gc.isenabled())\nfrom . import sub\n"
PROGRAM = (
    "import gc, sys\n"
    "{before}"
    "import webdataset\n"
    "print('after, collector on:', gc.isenabled())\n"
    "print('hooked:', any(type(f).__name__ == 'PausingFinder' for f in sys.meta_path))\n"
)


def run_with_hook(
    tmp_path: Path, value: str | None, before: str = "", checkout: bool = True
) -> list[str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    import_gc.install_hook(site)
    fake = tmp_path / "fake" / "webdataset"
    fake.mkdir(parents=True, exist_ok=True)
    (fake / "__init__.py").write_text(FAKE)
    (fake / "sub.py").write_text("import gc\nprint('submodule, collector on:', gc.isenabled())\n")
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM.format(before=before))
    env = {k: v for k, v in os.environ.items() if k != import_gc.ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "fake"), *([str(ROOT)] * checkout)])
    if value is not None:
        env[import_gc.ENV] = value
    # site.addsitedir reads the .pth line as the interpreter does at start-up, then the program;
    # without the checkout, -S leaves out the site-packages where clusterkit is installed
    wrapper = (
        f"import runpy, site; site.addsitedir({str(site)!r}); "
        f"runpy.run_path({str(program)!r}, run_name='__main__')"
    )
    flags = [] if checkout else ["-S"]
    r = subprocess.run(
        [sys.executable, *flags, "-c", wrapper],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and not r.stderr, r.stderr
    return r.stdout.splitlines()


def test_a_framework_is_imported_with_the_collector_off_and_it_is_on_again_after(tmp_path):
    assert "webdataset" in import_gc.FRAMEWORKS
    assert run_with_hook(tmp_path, "paused") == [
        "importing, collector on: False",
        "submodule, collector on: False",
        "after, collector on: True",
        "hooked: True",
    ]


@pytest.mark.parametrize("value", [None, "", "on"])
def test_without_the_setting_nothing_changes(tmp_path, value):
    assert run_with_hook(tmp_path, value) == [
        "importing, collector on: True",
        "submodule, collector on: True",
        "after, collector on: True",
        "hooked: False",
    ]


def test_where_clusterkit_cannot_be_imported_the_line_does_nothing(tmp_path):
    """As in a process of a software stack's environment (nox -s stacks) that a test starts
    without the checkout on its path: no error at start-up, nothing paused."""
    assert run_with_hook(tmp_path, "paused", checkout=False) == [
        "importing, collector on: True",
        "submodule, collector on: True",
        "after, collector on: True",
        "hooked: False",
    ]


def test_a_program_that_turned_the_collector_off_keeps_it_off(tmp_path):
    out = run_with_hook(tmp_path, "paused", before="gc.disable()\n")
    assert out[:3] == [
        "importing, collector on: False",
        "submodule, collector on: False",
        "after, collector on: False",
    ]


def test_an_import_that_fails_turns_the_collector_back_on():
    seen = []

    def failing():
        seen.append(gc.isenabled())
        raise ImportError("no torch here")

    assert gc.isenabled()
    with pytest.raises(ImportError):
        import_gc.paused(failing)
    assert seen == [False] and gc.isenabled()


def test_only_a_framework_not_imported_yet_goes_through_the_finder(monkeypatch):
    finder = import_gc.PausingFinder()
    assert finder.find_spec("json") is None  # not a framework
    monkeypatch.setitem(sys.modules, "torch", sys)
    assert finder.find_spec("torch") is None  # imported already
    monkeypatch.delitem(sys.modules, "webdataset", raising=False)
    spec = finder.find_spec("webdataset")  # installed here: its own spec, with the pause
    assert spec is not None and spec.name == "webdataset" and spec.origin.endswith(".py")
