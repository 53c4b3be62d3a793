"""Run the training programs under the framework versions of each software stack (nox -s stacks).

For every stack of every site profile that some page names, CI builds (once, then reuses) an
environment with the stack's framework versions from PyPI, or its ``ci.pip`` list, under
``.nox/_stack-<hash of the package list>``; stacks with the same packages share it. In it, the
programs those pages run are tested by their own tests (those marked ``stack``: tiny runs, exact
resume, two-rank runs), with ``CLUSTERKIT_STACK`` naming the stack. A failure is reported with
the program, the stack and the error that stopped it (often the API the framework lacks).

``python -m clusterkit.runs.stack_ci [--only site/name ...]``
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from clusterkit.runs import import_gc, stack_pages
from clusterkit.sites import stacks as S
from clusterkit.sites.profiles import ROOT, ProfileError, Stack, load_site

ENVS_DIR = ROOT / ".nox"
STAMP = ".packages"
SHARED_REQUIREMENTS = ROOT / "requirements" / "ml.txt"  # the tests session's .nox/_ml
# Each program's own tests; those marked `stack` run under every stack that uses the program.
TESTS = {
    "examples/pytorch/train_resnet.py": "tests/test_pytorch_trainer.py",
    "examples/tensorflow/train_resnet_keras.py": "tests/test_tensorflow_trainer.py",
    "examples/pytorch/train_resnet_hvd.py": "tests/horovod/test_horovod_pytorch.py",
    "examples/tensorflow/train_resnet_keras_hvd.py": "tests/horovod/test_horovod_keras.py",
    "examples/pytorch/train_lm.py": "tests/test_lm_trainer.py",
    # the module the PyTorch trainers import: its rules are tested through the ResNet trainer's
    "examples/pytorch/job_runtime.py": "tests/test_pytorch_trainer.py",
    "examples/skeletons/ddp_skeleton.py": "tests/test_skeletons.py",
    "examples/skeletons/keras_skeleton.py": "tests/test_skeletons.py",
}
# Programs the pages run that the stacks session does not test, and why
NOT_TESTED = {
    "examples/pytorch/finetune_hf.py": (
        "its runs need Accelerate and Transformers at the versions requirements/ml.txt pins, "
        "with the PyTorch they were released against: tests/test_finetune_hf.py runs them in "
        "the tests session only"
    ),
}
# What a program needs beside the stack's framework, at the versions requirements/ml.txt pins:
# a stack whose pages run it gets them in its environment too
PROGRAM_PACKAGES = {
    "examples/pytorch/train_lm.py": (
        "transformers",
        "tokenizers",
        "safetensors",
        "datasets",
        "peft",
    ),
}
# The frameworks a program may need, as Python imports them (Horovod: only the Horovod twins,
# and never from PyPI)
MODULES = ("torch", "torchvision", "tensorflow", "horovod")
# The distributions whose versions the report shows
REPORTED = ("torch", "torchvision", "tensorflow", "tensorflow-cpu", "keras", "numpy", "horovod")
NOT_FROM_PYPI = {"horovod": "PyPI has only its sources; `nox -s horovod` builds it"}
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit): .+")


# --------------------------------------------------------------------------- environments
@dataclass
class Environment:
    """A virtual environment holding one package list, rebuilt only when the list changes."""

    path: Path
    packages: tuple[str, ...]

    @classmethod
    def for_route(cls, route: S.CiRoute, envs_dir: Path = ENVS_DIR) -> Environment:
        packages = S.environment_packages(route)
        return cls(envs_dir / S.environment_name(packages), packages)

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def ready(self) -> bool:
        stamp = self.path / STAMP
        return (
            self.python.exists()
            and stamp.is_file()
            and stamp.read_text().splitlines() == list(self.packages)
        )

    @property
    def target(self) -> list[str]:
        """uv's arguments after the options: the interpreter, then the packages."""
        return ["--python", str(self.python), *self.packages]

    def build(self) -> str:
        """Make the environment; '' on success, else the end of the installer's complaint.
        uv when it is installed (it fetches in parallel and links files from its cache, so
        stacks that share the CUDA wheels of PyPI's torch store them once), else pip."""
        shutil.rmtree(self.path, ignore_errors=True)
        uv = _uv()
        if uv:
            steps = [
                [uv, "venv", "--quiet", "--python", sys.executable, str(self.path)],
                # compiled at install, as pip does: PYTHONDONTWRITEBYTECODE would leave every
                # test process to compile the framework's Python again
                [uv, "pip", "install", "--quiet", "--compile-bytecode", *self.target],
            ]
        else:
            steps = [
                [sys.executable, "-m", "venv", str(self.path)],
                [str(self.python), "-m", "pip", "install", "--quiet", *self.packages],
            ]
        for cmd in steps:
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                lines = [ln for ln in (r.stderr + r.stdout).splitlines() if "WARNING" not in ln]
                return "\n".join(lines[-6:])
        (self.path / STAMP).write_text("\n".join(self.packages))
        return ""

    def hook_imports(self) -> None:
        """The start-up line of :mod:`clusterkit.runs.import_gc` in the environment's
        site-packages: the frameworks' imports of its test processes run with the collector
        paused where ``CLUSTERKIT_IMPORT_GC=paused`` (as ``nox -s stacks`` sets it)."""
        for site_dir in self.path.glob("lib/python3*/site-packages"):
            import_gc.install_hook(site_dir)

    def describe(self) -> dict[str, str]:
        """The interpreter's version and the versions of the frameworks installed."""
        code = (
            "import importlib.metadata as m, sys\n"
            "print('python', '.'.join(map(str, sys.version_info[:3])))\n"
            f"for name in {list(REPORTED)!r}:\n"
            "    try:\n"
            "        print(name, m.version(name))\n"
            "    except m.PackageNotFoundError:\n"
            "        pass\n"
        )
        out = subprocess.run([str(self.python), "-c", code], capture_output=True, text=True)
        return dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)


