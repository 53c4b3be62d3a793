"""Sphinx directives that render site facts from the profiles, so no page retypes them.

``{site-facts} bede`` with ``:show: nodes`` (or affinity, partitions, qos, modules, launchers,
paths, account, stacks, internet, sources) renders one table (``:kinds: node-local
memory-backed`` keeps the paths of those kinds); ``{site-status} summit`` renders the
lifecycle banner (current / end of service / retired, with dates and successor);
``{page-stacks}`` says which software stacks the page uses (its front matter's ``stacks:``)
and what they hold; ``{recipes-running} PROGRAM`` lists, site by site, the how-to pages that
show a job script starting the program. ``{block-coverage}``
(docs/project/test-coverage.md) is replaced, when the page is read, by the coverage report of
the last test run, which lives under ``_build/`` (:func:`clusterkit.pages.coverage.report_text`).
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.directives.code import LiteralInclude
from sphinx.transforms import SphinxTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from clusterkit.grammars.myst import scan_page
from clusterkit.runs import stack_pages
from clusterkit.sites import stacks as S
from clusterkit.sites import substitutions
from clusterkit.sites.errors import CheckError
from clusterkit.sites.profiles import (
    Place,
    Site,
    Stack,
    all_sites,
    broken_sites,
    load_site,
    unloaded_note,
)

logger = logging.getLogger(__name__)
SHOWS = (
    "nodes",
    "affinity",
    "partitions",
    "qos",
    "modules",
    "launchers",
    "paths",
    "sources",
    "account",
    "stacks",
    "internet",
    "plugins",
)
KINDS = {"parallel", "network", "node-local", "memory-backed"}  # sites/schema.yaml, paths
STACK_HEADERS = [
    "Stack",
    "How it is made",
    "Python",
    "Frameworks",
    "Accelerator",
    "Node types",
    "Status",
    "Sources",
]


def _table(
    headers: list[str], rows: list[list[str | nodes.Node]], caption: str | None = None
) -> nodes.table:
    table = nodes.table(classes=["site-facts"])
    if caption:
        table += nodes.title(text=caption)
    group = nodes.tgroup(cols=len(headers))
    table += group
    for _ in headers:
        group += nodes.colspec(colwidth=1)
    head = nodes.thead()
    group += head
    row = nodes.row()
    for h in headers:
        row += nodes.entry("", nodes.paragraph(text=h))
    head += row
    body = nodes.tbody()
    group += body
    for cells in rows:
        row = nodes.row()
        for c in cells:
            cell = c if isinstance(c, nodes.Node) else nodes.paragraph(text=str(c))
            row += nodes.entry("", cell)
        body += row
    return table


def stack_route(stack: Stack) -> str:
    """How users make a stack, in one line: module, conda, pip or container, and what."""
    how = stack.install
    if stack.route == "module":
        pre = how.get("prerequisites") or []
        return "module load " + " ".join([*pre, how["name"]])
    if stack.route == "conda":
        return f"conda: {' '.join(how['packages'])} from {', '.join(how['channels'])}"
    if stack.route == "pip":
        index = how.get("index", "PyPI")
        return f"pip: {' '.join(how['packages'])} from {index}"
    runtime = how.get("runtime", "container")
    return f"{runtime}: {how['image']}"


def stack_rows(site: Site) -> list[list[str]]:
    """One row per stack, in STACK_HEADERS order; sources as their titles."""
    rows = []
    for stack in site.stacks.values():
        frameworks = ", ".join(f"{k} {v}" for k, v in stack.frameworks.items())
        rows.append(
            [
                stack.name,
                stack_route(stack),
                stack.python_text,
                frameworks,
                stack.accelerator,
                ", ".join(stack.raw["node_types"]),
                stack.status,
                "; ".join(src["title"] for src in stack.raw["sources"]),
            ]
        )
    return rows


INTERNET = {
    "none": "no",
    "proxy": "only through the site's proxy",
    "direct": "yes",
    "unknown": "not documented",
}


def internet_rows(site: Site) -> list[list[str]]:
    """Whether jobs reach the internet, as the profile says (no rows where it says nothing)."""
    net = site.data.get("internet")
    if not net:
        return []
    how = net.get("note", "")
    if net.get("proxy"):
        how += "; " + " ".join(f"export {k}={v}" for k, v in net["proxy"].items())
    titles = "; ".join(src["title"] for src in net["sources"])
    return [[INTERNET[net["compute_nodes"]], how, titles]]


def _source_links(sources: list[dict]) -> nodes.paragraph:
    para = nodes.paragraph()
    for i, src in enumerate(sources):
        if i:
            para += nodes.Text("; ")
        para += nodes.reference("", src["title"], refuri=src["url"])
    return para


def _in_a_job(place: Place) -> str:
    """How a job reaches a path: the variable that holds it, the feature to ask for."""
    how = []
    if place.variable:
        how.append(f"${place.variable}")
    if place.constraint:
        how.append(f"only with sbatch -C {place.constraint}")
    return "; ".join(how)


def _qos_row(name: str, q: dict) -> list[str]:
    """A QoS's limits, with those it sets per node type and whether it is the default."""
    walltime = q.get("max_walltime", "-")
    per_type = "; ".join(
        f"{nt}: {lim['max_walltime']}"
        for nt, lim in q.get("by_node_type", {}).items()
        if lim.get("max_walltime")
    )
    if per_type:
        walltime = per_type if walltime == "-" else f"{walltime} ({per_type})"
    notes = q.get("description", "")
    if q.get("default"):
        notes = f"default (a job that names no QoS). {notes}".strip()
    if q.get("flags"):
        notes = f"{notes} Flags: {', '.join(q['flags'])}.".strip()
    return [name, walltime, str(q.get("max_nodes", "-")), str(q.get("max_gpus", "-")), notes]


