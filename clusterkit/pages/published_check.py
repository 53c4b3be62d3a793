"""The emulator against the published-scripts corpus: agreement with the expected verdicts.

``python -m clusterkit.pages.published_check [--limit S] [--update]`` judges every script of
``tests/corpus/published/manifest.yaml`` with the emulator's public entry points
(:func:`clusterkit.emulate.sbatch.check_slurm_script`,
:func:`clusterkit.emulate.lsf.check_lsf_script`), prints the agreement figure and each
disagreement, and exits non-zero when a script crashes the emulator, when a disagreement has
no ``reason`` in the manifest, or when agreement is below the threshold. ``--update`` writes
what the emulator says today into ``emulator_today`` and drops the ``reason`` of entries that
now agree.

Each script is judged in a worker process with a time limit: a script still being judged when
the limit is up counts as a disagreement (``timeout``), and the worker is replaced.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from clusterkit.sites import published_manifest as M

THRESHOLD = 0.95
LIMIT_S = 15.0  # per script; the whole machine should take well under a second


@dataclass
class Outcome:
    """What the emulator said about one script."""

    verdict: str  # accept | refuse | crash | timeout
    errors: list[tuple[int, str]] = field(default_factory=list)  # (line, rule) of each error
    messages: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rules(self) -> list[str]:
        return [rule for _, rule in self.errors]

    def summary(self) -> str:
        if self.verdict == "timeout":
            return f"still judging after {self.seconds:.0f} s"
        if self.verdict == "crash":
            return f"crashed: {self.messages[0] if self.messages else '?'}"
        if self.verdict == "accept":
            return "accepts"
        return "refuses: " + "; ".join(f"[{r}]" for r in dict.fromkeys(self.rules))


# --------------------------------------------------------------------------- judging
def judge_one(path: Path, site_name: str, scheduler: str) -> Outcome:
    from clusterkit.emulate.lsf import check_lsf_script
    from clusterkit.emulate.sbatch import check_slurm_script
    from clusterkit.sites.profiles import load_site

    start = time.perf_counter()
    check = check_lsf_script if scheduler == "lsf" else check_slurm_script
    try:
        report = check(path, load_site(site_name))
    except Exception as exc:  # a crash is recorded, not raised: it is a finding of its own
        return Outcome("crash", [], [f"{type(exc).__name__}: {exc}"], time.perf_counter() - start)
    errors = report.errors
    return Outcome(
        "refuse" if errors else "accept",
        [(f.line, f.rule) for f in errors],
        [f"{f.line}: [{f.rule}] {f.message}" for f in errors],
        time.perf_counter() - start,
    )


def _worker(jobs: list[tuple[str, str, str]], conn) -> None:
    for path, site, scheduler in jobs:
        conn.send(judge_one(Path(path), site, scheduler))
    conn.close()


def _path(entry: dict, root: Path) -> Path:
    return M.script_path(entry) if entry.get("rebuilt") else root / entry["file"]


def available(entries: list[dict]) -> list[dict]:
    """The entries whose script text is here: every kept one, and each rebuilt one that
    benchmarks/collect_corpus.py has written (see published_manifest.rebuild_command)."""
    return [e for e in entries if M.script_path(e).is_file()]


def judge_all(
    entries: list[dict], root: Path = M.CORPUS, limit: float = LIMIT_S
) -> dict[str, Outcome]:
    """Every entry's outcome, keyed by its ``file``; each script gets ``limit`` seconds."""
    ctx = multiprocessing.get_context("spawn")
    jobs = [(str(_path(e, root)), e["site"], e["scheduler"]) for e in entries]
    out: dict[str, Outcome] = {}
    i = 0
    while i < len(jobs):
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_worker, args=(jobs[i:], child), daemon=True)
        proc.start()
        child.close()
        while i < len(jobs):
            if not parent.poll(limit):
                proc.kill()
                out[entries[i]["file"]] = Outcome("timeout", seconds=limit)
                i += 1
                break
            try:
                out[entries[i]["file"]] = parent.recv()
            except EOFError:  # the worker died (e.g. killed by the system)
                out[entries[i]["file"]] = Outcome("crash", [], ["the worker process died"])
                i += 1
                break
            i += 1
        proc.join(5)
        parent.close()
    return out