def _uv() -> str | None:
    try:
        from uv import find_uv_bin
    except ImportError:
        return shutil.which("uv")
    return find_uv_bin()


def pinned(requirements: Path = SHARED_REQUIREMENTS) -> set[str]:
    """The ``name==version`` lines of a requirements file (names lower-case)."""
    lines = (ln.split("#")[0].strip() for ln in requirements.read_text().splitlines())
    return {ln.lower() for ln in lines if re.fullmatch(r"[\w.-]+==[\w.+-]+", ln)}


def covered_by_tests_session(route: S.CiRoute) -> bool:
    """True when the tests session's shared environment pins exactly these packages: its run of
    the programs' whole test files already tried them under these versions."""
    return bool(route.packages) and {p.lower() for p in route.packages} <= pinned()


def unused_environments(used: set[Path], envs_dir: Path = ENVS_DIR) -> list[Path]:
    """Stack environments no stack needs any more (their package list changed)."""
    return sorted(p for p in envs_dir.glob("_stack-*") if p not in used and (p / STAMP).is_file())


# --------------------------------------------------------------------------- running tests
@dataclass(frozen=True)
class Failure:
    program: str
    test: str
    reason: str

    def line(self, stack_key: str) -> str:
        return f"FAIL {self.program} under {stack_key}: {self.reason} [{self.test}]"


@dataclass
class TestRun:
    """What the programs' tests did under one interpreter."""

    ran: list[str] = field(default_factory=list)
    not_run: dict[str, str] = field(default_factory=dict)
    passed: int = 0
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # of the test processes and their children: a measure of the work