def facts_rows(site: Site, show: str) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of one facts table (also used by tests and the coverage page)."""
    if show == "nodes":
        headers = [
            "Node type",
            "CPU",
            "Arch",
            "Sockets x cores",
            "Usable cores",
            "Threads/core",
            "Memory (GB)",
            "GPUs",
        ]
        # the network column only where the profile records how nodes reach each other
        network = any(nt.raw.get("network") for nt in site.node_types.values())
        if network:
            headers.append("Network")
        # the features column only where jobs select nodes with -C (Perlmutter's gpu, hbm80g)
        features = any(nt.features for nt in site.node_types.values())
        if features:
            headers.append("Features (-C)")
        rows = []
        for nt in site.node_types.values():
            gpus = f"{nt.gpus} x {nt.gpu_model}" if nt.gpus else "none"
            row = [
                nt.name,
                nt.cpu,
                nt.arch,
                f"{nt.sockets} x {nt.cores_per_socket}",
                str(nt.usable_cores),
                str(nt.threads_per_core),
                nt.memory_text,
                gpus,
            ]
            if network:
                row.append(nt.raw.get("network", "not documented"))
            if features:
                row.append(", ".join(nt.raw.get("features", ())) or "none")
            rows.append(row)
        return headers, rows
    if show == "affinity":
        headers = ["Node type", "NUMA", "Cores", "Hardware threads", "GPUs", "Kept for the system"]
        rows = [
            [
                nt.name,
                str(g.get("numa", "")),
                g["cores"],
                g.get("threads", ""),
                ", ".join(str(i) for i in g["gpus"]) or "none",
                g.get("reserved", ""),
            ]
            for nt in site.node_types.values()
            for g in nt.raw.get("cpu_gpu_map", ())
        ]
        return headers, rows
    if show == "partitions":
        headers = ["Partition", "Node type", "Max walltime", "Max nodes/job", "QoS", "Notes"]
        rows = []
        for p in site.partitions.values():
            notes = p.raw.get("description", "")
            bins = p.raw.get("walltime_by_nodes")
            if bins:
                notes += " Walltime by job size: " + "; ".join(
                    f"{b['min_nodes']}-{b['max_nodes']} nodes {b['max_walltime']}" for b in bins
                )
            if p.default:
                notes = ("default. " + notes).strip()
            if p.status != "current":
                notes = f"({p.status}) {notes}"
            rows.append(
                [
                    p.name,
                    ", ".join(nt.name for nt in p.node_types),
                    p.max_walltime
                    if p.max_walltime_s is not None or p.max_walltime_unknown
                    else "none (per QoS)",
                    str(p.max_nodes or "-"),
                    ", ".join(p.qos) or "-",
                    notes,
                ]
            )
        return headers, rows
    if show == "qos":
        return ["QoS", "Max walltime", "Max nodes", "Max GPUs", "Notes"], [
            _qos_row(name, q) for name, q in site.qos.items()
        ]
    if show == "modules":
        headers = ["Module", "Status", "Provides", "Replacement"]
        rows = []
        for m in site.modules:
            name = m.full_name + (" (default)" if m.default else "")
            rows.append([name, m.status, m.raw.get("provides", ""), m.replacement or ""])
        return headers, rows
    if show == "launchers":
        headers = ["Launcher", "Status", "Replacement", "Notes"]
        rows = [
            [x["name"], x["status"], x.get("replacement", ""), x.get("note", "")]
            for x in site.data["launchers"]
        ]
        return headers, rows
    if show == "paths":
        headers = ["Name", "Path", "Kind", "In a job", "Size", "What it is for", "Sources"]
        rows = [
            [
                p.name,
                p.path,
                p.kind,
                _in_a_job(p),
                p.raw.get("size", ""),
                p.raw["description"],
                "; ".join(src["title"] for src in p.raw.get("sources", ())),
            ]
            for p in site.places.values()
        ]
        return headers, rows
    if show == "account":
        a = site.account
        without = a.get("default") or ("refused" if a["required"] else "accepted")
        return ["Option", "Form", "Example", "A job without one"], [
            [a.get("option", ""), a["pattern"], a["example"], without]
        ]
    if show == "plugins":
        headers = ["Plugin", "Options it adds (sbatch, srun, salloc)", "What for", "Sources"]
        rows = [
            [
                plugin.name,
                " ".join(o.name for o in plugin.options),
                site.data["plugins"][plugin.name].get("description", ""),
                "; ".join(src["title"] for src in plugin.sources),
            ]
            for plugin in site.plugins
        ]
        return headers, rows
    if show == "stacks":
        return STACK_HEADERS, stack_rows(site)
    if show == "internet":
        return ["Compute nodes reach the internet", "How", "Sources"], internet_rows(site)
    if show == "sources":
        headers = ["Source", "Address", "Retrieved"]
        rows = [[s["title"], s["url"], s.get("retrieved", "")] for s in site.data["sources"]]
        return headers, rows
    raise ValueError(f"unknown table {show!r}; choose from {', '.join(SHOWS)}")


def _site_or_note(directive: SphinxDirective, name: str) -> Site | list[nodes.Node]:
    """The site a directive renders; where its profile does not load, a warning at the
    directive (the profile's own errors are ``python -m clusterkit profiles``'s) and a note in
    the page in place of the facts. An unknown site's name is the directive's error."""
    if name in broken_sites():
        note = unloaded_note(name)
        logger.warning(f"[profile-loads] {note}", location=directive.get_location())
        path = broken_sites()[name].findings[0].path
        directive.env.note_dependency(str(path))
        return [nodes.paragraph(text=f"{name}: {note}")]
    try:
        return load_site(name)
    except CheckError as exc:
        raise directive.error(str(exc)) from None


class SiteFacts(SphinxDirective):
    required_arguments = 1
    option_spec: ClassVar[dict] = {
        "show": lambda arg: directives.choice(arg, SHOWS),
        "caption": directives.unchanged,
        # with :show: paths, only the paths of these kinds (node-local memory-backed, ...)
        "kinds": lambda arg: [k for k in arg.replace(",", " ").split() if k],
    }

    def run(self) -> list[nodes.Node]:
        site = _site_or_note(self, self.arguments[0])
        if not isinstance(site, Site):
            return site
        self.env.note_dependency(str(site.path))
        show = self.options.get("show", "nodes")
        headers, rows = facts_rows(site, show)
        if not rows:
            return [nodes.paragraph(text=f"{site.title}: no {show} listed.")]
        if show == "internet":
            rows[0][-1] = _source_links(site.data["internet"]["sources"])
        if show == "stacks":  # the last column links each source
            for row, stack in zip(rows, site.stacks.values(), strict=True):
                row[-1] = _source_links(stack.raw["sources"])
        if show == "paths":
            places = list(site.places.values())
            for row, place in zip(rows, places, strict=True):
                row[-1] = _source_links(place.raw.get("sources", ()))
            kinds = self.options.get("kinds")
            if kinds:
                unknown = sorted(set(kinds) - KINDS)
                if unknown:
                    raise self.error(f":kinds: {', '.join(unknown)} is no kind of path")
                rows = [r for r, p in zip(rows, places, strict=True) if p.kind in kinds]
                if not rows:
                    kinds_text = " or ".join(kinds)
                    return [nodes.paragraph(text=f"{site.title}: no {kinds_text} storage listed.")]
        return [_table(headers, rows, self.options.get("caption"))]


# The page that says where the users of a site that has closed go (linked by its title).
MOVE_ON_PAGE = "/howto/moving-on"
MOVED_ON = ("retired", "end-of-service")


def status_text(site: Site) -> tuple[str, str]:
    """(admonition class, sentence) describing where the site stands."""
    life = site.data["lifecycle"]
    if life["status"] == "retired":
        succ = f" Its successor is {life['successor']}." if life.get("successor") else ""
        return (
            "warning",
            f"{site.title} was retired on {life['retired']}. This page is kept "
            f"as a historical record; its commands no longer run anywhere.{succ}",
        )
    if life["status"] == "end-of-service":
        when = life.get("retired")
        ended = when and str(when) <= date.today().isoformat()
        said = f"ended on {when}" if ended else f"is scheduled to end on {when}"
        succ = f" {life['successor']}." if life.get("successor") else ""
        return (
            "warning",
            f"{site.title}'s service {said}. The recipes carry over to other Slurm systems "
            f"with the same kind of nodes.{succ}",
        )
    return (
        "note",
        f"{site.title} is in service. Facts on this page are read from its site "
        f"profile ({site.path.name}).",
    )


class MemoryPlan(SphinxDirective):
    """``{memory-plan} SITE``: what the language-model recipes need of each GPU node type of the
    site (clusterkit.emulate.memory_plan), computed from the profile's GPU memory."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        from clusterkit.emulate import memory_plan

        try:
            site = load_site(self.arguments[0])
        except CheckError as exc:
            raise self.error(str(exc)) from None
        self.env.note_dependency(str(site.path))
        rows = memory_plan.site_rows(site)
        if not rows:
            raise self.error(f"{site.title}'s profile gives no GPU with its memory size")
        return [_table(memory_plan.HEADERS, rows)]


