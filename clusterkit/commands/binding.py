"""A rank bound to fewer cores than the data loader workers it starts.

``srun --cpu-bind=map_cpu:0,8,16,24`` gives each rank one core; a trainer started with
``--workers 4`` then forks four loader processes that share that core with the rank, and the
GPU waits for data. The same goes for ``mask_cpu:`` masks with few bits, and for an explicit
``--cpus-per-task`` smaller than the workers. Rule ``binding-workers``, in job scripts and in
the shell blocks of pages.
"""

from __future__ import annotations

import re
from pathlib import Path

from clusterkit.grammars import myst as P
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import ROOT

LAUNCHERS = {"srun"}


def _option(words: list[str], name: str) -> str | None:
    for i, w in enumerate(words):
        if w.startswith(name + "="):
            return w.split("=", 1)[1]
        if w == name and i + 1 < len(words):
            return words[i + 1]
    return None


def cores_per_rank(srun_args: list[str]) -> tuple[int, str] | None:
    """(fewest cores a rank gets, how it was bound), when the srun options fix it."""
    bind = _option(srun_args, "--cpu-bind") or ""
    m = re.search(r"\b(?P<kind>map_cpu|mask_cpu):(?P<list>[\w,]+)", bind)
    if m and m["kind"] == "map_cpu":
        return 1, f"--cpu-bind={bind}"
    if m:
        try:
            bits = [
                bin(int(x, 16 if x.lower().startswith("0x") else 10)).count("1")
                for x in m["list"].split(",")
                if x
            ]
        except ValueError:
            return None
        return (min(bits), f"--cpu-bind={bind}") if bits else None
    cpus = _option(srun_args, "--cpus-per-task") or _option(srun_args, "-c")
    if cpus and cpus.isdigit():
        return int(cpus), f"--cpus-per-task={cpus}"
    return None


def _workers(program_args: list[str]) -> int | None:
    value = _option(program_args, "--workers")
    return int(value) if value and value.isdigit() else None


def check_command(path: Path | str, words: list[P.Word]) -> list[Finding]:
    texts = [w.text for w in words]
    if not texts or Path(texts[0]).name not in LAUNCHERS:
        return []
    # the launcher's options end at the first word that is not an option or its value
    prog = next(
        (i for i, t in enumerate(texts[1:], 1) if re.search(r"(^|/)python[\d.]*$|\.py$", t)),
        None,
    )
    if prog is None:
        return []
    cores = cores_per_rank(texts[1:prog])
    workers = _workers(texts[prog:])
    if cores is None or workers is None or cores[0] >= workers:
        return []
    line = next((w.line for w in words if w.text.startswith("--workers")), words[0].line)
    return [
        Finding(
            path,
            line,
            "binding-workers",
            f"{cores[1]} gives each rank {cores[0]} core(s), but the trainer starts {workers} "
            "loader workers per rank: give each rank at least that many cores "
            "(--cpus-per-task with --cpu-bind=cores)",
        )
    ]


def check_lines(path: Path | str, lines: list[tuple[int, str]], console: bool) -> list[Finding]:
    out = []
    for cmd in P.logical_commands(lines, console=console):
        for simple in P.split_commands(cmd.words):
            out += check_command(path, list(P.command_words(simple)))
    return out


def lint_all(root: Path = ROOT) -> list[Finding]:
    out: list[Finding] = []
    for page in P.scan_pages(root / "docs"):
        for b in page.blocks:
            if b.is_shell and not b.is_include:
                out += check_lines(page.path, list(b.body), console=b.lang == "console")
    for path in P.example_files(root / "examples"):
        text = path.read_text(encoding="utf-8")
        if P.file_kind(path, text) == "shell":
            out += check_lines(path, list(enumerate(text.splitlines(), 1)), console=False)
    return out