def reason_of(text: str) -> str:
    """The line that says why a test failed: the last exception a program raised (its missing
    API, for example), else the program's own ``error:`` line, else the first line."""
    # pytest marks its report lines "E   "; torchrun prefixes each rank's lines "[rank1]: "
    text = text.replace("\\'", "'")  # quotes escaped by a repr() in an assert message
    lines = [re.sub(r"^(?:E\s+)?(?:\[[\w-]+\]:\s*)?", "", ln).strip() for ln in text.splitlines()]
    found = [
        ln
        for ln in lines
        if (_EXCEPTION.match(ln) and not ln.startswith("AssertionError"))
        or ln.startswith("error: ")
    ]
    if found:
        return found[-1]
    return next((ln for ln in lines if ln), "failed")


def run_tests(
    stack_key: str,
    python: Path | str,
    programs: list[Path],
    extra_env: dict[str, str] | None = None,
    select: str | None = None,
    timeout: int = 1200,
) -> TestRun:
    """Run the `stack` tests of ``programs`` with ``python``; ``select`` is pytest's ``-k``."""
    result = TestRun()
    start = time.perf_counter()
    missing = _missing_modules(python, programs)
    by_file: dict[str, list[str]] = {}
    for program in programs:
        rel = _rel(program)
        if rel in NOT_TESTED:
            result.not_run[rel] = NOT_TESTED[rel]
        elif rel not in TESTS:
            result.not_run[rel] = "no tests are registered for it (clusterkit.runs.stack_ci.TESTS)"
        elif missing.get(rel):
            result.not_run[rel] = missing[rel]
        else:
            by_file.setdefault(TESTS[rel], []).append(rel)
    for test_file, rels in by_file.items():
        result.ran += rels
        passed, failures, cpu = _pytest(stack_key, python, test_file, extra_env, select, timeout)
        result.passed += passed
        result.cpu_seconds += cpu
        result.failures += [Failure(" and ".join(rels), t, r) for t, r in failures]
    result.seconds = time.perf_counter() - start
    return result


def _pytest(stack_key, python, test_file, extra_env, select, timeout):
    """(tests passed, [(test, reason)], CPU seconds of pytest and the processes it waited for)."""
    env = dict(os.environ, CLUSTERKIT_STACK=stack_key, **(extra_env or {}))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(ROOT)) if p)
    with tempfile.TemporaryDirectory(prefix="stack-ci-") as tmp:
        report = Path(tmp) / "junit.xml"
        cmd = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-q"]
        cmd += [f"--junitxml={report}", "-o", "junit_logging=no", test_file]
        cmd += ["-k", select] if select else []
        finished, output, cpu = run_measured(cmd, ROOT, env, timeout, Path(tmp) / "output")
        if not finished:
            return 0, [(test_file, f"timed out after {timeout} s")], cpu
        if not report.is_file():
            return 0, [(test_file, reason_of(output))], cpu
        return (*_junit(report.read_text(), output), cpu)


def run_measured(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: float, log: Path
) -> tuple[bool, str, float]:
    """Run ``cmd`` with its output in ``log``: (finished within ``timeout``, its output, the CPU
    seconds of it and of the processes it waited for). The CPU time is the process's own (from
    wait4), so runs of several stacks at once do not count each other's."""
    with open(log, "w+b") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            pid, _, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                _, _, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.2)
        proc.returncode = 0  # reaped here: Popen must not wait for it again
        out.seek(0)
        text = out.read().decode(errors="replace")
    return pid != 0, text, usage.ru_utime + usage.ru_stime


def _junit(xml: str, output: str) -> tuple[int, list[tuple[str, str]]]:
    """(tests passed, [(test, reason)]) from pytest's JUnit XML."""
    root = ET.fromstring(xml)
    passed, failures = 0, []
    cases = list(root.iter("testcase"))
    for case in cases:
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            text = (bad.get("message") or "") + "\n" + (bad.text or "")
            failures.append((case.get("name", "?"), reason_of(text)))
        elif case.find("skipped") is None:
            passed += 1
    if not cases:  # nothing selected, or the file did not load: never a pass
        failures.append(("(collection)", f"no test ran: {reason_of(output)}"))
    return passed, failures


