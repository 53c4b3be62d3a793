"""Where the project's data is: the checkout the package runs from, or the copy installed with it.

The profiles (``sites/``), the recorded contracts (``contracts/``), the stale-command registry
(``lint/``) and the example programs and job scripts (``examples/``) are read from one root:

* ``CLUSTERKIT_ROOT``, when set: an explicit root (a checkout, or a copy of those folders);
* the checkout, when the package runs from one (``python -m clusterkit`` in the repository, or
  an editable install);
* else the copy a ``pip install`` of the repository puts beside the code, ``clusterkit/data/``
  (``setup.py`` copies :data:`DATA_DIRS` there when it builds the wheel).

What the tools cache goes to ``.cache/`` of a checkout, or the user's cache folder for an
installed copy (whose folder may not be writable).
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent
CHECKOUT = PACKAGE.parent
INSTALLED = PACKAGE / "data"
# The folders of the repository an installed package carries (what check-job and the profile
# checks read); docs/, tests/ and the rest stay in the repository.
DATA_DIRS = ("sites", "contracts", "lint", "examples")
MARKER = Path("sites") / "schema.yaml"


def find_root() -> Path:
    explicit = os.environ.get("CLUSTERKIT_ROOT")
    if explicit:
        return Path(explicit).expanduser().resolve()
    if (CHECKOUT / MARKER).is_file():
        return CHECKOUT
    return INSTALLED


def cache_dir(root: Path) -> Path:
    if root == INSTALLED:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        return Path(base) / "clusterkit"
    return root / ".cache"


ROOT = find_root()
CACHE = cache_dir(ROOT)
