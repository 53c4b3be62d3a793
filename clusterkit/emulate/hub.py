"""Judge downloads from the Hugging Face Hub in a job script: ``hf download`` (read by the
CLI's own parser) runs on a compute node, which may not reach the internet. The profile says
whether it does (``internet.compute_nodes``): none is an error, the site's proxy without its
variables exported is an error, a site that does not document it is a warning. Models and data
are fetched on a login node; the job reads the copy with HF_HUB_OFFLINE=1."""

from __future__ import annotations

from clusterkit.emulate.body import Context, Placement
from clusterkit.emulate.registry import register_command
from clusterkit.grammars import hf_cli

ADVICE = "run hf download on a login node, into project storage, and read that copy in the job"


@register_command("hf")
def hf(ctx: Context, line: int, words: list[str], placement: Placement | None) -> None:
    try:
        command, _ = hf_cli.parse(ctx.expanded(words[1:]))
    except hf_cli.HfOptionError as exc:
        ctx.add(line, "hf-option", str(exc))
        return
    if command != "download":
        return
    site, reach = ctx.site, ctx.site.compute_internet
    if reach == "none":
        no = f"{site.title}'s compute nodes do not reach the internet"
        ctx.add(line, "hub-offline", f"{no}: {ADVICE}")
    elif reach == "proxy":
        proxy = (site.data.get("internet") or {}).get("proxy") or {}
        missing = [name for name in proxy if name.endswith("https_proxy") and name not in ctx.env]
        if missing:
            ctx.add(
                line,
                "hub-offline",
                f"{site.title}'s compute nodes reach the internet only through its proxy, and "
                f"this script does not export {', '.join(missing)}: {ADVICE}, or export "
                + " ".join(f"{k}={v}" for k, v in proxy.items()),
            )
    elif reach == "unknown":
        ctx.add(
            line,
            "hub-offline",
            f"{site.title}'s documentation does not say whether compute nodes reach the "
            f"internet: {ADVICE}",
            level="warning",
        )
