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
    "clusterkit.sphinxext",
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
# {{ bede_gpu_gpus }}, {{ summit_batch_usable_cores }}, {{ archer2_title }}, ... Hyphens in site
# and partition names become underscores ({{ isambard_ai_title }}): Jinja names have none.
def _site_substitutions() -> dict[str, str]:
    from clusterkit.profiles import all_sites

    out: dict[str, str] = {}
    for site in all_sites():
        s = site.name.replace("-", "_")
        life = site.data["lifecycle"]
        out[f"{s}_title"] = site.title
        out[f"{s}_status"] = life["status"]
        if life.get("retired"):
            out[f"{s}_retired"] = life["retired"]
        if life.get("successor"):
            out[f"{s}_successor"] = life["successor"]
        for name, part in site.partitions.items():
            key = f"{s}_{name}".replace("-", "_")
            node = part.node_type
            out[f"{key}_gpus"] = str(node.gpus)
            out[f"{key}_gpu_model"] = node.gpu_model or "none"
            out[f"{key}_cores"] = str(node.cores)
            out[f"{key}_usable_cores"] = str(node.usable_cores)
            out[f"{key}_threads_per_core"] = str(node.threads_per_core)
            out[f"{key}_memory_gb"] = f"{node.memory_gb:g}"
            out[f"{key}_max_walltime"] = part.max_walltime
            out[f"{key}_arch"] = node.arch
            out[f"{key}_cpu"] = node.cpu
            if part.max_nodes:
                out[f"{key}_max_nodes"] = str(part.max_nodes)
            if part.size:
                out[f"{key}_nodes"] = str(part.size)
            gpu = node.raw.get("gpus") or {}
            if gpu.get("interconnect"):
                out[f"{key}_gpu_interconnect"] = gpu["interconnect"]
            if gpu.get("memory_gb"):
                out[f"{key}_gpu_memory_gb"] = f"{gpu['memory_gb']:g}"
    return out


myst_substitutions = _site_substitutions()
