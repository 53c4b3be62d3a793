"""What every PyTorch training program needs from the job it runs in.

train_resnet.py and train_lm.py import this file; keep it in the same directory as them. It
holds the rules they share, so that each trainer keeps only its own model, data and loop:

- launch: which launcher started this process (torchrun, srun, mpirun, jsrun, ...), its rank,
  the number of ranks and its local rank; CPU threads per rank; GPU or not;
- the process group, and the small agreements between ranks (stop flags, gathered states);
- stop and checkpoint: SIGUSR1 or SIGTERM make every rank stop at the same step;
- errors a user can cause end the run with one line, never a traceback or a hang;
- how data loader processes start (fork, or a fork server under MPI-style launchers).

It needs only torch.
"""

from __future__ import annotations

import os
import pickle
import random
import re
import signal
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

# The oldest release this module runs on (train_resnet.py's, the oldest of the trainers that
# import it; each trainer checks its own minimum at start-up).
MINIMUM_VERSIONS = {"torch": "2.1"}
# Slurm sets these for the GPUs it gives a job or a job step; LSF and jsrun set
# CUDA_VISIBLE_DEVICES. With --device auto, any of them means the run must get a GPU.
GPU_JOB_VARIABLES = (
    "SLURM_GPUS_ON_NODE",
    "SLURM_JOB_GPUS",
    "SLURM_STEP_GPUS",
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
)
# torch.OutOfMemoryError is PyTorch 2.3+; torch.cuda.OutOfMemoryError is the same class.
OutOfMemoryError = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
# Seconds a fork server may take to start a first process (it imports the trainer, and torch).
FORKSERVER_PROBE_S = 120
# Seconds the interpreter may spend ending after an error before it is stopped: its teardown can
# wait for loader processes or ranks that are gone.
TEARDOWN_S = 20


# --------------------------------------------------------------------------- one-line errors
class Abort(Exception):
    """An error for the user: printed as one line, no traceback; the run exits with status 1."""


class UsageError(Abort):
    """A wrong option, path or file found before anything is written: exit status 2, as
    argparse gives for a wrong option."""


def log(*parts) -> None:
    """One line to stdout in one write: under PYTHONUNBUFFERED print() writes the newline
    apart, and the lines of ranks that share a pipe then run into one another."""
    sys.stdout.write(" ".join(map(str, parts)) + "\n")
    sys.stdout.flush()


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def version_tuple(text: str) -> tuple[int, ...]:
    """(2, 1, 2) for "2.1.2+cu121": the leading numbers of a version."""
    m = re.match(r"\d+(?:\.\d+)*", text)
    return tuple(int(part) for part in m[0].split(".")) if m else ()


def check_versions(program: str, minimums: dict[str, str], *modules) -> None:
    """Stop at once on a package older than ``minimums``, naming the version needed."""
    for module in modules:
        have = getattr(module, "__version__", None)
        oldest = minimums[module.__name__]
        if isinstance(have, str) and version_tuple(have) < version_tuple(oldest):
            raise Abort(
                f"{program} needs {module.__name__} {oldest} or newer; this environment has {have}"
            )


# --------------------------------------------------------------------------- ranks and devices
# (launcher, rank, world size, local rank): the first whose rank variable is set wins.
# torchrun first: a job script may run torchrun under srun or mpirun. MPI launchers before Slurm:
# ranks that mpirun starts inside a Slurm job inherit the batch shell's SLURM_PROCID=0.
LAUNCHERS = [
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("jsrun", "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_LOCAL_RANK"),
    ("srun", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS|SLURM_NTASKS", "SLURM_LOCALID"),
    ("pmix", "PMIX_RANK", "WORLD_SIZE", "LOCAL_RANK"),  # PMIx exports no size: set WORLD_SIZE
    ("mpiexec", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),  # MPICH and Intel MPI (hydra)
]
# What a launcher sets for each rank it starts. Configuration variables (OMPI_MCA_*, PMIX_MCA_*)
# say nothing: container images that ship Open MPI set them for every process.
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "JSM_NAMESPACE_RANK")


