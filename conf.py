"""Sphinx configuration. Build: ``nox -s docs`` (sphinx-build -W --keep-going -n -c . docs ...)."""

from __future__ import annotations

import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

project = "Deep learning on HPC clusters, tested"
author = "The maintainers"
copyright = f"{date.today().year}, {author}"

extensions = [
    "myst_parser",
    "sphinx_tabs.tabs",
    "sphinx_copybutton",
    "sphinx.ext.doctest",
    "clusterkit.sphinxext",
]

myst_enable_extensions = ["colon_fence", "deflist", "fieldlist", "attrs_block", "attrs_inline"]
myst_heading_anchors = 3
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**/conftest.py", "**/.pytest_cache"]
nitpicky = True

html_theme = "furo"
html_title = project
html_static_path = ["_static"] if (ROOT / "docs" / "_static").is_dir() else []
html_last_updated_fmt = None

# sphinx-tabs: tab groups with the same labels switch together on a page
sphinx_tabs_disable_tab_closing = True

# sphinx-copybutton: strip shell prompts so a copied command runs as it is
copybutton_prompt_text = r"\$ |\(\S+\) \$ |>>> |\.\.\. "
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = False
copybutton_copy_empty_lines = True
copybutton_remove_prompts = True
