"""Shims of the tools a job script uses that do not launch anything: ``conda`` (no conda is
installed here: activation keeps the current environment), ``nvidia-smi`` (lists the GPUs of
the allocation on NVIDIA nodes) and ``module``/``ml`` where Lmod is not installed (the same
verdicts as the modulefiles generated from the profile).
"""

from __future__ import annotations

import json
import os
import shlex
import sys

from clusterkit.emulate.modules import check_module_command
from clusterkit.runs.runtime import ALLOC_VAR, current_site, note
from clusterkit.runs.shimdir import CONDA_HOOK
from clusterkit.sites.profiles import load_site


# --------------------------------------------------------------------------- conda
def conda(argv: list[str]) -> int:
    if argv[:2] == ["shell.bash", "hook"] or argv[:2] == ["shell.posix", "hook"]:
        print(CONDA_HOOK)
        return 0
    note("conda", f"conda {shlex.join(argv)}: nothing is installed or changed here")
    return 0


# --------------------------------------------------------------------------- nvidia-smi
def nvidia_smi(argv: list[str]) -> int:
    """Lists the allocation's GPUs on NVIDIA nodes; elsewhere behaves as a missing command."""
    alloc = json.loads(os.environ.get(ALLOC_VAR, "null") or "null")
    if not alloc:
        print(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
            file=sys.stderr,
        )
        return 9
    site = load_site(alloc["site"])
    node = site.partitions[alloc["plan"]["partition"]].node_type
    if node.gpu_vendor != "nvidia":
        print("bash: nvidia-smi: command not found", file=sys.stderr)
        return 127
    n = alloc["plan"]["gpus_per_node"]
    note("nvidia-smi", f"{n} emulated {node.gpu_model} GPU(s) of {site.title}")
    for i in range(n):
        print(f"GPU {i}: {node.gpu_model} (UUID: GPU-emulated-{i})")
    return 0


# --------------------------------------------------------------------------- module (fallback)
def module(argv: list[str], tool: str = "module") -> int:
    """Used only where Lmod is not installed: the same verdicts as the generated modulefiles."""
    site = current_site(tool)
    findings = check_module_command("<module>", 0, tool, argv, site)
    for f in findings:
        print(str(f), file=sys.stderr)
    return 1 if any(f.level == "error" for f in findings) else 0


HANDLERS = {
    "conda": conda,
    "nvidia-smi": nvidia_smi,
    "module": module,
    "ml": lambda argv: module(argv, "ml"),
}