def launcher_rank_variable() -> str | None:
    """The rank variable of the MPI-style launcher (or srun step) that started this process."""
    env = os.environ
    found = next((var for var in RANK_VARIABLES if var in env), None)
    # the batch shell has SLURM_PROCID=0 too; only a step's tasks have a SLURM_STEP_ID as well
    if found is None and "SLURM_PROCID" in env and "SLURM_STEP_ID" in env:
        found = "SLURM_PROCID"
    return found


def launcher_env() -> tuple[str, int, int, int]:
    """(launcher, rank, world size, local rank) of this process."""
    env = os.environ
    for name, rank, sizes, local in LAUNCHERS:
        if rank in env:
            size = next((v for v in sizes.split("|") if v in env), None)
            if size is None:
                want = sizes.split("|")[-1]
                raise Abort(f"{rank} is set but {want} is not: export {want}=<number of ranks>")
            return name, int(env[rank]), int(env[size]), int(env.get(local, "0"))
    return "none", 0, 1, 0


def ranks_per_node(world: int) -> int:
    env = os.environ
    for var in ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"):
        if env.get(var, "").isdigit():
            return int(env[var])
    for var in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):  # e.g. "4(x2)"
        m = re.match(r"\d+", env.get(var, ""))
        if m:
            return int(m[0])
    return world  # assume they all share one node


