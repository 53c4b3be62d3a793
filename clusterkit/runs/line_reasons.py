"""Why some lines of the example programs never run in CI: ``tests/coverage-reasons.yaml``.

The file maps each program (its path under the repository) to a list of entries::

    examples/pytorch/train_resnet.py:
      - function: setup            # where: a function (Class.method, outer.inner), or <module>
        code: "if use_cuda:"       # a fragment of the first line of one statement there
        through: "set_float32"     # optional: a later statement of the same function
        reason: needs a GPU; CI has none

An entry names a statement by the function it is in and a fragment of its first line, so it
stays put when lines move. It covers that statement: for ``if``, ``for``, ``while``, ``with``
and ``try`` the header and its body (not the ``else``/``except`` branches, which have their own
anchors: ``code: "except OSError"``), for anything else the whole statement; with ``through``,
everything from there to the end of the statement ``through`` names.

:func:`check` fails on a statement that no process ran and no entry covers
(``line-uncovered``), on an entry that covers no line left unrun (``reason-stale``), on an
anchor that names no statement or several (``reason-anchor``), on a program below
:data:`MIN_PERCENT` (``coverage-low``), and on a malformed file (``reasons-format``).
"""

from __future__ import annotations

import ast
import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

from clusterkit.runs.program_lines import Measurement, ProgramLines, missing_runs
from clusterkit.sites.errors import CheckError, Finding
from clusterkit.sites.profiles import ROOT, load_yaml

REASONS = ROOT / "tests" / "coverage-reasons.yaml"
MIN_PERCENT = 95.0
# Until every unrun line of a program has its reason, the program may not fall below the
# coverage measured when its reasons were last reviewed (nox -s tests, 2026-11-23): a line
# without a reason is then a warning, listed on the coverage page, and a drop below the floor
# fails. The PyTorch trainer's last unexplained line is the second `if device.type ==
# "cuda": torch.cuda.synchronize()` of main, which an anchor cannot tell from the first (the
# same text in the same function). The Keras trainer's floor is a point under its measured
# coverage (97.6 %, 2026-11-23), above MIN_PERCENT: its step functions run as written in
# tests/test_tensorflow_trainer.py (test_autograph_does_not_change_a_step), since coverage.py
# attributes the lines of a function that AutoGraph traced to AutoGraph's converted copy. The
# Horovod twins' floors are a point under their coverage with Horovod built in the tests
# session (99.2 % and 97.8 %, tests/horovod alone, 2026-11-23); their unrun lines are GPU-only.
FLOORS = {
    "examples/pytorch/train_resnet.py": 96.0,
    "examples/tensorflow/train_resnet_keras.py": 96.0,
    "examples/pytorch/train_resnet_hvd.py": 98.0,
    "examples/tensorflow/train_resnet_keras_hvd.py": 96.0,
}
# Programs whose tests run in a session of their own, not in `nox -t ci`: (the distribution
# they need, the session). Where that distribution is not installed, their lines are not judged
# (tests that read their source or load them with stand-ins still run some); the page says
# where they are run. The Horovod twins need Horovod built from its sources (PyPI has no
# wheel), minutes of a cold CI run for two trainers only ended or historical sites used.
ELSEWHERE = {
    "examples/pytorch/train_resnet_hvd.py": ("horovod", "nox -s horovod"),
    "examples/tensorflow/train_resnet_keras_hvd.py": ("horovod", "nox -s horovod"),
}


def tested_elsewhere(rel: str) -> str | None:
    """The session that tests the program ``rel``, where this environment cannot."""
    if rel not in ELSEWHERE:
        return None
    needs, session = ELSEWHERE[rel]
    try:
        importlib.metadata.version(needs)
    except importlib.metadata.PackageNotFoundError:
        return session
    return None


MIN_REASON = 8
KEYS = {"function", "code", "through", "reason"}
MODULE = "<module>"


