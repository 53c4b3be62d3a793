"""A directory of shim executables to put first on PATH (tests, nox sessions, maintainers).

Each shim is a two-line Python script bound to the interpreter that has clusterkit installed,
so a job script that activates another environment still reaches the emulator.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

SHIMS = (
    "sbatch",
    "srun",
    "sbcast",
    "scontrol",
    "torchrun",
    "accelerate",
    "conda",
    "nvidia-smi",
    "module",
    "ml",
    "bsub",
    "jsrun",
    "ddlrun",
    "bede-ddlrun",
    "bede-mpirun",
    "salloc",
    "singularity",
    "apptainer",
    "shifter",
)


def ensure(directory: Path | None = None) -> Path:
    """Write the shims (idempotent) and return their directory."""
    # one directory per interpreter and checkout: each shim is bound to the Python that has
    # clusterkit and to this checkout's clusterkit (two checkouts that share an interpreter
    # would otherwise rewrite each other's shims, and run each other's code)
    tag = hashlib.sha256(f"{sys.executable}\0{ROOT}".encode()).hexdigest()[:10]
    directory = Path(
        directory
        or os.environ.get("CLUSTERKIT_SHIM_DIR")
        or Path(tempfile.gettempdir()) / f"clusterkit-shims-{os.getuid()}-{tag}"
    )
    directory.mkdir(parents=True, exist_ok=True)
    for name in SHIMS:
        path = directory / name
        text = (
            f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT)!r})\n"
            f"from clusterkit.runs.entry import main\nmain({name!r})\n"
        )
        if not path.is_file() or path.read_text() != text:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(text)
            tmp.chmod(0o755)
            os.replace(tmp, path)
    return directory


# What `conda shell.bash hook` prints here: activate/deactivate keep the current environment.
CONDA_HOOK = r"""
conda() {
    case "${1:-}" in
        activate|deactivate)
            echo "[conda emulator] conda $* (the current Python environment is used)" >&2 ;;
        *) command conda "$@" ;;
    esac
}
"""


def conda_root(shims: Path) -> Path:
    """A stand-in conda installation: ``etc/profile.d/conda.sh`` defines a ``conda`` function
    whose activate/deactivate keep the current Python environment (conda is not installed
    here; job scripts source this file the way they source a real Miniforge)."""
    root = shims.parent / f"{shims.name}-conda"
    script = root / "etc" / "profile.d" / "conda.sh"
    script.parent.mkdir(parents=True, exist_ok=True)
    text = "# stand-in for Miniforge's conda.sh (clusterkit emulator)\n" + CONDA_HOOK
    if not script.is_file() or script.read_text() != text:
        script.write_text(text)
    return root
