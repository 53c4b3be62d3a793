"""Build hook: a wheel of clusterkit carries the data it reads (clusterkit/sites/root.py).

``pip install .`` of the repository copies sites/, contracts/, lint/ and examples/ into the
package as clusterkit/data/, so that the installed ``clusterkit`` command knows every site and
the example programs' options without the repository beside it. An editable install reads them
from the checkout instead. Everything else is configured in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
DATA_DIRS = ("sites", "contracts", "lint", "examples")  # clusterkit.sites.root.DATA_DIRS
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")


class BuildWithData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # the checkout is the data root
        target = Path(self.build_lib) / "clusterkit" / "data"
        for name in DATA_DIRS:
            if (HERE / name).is_dir():
                shutil.copytree(HERE / name, target / name, ignore=SKIP, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildWithData})
