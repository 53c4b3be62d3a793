"""Entry point of the shims: ``sbatch``, ``srun``, ``sbcast``, ``bsub``, ``jsrun``, ``torchrun``,
``conda``, ...

Each shim stands in for a tool that cannot run on a machine without the cluster: it parses its
arguments as the real tool does, judges them against the site profile named by
``CLUSTERKIT_SITE``, and then either prints a plan (dry run) or runs the job locally, scaled
down. Every shim says on stderr that it is an emulation. :mod:`clusterkit.runs.shimdir`
writes the executables, each a call of :func:`main` with its own name.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

from clusterkit.sites.errors import CheckError

# The module of clusterkit.runs that handles each tool (its HANDLERS). A shim imports only its
# own: every emulated command is a process of its own, and importing every handler (bashlex's
# parser tables among them) cost each one about half a second.
MODULES = {
    **dict.fromkeys(("salloc", "sbatch", "scontrol", "srun"), "run_slurm"),
    **dict.fromkeys(("bsub", "jsrun"), "run_lsf"),
    **dict.fromkeys(
        (
            "accelerate",
            "apptainer",
            "bede-ddlrun",
            "bede-mpirun",
            "ddlrun",
            "shifter",
            "singularity",
            "torchrun",
        ),
        "run_launchers",
    ),
    **dict.fromkeys(("conda", "ml", "module", "nvidia-smi"), "run_tools"),
    "sbcast": "run_storage",
}


def handler(tool: str):
    """The function that emulates ``tool``, or None where there is none."""
    if tool not in MODULES:
        return None
    module = importlib.import_module(f"clusterkit.runs.{MODULES[tool]}")
    return module.HANDLERS.get(tool)


def main(tool: str | None = None) -> None:
    tool = tool or Path(sys.argv[0]).name
    run = handler(tool)
    if run is None:
        print(f"clusterkit: no emulator for {tool!r}", file=sys.stderr)
        sys.exit(2)
    try:
        sys.exit(run(sys.argv[1:]))
    except CheckError as exc:
        print(str(exc), file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        # the reader stopped early (``scontrol show hostnames ... | head -n 1``): a real tool
        # writes its few lines in one go and never notices; under PYTHONUNBUFFERED a shim
        # writes them one by one and would fail a job run with ``set -o pipefail``
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
