"""clusterkit.runs.horovod_wheel: the patches, the cache's names, and the build's steps (with the
download, pip and the compiler stood in for: the tests session itself builds the real wheel)."""

from __future__ import annotations

import io
import sys
import tarfile
from pathlib import Path

import pytest

from clusterkit.runs import horovod_wheel as hw

VERSIONS = {"torch": "2.14.1", "cuda": "13.0", "tensorflow": "2.21.0", "python": "3.11"}
TOP = "project(horovod)\nset(CMAKE_CXX_STANDARD 14)\n"
TORCH = "if(NOT Pytorch_VERSION VERSION_LESS 1.5.0)\n    set(CMAKE_CXX_STANDARD 14)\nendif()\n"
TF = (
    'list(APPEND TF_SOURCES "${PROJECT_SOURCE_DIR}/horovod/tensorflow/mpi_ops.cc")\n'
    'list(APPEND TF_SOURCES "${PROJECT_SOURCE_DIR}/horovod/tensorflow/xla_mpi_ops.cc")\n'
)


def release_tree(root: Path) -> Path:
    tree = root / f"horovod-{hw.VERSION}"
    for rel, text in {
        "setup.py": "",
        "CMakeLists.txt": TOP,
        "horovod/torch/CMakeLists.txt": TORCH,
        "horovod/tensorflow/CMakeLists.txt": TF,
    }.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    return tree


def test_the_patches_raise_the_cxx_standard_and_drop_the_xla_ops(tmp_path):
    tree = release_tree(tmp_path)
    hw.patch_sources(tree)
    assert (tree / "CMakeLists.txt").read_text() == TOP.replace("STANDARD 14", "STANDARD 20")
    assert "CMAKE_CXX_STANDARD 20" in (tree / "horovod/torch/CMakeLists.txt").read_text()
    tf = (tree / "horovod/tensorflow/CMakeLists.txt").read_text()
    assert "xla_mpi_ops.cc" not in tf and "mpi_ops.cc" in tf


def test_sources_that_are_not_what_the_recipe_expects_stop_the_build(tmp_path):
    tree = release_tree(tmp_path)
    hw.patch_sources(tree)
    with pytest.raises(hw.BuildError, match="raise_cxx_standard found nothing to change"):
        hw.patch_sources(tree)  # already patched: the texts it looks for are gone
    tree = release_tree(tmp_path / "another")
    (tree / "horovod/torch/CMakeLists.txt").unlink()
    with pytest.raises(hw.BuildError, match=r"torch/CMakeLists.txt: not in the Horovod"):
        hw.patch_sources(tree)


def test_the_cache_is_named_by_every_version_the_wheel_depends_on():
    name = hw.cache_name(VERSIONS)
    assert name.startswith("horovod-0.28.1-torch2.14.1-cu130-tf2.21.0-py3.11-")
    assert name == hw.cache_name(dict(VERSIONS))  # the recipe's digest is stable
    for key, other in [("torch", "2.13.0"), ("cuda", "cpu"), ("tensorflow", "2.20.0")]:
        assert hw.cache_name({**VERSIONS, key: other}) != name
    assert hw.cache_name({**VERSIONS, "python": "3.12"}) != name
    assert "/" not in hw.cache_name({**VERSIONS, "torch": "2.14.1+rocm6/x"})


def test_a_missing_framework_is_named(monkeypatch):
    monkeypatch.setattr(hw, "installed", lambda name: "2.14.1" if name == "torch" else None)
    with pytest.raises(hw.BuildError, match="lacks TensorFlow"):
        hw.framework_versions()


def test_nvcc_comes_at_pytorch_s_cuda_version_and_the_runtime_at_the_installed_one():
    assert hw.toolkit_requirements("13.0", "13.0.96") == [
        "nvidia-cuda-nvcc==13.0.*",
        "nvidia-cuda-crt==13.0.*",
        "nvidia-nvvm==13.0.*",
        "nvidia-cuda-cccl==13.0.*",
        "nvidia-cuda-runtime==13.0.96",
    ]
    assert hw.toolkit_requirements("12.8", None)[-1] == "nvidia-cuda-runtime==12.8.*"


def test_the_toolkit_gets_the_links_its_wheels_lack(tmp_path):
    lib = tmp_path / "cu13" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcudart.so.13").write_bytes(b"")
    (lib / "libnvvm.so.4").write_bytes(b"")
    hw.add_toolkit_links(lib)
    hw.add_toolkit_links(lib)  # again: nothing to add
    assert (tmp_path / "cu13" / "lib64").resolve() == lib.resolve()
    assert (lib / "libcudart.so").resolve() == (lib / "libcudart.so.13").resolve()
    assert (lib / "libnvvm.so").is_symlink()


