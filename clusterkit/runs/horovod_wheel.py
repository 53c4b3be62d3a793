"""A Horovod wheel for the frameworks of the running environment, built once and kept.

Horovod's last release, 0.28.1, is on PyPI as sources only, and they do not build against
today's PyTorch and TensorFlow as released (``docs/howto/horovod.md``). :func:`wheel` builds it
the way that page shows: the source release with its C++ standard raised and its XLA ops left
out, built without pip's build isolation against the installed frameworks. The wheel is kept in
a cache directory under a name made of the versions it was built for (Horovod, PyTorch,
TensorFlow, Python) and of the recipe, so a later run finds it and installs it in
seconds; another framework version or another recipe builds a new one.

A CUDA build of PyTorch makes Horovod compile its CUDA kernels, with nvcc, even when no GPU
operation is asked for. The toolkit comes from PyPI, at PyTorch's CUDA version, into the build's
scratch directory; the environment's own CUDA headers (PyTorch's dependencies) fill in the rest.
The scratch directory (sources, toolkit, objects: several hundred MB) goes once the wheel exists.

``python -m clusterkit.runs.horovod_wheel CACHE_DIR`` prints the wheel's path, building it if needed
(``--no-build``: only if it is there).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as metadata
import inspect
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from pathlib import Path

VERSION = "0.28.1"
CXX_STANDARD = "20"  # PyTorch 2.14's headers need C++20, TensorFlow 2.21's C++17
GPU_ARCHITECTURES = "90"  # one architecture is enough for a build that tests on the CPU
TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu")
PIP = [sys.executable, "-m", "pip"]  # builds against the frameworks of this interpreter
# the NVIDIA wheels that make a CUDA toolkit for Horovod's kernels, at PyTorch's CUDA version
# (cccl: the C++ headers that CUDA's own headers include, e.g. nv/target)
TOOLKIT_PACKAGES = ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-cccl")
BUILD_ENV = {
    "HOROVOD_WITH_PYTORCH": "1",
    "HOROVOD_WITH_TENSORFLOW": "1",
    "HOROVOD_WITHOUT_MXNET": "1",
    "HOROVOD_WITHOUT_MPI": "1",  # horovodrun --gloo starts the ranks
    "HOROVOD_WITH_GLOO": "1",
    "HOROVOD_BUILD_CUDA_CC_LIST": GPU_ARCHITECTURES,
    # unoptimised (-O0 -g): built without CUDA on 2 idle cores (2026-11-24) in 305 s, against
    # 393 s with Horovod's default -O3 -g; the tests run on CPUs and on tiny tensors
    "HOROVOD_DEBUG": "1",
}


class BuildError(RuntimeError):
    """The build stopped; the message names the step and ends with the tool's last lines."""


# --------------------------------------------------------------------------- what to build for
def installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def framework_versions() -> dict[str, str]:
    """PyTorch's (and the CUDA it was built with), TensorFlow's and Python's versions in this
    environment, read without importing the frameworks."""
    torch = installed("torch")
    tensorflow = next(filter(None, map(installed, TENSORFLOW_DISTRIBUTIONS)), None)
    if torch is None or tensorflow is None:
        raise BuildError(
            "Horovod is built for PyTorch and TensorFlow together, and this environment "
            f"lacks {'PyTorch' if torch is None else 'TensorFlow'}"
        )
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return {"torch": torch, "cuda": torch_cuda(), "tensorflow": tensorflow, "python": python}


def torch_cuda() -> str:
    """The CUDA version PyTorch was built with ("13.0"), or "cpu", from its torch/version.py."""
    path = Path(metadata.distribution("torch").locate_file("torch/version.py"))
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    m = re.search(r"^cuda\b[^=\n]*=\s*['\"]([\d.]+)['\"]", text, re.M)
    return m[1] if m else "cpu"


def recipe_digest() -> str:
    """Changes when the recipe does: the patches, the build variables, the toolkit's parts."""
    recipe = [CXX_STANDARD, sorted(BUILD_ENV.items()), TOOLKIT_PACKAGES]
    recipe += [(rel, [inspect.getsource(f) for f in fs]) for rel, fs in sorted(PATCHES.items())]
    return hashlib.sha256(repr(recipe).encode()).hexdigest()[:8]


def cache_name(versions: dict[str, str]) -> str:
    """The cache entry for these versions: readable, and safe as a directory name."""
    name = (
        f"horovod-{VERSION}-torch{versions['torch']}-{_cuda_tag(versions['cuda'])}"
        f"-tf{versions['tensorflow']}"
        f"-py{versions['python']}-{recipe_digest()}"
    )
    return re.sub(r"[^\w.-]", "_", name)