def _missing_modules(python, programs: list[Path]) -> dict[str, str]:
    """For each program: which of the frameworks it needs the interpreter cannot import."""
    needed = {m for p in programs for m in S.frameworks_of(p) if m in MODULES}
    code = "import importlib.util as u, sys\nfor m in sys.argv[1:]: print(m, bool(u.find_spec(m)))"
    r = subprocess.run(
        [str(python), "-c", code, *sorted(needed)],
        capture_output=True,
        text=True,
    )
    have = {ln.split()[0] for ln in r.stdout.splitlines() if ln.endswith("True")}
    out = {}
    for program in programs:
        absent = [m for m in S.frameworks_of(program) if m in MODULES and m not in have]
        if absent:
            why = "; ".join(f"{m}: {NOT_FROM_PYPI[m]}" for m in absent if m in NOT_FROM_PYPI)
            out[_rel(program)] = f"needs {', '.join(absent)}, not installed here" + (
                f" ({why})" if why else ""
            )
    return out


def _rel(path: Path | str) -> str:
    try:
        return str(Path(path).absolute().relative_to(ROOT))
    except ValueError:
        return str(path)


# --------------------------------------------------------------------------- one stack
@dataclass
class StackReport:
    stack: Stack
    lines: list[str] = field(default_factory=list)
    status: str = "pass"  # pass, fail, skip

    def say(self, label: str, text: str) -> None:
        self.lines.append(f"  {label + ':':13} {text}")


def pinned_version(name: str) -> str:
    """``name==version`` as requirements/ml.txt pins it."""
    for line in SHARED_REQUIREMENTS.read_text().splitlines():
        if line.split("==")[0].strip().lower() == name:
            return line.split("#")[0].strip()
    raise ValueError(f"{_rel(SHARED_REQUIREMENTS)} does not pin {name}")


def ended_site(stack: Stack) -> str | None:
    """Why a stack of a site out of service is not tested (its pages keep it as a record:
    nobody can load it any more); None for a site in service."""
    try:
        site = load_site(stack.site)
    except ProfileError:
        return None  # the profile's own errors are reported by the fast pass
    if site.is_current:
        return None
    return f"{site.out_of_service}: its stacks are kept on the pages as a record, no longer tested"


def route_for(stack: Stack, programs: list[Path] | None) -> S.CiRoute:
    """The stack's CI route, with what its pages' programs need beside its frameworks."""
    ended = ended_site(stack)
    if ended:
        return S.CiRoute(skip=ended)
    route = S.ci_route(stack)
    extra = {pinned_version(n) for p in programs or () for n in PROGRAM_PACKAGES.get(_rel(p), ())}
    if not route.runs or not extra:
        return route
    return S.CiRoute(packages=tuple(sorted({*route.packages, *extra})))


def environment_needed(
    stack: Stack, programs: list[Path] | None, envs_dir: Path = ENVS_DIR
) -> Environment | None:
    """The environment :func:`check_stack` will test the stack in, if it tests it at all."""
    route = route_for(stack, programs)
    usable = [p for p in programs or [] if not S.unsupported(p, stack)]
    if not (route.runs and usable) or covered_by_tests_session(route):
        return None
    return Environment.for_route(route, envs_dir)


