"""Node-local storage in a job that runs here, and the ``sbcast`` shim that fills it.

A site's profile lists its node-local and memory-backed paths (``paths:``, ``kind``). A job that
runs here gets a scratch directory of its own (``CLUSTERKIT_JOB_SCRATCH``), removed when it
ends, as the site empties such storage after a job, and each of those paths becomes a directory
in it:

* a path a variable holds (Isambard-AI's ``$LOCALDIR``, Cirrus's ``$TMPDIR``) gets its directory
  through that variable: the stand-in module that sets it on the site (``brics/userenv``) points
  it there in a job (:mod:`clusterkit.sites.lmod`), and a variable no module sets is set in the
  job's environment, as the scheduler sets it on the site;
* a fixed path this machine does not have (Frontier's ``/mnt/bb/<user>``) is mapped: the job
  runs a copy of its script (Slurm, too, runs a copy) in which the path's fixed part
  (``/mnt/bb``) names the job's directory, so ``/mnt/bb/$USER/...`` lands there. The judged
  script is the file as written; the emulator says what it mapped.

``sbcast SOURCE DEST`` reads its options as the real one (:mod:`clusterkit.grammars.sbcast_cli`)
and copies SOURCE to DEST on each node where the job's nodes have storage of their own
(:mod:`clusterkit.runs.node_network`), else once: every node is then this machine, so one copy
is what each node would hold. It fails as sbcast does: a SOURCE it cannot open, a DEST whose
directory is missing, or one that exists without ``--force``; and, for tests of a job's handling
of a failed transfer, on the node ``CLUSTERKIT_SBCAST_FAIL`` names, after writing half the file
there, as a broken transfer can.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from clusterkit.grammars import sbcast_cli
from clusterkit.runs.node_network import on_node
from clusterkit.runs.runtime import ALLOC_VAR, LMOD_INIT, note
from clusterkit.sites.profiles import Site

SCRATCH_VAR = "CLUSTERKIT_JOB_SCRATCH"
# A node whose transfer breaks halfway (tests of a job's handling of a failed sbcast: a broken
# network cannot be had here)
FAIL_VAR = "CLUSTERKIT_SBCAST_FAIL"
_BROKEN = "Input/output error (the transfer broke: CLUSTERKIT_SBCAST_FAIL)"


def _fill(segment: str, env: dict[str, str], account: str | None) -> str | None:
    """One placeholder segment of a profile path as it reads in this job, or None."""
    name = segment.strip("<>").lower()
    if name in {"user", "userid", "username"}:
        return env.get("USER")
    if name == "uid":
        return str(os.getuid())
    if name in {"project", "projid"} and account:
        return account
    return None


def module_variables(site: Site) -> set[str]:
    """The variables a module of the site sets (``sets:``)."""
    return {item.partition("=")[0] for m in site.modules for item in m.raw.get("sets", ())}


def lmod_here(env: dict[str, str]) -> bool:
    """Whether the job's ``module`` is the real Lmod (which runs the stand-in modulefiles)."""
    return LMOD_INIT.is_file() and not env.get("CLUSTERKIT_NO_LMOD")


def prepare(site: Site, env: dict[str, str], account: str | None, job_id: int):
    """Make the job's scratch directory and its stand-ins of the site's node-local paths:
    returns (the directory, {fixed prefix: its stand-in}, notes)."""
    scratch = Path(tempfile.mkdtemp(prefix=f"clusterkit-job{job_id}-"))
    env[SCRATCH_VAR] = str(scratch)
    by_module = module_variables(site) if lmod_here(env) else set()
    mapping: dict[str, str] = {}
    notes = []
    for place in site.places.values():
        if not place.staging:
            continue
        here = scratch / place.name
        if place.variable:
            here.mkdir(parents=True, exist_ok=True)
            if place.variable in by_module:
                notes.append(
                    f"${place.variable} ({place.path}) is {here} once the module that sets "
                    "it is loaded"
                )
            else:
                env[place.variable] = str(here)
                notes.append(f"${place.variable} ({place.path}) is {here}")
            continue
        prefix = place.fixed_prefix
        if prefix == "/" or Path(prefix).exists():
            continue  # /tmp, /dev/shm: this machine has them
        rest = place.path[len(prefix) :].strip("/").split("/") if place.path != prefix else []
        filled = [_fill(s, env, account) if s.startswith("<") else s for s in rest]
        target = here.joinpath(*[s for s in filled if s]) if None not in filled else here
        target.mkdir(parents=True, exist_ok=True)
        mapping[prefix] = str(here)
        notes.append(
            f"{place.path} ({place.name}, {place.kind}) is {target}: the job runs a copy of "
            f"its script with {prefix} mapped to {here}"
        )
    return scratch, mapping, notes