def usable_cores() -> int:
    """The cores this process may run on (its affinity: what the launcher's binding gave it)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return cores or 1


def cores_per_rank(world: int) -> int:
    """The cores each rank of this node may use: Slurm's --cpus-per-task, else the cores this
    process may run on shared among the node's ranks."""
    per_task = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if per_task.isdigit():
        return int(per_task)
    cores = usable_cores()
    return max(1, cores // min(world, ranks_per_node(world)))


def limit_threads(launcher: str, rank: int, world: int) -> None:
    """Hand-launched ranks each start one thread per core: several ranks on a node then fight
    over the cores (torchrun avoids this by setting OMP_NUM_THREADS=1)."""
    per_node = min(world, ranks_per_node(world))
    if "OMP_NUM_THREADS" in os.environ or launcher == "torchrun" or per_node < 2:
        return
    cores = usable_cores()
    per_task = os.environ.get("SLURM_CPUS_PER_TASK", "")
    threads = int(per_task) if per_task.isdigit() else max(1, cores // per_node)
    torch.set_num_threads(threads)
    if rank == 0:
        warn(
            f"OMP_NUM_THREADS is not set and {per_node} ranks share a node: using {threads} "
            "thread(s) per rank; set OMP_NUM_THREADS in the job script to choose"
        )


def master_address_help(launcher: str) -> str:
    if launcher == "jsrun":
        first = '$(sort -u "$LSB_DJOB_HOSTFILE" | grep -v -e batch -e login | head -n 1)'
    elif launcher == "mpirun":
        first = "$(hostname)  (and pass -x MASTER_ADDR -x MASTER_PORT to mpirun)"
    else:
        first = '$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'
    return f"export MASTER_PORT=29500 MASTER_ADDR={first}"


def gpus_granted() -> str | None:
    """The variable saying that this job holds GPUs (as NAME=VALUE), or None."""
    for var in GPU_JOB_VARIABLES:
        value = os.environ.get(var, "").strip()
        # SLURM_GPUS_ON_NODE is a count; the others list devices ("-1" hides them all)
        none = ("", "0") if var == "SLURM_GPUS_ON_NODE" else ("", "-1", "NoDevFiles")
        if value not in none:
            return f"{var}={value}"
    return None


def gpu_request(device: str) -> str | None:
    """What asks this run for a GPU: --device cuda, or (with auto) a job that holds GPUs."""
    if device == "cuda":
        return "--device cuda"
    return gpus_granted() if device == "auto" else None


def missing_gpu() -> str | None:
    """Why PyTorch cannot use a GPU here, or None if it can."""
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        return (
            f"this PyTorch ({torch.__version__}) is a CPU-only build: install a CUDA or ROCm "
            "build of torch"
        )
    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else f"ROCm {torch.version.hip}"
        return f"PyTorch {torch.__version__} ({build}) sees no GPU on {os.uname().nodename}"
    return None


def choose_device_type(device: str, tiny: bool, rank: int) -> str:
    """cuda or cpu, for --device auto|cuda|cpu. A run that asks for a GPU and cannot have one
    stops here (a --tiny run warns and goes on, on the CPU)."""
    wanted = gpu_request(device)
    problem = missing_gpu() if wanted else None
    if problem and not tiny:
        raise Abort(f"{wanted} asks for a GPU, but {problem}")
    if problem:
        if rank == 0:
            warn(f"{wanted} asks for a GPU, but {problem}; --tiny runs on the CPU instead")
        return "cpu"
    if wanted or (device == "auto" and torch.cuda.is_available()):
        return "cuda"
    return "cpu"


def local_device(use_cuda: bool, local_rank: int) -> torch.device:
    """The GPU of this rank (ranks on a node share its GPUs round-robin), or the CPU."""
    if not use_cuda:
        return torch.device("cpu")
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def backend_for(backend: str, use_cuda: bool) -> str:
    """--backend auto|nccl|gloo|mpi as torch.distributed names it (RCCL answers to nccl)."""
    if backend == "auto":
        return "nccl" if use_cuda else "gloo"
    if backend == "nccl" and not use_cuda:
        raise Abort("--backend nccl needs GPUs; use gloo on CPU")
    return backend


def join_group(backend: str, launcher: str, rank: int, world: int):
    """Join the process group of ``world`` ranks; return the group for small CPU-side messages
    (stop flags, gathered states): gloo beside NCCL, so that they never wait for the GPU."""
    missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing and backend != "mpi":
        nor = f" (nor {missing[1]})" if len(missing) > 1 else ""
        raise Abort(
            f"{missing[0]} is not set{nor}: {launcher} started {world} ranks but does not say "
            f"where they meet. In the job script: {master_address_help(launcher)}"
        )
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(world))
    try:
        if backend == "mpi":
            dist.init_process_group("mpi")
        else:
            dist.init_process_group(backend, rank=rank, world_size=world)
    except (RuntimeError, ValueError) as exc:
        where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Abort(f"rank {rank} could not join the {backend} group at {where}: {first}") from None
    control = dist.new_group(backend="gloo") if backend == "nccl" else dist.group.WORLD
    _GROUPS.extend([dist.group.WORLD, control])  # dropped last, by guarded(): see _GROUPS
    return control


# --------------------------------------------------------------------------- between ranks
# Ending gloo process groups without a deadlock. A group's worker thread frees each collective
# after it ran; freeing a tensor made in Python can need the interpreter lock. When the main
# thread destroys the group while holding that lock, as it does when the DDP model that holds
# the group goes, each waits for the other. Seen here with two ranks on the CPU (2026-11-27):
# under torch 2.5.0 the end of a run hung after its summary in 2 of 21 runs. Two measures, each
# needed by some versions: gather_states keeps the tensors of its collectives until its next
# call (2.5.0 hung without it), and the groups are held here until guarded() drops them after
# main() returned, so that a group goes with Python's handle on it, which lets the lock go
# (2.10.0 hung without it; a test ends 60 groups under each stack's PyTorch).
_GATHERED: list[torch.Tensor] = []
_GROUPS: list = []


def gather_states(state, rank: int, world: int, group) -> list | None:
    """Collective: every rank's picklable ``state``, in rank order, at rank 0 (None elsewhere).

    What dist.gather_object does, written out so that the tensors handed to gloo stay referenced
    (in _GATHERED) until the next call: see _GROUPS. Two-rank CPU runs under torch 2.5.0 hung
    after their summary in 2 of 21 runs with dist.gather_object here, in none of 30 with this.
    """
    data = torch.frombuffer(bytearray(pickle.dumps(state)), dtype=torch.uint8)
    size = torch.tensor([data.numel()], dtype=torch.int64)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    padded = torch.zeros(int(max(sizes)), dtype=torch.uint8)
    padded[: data.numel()] = data
    received = [torch.zeros_like(padded) for _ in range(world)] if rank == 0 else None
    dist.gather(padded, received, dst=0, group=group)
    _GATHERED[:] = [size, *sizes, padded, *(received or [])]
    if received is None:
        return None
    return [pickle.loads(r[: int(n)].numpy().tobytes()) for r, n in zip(received, sizes)]  # noqa: B905


def rng_state(device) -> dict:
    return {
        "python": random.getstate(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
    }


def set_rng_state(state: dict, device) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and state["cuda"] is not None:
        torch.cuda.set_rng_state(state["cuda"], device)


# --------------------------------------------------------------------------- stop and checkpoint
class StopFlag:
    """SIGUSR1/SIGTERM set a flag; the training loop stops at the next step boundary.

    Slurm: `#SBATCH --signal=B:USR1@120` sends USR1 to the batch shell two minutes before the
    time limit; the job script traps it, passes it on to this program (kill -USR1 or -TERM on
    srun/torchrun's pid), waits for it to exit, then runs `scontrol requeue $SLURM_JOB_ID`
    (with #SBATCH --requeue). The requeued job resumes from the checkpoint written here.
    Without B: Slurm signals every task directly. scancel and the time limit send SIGTERM.
    """

    def __init__(self):
        self.raised = False
        self.pending = None
        for sig in (signal.SIGUSR1, signal.SIGTERM):
            signal.signal(sig, self._handler)

    def _handler(self, signum, frame):
        self.raised = True

    def agreed(self, world: int, control) -> bool:
        """True on every rank if any rank was signalled: all stop at the same step.

        Each call starts the all-reduce of this step's flag in the background and decides on
        the previous step's, finished long since: the ranks still agree on the step, and
        no step waits for the network."""
        if world == 1:
            return self.raised
        flag = torch.tensor([int(self.raised)])
        work = dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=control, async_op=True)
        previous, self.pending = self.pending, (work, flag)
        if previous is None:
            return False
        previous[0].wait()
        return bool(previous[1].item())


UMASK = os.umask(0o022)
os.umask(UMASK)


def fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def save_atomically(obj, final: Path) -> None:
    """torch.save ``obj`` to ``final`` through a temporary file in the same directory, flushed
    to disk and then renamed: a job killed mid-write leaves no partial file, and the older
    files stay whole."""
    fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=".ckpt-", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~UMASK)  # mkstemp makes it private; use the usual mode
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    finally:
        Path(tmp).unlink(missing_ok=True)
    fsync_directory(final.parent)


