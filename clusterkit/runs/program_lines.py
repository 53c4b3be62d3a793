"""Line coverage of the example programs (``examples/**/*.py``) in every process the tests start.

The tests session measures them with coverage.py across process boundaries: ``start(DIR)``
writes a coverage configuration to ``DIR/coveragerc``, :func:`install_hook` puts a ``.pth``
line into the environment's site-packages, and the session exports ``CLUSTERKIT_LINES``
pointing at the configuration. The hook (:mod:`clusterkit.runs.lines_hook`) then measures the
processes that run a program: the trainers the tests start, torchrun's workers, the ranks of
the emulated ``srun`` and of ``mpirun``, the TensorFlow workers; tests that load a program
in-process measure that stretch with :func:`clusterkit.runs.lines_hook.measured`. Each measured
process writes its own data file into ``DIR`` when it exits.

Only files named like an example program are measured (``include`` patterns). The job-script
tests run a *copy* of a trainer in a scratch job directory; :func:`measure` counts a copy's lines
as its original's, after checking that every line the copy ran is code in the original.

``python -m clusterkit.runs.program_lines start DIR`` clears ``DIR`` of old data, writes the
configuration and installs the hook in the running interpreter's environment;
``python -m clusterkit.runs.program_lines report DIR`` prints lines, covered and % per program (the
coverage page is written by :mod:`clusterkit.pages.coverage`).
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from clusterkit.sites.profiles import ROOT

EXAMPLES = ROOT / "examples"
CONFIG_NAME = "coveragerc"
DATA_NAME = ".coverage"


def programs(root: Path = EXAMPLES) -> list[Path]:
    """Every Python program under examples/."""
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def config_text(data_dir: Path, names: list[str]) -> str:
    """The coverage.py configuration of a measured test run (INI format)."""
    include = "".join(f"\n    */{name}" for name in names)
    return (
        "# Written by clusterkit.runs.program_lines: the example programs, measured in the\n"
        "# processes that run them (clusterkit.runs.lines_hook).\n"
        "[run]\n"
        f"data_file = {data_dir.resolve() / DATA_NAME}\n"
        "parallel = true\n"
        f"include ={include}\n"
        # processes that run no example program stay silent (many tests read stderr)
        "disable_warnings =\n"
        "    no-data-collected\n"
        "    module-not-measured\n"
        "    module-not-imported\n"
        "    include-ignored\n"
        "    couldnt-parse\n"
        # data loader workers and some launchers leave through os._exit: save first
        "patch = _exit\n"
    )


def start(data_dir: Path, paths: list[Path] | None = None) -> Path:
    """Clear old data from data_dir and write the configuration; return its path."""
    data_dir.mkdir(parents=True, exist_ok=True)
    for old in data_dir.glob(f"{DATA_NAME}*"):
        old.unlink()
    names = [p.name for p in (programs() if paths is None else paths)]
    config = data_dir / CONFIG_NAME
    config.write_text(config_text(data_dir, names), encoding="utf-8")
    return config


def install_hook(site_dir: Path) -> Path:
    """Write the start-up line of :mod:`clusterkit.runs.lines_hook` into ``site_dir`` (a
    site-packages folder); it does nothing in a process without ``CLUSTERKIT_LINES``."""
    from clusterkit.runs import lines_hook

    return lines_hook.write_start_up_line(site_dir, lines_hook.PTH_NAME, lines_hook.PTH_LINE)


@dataclass
class ProgramLines:
    """One program: its statements (first lines) and those that ran in some process."""

    path: Path
    rel: str  # its name in the reasons file and on the page: the path under the repository
    statements: list[int]
    missing: list[int]
    processes: int = 0  # data files with lines of this program

    @property
    def covered(self) -> int:
        return len(self.statements) - len(self.missing)

    @property
    def percent(self) -> float:
        return 100.0 * self.covered / len(self.statements) if self.statements else 100.0


@dataclass
class Measurement:
    programs: list[ProgramLines]
    problems: list[str] = field(default_factory=list)
    data_files: int = 0


def code_lines(path: Path) -> set[int]:
    """Lines that hold code (not blank, not a comment): where a run can have been."""
    out = set()
    for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = text.strip()
        if stripped and not stripped.startswith("#"):
            out.add(n)
    return out


def relative(path: Path, root: Path = ROOT) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def collect(data_dir: Path, paths: list[Path]) -> tuple[dict[Path, set[int]], dict, list[str]]:
    """Executed lines per program from every data file in data_dir (copies mapped home)."""
    from coverage import CoverageData

    by_name = {p.name: p for p in paths}
    executed: dict[Path, set[int]] = {p: set() for p in paths}
    files: dict[Path, int] = dict.fromkeys(paths, 0)
    problems: list[str] = []
    code = {p: code_lines(p) for p in paths}
    for data_file in sorted(data_dir.glob(f"{DATA_NAME}.*")):
        data = CoverageData(basename=str(data_file))
        data.read()
        for measured in data.measured_files():
            lines = set(data.lines(measured) or ())
            home = by_name.get(Path(measured).name)
            if home is None or not lines:
                continue
            stray = sorted(n for n in lines if n not in code[home])
            if Path(measured).resolve() != home.resolve() and stray:
                problems.append(
                    f"{measured}: ran lines {stray[:5]} that are not code in "
                    f"{relative(home)}: the copy differs from the program, so its "
                    "lines are left out"
                )
                continue
            executed[home] |= lines
            files[home] += 1
    return executed, files, problems


def measure(data_dir: Path, paths: list[Path] | None = None, root: Path = ROOT) -> Measurement:
    """Combine the data files in data_dir into lines, covered and missing per program."""
    paths = paths if paths is not None else programs()
    names = [p.name for p in paths]
    problems = [
        f"{relative(p, root)}: another example program has the same file name; copies of "
        "them cannot be told apart"
        for p in paths
        if names.count(p.name) > 1
    ]
    executed, files, found = collect(data_dir, paths)
    problems += found
    out = []
    for p in paths:
        statements, missing = analyse(p, executed[p])
        rel = relative(p, root)
        out.append(ProgramLines(p, rel, statements, missing, files[p]))
    return Measurement(out, problems, len(list(data_dir.glob(f"{DATA_NAME}.*"))))


def analyse(path: Path, executed: set[int]) -> tuple[list[int], list[int]]:
    """The statements of path and those not executed, as coverage.py's report counts them.

    coverage.py's parser, not a Coverage object: creating one in a process that the start-up
    hook measures tells that process's own measurement not to save (coverage.py takes the
    process for one that manages coverage itself), and the tests call this in-process.
    """
    from coverage.config import DEFAULT_EXCLUDE
    from coverage.misc import join_regex
    from coverage.parser import PythonParser

    parser = PythonParser(filename=str(path), exclude=join_regex(DEFAULT_EXCLUDE))
    parser.parse_source()
    statements = parser.statements
    return sorted(statements), sorted(statements - parser.translate_lines(executed))


def missing_runs(program: ProgramLines) -> list[tuple[int, int]]:
    """The missing statements as runs not broken by a covered statement."""
    missing = set(program.missing)
    runs: list[tuple[int, int]] = []
    previous_missing = False
    for n in program.statements:
        if n in missing:
            if previous_missing:
                runs[-1] = (runs[-1][0], n)
            else:
                runs.append((n, n))
        previous_missing = n in missing
    return runs


def report(measurement: Measurement) -> str:
    lines = [f"{'program':48} {'lines':>6} {'covered':>8} {'%':>6}"]
    for p in measurement.programs:
        lines.append(f"{p.rel:48} {len(p.statements):6d} {p.covered:8d} {p.percent:6.1f}")
    lines.append(f"({measurement.data_files} data file(s))")
    return "\n".join(lines + measurement.problems)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=["start", "report"])
    ap.add_argument("dir", type=Path, help="where the data files go")
    args = ap.parse_args(argv)
    if args.action == "start":
        print(start(args.dir))
        # the hook goes into this interpreter's environment: the one the tests run with
        print(install_hook(Path(sysconfig.get_path("purelib"))))
        return 0
    print(report(measure(args.dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
