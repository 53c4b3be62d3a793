"""Site facts as MyST substitutions, so prose can cite a figure without retyping it:
``{{ bede_gpu_gpus }}``, ``{{ summit_batch_usable_cores }}``, ``{{ archer2_title }}``, ...
Hyphens in site and partition names become underscores (``{{ isambard_ai_title }}``): Jinja
names have none.

``conf.py`` hands them to MyST; MyST leaves inline code as it is, so
:mod:`clusterkit.pages.sphinxext` puts them into code spans too (the span
``--cpus-per-task={{ bede_gh_cores }}`` shows the core count of Bede's profile), and the inline-code
checks judge the span with the same values.
"""

from __future__ import annotations

import re
from functools import cache

from clusterkit.sites.profiles import all_sites

SUBSTITUTION = re.compile(r"\{\{\s*(?P<key>[A-Za-z_]\w*)\s*\}\}")


@cache
def site_substitutions() -> dict[str, str]:
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
            out.update(_partition(f"{s}_{name}".replace("-", "_"), part))
        if site.default_qos:
            out[f"{s}_default_qos"] = site.default_qos
        for name, q in site.qos.items():
            if q.get("max_walltime"):
                out[f"{s}_qos_{name}_max_walltime".replace("-", "_")] = q["max_walltime"]
            for nt, lim in q.get("by_node_type", {}).items():
                if lim.get("max_walltime"):
                    key = f"{s}_qos_{name}_{nt}_max_walltime".replace("-", "_")
                    out[key] = lim["max_walltime"]
    return out


def _partition(key: str, part) -> dict[str, str]:
    node = part.node_type
    out = {
        f"{key}_gpus": str(node.gpus),
        f"{key}_gpu_model": node.gpu_model or "none",
        f"{key}_cores": str(node.cores),
        f"{key}_usable_cores": str(node.usable_cores),
        f"{key}_threads_per_core": str(node.threads_per_core),
        f"{key}_memory_gb": node.memory_text,
        f"{key}_max_walltime": part.max_walltime,
        f"{key}_arch": node.arch,
        f"{key}_cpu": node.cpu,
    }
    if part.max_nodes:
        out[f"{key}_max_nodes"] = str(part.max_nodes)
    if part.size:
        out[f"{key}_nodes"] = str(part.size)
    gpu = node.raw.get("gpus") or {}
    if gpu.get("interconnect"):
        out[f"{key}_gpu_interconnect"] = gpu["interconnect"]
    if gpu.get("memory_gb"):
        out[f"{key}_gpu_memory_gb"] = f"{gpu['memory_gb']:g}"
    if node.raw.get("network"):
        out[f"{key}_network"] = node.raw["network"]
    return out


def resolve(text: str, values: dict[str, str] | None = None) -> tuple[str, list[str]]:
    """``text`` with each ``{{ key }}`` replaced by its value, and the keys that have none."""
    values = site_substitutions() if values is None else values
    unknown: list[str] = []

    def value(m: re.Match) -> str:
        if m["key"] in values:
            return str(values[m["key"]])
        unknown.append(m["key"])
        return m.group(0)

    return SUBSTITUTION.sub(value, text), unknown