def _cuda_tag(cuda: str) -> str:
    return "cpu" if cuda == "cpu" else f"cu{cuda.replace('.', '')}"


def cached_wheel(entry: Path) -> Path | None:
    found = sorted(entry.glob(f"horovod-{VERSION}-*.whl"))
    return found[0] if found else None


# --------------------------------------------------------------------------- the sources
def raise_cxx_standard(text: str) -> str:
    return text.replace("CMAKE_CXX_STANDARD 14", f"CMAKE_CXX_STANDARD {CXX_STANDARD}")


def drop_xla_ops(text: str) -> str:
    """The XLA ops include highwayhash headers that the TensorFlow wheel does not ship."""
    return "".join(line for line in text.splitlines(keepends=True) if "xla_mpi_ops.cc" not in line)


PATCHES = {
    "CMakeLists.txt": (raise_cxx_standard,),
    "horovod/torch/CMakeLists.txt": (raise_cxx_standard,),
    "horovod/tensorflow/CMakeLists.txt": (drop_xla_ops,),
}


def patch_sources(tree: Path) -> None:
    """Apply :data:`PATCHES`; a file missing, or one a patch leaves as it was, is an error
    (the release's files are not what the recipe expects)."""
    for rel, patches in PATCHES.items():
        path = tree / rel
        if not path.is_file():
            raise BuildError(f"{path}: not in the Horovod {VERSION} sources")
        text = path.read_text(encoding="utf-8")
        for patch in patches:
            changed = patch(text)
            if changed == text:
                raise BuildError(f"{path}: {patch.__name__} found nothing to change")
            text = changed
        path.write_text(text, encoding="utf-8")


def unpack(archive: Path, into: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    tree = into / f"horovod-{VERSION}"
    if not (tree / "setup.py").is_file():
        raise BuildError(f"{archive}: no horovod-{VERSION}/setup.py in it")
    return tree


# --------------------------------------------------------------------------- the CUDA toolkit
def toolkit_requirements(cuda: str, runtime: str | None) -> list[str]:
    """nvcc and its parts at PyTorch's CUDA version; the CUDA runtime at the installed one (its
    headers must match the library PyTorch loads)."""
    pins = [f"{name}=={cuda}.*" for name in TOOLKIT_PACKAGES]
    return [*pins, f"nvidia-cuda-runtime=={runtime or cuda + '.*'}"]


def install_toolkit(cuda: str, target: Path) -> Path:
    """The NVIDIA wheels unpacked into ``target``; return the toolkit's root (CUDA_HOME)."""
    packages = toolkit_requirements(cuda, installed("nvidia-cuda-runtime"))
    _run(
        [*PIP, "install", "--quiet", "--no-deps", "--target", str(target), *packages],
        "install the CUDA compiler from PyPI",
    )
    major = cuda.split(".")[0]
    home = target / "nvidia" / f"cu{major}"
    if not (home / "bin" / "nvcc").is_file():
        raise BuildError(f"{home}: no bin/nvcc after installing {' '.join(packages)}")
    add_toolkit_links(home / "lib")
    return home


def add_toolkit_links(lib: Path) -> None:
    """The links a toolkit installer makes and the wheels lack: lib64 (where nvcc looks) and the
    unversioned names of the shared libraries (what CMake's FindCUDAToolkit looks for)."""
    if not (lib.parent / "lib64").exists():
        (lib.parent / "lib64").symlink_to(lib.name)
    for versioned in lib.glob("lib*.so.*"):
        plain = lib / (versioned.name.split(".so.")[0] + ".so")
        if not plain.exists():
            plain.symlink_to(versioned.name)


def environment_cuda_include(cuda: str) -> Path | None:
    """The CUDA headers PyTorch's dependencies put into this environment (cuBLAS, cuSPARSE...),
    which PyTorch's CUDA headers include."""
    major = cuda.split(".")[0]
    include = Path(sysconfig.get_path("purelib")) / "nvidia" / f"cu{major}" / "include"
    return include if include.is_dir() else None


# --------------------------------------------------------------------------- the build
def build_environment(cuda_home: Path | None, extra_include: Path | None) -> dict[str, str]:
    env = {**os.environ, **BUILD_ENV, "MAKEFLAGS": f"-j{os.cpu_count() or 2}"}
    if cuda_home is None:
        return env
    env.update(
        CUDA_HOME=str(cuda_home),
        HOROVOD_CUDA_HOME=str(cuda_home),
        PATH=f"{cuda_home / 'bin'}{os.pathsep}{env.get('PATH', '')}",
    )
    # the environment's CUDA headers, and CCCL's (nvcc finds those itself; g++ does not)
    include = [p for p in (extra_include, cuda_home / "include" / "cccl") if p and p.is_dir()]
    env["CPATH"] = os.pathsep.join([*map(str, include), *filter(None, [env.get("CPATH")])])
    return env


def missing_tools() -> list[str]:
    """What the build needs from the system and does not find (Debian's package names)."""
    missing = [tool for tool in ("cmake", "make", "g++") if shutil.which(tool) is None]
    if not Path(sysconfig.get_paths()["include"], "Python.h").is_file():
        missing.append("python3-dev")  # the headers of this Python, for the extensions
    return missing


def build(entry: Path, log=print) -> Path:
    """Build the wheel into ``entry`` (a cache entry); the scratch directory is removed."""
    missing = missing_tools()
    if missing:
        raise BuildError(f"the build needs {', '.join(missing)}: install them first")
    entry.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".horovod-build-", dir=entry.parent))
    try:
        log(f"horovod {VERSION}: downloading its sources")
        sources = ["--no-deps", "--no-binary", ":all:", f"horovod=={VERSION}"]
        _run(
            [*PIP, "download", "--quiet", *sources, "-d", str(scratch)],
            "download the Horovod sources from PyPI",
        )
        tree = unpack(scratch / f"horovod-{VERSION}.tar.gz", scratch)
        patch_sources(tree)
        cuda = torch_cuda()
        cuda_home = include = None
        if cuda != "cpu":
            log(f"horovod {VERSION}: PyTorch is a CUDA {cuda} build; fetching nvcc {cuda}")
            cuda_home = install_toolkit(cuda, scratch / "cuda")
            include = environment_cuda_include(cuda)
        log(f"horovod {VERSION}: compiling (minutes)")
        built = scratch / "wheel"
        _run(
            [*PIP, "wheel", "--no-build-isolation", "--no-deps", "-w", str(built), str(tree)],
            "build the Horovod wheel",
            env=build_environment(cuda_home, include),
            log=entry.parent / f"{entry.name}.log",
        )
        (wheel,) = built.glob("horovod-*.whl")
        entry.mkdir(parents=True, exist_ok=True)
        final = entry / wheel.name
        shutil.move(str(wheel), final.with_suffix(".part"))
        os.replace(final.with_suffix(".part"), final)  # a wheel in the cache is whole
        return final
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def cache_entry(cache: Path) -> Path:
    """Where the wheel for this environment's frameworks is kept."""
    return cache.resolve() / cache_name(framework_versions())


