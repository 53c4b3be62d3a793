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
    "sphinxarg.ext",  # sphinx-argparse: the trainers' option pages
    "clusterkit.pages.sphinxext",
]

myst_enable_extensions = [
    "colon_fence",
    "deflist",
    "fieldlist",
    "attrs_block",
    "attrs_inline",
    "substitution",
]
myst_heading_anchors = 3
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**/conftest.py", "**/.pytest_cache"]
nitpicky = True

# Curly quotes and ellipses, but "--" stays two hyphens: the pages are full of command-line flags.
smartquotes_action = "qe"
html_theme = "furo"
html_title = project
html_static_path = ["docs/_static"]
html_js_files = ["copy-file.js"]
html_favicon = "docs/_static/favicon.svg"
html_last_updated_fmt = None

# sphinx-tabs: tab groups with the same labels switch together on a page
sphinx_tabs_disable_tab_closing = True

# sphinx-copybutton: strip shell prompts so a copied command runs as it is
copybutton_prompt_text = r"\$ |\(\S+\) \$ |>>> |\.\.\. "
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = False
copybutton_copy_empty_lines = True
copybutton_remove_prompts = True


# Site facts as substitutions, so prose can cite a figure without retyping it:
# {{ bede_gpu_gpus }}, {{ summit_batch_usable_cores }}, {{ archer2_title }}, ... (see
# clusterkit/sites/substitutions.py; clusterkit.pages.sphinxext applies them in inline code too).
from clusterkit.sites.substitutions import site_substitutions  # noqa: E402

myst_substitutions = site_substitutions()
