"""Entry point of the shims: ``sbatch``, ``srun``, ``sbcast``, ``bsub``, ``jsrun``, ``torchrun``,
``conda``, ...

Each shim stands in for a tool that cannot run on a machine without the cluster: it parses its
arguments as the real tool does, judges them against the site profile named by
``CLUSTERKIT_SITE``, and then either prints a plan (dry run) or runs the job locally, scaled
down. Every shim says on stderr that it is an emulation. :mod:`clusterkit.runs.shimdir`
writes the executables, each a call of :func:`main` with its own name.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from clusterkit.runs import run_launchers, run_lsf, run_slurm, run_storage, run_tools
from clusterkit.sites.errors import CheckError

HANDLERS = {
    **run_slurm.HANDLERS,
    **run_lsf.HANDLERS,
    **run_launchers.HANDLERS,
    **run_tools.HANDLERS,
    **run_storage.HANDLERS,
}


def main(tool: str | None = None) -> None:
    tool = tool or Path(sys.argv[0]).name
    if tool not in HANDLERS:
        print(f"clusterkit: no emulator for {tool!r}", file=sys.stderr)
        sys.exit(2)
    try:
        sys.exit(HANDLERS[tool](sys.argv[1:]))
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