class SiteStatus(SphinxDirective):
    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        site = _site_or_note(self, self.arguments[0])
        if not isinstance(site, Site):
            return site
        self.env.note_dependency(str(site.path))
        kind, text = status_text(site)
        node = nodes.warning() if kind == "warning" else nodes.note()
        node["classes"].append(f"site-status-{site.status}")
        node += nodes.paragraph(text=text)
        if site.status in MOVED_ON:  # where its users go now
            link = addnodes.pending_xref(
                "", refdomain="std", reftype="doc", reftarget=MOVE_ON_PAGE, refexplicit=False
            )
            link += nodes.inline(text=MOVE_ON_PAGE)
            node += nodes.paragraph("", "Where to run now: ", link, nodes.Text("."))
        return [node]


def _results_table(rows) -> nodes.table:
    headers = ["Site", "Nodes", "GPUs", "Metric", "Value", "Date", "Kind", "Source"]
    table_rows = []
    for r in sorted(rows, key=lambda r: (r.site, r.data.get("gpus", 0), r.metric)):
        value = f"{r.value:g} {r.unit}"
        if r.data.get("approx"):
            value = "about " + value
        kind = r.kind
        if r.kind == "measured" and r.is_stale():
            kind += " (stale)"
        table_rows.append(
            [
                r.site,
                str(r.data.get("nodes", "")),
                str(r.data.get("gpus", "")),
                r.metric,
                value,
                r.data.get("date", "not given"),
                kind,
                r.source["title"],
            ]
        )
    return _table(headers, table_rows)