def check_stack(
    stack: Stack,
    programs: list[Path] | None,
    envs_dir: Path = ENVS_DIR,
    select: str | None = None,
    built: Future | None = None,
    earlier: SharedRuns | None = None,
    built_by_another: bool = False,
) -> StackReport:
    """Build or reuse the stack's environment and run its programs' tests there. ``programs``:
    those of the pages that name the stack (None: no page names it); ``select``: pytest's
    ``-k``, to run fewer tests; ``built``: a build of its environment already under way
    (its result: (problem, seconds)), which ``built_by_another`` stack of this session started;
    ``earlier``: the runs of this session: an identical run is not repeated, its result stands."""
    report = StackReport(stack)
    named = programs is not None
    programs = programs or []
    route = route_for(stack, programs)
    report.say(
        "stack", f"{stack.raw['title']} ({stack.route}, {stack.accelerator}, {stack.status})"
    )
    refused = {_rel(p): S.unsupported(p, stack) for p in programs if S.unsupported(p, stack)}
    for rel, why in refused.items():
        report.say("unsupported", f"{rel}: {'; '.join(why)} (the trainer stops at start-up)")
    programs = [p for p in programs if _rel(p) not in refused]
    if not route.runs:
        report.status = "skip"
        report.say("skipped", route.skip)
        return report
    if not programs:
        report.status = "skip"
        if refused:
            report.say("skipped", "every program of its pages needs newer versions (above)")
        elif named:
            report.say("skipped", "its pages run no program of this stack's frameworks")
        else:
            report.say("skipped", "no page names this stack (front matter stacks:)")
        return report
    if covered_by_tests_session(route):
        report.say("packages", " ".join(route.packages))
        report.say(
            "covered",
            f"{_rel(SHARED_REQUIREMENTS)} pins the same versions: nox -s tests runs "
            f"{', '.join(_rel(p) for p in programs)} and all their tests under them",
        )
        return report
    env = Environment.for_route(route, envs_dir)
    report.say("packages", " ".join(route.packages) + " (and pytest, pillow, clusterkit's needs)")
    if built is None and env.ready:
        report.say("environment", f"{_rel(env.path)} (reused)")
    else:
        problem, took = built.result() if built else timed_build(env)
        if problem:
            report.status = "fail"
            report.say("environment", f"{_rel(env.path)}: pip could not install the packages")
            report.lines += [f"    {ln}" for ln in problem.splitlines()]
            report.say(
                "hint",
                "if PyPI has no x86-64 wheel of these versions, give the stack "
                "`ci: {skip: <reason>}` or `ci: {pip: [...]}` in its profile",
            )
            return report
        how = "for another stack of this run" if built_by_another else f"in {took:.0f} s"
        report.say("environment", f"{_rel(env.path)} (built {how})")
    env.hook_imports()
    versions = env.describe()
    python = versions.pop("python", "?")
    if stack.python is None:
        note = f"the stack's own is unknown: {stack.python_unknown}"
    elif python.startswith(stack.python + "."):
        note = "the same minor version"
    else:
        note = f"differs: the stack has Python {stack.python}"
    report.say("interpreter", f"{_rel(env.python)}, Python {python} ({note})")
    report.say("installed", ", ".join(f"{k} {v}" for k, v in sorted(versions.items())))
    run = shared_runs(earlier, stack.key, env, programs, select, report)
    for rel in run.ran:
        report.say("ran", f"{rel} (the tests of {TESTS[rel]} marked stack)")
    for rel, why in run.not_run.items():
        report.say("not run", f"{rel}: {why}")
    report.lines += [f"  {failure.line(stack.key)}" for failure in run.failures]
    if run.failures:
        report.status = "fail"
    elif not run.ran:
        report.status = "skip"
    report.say(
        "result",
        f"{report.status.upper()}: {run.passed} passed, {len(run.failures)} failed "
        + (
            f"in {run.seconds:.0f} s (CPU time {run.cpu_seconds:.0f} s)"
            if run.seconds
            else "(in the runs named above)"
        ),
    )
    return report


def shared_runs(
    earlier: SharedRuns | None,
    stack_key: str,
    env: Environment,
    programs: list[Path],
    select: str | None,
    report: StackReport,
) -> TestRun:
    """The tests of each program under ``env``, run once per session: a stack whose
    environment and program another stack has run already takes that run's result (Frontier's,
    Isambard-AI's and Perlmutter's PyTorch 2.10 stacks install the same packages)."""
    earlier = earlier if earlier is not None else SharedRuns()
    run, reused = TestRun(), {}
    for program in programs:
        first, part = earlier.run_once(
            (env.path, _rel(program), select),
            stack_key,
            lambda p=program: run_tests(stack_key, env.python, [p], select=select),
        )
        if first != stack_key:
            reused.setdefault(first, []).append(_rel(program))
        else:
            run.seconds += part.seconds
            run.cpu_seconds += part.cpu_seconds
        run.ran += part.ran
        run.not_run.update(part.not_run)
        run.passed += part.passed
        run.failures += part.failures
    for first, rels in reused.items():
        report.say(
            "same run",
            f"as {first} for {', '.join(rels)}: the same environment and program, so its "
            "tests stand",
        )
    return run