# --------------------------------------------------------------------------- loader processes
def loader_death(exc: BaseException | str) -> str:
    """The one-line error for a loader process that died (PyTorch's message names it)."""
    return (
        f"a data loader process died ({str(exc).strip().splitlines()[0]}). The usual cause is "
        "the kernel's out-of-memory killer: look at the job's memory use (sacct -j JOBID -o "
        "MaxRSS) and give the job more memory, or use fewer --workers or a smaller --batch-size"
    )


def exit_status(code: int) -> str:
    if code < 0:
        return f"killed by signal {signal.Signals(-code).name}"
    return f"exited with status {code}"


_WATCHED: set[int] = set()


def watch_loader(batches) -> None:
    """End the run within a second of a loader process's death. Forked loader processes are
    this process's children, and PyTorch hears of their end at once (SIGCHLD); those started
    by a fork server are not, and PyTorch notices one gone only when a wait for its data times
    out, which took 8 to 40 s on two busy cores. A thread waits for them instead and, when one
    dies, prints the error and ends the process (signals cannot reach the training loop
    reliably: a program started in the background of a job script ignores SIGINT)."""
    workers = getattr(batches, "_workers", None)
    if not workers or id(batches) in _WATCHED:
        return
    if getattr(getattr(workers[0], "_popen", None), "method", "fork") == "fork":
        return
    _WATCHED.add(id(batches))
    from multiprocessing.connection import wait

    def watch():
        wait([w.sentinel for w in workers])
        dead = [w for w in workers if w.exitcode is not None]  # they end only at shutdown
        if dead and not getattr(batches, "_shutdown", True):
            how = ", ".join(f"pid {w.pid}: {exit_status(w.exitcode)}" for w in dead)
            print(f"error: {loader_death(f'DataLoader worker ({how})')}", file=sys.stderr)
            for w in workers:  # the others would live on until they noticed (seconds)
                if w.exitcode is None:
                    w.kill()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)

    import threading

    threading.Thread(target=watch, name="loader-watch", daemon=True).start()


