"""Which processes of a test run measure the lines of the example programs.

coverage.py traces a process with ``sys.settrace`` on Python 3.11, and every line of Python the
process runs pays for it: page tests ran 2.5 times slower traced, a tiny PyTorch run 40 %
slower. So the tests session does not trace every process. It sets ``CLUSTERKIT_LINES`` to the
coverage.py configuration that :func:`clusterkit.runs.program_lines.start` wrote and installs a
``.pth`` line that calls :func:`start` when a Python process starts; a process is measured when

* the script it runs is one of the programs (``python train_resnet.py``, the ranks of the
  emulated ``srun``, of ``mpirun``, ``torchrun``'s and ``horovodrun``'s workers, TensorFlow's
  workers, a copy of a trainer in a job's directory), or
* it runs ``python -c CODE`` or another Python file with a program among its arguments (a
  wrapper that runs one with ``runpy``, such as ``tests/fixtures/mpi_standin.py``), or
* it is a ``multiprocessing`` child of such a process (data loader workers started by spawn;
  forked ones inherit their parent's measurement).

A measured process imports the frameworks its program's first lines import before the
measurement starts (:func:`leading_imports`): importing PyTorch traced cost each rank about
two seconds and measured nothing of the programs.

Code that runs a program inside a process that is not measured (the tests that load a trainer
as a module, the option tables read from a trainer's ``build_parser``) wraps it in
:func:`measured`. Only the standard library is imported here: the hook runs in every process.
"""

from __future__ import annotations

import configparser
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ENV = "CLUSTERKIT_LINES"
PTH_NAME = "clusterkit_lines.pth"
# one line, run by site.py at every start of the environment's interpreter
PTH_LINE = (
    "import os; os.environ.get('CLUSTERKIT_LINES') and "
    "__import__('clusterkit.runs.lines_hook').runs.lines_hook.start()\n"
)


def write_start_up_line(site_dir: Path, name: str, line: str) -> Path:
    """``site_dir/name`` (a ``.pth`` file of a site-packages folder) holding ``line``, written
    only where it holds something else (this hook's and :mod:`clusterkit.runs.import_gc`'s)."""
    path = Path(site_dir) / name
    if not path.is_file() or path.read_text(encoding="utf-8") != line:
        path.write_text(line, encoding="utf-8")
    return path


_in_process = None  # the Coverage object of measured(), made once per process
_depth = 0


def program_names(config: str) -> set[str]:
    """File names of the measured programs: the ``include`` patterns of the configuration."""
    parser = configparser.ConfigParser()
    parser.read(config, encoding="utf-8")
    patterns = parser.get("run", "include", fallback="").split()
    return {pattern.rsplit("/", 1)[-1] for pattern in patterns}


def wanted(argv: list[str], names: set[str]) -> bool:
    """Whether a process started with ``sys.argv == argv`` runs one of the programs."""
    if not argv:
        return False
    if os.path.basename(argv[0]) in names:
        return True
    if argv[0] == "-c" and "--multiprocessing-fork" in argv:
        return True
    # a wrapper that runs a program after changing something (code given with -c, or a
    # script such as tests/fixtures/mpi_standin.py); launchers are no Python file
    if argv[0] == "-c" or argv[0].endswith(".py"):
        return any(os.path.basename(arg) in names for arg in argv[1:])
    return False


# Frameworks whose import a program's first lines may be given before the measurement starts
# (see leading_imports): under sys.settrace importing torch and torchvision took 8.0 s instead
# of 5.9 here, TensorFlow 6.2 instead of 4.5 (2026-11-29, one run each, idle machine).
FRAMEWORKS = frozenset(
    {"accelerate", "datasets", "keras", "numpy", "peft", "tensorflow", "torch", "torchvision"}
    | {"transformers", "webdataset"}
)


def _setdefault(node) -> tuple[str, str] | None:
    """(key, value) of a statement ``os.environ.setdefault("KEY", "value")``, else None."""
    import ast

    call = node.value if isinstance(node, ast.Expr) else None
    if not (isinstance(call, ast.Call) and ast.unparse(call.func) == "os.environ.setdefault"):
        return None
    args = [a.value for a in call.args if isinstance(a, ast.Constant)]
    if len(args) != 2 or call.keywords or not all(isinstance(a, str) for a in args):
        return None
    return args[0], args[1]


def leading_imports(program: str) -> list[tuple[str, ...]]:
    """What a program does before its first other statement, as far as it imports frameworks
    (``("import", name)``) and sets defaults in its environment (``("setdefault", key,
    value)``), in its order, up to the first import of anything else (a module of its own,
    say, whose lines are measured). Doing these before the measurement starts changes nothing
    the program sees: its own statements run next, measured, find the frameworks loaded and
    set no default twice."""
    import ast

    try:
        with open(program, encoding="utf-8") as f:
            body = ast.parse(f.read()).body
    except (OSError, SyntaxError, ValueError):
        return []
    out: list[tuple[str, ...]] = []
    for node in body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if _setdefault(node):
            out.append(("setdefault", *_setdefault(node)))
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            break
        for name in names:
            root = name.partition(".")[0]
            if root in FRAMEWORKS:
                out.append(("import", name))
            elif root != "__future__" and root not in sys.stdlib_module_names:
                return out
    return out


def _prepare(program: str) -> None:
    """Do what :func:`leading_imports` finds; an import that fails is left to the program."""
    for step in leading_imports(program):
        if step[0] == "setdefault":
            os.environ.setdefault(step[1], step[2])
            continue
        try:
            __import__(step[1])
        except Exception:  # the program's own import says what is wrong
            return


def start() -> None:
    """Start coverage.py in this process if it runs a program (called by the ``.pth`` line),
    after importing the frameworks its first lines import (:func:`leading_imports`)."""
    config = os.environ.get(ENV)
    if not config or not wanted(sys.argv, program_names(config)):
        return
    if os.path.basename(sys.argv[0]) in program_names(config):
        _prepare(sys.argv[0])
    os.environ["COVERAGE_PROCESS_START"] = config
    try:
        import coverage

        coverage.process_startup()
    except ImportError:
        pass
    finally:
        # its children decide for themselves (a launcher's ranks are programs again)
        del os.environ["COVERAGE_PROCESS_START"]


@contextmanager
def measured() -> Iterator[None]:
    """Measure the example programs' lines that run in this process inside the block (a no-op
    outside a measured test run, or where the whole process is measured already)."""
    global _in_process, _depth
    config = os.environ.get(ENV)
    if not config or _depth:  # not measuring, or inside a measured block already
        yield
        return
    import coverage

    if coverage.Coverage.current() is not None:  # the whole process is measured
        yield
        return
    if _in_process is None:
        _in_process = coverage.Coverage(config_file=config, data_suffix=True)
    _depth += 1
    _in_process.start()
    try:
        yield
    finally:
        _in_process.stop()
        _in_process.save()
        _depth -= 1