@dataclass(frozen=True)
class Reason:
    program: str  # path under the repository
    line: int  # of the entry in the reasons file
    function: str
    code: str
    reason: str
    first: int = 0  # the lines it covers in the program (0: the anchor did not resolve)
    last: int = 0

    def covers(self, n: int) -> bool:
        return self.first <= n <= self.last


# --------------------------------------------------------------------------- anchors
def _scopes(tree: ast.AST) -> list[tuple[str, ast.AST]]:
    """(qualified function name, statement) for every statement, innermost def/class first."""
    out: list[tuple[str, ast.AST]] = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt | ast.ExceptHandler):
                out.append((scope, child))
            inner = scope
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = child.name if scope == MODULE else f"{scope}.{child.name}"
            visit(child, inner)

    visit(tree, MODULE)
    return out


def _extent(node: ast.AST) -> tuple[int, int]:
    """The lines an anchor on this statement covers: a compound statement's header and body."""
    body = getattr(node, "body", None)
    if isinstance(node, ast.If | ast.For | ast.AsyncFor | ast.While | ast.With | ast.Try) and body:
        return node.lineno, body[-1].end_lineno or node.lineno
    return node.lineno, node.end_lineno or node.lineno


class Anchors:
    """The statements of one program, found by function and first-line fragment."""

    def __init__(self, path: Path):
        self.text = path.read_text(encoding="utf-8")
        self.lines = self.text.splitlines()
        self.statements = _scopes(ast.parse(self.text, str(path)))
        self.functions = {scope for scope, _ in self.statements}

    def find(self, function: str, code: str) -> tuple[ast.AST | None, str]:
        """The one statement of ``function`` whose first line holds ``code``, or why none."""
        if function not in self.functions:
            return None, f"no function {function!r} here"
        hits: dict[int, ast.AST] = {}
        for scope, node in self.statements:
            if scope == function and code in self.lines[node.lineno - 1]:
                hits.setdefault(node.lineno, node)  # the outermost statement of a line
        if len(hits) == 1:
            return next(iter(hits.values())), ""
        if not hits:
            return None, f"no statement of {function} starts on a line holding {code!r}"
        where = ", ".join(str(n) for n in sorted(hits))
        return None, f"{code!r} starts {len(hits)} statements of {function} (lines {where})"

    def function_at(self, line: int) -> str:
        """The innermost function holding ``line`` (for messages)."""
        best, size = MODULE, None
        for scope, node in self.statements:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                lo, hi = node.lineno, node.end_lineno or node.lineno
                if lo <= line <= hi and (size is None or hi - lo < size):
                    name = node.name if scope == MODULE else f"{scope}.{node.name}"
                    best, size = name, hi - lo
        return best

    def source(self, line: int) -> str:
        return self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""


# --------------------------------------------------------------------------- the file
def load(path: Path = REASONS, root: Path = ROOT) -> tuple[list[Reason], list[Finding]]:
    """The entries of the reasons file, their anchors resolved to lines, and format findings."""
    if not path.is_file():
        return [], []
    try:
        data = load_yaml(path) or {}
    except CheckError as exc:  # a YAML syntax error, with its line
        return [], exc.findings
    if not isinstance(data, dict):
        return [], [Finding(path, 1, "reasons-format", "expected a mapping of program: entries")]
    reasons: list[Reason] = []
    findings: list[Finding] = []
    anchors: dict[str, Anchors] = {}
    for program, entries in data.items():
        where = getattr(data, "lines", {}).get(program, 1)
        target = root / str(program)
        if not str(program).startswith("examples/") or not target.is_file():
            findings.append(
                Finding(path, where, "reasons-format", f"{program}: no such example program")
            )
            continue
        if not isinstance(entries, list):
            findings.append(Finding(path, where, "reasons-format", f"{program}: expected a list"))
            continue
        anchors.setdefault(str(program), Anchors(target))
        for i, entry in enumerate(entries):
            line = entries.lines[i] if hasattr(entries, "lines") else where
            reason, problems = _entry(str(program), line, entry, anchors[str(program)])
            findings += [Finding(path, line, rule, text) for rule, text in problems]
            if reason is not None:
                reasons.append(reason)
    return reasons, findings