def wheel(cache: Path, log=print) -> Path:
    """The cached wheel for this environment's frameworks, built first if there is none."""
    entry = cache_entry(cache)
    found = cached_wheel(entry)
    if found is not None:
        log(f"horovod {VERSION}: reusing {found}")
        return found
    start = time.perf_counter()
    made = build(entry, log)
    log(f"horovod {VERSION}: built {made.name} in {time.perf_counter() - start:.0f} s")
    return made


def _run(cmd: list[str], what: str, env: dict[str, str] | None = None, log: Path | None = None):
    """Run a step; on failure, a BuildError with the step's last lines (all of them in ``log``)."""
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if r.returncode:
        where = ""
        if log is not None:
            log.write_text(r.stdout, encoding="utf-8")
            where = f"\n(all of its output: {log})"
        tail = "\n".join(_telling_lines(r.stdout))
        raise BuildError(f"could not {what} (exit status {r.returncode}):\n{tail}{where}")
    return r.stdout


def _telling_lines(output: str, limit: int = 30) -> list[str]:
    """The compiler's and CMake's error lines if there are any, else the last lines."""
    lines = output.rstrip().splitlines()
    errors = [ln for ln in lines if re.search(r"\berror:|CMake Error|\*\*\* \[", ln)]
    return (errors or lines)[-limit:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cache", type=Path, help="directory of built wheels")
    ap.add_argument(
        "--no-build", action="store_true", help="print the cached wheel; exit 3 if there is none"
    )
    args = ap.parse_args(argv)
    try:
        if args.no_build:
            found = cached_wheel(cache_entry(args.cache))
            if found is None:
                print(f"no wheel in {cache_entry(args.cache)}", file=sys.stderr)
                return 3
        else:
            found = wheel(args.cache, log=lambda text: print(text, file=sys.stderr, flush=True))
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