# --------------------------------------------------------------------------- comparing
def disagreement(entry: dict, outcome: Outcome) -> str | None:
    """Why the emulator's outcome differs from the expected verdict, or None."""
    expected = entry["expected"]
    if outcome.verdict in {"crash", "timeout"}:
        return outcome.summary()
    if outcome.verdict != expected:
        return f"expected {expected}, emulator {outcome.summary()}"
    if expected == "refuse" and not any(matches(err, outcome) for err in entry["errors"]):
        wanted = sorted({r for err in entry["errors"] for r in err["rules"]})
        return f"refuses for another reason: {outcome.summary()} (expected one of {wanted})"
    return None


def matches(error: dict, outcome: Outcome) -> bool:
    """Whether the emulator reports an expected error: under one of its rule names, or (as a
    rule may be named otherwise) at its line."""
    return any(
        rule in error["rules"] or (error["line"] > 0 and line == error["line"])
        for line, rule in outcome.errors
    )


@dataclass
class Agreement:
    judged: int
    agreed: int
    disagreements: dict[str, str]  # file -> what differs
    unexplained: list[str]  # disagreements without a reason in the manifest
    crashes: list[str]
    stale: list[str]  # entries with a reason that now agree

    @property
    def rate(self) -> float:
        return self.agreed / self.judged if self.judged else 0.0

    def lines(self) -> list[str]:
        out = [f"agreement: {self.agreed}/{self.judged} = {100 * self.rate:.1f} %"]
        out += [f"  disagrees: {f}: {why}" for f, why in sorted(self.disagreements.items())]
        out += [f"  no reason in the manifest: {f}" for f in self.unexplained]
        out += [f"  crash: {f}" for f in self.crashes]
        out += [f"  agrees now, reason to drop: {f}" for f in self.stale]
        return out


def compare(entries: list[dict], outcomes: dict[str, Outcome]) -> Agreement:
    diffs, unexplained, crashes, stale = {}, [], [], []
    judged = [e for e in entries if e.get("expected") in M.VERDICTS]
    for e in judged:
        outcome = outcomes[e["file"]]
        why = disagreement(e, outcome)
        if outcome.verdict == "crash":
            crashes.append(e["file"])
        if why is None:
            if e.get("reason"):
                stale.append(e["file"])
            continue
        diffs[e["file"]] = why
        if not e.get("reason"):
            unexplained.append(e["file"])
    agreed = len(judged) - len(diffs)
    return Agreement(len(judged), agreed, diffs, unexplained, crashes, stale)


def update(manifest: dict, outcomes: dict[str, Outcome]) -> None:
    """Record today's emulator outcome; drop reasons of entries that agree now."""
    for e in manifest["scripts"]:
        outcome = outcomes.get(e["file"])
        if outcome is None or e.get("expected") not in M.VERDICTS:
            continue
        if disagreement(e, outcome) is None:
            e.pop("reason", None)
            e.pop("emulator_today", None)
        else:
            e["emulator_today"] = outcome.summary()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=float, default=LIMIT_S, help="seconds per script")
    ap.add_argument("--update", action="store_true", help="rewrite emulator_today")
    args = ap.parse_args(argv)
    manifest = M.load()
    here = available(manifest["scripts"])
    missing = len(manifest["scripts"]) - len(here)
    if missing:
        print(f"{missing} rebuilt script(s) not here, not judged: {M.rebuild_command()}")
    outcomes = judge_all(here, limit=args.limit)
    result = compare(here, outcomes)
    print("\n".join(result.lines()))
    if args.update:
        update(manifest, outcomes)
        M.dump(manifest)
    bad = result.unexplained or result.crashes or result.rate < THRESHOLD
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
