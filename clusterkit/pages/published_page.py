"""The reference page listing the errors found in the sites' published job scripts.

``python -m clusterkit.pages.published_page [--write | --check]`` renders
``docs/reference/published-scripts.md`` from ``tests/corpus/published/manifest.yaml``:
``--write`` writes it, ``--check`` exits 1 when the file differs from what the manifest gives
(tests/test_published_corpus.py runs the same comparison).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from clusterkit.sites import published_manifest as M
from clusterkit.sites.profiles import ROOT, load_site

PAGE = ROOT / "docs" / "reference" / "published-scripts.md"
SCHEDULER_WORD = {"slurm": "sbatch --test-only", "lsf": "bsub (reasoned)"}


def cell(text: str) -> str:
    """Text safe inside a MyST table cell (no markup taken from it)."""
    text = " ".join(str(text).split())
    for ch, rep in (
        ("\\", "\\\\"),
        ("|", "\\|"),
        ("`", "'"),
        ("*", "\\*"),
        ("_", "\\_"),
        ("[", "\\["),
        ("]", "\\]"),
        ("{", "\\{"),
        ("}", "\\}"),
        ("<", "&lt;"),
        (">", "&gt;"),
        ("$", "\\$"),
    ):
        text = text.replace(ch, rep)
    return text


def source_link(entry: dict, line: int = 0) -> str:
    """``path:line`` linked to the file at the recorded commit."""
    line = entry["line"] + max(line, 1) - 1 if entry.get("column") is None else entry["line"]
    url = f"https://github.com/{entry['repo']}/blob/{entry['commit']}/{entry['path']}#L{line}"
    col = f", column {entry['column']}" if entry.get("column") else ""
    return f"[{cell(entry['path'])}:{line}{col}]({url})"


def code(text: str) -> str:
    """Text as inline code in a table cell: shown as the tool printed it."""
    text = " ".join(str(text).split()).replace("`", "'").replace("|", "\\|")
    return f"`{text}`"


def scheduler_says(entry: dict) -> str:
    """A table cell: Slurm's own words, or the reasoning behind an LSF verdict."""
    if entry["scheduler"] == "lsf":
        return cell(entry["lsf"]["reasoning"])
    return code(entry["slurm"]["says"])


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def _error_rows(entries: list[dict], key: str, says: bool = True) -> list[list[str]]:
    rows = []
    for e in entries:
        for err in e.get(key, []):
            row = [load_site(e["site"]).title, source_link(e, err["line"]), cell(err["what"])]
            rows.append(row + ([scheduler_says(e)] if says else []))
    return rows


def _excerpt_rows(entries: list[dict]) -> list[list[str]]:
    """One row for each excerpt: every reason it is refused, and what the scheduler said."""
    return [
        [
            load_site(e["site"]).title,
            source_link(e),
            cell("; ".join(err["what"] for err in e["errors"])),
            scheduler_says(e),
        ]
        for e in entries
    ]


def _slurm_sites(entries: list[dict]) -> str:
    sites = dict.fromkeys(e["site"] for e in entries if e["scheduler"] == "slurm")
    return ", ".join(load_site(s).title for s in sites)


def _sources(manifest: dict) -> list[str]:
    seen: dict[str, tuple[str, int]] = {}
    for e in manifest["scripts"]:
        commit, n = seen.get(e["repo"], (e["commit"], 0))
        seen[e["repo"]] = (commit, n + 1)
    rows = [
        [f"[{r}](https://github.com/{r}/tree/{c})", f"`{c[:12]}`", str(n)]
        for r, (c, n) in sorted(seen.items())
    ]
    return _table(["repository", "commit", "job scripts"], rows)


def _left_out(manifest: dict) -> str:
    parts = []
    for repo, machines in manifest.get("left_out", {}).items():
        listed = ", ".join(f"{name} {n}" for name, n in machines.items())
        parts.append(f"{sum(machines.values())} from {repo} ({listed})")
    return "; ".join(parts)


def _placeholders(entries: list[dict]) -> list[list[str]]:
    seen: Counter = Counter()
    said: dict[tuple[str, str], str] = {}
    for e in entries:
        record = e.get("slurm") or e.get("lsf") or {}
        for value in record.get("placeholders", {}):
            seen[(e["site"], value)] += 1
            published = record.get("as_published", {})
            said.setdefault((e["site"], value), published.get("says", ""))
    return [
        [
            load_site(site).title,
            code(value),
            str(n),
            code(said[(site, value)]) if said[(site, value)] else "(no scheduler left to ask)",
        ]
        for (site, value), n in sorted(seen.items())
    ]