class PageStacks(SphinxDirective):
    """The stacks the page names in its front matter, in words: how each is made, its Python,
    framework versions and accelerator build, and what CI runs for it. A stack that a program of
    the page cannot run on is said so. An unknown stack is an error at its front-matter line."""

    def run(self) -> list[nodes.Node]:
        path = Path(self.env.doc2path(self.env.docname))
        page = scan_page(path)
        named = stack_pages.named_stacks(page)
        if not named:
            raise self.error(
                "the page names no stacks: add `stacks: [site/name]` to its front matter"
            )
        box = nodes.admonition(classes=["page-stacks"])
        box += nodes.title(text="Software stack" if len(named) == 1 else "Software stacks")
        items = nodes.bullet_list()
        for key, line in named:
            try:
                stack = S.find(key, path, line)
            except CheckError as exc:
                finding = exc.findings[0]
                logger.warning(
                    f"[{finding.rule}] {finding.message}", location=(self.env.docname, line)
                )
                continue
            self.env.note_dependency(str(load_site(stack.site).path))
            items += nodes.list_item("", *self.describe(stack, stack_pages.page_programs(page)))
        box += items
        return [box]

    @staticmethod
    def describe(stack, programs: list[Path]) -> list[nodes.Node]:
        para = nodes.paragraph()
        para += nodes.strong(text=stack.raw["title"])
        para += nodes.Text(" (")
        para += nodes.literal(text=stack.key)
        para += nodes.Text("): ")
        para += nodes.literal(text=S.how_made(stack))
        para += nodes.Text(f"; {S.facts(stack)}. {S.ci_sentence(stack)}.")
        out = [para]
        for program in programs:
            why = S.unsupported(program, stack) if S.uses(program, stack) else []
            if why:
                out.append(
                    nodes.paragraph(
                        text=f"{program.name} does not run on this stack ({'; '.join(why)}): it "
                        "stops at start-up, naming the version it needs."
                    )
                )
        return out


