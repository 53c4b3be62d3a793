"""Scaling plots of recorded results, drawn with matplotlib when the site is built.

:func:`scaling_svg` draws one benchmark's throughput against the number of GPUs, one series
per site (reported figures as open markers, measured ones filled), with the line of perfect
scaling from each series' smallest run; a site with runs at one size only shows them side by
side at that size. :func:`where_measured` says, for the caption, where and on what each
series ran. The ``{results-plot}`` directive (:mod:`clusterkit.pages.sphinxext`) puts both on
a page.
"""

from __future__ import annotations

import io
from collections import defaultdict

from clusterkit.sites.errors import CheckError
from clusterkit.sites.profiles import load_site
from clusterkit.sites.results import Result


def _series(rows: list[Result]) -> dict[str, list[Result]]:
    out: dict[str, list[Result]] = defaultdict(list)
    for r in rows:
        out[r.site].append(r)
    for series in out.values():
        series.sort(key=lambda r: (r.data.get("gpus", 0), r.value))
    return dict(out)


def _label(r: Result) -> str:
    settings = r.data.get("settings") or {}
    parts = [str(settings["precision"])] if settings.get("precision") else []
    if settings.get("compile"):
        parts.append("torch.compile")
    return ", ".join(parts)


def scaling_svg(rows: list[Result], metric: str = "throughput") -> str:
    """An SVG plot of ``metric`` against GPUs for the given results."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    matplotlib.rcParams["svg.hashsalt"] = "results"  # the same SVG for the same data
    picked = [r for r in rows if r.metric == metric and r.data.get("gpus")]
    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=100)
    try:
        for site, series in sorted(_series(picked).items()):
            xs = [r.gpus for r in series]
            ys = [r.value for r in series]
            measured = series[0].kind == "measured"
            style = {"marker": "o", "markersize": 7, "linewidth": 1.8}
            if not measured:
                style["markerfacecolor"] = "white"
            (line,) = ax.plot(xs, ys, label=f"{site} ({series[0].kind})", **style)
            if len(set(xs)) > 1:
                ideal = [ys[0] * x / xs[0] for x in xs]
                ax.plot(xs, ideal, linestyle=":", color=line.get_color(), linewidth=1)
            for r in series:
                text = _label(r)
                if text and len(set(xs)) == 1:
                    ax.annotate(
                        text,
                        (r.gpus, r.value),
                        textcoords="offset points",
                        xytext=(8, -3),
                        fontsize=8,
                    )
        gpus = sorted({r.gpus for r in picked})
        ax.set_xscale("log", base=2)
        ax.set_xticks(gpus, [str(g) for g in gpus])
        ax.set_xlim(min(gpus) / 1.6, max(gpus) * 1.6)
        ax.set_ylim(bottom=0)
        unit = picked[0].unit if picked else ""
        ax.set_xlabel("GPUs")
        ax.set_ylabel(f"{metric} ({unit})")
        ax.grid(True, alpha=0.3)
        if len(gpus) > 1:
            ax.plot([], [], linestyle=":", color="grey", label="perfect scaling")
        ax.legend(fontsize=8, loc="upper left")
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    finally:
        plt.close(fig)
    svg = buf.getvalue()
    return svg[svg.index("<svg") :]


def where_measured(rows: list[Result]) -> list[str]:
    """One sentence per site: who measured the figures, where, on what hardware."""
    out = []
    for site, series in sorted(_series(rows).items()):
        r = series[0]
        dates = sorted({x.data["date"] for x in series if x.data.get("date")})
        when = f" on {', '.join(dates)}" if dates else ""
        if r.kind == "measured":
            hardware = r.data.get("hardware", "hardware not recorded")
            out.append(
                f"{site}: measured by this project's benchmark scripts{when}, on {hardware}."
            )
            continue
        try:
            profile = load_site(site)
            part = profile.partitions.get(r.data.get("partition", ""))
            node = part.node_type if part else None
            what = (
                f"{profile.title}'s {part.name} nodes ({node.gpu_model})" if node else profile.title
            )
        except CheckError:
            what = site
        out.append(f"{site}: reported by {r.source['title']}{when}, measured on {what}.")
    return out