def render(manifest: dict) -> str:
    entries = manifest["scripts"]
    judged = [e for e in entries if e.get("expected") in M.VERDICTS]
    by_cause = {c: [e for e in judged if e.get("cause") == c] for c in ("script", "profile")}
    excerpts = [e for e in judged if e["form"] == "excerpt"]
    run_errors = [e for e in judged if e.get("run_errors")]
    agreed = sum(1 for e in judged if not e.get("reason"))
    refused = sum(1 for e in judged if e["expected"] == "refuse")
    lines = [
        "# Errors in the sites' published job scripts",
        "",
        "Generated by `python -m clusterkit.pages.published_page` from "
        "`tests/corpus/published/manifest.yaml`; do not edit by hand.",
        "",
        "The sites' own documentation repositories hold job scripts, as files and as code "
        "blocks of their pages. Each is recorded in `tests/corpus/published/` with where it was "
        "published (the scripts of NERSC's repositories by their origin and digest only, "
        "their text taken back from the repositories when the corpus is judged), and CI holds "
        "the checker of this site to the verdict the site's scheduler gives: for Slurm "
        f"({_slurm_sites(entries)}), what `sbatch --test-only` answers on a Slurm cluster "
        "configured from the site's profile; for LSF (Summit, which has no scheduler left to "
        "ask), a verdict reasoned from the limits OLCF documented. Account placeholders such as "
        "`[budget code]` are filled in with the profile's example account before a script is "
        "judged, since a reader replaces them. Options of a site's Slurm plugins (Shifter's "
        "`--image` on Perlmutter) are taken out before the test cluster, which runs no such "
        "plugin, is asked; the checker judges them against the plugin's own options.",
        "",
        *_sources(manifest),
        "",
        f"OLCF's Slurm scripts are for its other machines, which have no profile here, and are "
        f"left out: {_left_out(manifest)}. OLCF's repository is taken at the last commit "
        "before its Summit pages were removed in January 2025.",
        "",
        f"Of {len(judged)} scripts, {refused} are refused as published (placeholders filled "
        f"in); {len(excerpts)} of them are excerpts rather than whole scripts. The checker "
        f"(`python -m clusterkit check-job`) agrees with the scheduler on {agreed} of "
        f"{len(judged)} (`python -m clusterkit.pages.published_check` gives today's figure).",
        "",
        "## Errors in whole scripts",
        "",
        "Scripts a reader would copy and submit, and what goes wrong.",
        "",
        *_table(
            ["site", "where", "what is wrong", "what the scheduler says"],
            _error_rows(by_cause["script"], "errors"),
        ),
        "",
        "## Errors that show only when the job runs",
        "",
        "The scheduler accepts these scripts; the job then does something other than what the "
        "page meant.",
        "",
        *_table(
            ["site", "where", "what is wrong"], _error_rows(run_errors, "run_errors", says=False)
        ),
        "",
        "## Where the site's profile is behind the site",
        "",
        "Refused on the test cluster because the profile lacks something the site documents; "
        "not errors of the scripts.",
        "",
        *_table(
            ["site", "where", "what is missing", "what the scheduler says"],
            _error_rows(by_cause["profile"], "errors"),
        ),
        "",
        "## Excerpts",
        "",
        "Pieces of scripts shown to make a point (a directive or two, or lines left out as "
        "`...`). Submitted as they stand they are refused, which the table records; a reader "
        "adds them to a whole script.",
        "",
        *_table(
            ["site", "where", "refused because", "what the scheduler says"],
            _excerpt_rows([e for e in excerpts if e.get("cause") == "excerpt"]),
        ),
        "",
        "## Placeholders as printed",
        "",
        "Left in place, a placeholder with a space in it breaks the directive: `sbatch` splits "
        "the line at the space and refuses the second half as an unknown directive.",
        "",
        *_table(
            ["site", "placeholder", "scripts", "the scheduler, as printed"], _placeholders(judged)
        ),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true", help=f"write {PAGE.relative_to(ROOT)}")
    group.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = ap.parse_args(argv)
    text = render(M.load())
    if args.write:
        PAGE.write_text(text, encoding="utf-8")
        return 0
    if not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != text:
        print(f"{PAGE.relative_to(ROOT)} is stale: run {ap.prog} --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