def _entry(program: str, line: int, entry, anchors: Anchors):
    if not isinstance(entry, dict) or not {"function", "code", "reason"} <= set(entry):
        return None, [("reasons-format", "an entry needs function, code and reason")]
    unknown = set(entry) - KEYS
    if unknown:
        return None, [("reasons-format", f"unknown key(s) {', '.join(sorted(unknown))}")]
    function, code = str(entry["function"]), str(entry["code"])
    text = " ".join(str(entry["reason"]).split())
    problems = []
    if len(text) < MIN_REASON:
        problems.append(("reasons-format", f"{program} {function}: the reason says nothing"))
    node, why = anchors.find(function, code)
    if node is None:
        return None, [*problems, ("reason-anchor", f"{program}: {why}")]
    first, last = _extent(node)
    if "through" in entry:
        end, why = anchors.find(function, str(entry["through"]))
        if end is None:
            return None, [*problems, ("reason-anchor", f"{program}: through: {why}")]
        if end.lineno < first:
            return None, [
                *problems,
                ("reason-anchor", f"{program}: through {entry['through']!r} comes before code"),
            ]
        last = max(last, end.end_lineno or end.lineno)
    return Reason(program, line, function, code, text, first, last), problems


# --------------------------------------------------------------------------- the check
@dataclass
class Run:
    """A run of statements no process executed, with its reason if one covers it."""

    program: ProgramLines
    first: int
    last: int
    function: str
    source: str
    reason: Reason | None


def runs(measurement: Measurement, reasons: list[Reason]) -> list[Run]:
    """Every unrun statement grouped into runs, split where the function or the reason
    changes."""
    out: list[Run] = []
    for program in measurement.programs:
        anchors = Anchors(program.path)
        mine = [r for r in reasons if r.program == program.rel]
        for lo, hi in missing_runs(program):
            current: Run | None = None
            for n in (m for m in program.missing if lo <= m <= hi):
                why = next((r for r in mine if r.covers(n)), None)
                function = anchors.function_at(n)
                if current is not None and (current.reason, current.function) == (why, function):
                    current.last = n
                    continue
                current = Run(program, n, n, function, anchors.source(n), why)
                out.append(current)
    return out


def check(
    measurement: Measurement, reasons: list[Reason], reasons_path: Path = REASONS
) -> list[Finding]:
    findings: list[Finding] = []
    away = {p.rel for p in measurement.programs if tested_elsewhere(p.rel)}
    measurement = Measurement(
        [p for p in measurement.programs if p.rel not in away],
        measurement.problems,
        measurement.data_files,
    )
    reasons = [r for r in reasons if r.program not in away]
    all_runs = runs(measurement, reasons)
    for run in all_runs:
        floor = FLOORS.get(run.program.rel)
        if run.reason is None:
            span = f"line {run.first}" if run.first == run.last else f"lines {run.first}-{run.last}"
            findings.append(
                Finding(
                    run.program.path,
                    run.first,
                    "line-uncovered",
                    f"{span} ({run.function}: {run.source!r}) ran in no test and no entry of "
                    f"{reasons_path.name} says why: test it, or add a reason",
                    level="warning" if floor is not None else "error",
                )
            )
    used = {id(run.reason) for run in all_runs if run.reason is not None}
    for reason in reasons:
        if id(reason) not in used:
            findings.append(
                Finding(
                    reasons_path,
                    reason.line,
                    "reason-stale",
                    f"{reason.program} {reason.function} {reason.code!r}: every line it covers "
                    f"(lines {reason.first}-{reason.last}) ran; remove the entry",
                )
            )
    for program in measurement.programs:
        floor = FLOORS.get(program.rel, MIN_PERCENT)
        if program.percent < floor:
            findings.append(
                Finding(
                    program.path,
                    1,
                    "coverage-low",
                    f"{program.covered} of {len(program.statements)} statements ran "
                    f"({program.percent:.1f} %), below {floor:.0f} %",
                )
            )
    return findings
