"""The trainers' argument parsers, built without PyTorch or TensorFlow.

The option reference pages render each trainer's ``build_parser()`` with sphinx-argparse.
The trainers import their framework at the top, and the docs build has neither framework, so
the trainer is run (not as ``__main__``) with its framework imports answered by stand-in
modules; ``build_parser()`` then builds the real parser, help texts and defaults included.
Choices a framework computes (model names) come out empty. The stand-ins are removed from
``sys.modules`` afterwards, and a framework that was already imported is put back.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import runpy
import sys
import types
from pathlib import Path

from clusterkit.runs import lines_hook
from clusterkit.sites.profiles import ROOT

FRAMEWORKS = ("torch", "torchvision", "tensorflow", "keras", "horovod", "numpy")
TRAINERS = {
    "pytorch": ROOT / "examples" / "pytorch" / "train_resnet.py",
    "tensorflow": ROOT / "examples" / "tensorflow" / "train_resnet_keras.py",
    "lm": ROOT / "examples" / "pytorch" / "train_lm.py",
}


class _Anything:
    """Stands for any value a framework would hand back: callable, iterable (empty), a base."""

    def __getattr__(self, name: str) -> _Anything:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __call__(self, *args, **kwargs) -> _Anything:
        return _Anything()

    def __iter__(self):
        return iter(())

    def __mro_entries__(self, bases):
        return (object,)


class _StandIn(types.ModuleType):
    __path__: list[str] = []  # noqa: RUF012 - a package, so submodules import too

    def __getattr__(self, name: str) -> _Anything:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __dir__(self) -> list[str]:
        return []


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in FRAMEWORKS:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StandIn(spec.name)

    def exec_module(self, module):
        pass


def _is_framework(name: str) -> bool:
    return name.split(".")[0] in FRAMEWORKS


def load_parser(path: Path) -> argparse.ArgumentParser:
    """``build_parser()`` of the trainer at ``path``, its frameworks stood in for."""
    saved = {k: v for k, v in sys.modules.items() if _is_framework(k)}
    for name in saved:
        del sys.modules[name]
    finder = _Finder()
    sys.meta_path.insert(0, finder)
    folder = str(Path(path).resolve().parent)
    sys.path.insert(0, folder)  # as python does for a script: the modules beside it import
    loaded = set(sys.modules)
    try:
        with lines_hook.measured():  # the program's lines that run here count as run
            namespace = runpy.run_path(str(path), run_name=f"_options_of_{Path(path).stem}")
            parser = namespace["build_parser"]()
    finally:
        sys.path.remove(folder)
        for name in set(sys.modules) - loaded:  # imported beside it, over the stand-ins
            if str(getattr(sys.modules[name], "__file__", "")).startswith(folder):
                del sys.modules[name]
        sys.meta_path.remove(finder)
        for name in [k for k in sys.modules if _is_framework(k)]:
            del sys.modules[name]
        sys.modules.update(saved)
    parser.prog = Path(path).name
    for action in parser._actions:
        if action.choices is not None and not list(action.choices):
            action.choices = None  # computed by the framework: unknown here, not "none"
    return parser


def for_rst(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Escape what reStructuredText would read as markup (``*.JPEG`` is not emphasis)."""

    def esc(text: str | None) -> str | None:
        return text.replace("*", "\\*").replace("`", "\\`") if text else text

    parser.description = esc(parser.description)
    parser.epilog = esc(parser.epilog)
    for action in parser._actions:
        action.help = esc(action.help)
    return parser


def pytorch_parser() -> argparse.ArgumentParser:
    """For sphinx-argparse (:ref:)."""
    return for_rst(load_parser(TRAINERS["pytorch"]))


def tensorflow_parser() -> argparse.ArgumentParser:
    """For sphinx-argparse (:ref:)."""
    return for_rst(load_parser(TRAINERS["tensorflow"]))


def lm_parser() -> argparse.ArgumentParser:
    """For sphinx-argparse (:ref:)."""
    return for_rst(load_parser(TRAINERS["lm"]))