class SharedRuns:
    """The test runs of this session by (environment, program, select). The first stack to
    need a run makes it; a stack that needs the same run, even while it is under way in another
    thread, takes its result: ``run_once`` returns (the stack that ran it, the run)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[tuple, tuple[str, Future]] = {}

    def run_once(self, key: tuple, stack_key: str, start) -> tuple[str, TestRun]:
        with self._lock:
            first, done = self._runs.setdefault(key, (stack_key, Future()))
        if first != stack_key:
            return first, done.result()
        try:
            run = start()
        except BaseException as exc:
            done.set_exception(exc)
            raise
        done.set_result(run)
        return first, run


def timed_build(env: Environment) -> tuple[str, float]:
    began = time.perf_counter()
    return env.build(), time.perf_counter() - began


def start_builds(pool: ThreadPoolExecutor, envs: list[Environment]) -> dict[Path, Future]:
    """Build, one after another in the background, the environments not yet ready, so that
    fetching the next stack's wheels overlaps the tests of the one before."""
    builds: dict[Path, Future] = {}
    for env in envs:
        if env.path not in builds and not env.ready:
            builds[env.path] = pool.submit(timed_build, env)
    return builds


# --------------------------------------------------------------------------- all stacks
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", metavar="SITE/NAME", help="check only these")
    ap.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        metavar="N",
        help="stacks tested at once (default: 2, or 1 on one core); each run of a stack's "
        "tests keeps about one core busy",
    )
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error("--jobs wants 1 or more")
    start = time.perf_counter()
    stacks = S.all_stacks()
    unknown = sorted(set(args.only or ()) - set(stacks))
    if unknown:
        ap.error(f"no stack {', '.join(unknown)} (known: {', '.join(sorted(stacks))})")
    findings = stack_pages.check_all()
    if findings:
        print("\n".join(map(str, findings)))
    if any(f.level == "error" for f in findings):  # a page naming an unknown stack: untested
        return 1
    programs = stack_pages.programs_by_stack()
    chosen = [(k, s) for k, s in sorted(stacks.items()) if not args.only or k in args.only]
    needed = {k: environment_needed(s, programs.get(k)) for k, s in chosen}
    reports = []
    earlier = SharedRuns()
    with ThreadPoolExecutor(max_workers=1) as builder, ThreadPoolExecutor(args.jobs) as tester:
        builds = start_builds(builder, [e for e in needed.values() if e])
        checks, builders = [], set()
        for key, stack in chosen:
            env = needed[key]
            # every stack of an environment waits for its build; the first one reports it
            built = builds.get(env.path) if env else None
            by_another = built is not None and env.path in builders
            builders |= {env.path} if built else set()
            check = tester.submit(
                check_stack, stack, programs.get(key), ENVS_DIR, None, built, earlier, by_another
            )
            checks.append((key, check))
        for key, check in checks:  # in order, each as soon as it and those before are done
            report = check.result()
            print(f"stack {key}\n" + "\n".join(report.lines), flush=True)
            reports.append(report)
    if not args.only:
        routes = [route_for(s, programs.get(k)) for k, s in stacks.items()]
        used = {Environment.for_route(r).path for r in routes if r.runs}
        for old in unused_environments(used):
            print(f"removing {_rel(old)}: no stack installs its package list any more")
            shutil.rmtree(old, ignore_errors=True)
    counts = {k: sum(r.status == k for r in reports) for k in ("pass", "fail", "skip")}
    print(
        f"stacks: {counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped "
        f"in {time.perf_counter() - start:.0f} s"
    )
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