def mapped_script(path: Path, mapping: dict[str, str], scratch: Path) -> Path:
    """A copy of the job script whose mapped prefixes name their stand-ins (or the script
    itself when nothing is mapped)."""
    if not mapping:
        return path
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    for prefix, here in mapping.items():
        text = re.sub(re.escape(prefix) + r"(?![\w.-])", lambda _m, h=here: h, text)
    copy = scratch / "slurm_script"
    copy.write_text(text, encoding="utf-8", errors="surrogateescape")
    copy.chmod(0o700)
    return copy


def node_local_dirs(scratch: Path) -> list[Path]:
    """The stand-ins of the job's node-local storage: each node of a job whose nodes have
    namespaces of their own gets a directory of its own in their place
    (:mod:`clusterkit.runs.node_network`)."""
    return sorted(p for p in scratch.iterdir() if p.is_dir() and p.name != "nodes")


def cleanup(scratch: Path) -> None:
    shutil.rmtree(scratch, ignore_errors=True)


# --------------------------------------------------------------------------- sbcast
def _usage_error(message: str) -> int:
    print(message, file=sys.stderr)
    print(sbcast_cli.TRY, file=sys.stderr)
    return 1


def sbcast(argv: list[str]) -> int:
    try:
        args = sbcast_cli.parse(argv)
    except sbcast_cli.SbcastUsageError as exc:
        return _usage_error(str(exc))
    if args.has("help"):
        print(sbcast_cli.HELP)
        return 0
    if args.has("usage"):
        print(sbcast_cli.USAGE)
        return 0
    if args.has("version"):
        print("slurm-wlm 22.05.8 (the clusterkit emulator's sbcast grammar)")
        return 0
    try:
        sbcast_cli.check_files(args)
    except sbcast_cli.SbcastUsageError as exc:
        return _usage_error(str(exc))
    problems = sbcast_cli.value_problems(args)
    if problems:
        for problem in problems:
            print(f"sbcast: error: {problem}", file=sys.stderr)
        return 1
    if not (args.last("jobid") or os.environ.get("SLURM_JOB_ID")):
        print(
            "sbcast: error: Need a job id to run this command.  Run from within a Slurm job "
            "or use the --jobid option.",
            file=sys.stderr,
        )
        return 1
    alloc_text = os.environ.get(ALLOC_VAR)
    if not alloc_text:
        print(
            "sbcast: error: the emulator runs sbcast only inside a job started by its sbatch "
            "or salloc",
            file=sys.stderr,
        )
        return 1
    alloc = json.loads(alloc_text)
    nodes = alloc.get("run_nodes") or ["localhost"]
    source, dest = Path(args.files[0]), Path(args.files[1]).absolute()
    # each node's copy where the nodes have storage of their own, else one for them all
    pids = alloc.get("node_pids") or []
    targets = (
        [(name, on_node(pid, dest)) for name, pid in zip(nodes, pids, strict=True)] if pids else []
    )
    broken = os.environ.get(FAIL_VAR)
    for name, target in targets or [(nodes[0], dest)]:
        code = _copy(source, target, name, args, broken == name)
        if code:
            return code
    libs = " (--send-libs: the executable's libraries are not copied here)"
    where = (
        f"one copy on each of the job's {len(nodes)} node(s)"
        if targets
        else f"one copy here stands for the job's {len(nodes)} node(s), all this machine"
    )
    note("sbcast", f"{source} -> {dest}: {where}{libs if args.has('send-libs') else ''}")
    return 0


def _copy(source: Path, dest: Path, node: str, args, broken: bool = False) -> int:
    """One node's copy, failing as sbcast does; ``broken``: the transfer to this node breaks
    halfway, leaving a partial file there."""
    try:
        data = source.open("rb")
    except OSError as exc:
        print(f"sbcast: error: Can't open `{source}`: {exc.strerror}", file=sys.stderr)
        return 255
    with data:
        try:
            flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if args.has("force") else os.O_EXCL)
            fd = os.open(dest, flags, 0o600)
        except OSError as exc:
            # slurmd's answer, named after the node it came from
            print(f"sbcast: error: REQUEST_FILE_BCAST({node}): {exc.strerror}", file=sys.stderr)
            return 1
        with os.fdopen(fd, "wb") as out:
            if broken:
                out.write(data.read(max(1, source.stat().st_size // 2)))
                print(f"sbcast: error: REQUEST_FILE_BCAST({node}): {_BROKEN}", file=sys.stderr)
                return 1
            shutil.copyfileobj(data, out)
    if args.has("preserve"):
        shutil.copystat(source, dest)
    return 0


HANDLERS = {"sbcast": sbcast}