class FakeTools:
    """pip download / install --target / wheel, as the build calls them through _run."""

    def __init__(self, fail_at: str | None = None):
        self.calls: list[list[str]] = []
        self.envs: list[dict | None] = []
        self.fail_at = fail_at

    def __call__(self, cmd, what, env=None, log=None):
        self.calls.append(cmd)
        self.envs.append(env)
        step = cmd[3]  # python -m pip STEP
        if step == self.fail_at:
            raise hw.BuildError(f"could not {what}")
        if step == "download":
            into = Path(cmd[cmd.index("-d") + 1])
            data = io.BytesIO()
            with tarfile.open(fileobj=data, mode="w:gz") as tar:
                tar.add(release_tree(into / "src"), arcname=f"horovod-{hw.VERSION}")
            (into / f"horovod-{hw.VERSION}.tar.gz").write_bytes(data.getvalue())
        elif step == "install":
            home = Path(cmd[cmd.index("--target") + 1]) / "nvidia" / "cu13"
            for rel in ("bin/nvcc", "lib/libcudart.so.13", "include/cccl/nv/target"):
                (home / rel).parent.mkdir(parents=True, exist_ok=True)
                (home / rel).write_bytes(b"")
        elif step == "wheel":
            tree = Path(cmd[-1])
            assert "STANDARD 20" in (tree / "CMakeLists.txt").read_text()  # patched first
            out = Path(cmd[cmd.index("-w") + 1])
            out.mkdir(parents=True)
            (out / f"horovod-{hw.VERSION}-cp311-cp311-linux_x86_64.whl").write_bytes(b"PK")
        return ""


@pytest.fixture
def tools(monkeypatch):
    fake = FakeTools()
    monkeypatch.setattr(hw, "_run", fake)
    monkeypatch.setattr(hw, "framework_versions", lambda: dict(VERSIONS))
    monkeypatch.setattr(hw, "torch_cuda", lambda: "13.0")
    monkeypatch.setattr(hw, "missing_tools", lambda: [])
    return fake


def test_a_wheel_is_built_once_then_reused(tools, tmp_path):
    cache = tmp_path / "wheels"
    made = hw.wheel(cache, log=lambda text: None)
    assert made.parent == cache / hw.cache_name(VERSIONS) and made.read_bytes() == b"PK"
    steps = [cmd[3] for cmd in tools.calls]
    assert steps == ["download", "install", "wheel"]
    assert [p.name for p in cache.iterdir()] == [made.parent.name]  # the scratch is gone
    assert hw.wheel(cache, log=lambda text: None) == made
    assert len(tools.calls) == 3  # nothing run again


def test_a_cuda_pytorch_builds_with_nvcc_from_pypi(tools, tmp_path):
    hw.wheel(tmp_path, log=lambda text: None)
    install = tools.calls[1]
    assert "nvidia-cuda-nvcc==13.0.*" in install and "--no-deps" in install
    env = tools.envs[2]
    home = Path(env["CUDA_HOME"])
    assert home.parts[-2:] == ("nvidia", "cu13") and env["HOROVOD_CUDA_HOME"] == str(home)
    assert env["PATH"].startswith(str(home / "bin"))
    assert str(home / "include" / "cccl") in env["CPATH"].split(":")
    assert env["HOROVOD_WITHOUT_MPI"] == "1" and env["HOROVOD_WITH_GLOO"] == "1"


def test_a_cpu_pytorch_builds_without_a_toolkit(tools, monkeypatch, tmp_path):
    monkeypatch.setattr(hw, "torch_cuda", lambda: "cpu")
    hw.wheel(tmp_path, log=lambda text: None)
    assert [cmd[3] for cmd in tools.calls] == ["download", "wheel"]
    assert "HOROVOD_CUDA_HOME" not in tools.envs[1]


def test_a_failed_build_leaves_neither_a_wheel_nor_its_scratch(tools, tmp_path):
    tools.fail_at = "wheel"
    with pytest.raises(hw.BuildError, match="could not build the Horovod wheel"):
        hw.wheel(tmp_path, log=lambda text: None)
    assert hw.cached_wheel(tmp_path / hw.cache_name(VERSIONS)) is None
    assert not list(tmp_path.glob(".horovod-build-*"))


def test_a_failed_step_shows_the_compiler_s_errors_and_keeps_its_output(tmp_path):
    script = "print('[ 10%] Building x.o'); print('x.cc:3:1: error: no member'); exit(2)"
    log = tmp_path / "build.log"
    with pytest.raises(hw.BuildError) as failed:
        hw._run([sys.executable, "-c", script], "build it", log=log)
    message = str(failed.value)
    assert message.startswith("could not build it (exit status 2):\nx.cc:3:1: error: no member")
    assert "Building x.o" not in message and f"(all of its output: {log})" in message
    assert "Building x.o" in log.read_text()


def test_the_command_line(tools, tmp_path, capsys):
    assert hw.main([str(tmp_path), "--no-build"]) == 3
    assert "no wheel in" in capsys.readouterr().err
    assert hw.main([str(tmp_path)]) == 0
    made = capsys.readouterr().out.strip()
    assert hw.main([str(tmp_path), "--no-build"]) == 0
    assert capsys.readouterr().out.strip() == made


def test_the_command_line_names_what_stopped_the_build(tools, tmp_path, capsys):
    tools.fail_at = "download"
    assert hw.main([str(tmp_path)]) == 1
    assert "error: could not download the Horovod sources" in capsys.readouterr().err


def test_missing_system_tools_stop_the_build_before_it_starts(tools, monkeypatch, tmp_path):
    monkeypatch.setattr(hw, "missing_tools", lambda: ["cmake", "python3-dev"])
    with pytest.raises(hw.BuildError, match="the build needs cmake, python3-dev: install them"):
        hw.wheel(tmp_path, log=lambda text: None)
    assert tools.calls == [] and not list(tmp_path.iterdir())


def test_this_machine_has_what_a_build_needs_or_says_what_not():
    assert set(hw.missing_tools()) <= {"cmake", "make", "g++", "python3-dev"}