def loader_context(workers: int, method: str | None) -> str | None:
    """How DataLoader processes start. Workers forked from a process that MPI has initialised can
    segfault or hang (the MPI library's threads and memory registrations do not survive fork),
    so under a launcher that starts ranks as MPI does the default is forkserver; see Horovod PR
    #1824 and PyTorch's "multiprocessing best practices"."""
    if workers == 0:
        return None
    return method or ("forkserver" if launcher_rank_variable() else "fork")


def working_context(method: str | None, rank: int, preload: list[str]) -> str | None:
    """``method``, once a fork server has shown that it can start a process here; fork
    otherwise, with a warning. (A fork server that cannot start workers fails each one with a
    BrokenPipeError deep inside multiprocessing.)"""
    if method != "forkserver":
        return method
    import multiprocessing

    problem = None
    context = multiprocessing.get_context("forkserver")
    # Each process a fork server starts runs the trainer's file again (as __mp_main__): import
    # torch in the server once, or every loader process imports it anew (seconds each; minutes
    # on a busy node). Python's own preloading of the main module does not happen (it looks for
    # a "main_path" that its preparation data never holds).
    context.set_forkserver_preload(preload)
    try:
        probe = context.Process(target=os.getpid, daemon=True)
        probe.start()
        probe.join(FORKSERVER_PROBE_S)
        if probe.exitcode != 0:
            problem = (
                f"a test process {'did not end' if probe.exitcode is None else 'failed'} "
                f"(exit code {probe.exitcode})"
            )
            probe.kill()
    except (OSError, EOFError) as exc:  # BrokenPipeError, ConnectionError, ...
        problem = f"{type(exc).__name__}: {exc}"
    if problem is None:
        return method
    if rank == 0:
        warn(
            f"the fork server cannot start loader processes here ({problem}): forking them "
            "instead, as --mp-start-method fork does"
        )
    return "fork"


# --------------------------------------------------------------------------- the program's end
def run_guarded(main, argv=None, memory_hint: str = "lower --batch-size") -> int:
    """main(argv) with the errors a user can cause reported in one line, without a traceback:
    exit status 2 for a UsageError, 1 for any other Abort."""
    try:
        return main(argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    except Abort as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
    except OutOfMemoryError:
        print(f"error: out of GPU memory: {memory_hint}", file=sys.stderr, flush=True)
    except RuntimeError as exc:  # PyTorch's handler of SIGCHLD raises this anywhere
        if not str(exc).startswith("DataLoader worker"):
            raise
        print(f"error: {loader_death(exc)}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        return 130
    finally:
        _GROUPS.clear()  # after main()'s model is gone: see _GROUPS
    return 1


def exit_with(run) -> None:
    """sys.exit(run()); after an error, a teardown that waits for loader processes or ranks
    that are gone is cut short after TEARDOWN_S seconds, so the job never hangs."""
    status = 1
    try:
        status = run()
    finally:
        if status != 0:  # the error is printed; what is left must not hang the job
            import faulthandler

            faulthandler.dump_traceback_later(TEARDOWN_S, exit=True)
    sys.exit(status)
