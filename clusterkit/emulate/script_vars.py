"""What the variables of a batch script hold when Slurm runs it.

* ``$0`` and ``${BASH_SOURCE[0]}``: slurmd runs a copy of the script, written to its spool
  directory as ``<SlurmdSpoolDir>/job<id>/slurm_script`` (src/slurmd/slurmstepd/mgr.c,
  ``_batch_script_path``), so ``$(dirname $0)`` is that spool directory, not the folder the
  script was submitted from: ``$SLURM_SUBMIT_DIR`` is.
* A variable the script reads and never sets, where bash's reading (the parameter expansions
  bashlex finds) can tell and nothing else is likely to set it: one spelt in another case than
  the one the script sets (``ORCA_EXEC`` set, ``$orca_exec`` read); one with lower-case letters
  (environment and module variables are upper-case by convention) in a script that sources and
  evaluates nothing; one that names the container image or the program to run in a script that
  loads no module and sources nothing. A read with a default (``${VAR:-x}``, ``${VAR:?}``,
  ``${VAR+x}``, ...) is never reported, nor are the variables of bash, the login environment,
  Slurm and the launchers. Each is a warning naming the variable: the environment the job is
  submitted from may still hold it.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from clusterkit.emulate.script import JobScript, heredoc_lines, text_lines
from clusterkit.sites.errors import Finding

# $0, ${0}, ${BASH_SOURCE[0]}, $BASH_SOURCE where a script looks for its own folder
_SELF = r"""["']?\$(?:0\b|\{0[^}]*\}|BASH_SOURCE\b|\{BASH_SOURCE[^}]*\})"""
SCRIPT_DIR = re.compile(
    rf"\b(?:dirname|realpath|readlink\s+-\w*[fem]\w*)\s+(?:-\S+\s+)*{_SELF}"
    r"|\$\{(?:0|BASH_SOURCE(?:\[0\])?)%/?\*\}"
)

NAME = re.compile(r"[A-Za-z_]\w*")
# what follows a name in ${...} when the read has a default, an error or an alternative
_GUARDED = re.compile(r"^:?[-=?+]")
# words after which a name is set: builtins that set their arguments
_SETTERS = re.compile(
    r"\b(?:export|declare|typeset|local|readonly|read|mapfile|readarray|getopts|let|unset)\b"
    r"([^;&|\n]*)"
)
_SET_FORMS = (
    re.compile(r"(?<![\w$])([A-Za-z_]\w*)(?:\[[^\]\n]*\])?\+?="),  # name=, name+=, a[i]=
    re.compile(r"\b(?:for|select)\s+([A-Za-z_]\w*)"),
    re.compile(r"\bprintf\s+-v\s+([A-Za-z_]\w*)"),
    re.compile(r"\$\{([A-Za-z_]\w*):?="),  # ${name:=default}
)
# set outside the script: bash's own, the login environment, Slurm, launchers, runtimes
KNOWN = frozenset(
    """HOME USER LOGNAME PATH PWD OLDPWD SHELL HOSTNAME HOST TMPDIR TMP TEMP LANG TERM MAIL
    DISPLAY UID EUID PPID RANDOM LINENO SECONDS IFS PS1 PS2 PS4 OPTARG OPTIND OPTERR REPLY
    PIPESTATUS FUNCNAME GROUPS SHLVL HOSTTYPE OSTYPE MACHTYPE EPOCHSECONDS EPOCHREALTIME
    SRANDOM HISTFILE EDITOR PAGER LD_LIBRARY_PATH LD_PRELOAD PYTHONPATH PYTHONHOME MANPATH
    CPATH LIBRARY_PATH PKG_CONFIG_PATH MODULEPATH LOADEDMODULES MODULESHOME CUDA_HOME
    CUDA_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES HIP_VISIBLE_DEVICES GPU_DEVICE_ORDINAL
    VIRTUAL_ENV CONDA_PREFIX CONDA_DEFAULT_ENV CONDA_EXE SCRATCH WORK PROJECT STORE
    http_proxy https_proxy ftp_proxy no_proxy all_proxy""".split()
)
KNOWN_PREFIXES = (
    "SLURM", "SBATCH_", "SRUN_", "SALLOC_", "PMI", "OMPI_", "MPI", "I_MPI_", "MV2_", "UCX_",
    "NCCL_", "BASH", "LC_", "XDG_", "LMOD", "CRAY", "PE_", "EB", "SINGULARITY", "APPTAINER",
    "OMP_", "KMP_", "MKL_", "CONDA", "LSB_", "LS_", "PBS_", "SGE_", "JOB_", "CUDA", "ROCM",
    "HIP_", "HSA_",
)  # fmt: skip
# commands that may set variables the script cannot see: sourced files, eval, modules
_SOURCES = {"source", ".", "eval"}
_MODULES = {"module", "ml", "spack", "conda", "micromamba", "mamba"}
_CONTAINERS = {"singularity", "apptainer"}


def findings(script: JobScript) -> list[Finding]:
    """Warnings on the script's variables (a whole script only: a page snippet is part of
    one, and sets its variables elsewhere)."""
    out = script_dir_findings(script)
    if script.source.from_file and script.parameters:
        out += never_set_findings(script)
    return out


# --------------------------------------------------------------------------- $0 in a job
def code_lines(script: JobScript) -> list[tuple[int, str]]:
    skip = heredoc_lines(script.text)
    return [
        (n, line)
        for n, line in enumerate(text_lines(script.text), start=1)
        if n not in skip and not line.lstrip().startswith("#")
    ]


def script_dir_findings(script: JobScript) -> list[Finding]:
    """The script looks for its own folder through ``$0`` or ``BASH_SOURCE``: in a batch job
    that is slurmd's spool directory."""
    for n, line in code_lines(script):
        m = SCRIPT_DIR.search(line)
        if m and "SLURM_SUBMIT_DIR" not in line:  # ${SLURM_SUBMIT_DIR:-$(dirname $0)} is right
            what = "BASH_SOURCE" if "BASH_SOURCE" in m[0] else "$0"
            return [
                Finding(
                    script.path,
                    n,
                    "script-dir",
                    f"{what} does not lead to the script's folder in a batch job: slurmd runs "
                    "a copy of the script, <SlurmdSpoolDir>/job<id>/slurm_script (such as "
                    "/var/spool/slurmd/job123/slurm_script), so this names that spool "
                    "directory; use $SLURM_SUBMIT_DIR (the folder sbatch was run in) or a path "
                    "of your own",
                    level="warning",
                )
            ]
    return []


# --------------------------------------------------------------------------- never set
def set_names(text: str) -> set[str]:
    """Every name the script may set, read generously (an extra name only silences)."""
    names: set[str] = set()
    for form in _SET_FORMS:
        names.update(m[1] for m in form.finditer(text))
    for m in _SETTERS.finditer(text):
        names.update(NAME.findall(m[1]))
    return names


def _read_name(expr: str) -> str | None:
    """The name a parameter expansion reads without a default, or None."""
    if expr[:1] in "#!":
        return None  # ${#name}: its length; ${!name}: indirection
    m = NAME.match(expr)
    if m is None:
        return None  # $1, $@, $?, ...
    rest = expr[m.end() :]
    if rest.startswith("["):
        rest = rest[rest.find("]") + 1 :] if "]" in rest else ""
    return None if _GUARDED.match(rest) else m[0]


def _known(name: str) -> bool:
    return name in KNOWN or name.startswith(KNOWN_PREFIXES)


def never_set_findings(script: JobScript) -> list[Finding]:
    names = {PurePosixPath(c.name).name for c in script.commands}
    sources = bool(names & _SOURCES)
    modules = bool(names & _MODULES)
    setting = set_names(script.text)
    by_case: dict[str, list[str]] = {}
    for name in setting:
        by_case.setdefault(name.lower(), []).append(name)
    positions = _command_positions(script)
    out, said = [], set()
    for line, expr in script.parameters:
        name = _read_name(expr)
        if name is None or name in setting or name in said or _known(name):
            continue
        other = [n for n in by_case.get(name.lower(), []) if n != name]
        why = ""
        if other:
            why = f"it sets {other[0]}, and bash tells names apart by case"
        elif not sources and any(c.islower() for c in name):
            why = "neither Slurm nor bash sets a name in lower case"
        elif not (sources or modules) and name in positions.get(line, ()):
            why = (
                f"it is {positions[line][name]}, and the script loads no module and sources "
                "no file that could set it"
            )
        if not why:
            continue
        said.add(name)
        out.append(
            Finding(
                script.path,
                line,
                "variable-never-set",
                f"${name} is read here but never set in this script ({why}): bash expands it "
                "to an empty string, unless the environment the job is submitted from holds it",
                level="warning",
            )
        )
    return out


def _command_positions(script: JobScript) -> dict[int, dict[str, str]]:
    """line -> {name: what it stands for} for a variable that is the whole of a command's
    name or of a container's image."""
    out: dict[int, dict[str, str]] = {}
    for cmd in script.commands:
        words = list(cmd.words)
        for k, word in enumerate(words):
            m = re.fullmatch(r"""["']?\$\{?([A-Za-z_]\w*)\}?["']?""", word)
            if not m:
                continue
            before = [PurePosixPath(w).name for w in words[:k]]
            if k == 0:
                out.setdefault(cmd.line, {})[m[1]] = "the program this line runs"
            elif any(b in _CONTAINERS for b in before) and _is_image_position(words, k):
                out.setdefault(cmd.line, {})[m[1]] = "the container image this line runs"
    return out


# options of singularity/apptainer exec, run and shell that take the next word as their value
_VALUE_OPTIONS = frozenset(
    "-B --bind --mount --env --env-file --pwd -H --home -o --overlay -W --workdir "
    "--security --apply-cgroups --hostname --network --network-args -S --scratch".split()
)


def _is_image_position(words: list[str], k: int) -> bool:
    """Whether ``words[k]`` is the image of ``singularity exec|run|shell [options] IMAGE``."""
    i = next(i for i, w in enumerate(words) if PurePosixPath(w).name in _CONTAINERS)
    if i + 1 >= len(words) or words[i + 1] not in {"exec", "run", "shell"}:
        return False
    j = i + 2
    while j < len(words) and words[j].startswith("-"):
        j += 2 if words[j] in _VALUE_OPTIONS else 1
    return j == k