class ResultsTable(SphinxDirective):
    """Recorded figures for a benchmark (optionally one site), each with its source."""

    required_arguments = 1
    option_spec: ClassVar[dict] = {"site": directives.unchanged, "kind": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        from clusterkit.sites import results as res

        for path in res.RESULTS_DIR.glob("*.yaml"):
            self.env.note_dependency(str(path))
        try:
            rows = res.select(
                res.load_all(),
                self.arguments[0],
                self.options.get("site"),
                self.options.get("kind"),
            )
        except CheckError as exc:
            raise self.error(str(exc)) from None
        if not rows:
            raise self.error(f"no recorded results for {self.arguments[0]!r}")
        return [_results_table(rows)]


class ResultsPlot(SphinxDirective):
    """A scaling plot of one benchmark's recorded results, drawn at build time, with a caption
    that says where and on what each series was measured, and the table of the same figures."""

    required_arguments = 1
    option_spec: ClassVar[dict] = {
        "metric": directives.unchanged,
        "site": directives.unchanged,
        "kind": directives.unchanged,
        "no-table": directives.flag,
    }

    def run(self) -> list[nodes.Node]:
        from clusterkit.pages import results_plot
        from clusterkit.sites import results as res

        for path in res.RESULTS_DIR.glob("*.yaml"):
            self.env.note_dependency(str(path))
        metric = self.options.get("metric", "throughput")
        try:
            rows = res.select(
                res.load_all(),
                self.arguments[0],
                self.options.get("site"),
                self.options.get("kind"),
            )
        except CheckError as exc:
            raise self.error(str(exc)) from None
        rows = [r for r in rows if r.metric == metric and r.data.get("gpus")]
        if not rows:
            raise self.error(f"no recorded {metric} results with GPUs for {self.arguments[0]!r}")
        figure = nodes.container(classes=["results-plot"])
        figure += nodes.raw("", results_plot.scaling_svg(rows, metric), format="html")
        caption = nodes.paragraph(classes=["results-plot-caption"])
        caption += nodes.Text(
            f"{self.arguments[0]}, {metric} against GPUs, drawn from results/ when this page was "
            "built. " + " ".join(results_plot.where_measured(rows))
        )
        figure += caption
        out: list[nodes.Node] = [figure]
        if "no-table" not in self.options:
            out.append(_results_table(rows))
        return out


class RecipesRunning(SphinxDirective):
    """``{recipes-running} train_resnet.py``: every how-to page that shows a job script
    starting the program, site by site (the site its script is for), each linked by its title:
    read from the pages when the site is built, so no page keeps the list by hand."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        from clusterkit.pages.recipes import recipes_running

        program = self.arguments[0]
        docs = Path(self.env.srcdir)
        found = recipes_running(docs, program)
        if not found:
            raise self.error(f"no page of docs/howto/ shows a job script that starts {program}")
        for path in (docs / "howto").rglob("*.md"):
            self.env.note_dependency(str(path))
        titles = {s.name: s.title for s in all_sites()}
        items = nodes.bullet_list(classes=["recipes-running"])
        for site in sorted(found, key=lambda name: titles.get(name, name).lower()):
            para = nodes.paragraph()
            para += nodes.strong(text=titles.get(site, site))
            para += nodes.Text(": ")
            for i, doc in enumerate(found[site]):
                if i:
                    para += nodes.Text(", ")
                link = addnodes.pending_xref(
                    "", refdomain="std", reftype="doc", reftarget=doc, refexplicit=False,
                    refdoc=self.env.docname,
                )  # fmt: skip
                link += nodes.inline(text=doc)
                para += link
            items += nodes.list_item("", para)
        return [items]


class LastVerified(SphinxDirective):
    """'Last verified on <site> on <date>' from the newest measured result, or say none."""

    required_arguments = 1
    optional_arguments = 1

    def run(self) -> list[nodes.Node]:
        from clusterkit.sites import results as res

        for path in res.RESULTS_DIR.glob("*.yaml"):
            self.env.note_dependency(str(path))
        site = _site_or_note(self, self.arguments[0])
        if not isinstance(site, Site):
            return site
        bench = self.arguments[1] if len(self.arguments) > 1 else None
        r = res.last_verified(res.load_all(), site.name, bench)
        para = nodes.paragraph(classes=["last-verified"])
        if r is None:
            para += nodes.Text(
                f"Not yet verified on {site.title}'s hardware: the commands "
                "on this page are checked by emulation and CPU runs only."
            )
        else:
            stale = " This result is over six months old." if r.is_stale() else ""
            para += nodes.Text(
                f"Last verified on {site.title} ({r.data.get('partition', '')}) "
                f"on {r.date}: {r.benchmark}, {r.value:g} {r.unit}.{stale}"
            )
        return [para]


class ExampleLiteralInclude(LiteralInclude):
    """``literalinclude`` that marks files from examples/ and adds a download link.

    The class ``example-file`` makes the copy button copy the file byte for byte
    (docs/_static/copy-file.js); the link downloads the same file.
    """

    def run(self) -> list[nodes.Node]:
        result = super().run()
        _, filename = self.env.relfn2path(self.arguments[0])
        examples = Path(self.env.srcdir).parent / "examples"
        if examples not in Path(filename).resolve().parents or not result:
            return result
        for block in result[0].findall(nodes.literal_block):
            block["classes"].append("example-file")
        ref = addnodes.download_reference(
            "",
            "",
            refdoc=self.env.docname,
            reftarget=self.arguments[0],
            refexplicit=True,
            refdomain="",
            reftype="download",
        )
        ref += nodes.literal(text=Path(filename).name, classes=["xref", "download"])
        para = nodes.paragraph("", "", classes=["example-download"])
        para += nodes.Text("Download ")
        para += ref
        return [*result, para]


def substitute_code(document: nodes.document, values: dict[str, str]) -> list[nodes.literal]:
    """Put the site facts into inline code (MyST substitutes prose only, so a reader would see
    `` `--cpus-per-task={{ bede_gh_cores }}` `` as written); the spans with an unknown key."""
    bad = []
    for node in list(document.findall(nodes.literal)):
        text = node.astext()
        if "{{" not in text:
            continue
        new, unknown = substitutions.resolve(text, values)
        if unknown:
            bad.append(node)
        node[:] = [nodes.Text(new)]
    return bad


class CodeSubstitutions(SphinxTransform):
    default_priority = 500

    def apply(self, **kwargs) -> None:
        values = getattr(self.config, "myst_substitutions", None)  # absent without myst_parser
        if not values:
            return
        for node in substitute_code(self.document, values):
            logger.warning("no substitution for %s in inline code", node.astext(), location=node)


def insert_coverage_report(app: Sphinx, docname: str, source: list[str]) -> None:
    """Put the coverage report in place of a ``{block-coverage}`` block: the report of the last
    test run (written under _build/, so the tests leave the checkout as they found it), or the
    predicted routes when no run wrote one."""
    from clusterkit.pages import coverage

    if not coverage.PLACEHOLDER.search(source[0]):
        return
    page = Path(app.config.clusterkit_coverage_page or coverage.DEFAULT_PAGE)
    app.env.note_dependency(str(page))
    text, origin = coverage.report_text(page, Path(app.srcdir))
    logger.info("%s: coverage report %s", docname, origin)
    source[0] = coverage.PLACEHOLDER.sub(lambda _m: text, source[0], count=1)


def setup(app: Sphinx) -> dict:
    app.add_config_value("clusterkit_coverage_page", "", "env", types=[str])
    app.connect("source-read", insert_coverage_report)
    app.add_transform(CodeSubstitutions)
    app.add_directive("literalinclude", ExampleLiteralInclude, override=True)
    app.add_directive("site-facts", SiteFacts)
    app.add_directive("site-status", SiteStatus)
    app.add_directive("memory-plan", MemoryPlan)
    app.add_directive("results-table", ResultsTable)
    app.add_directive("results-plot", ResultsPlot)
    app.add_directive("page-stacks", PageStacks)
    app.add_directive("last-verified", LastVerified)
    app.add_directive("recipes-running", RecipesRunning)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "0.1"}
