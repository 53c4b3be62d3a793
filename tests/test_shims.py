"""The shims' entry point: each tool is handled by the module clusterkit.runs.entry names for it,
which a shim imports alone (every emulated command is a process of its own)."""

from __future__ import annotations

import subprocess
import sys

from clusterkit.runs import (
    entry,
    run_launchers,
    run_lsf,
    run_slurm,
    run_storage,
    run_tools,
    shimdir,
)


def test_each_tool_is_found_in_the_module_entry_names():
    handlers = {}
    for module in (run_slurm, run_lsf, run_launchers, run_tools, run_storage):
        for tool, run in module.HANDLERS.items():
            assert entry.MODULES.get(tool) == module.__name__.rsplit(".", 1)[1], tool
            handlers[tool] = run
    assert set(entry.MODULES) == set(handlers) == set(shimdir.SHIMS)
    assert all(entry.handler(tool) is run for tool, run in handlers.items())
    assert entry.handler("qsub") is None


def test_a_shim_imports_only_its_own_handlers(tmp_path):
    code = (
        "import sys; from clusterkit.runs import entry; entry.handler('module'); "
        "print(sorted(m for m in sys.modules if m.startswith('clusterkit.runs.run_')))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "['clusterkit.runs.run_tools']"
