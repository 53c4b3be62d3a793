"""The manifest of the published-scripts corpus (``tests/corpus/published/manifest.yaml``).

``scripts`` has one entry per script file:

``file``, ``site``, ``scheduler``, ``form``
    the file under ``tests/corpus/published/``, its profile, ``slurm`` or ``lsf``, and
    ``script`` or ``excerpt`` (a piece of a script: no ``#!`` line, or ``...`` for what is
    left out);
``repo``, ``commit``, ``path``, ``line`` (, ``column``), ``digest``
    where it was published (``column``: for scripts laid out side by side in a table) and a
    hash of its text;
``expected``
    ``accept`` or ``refuse``: the scheduler's verdict at submission, account placeholders
    filled in (:func:`fill_placeholders`);
``slurm``
    what ``sbatch --test-only`` said on the cluster generated from the profile: ``verdict``,
    ``says`` and, where placeholders were filled, ``placeholders`` and ``as_published`` (the
    verdict on the script as printed); ``plugin_options``: the options of the site's SPANK
    plugins (Shifter's ``--image``) taken out before submission, since the test cluster runs
    no such plugin (the emulator judges them against the plugin's table);
``rebuilt``
    true where the script's text is not kept in the repository: only its origin and digest
    are, and ``benchmarks/collect_corpus.py`` writes the text to ``_build/corpus/published/``
    from a snapshot of the repository (:func:`script_path`);
``lsf``
    for Summit, which has no scheduler left to ask: ``verdict`` and the ``reasoning`` behind it
    (from the limits in ``sites/summit.yaml``);
``errors``
    why a refused script is refused, each with ``line`` (0: something missing), ``rules`` (the
    checker's rule names that report it) and ``what`` (in words);
``run_errors``
    errors the scheduler does not see at submission, which make the job fail when it runs;
``cause``
    of a refusal: ``script`` (an error of the published script), ``excerpt`` or ``profile``
    (the profile lacks something the site documents);
``causes``, ``reason``, ``emulator_today``
    where today's emulator disagrees: the kinds of disagreement, why, and what it says.

``left_out`` counts the scripts not kept (OLCF's machines other than Summit).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

from clusterkit.sites.profiles import ROOT, Site

CORPUS = ROOT / "tests" / "corpus" / "published"
MANIFEST = CORPUS / "manifest.yaml"
# where the scripts of entries marked ``rebuilt`` are written: their text is not kept in the
# repository, only their origin and digest (benchmarks/collect_corpus.py takes it back from the
# documentation repositories' snapshots)
REBUILT = ROOT / "_build" / "corpus" / "published"
HEADER = """\
# Job scripts published in the sites' own documentation repositories, with the verdict a
# correct checker gives. Written by `python -m clusterkit.pages.published_collect SITE=CHECKOUT...`
# (entries and files) and by hand (verdicts, errors, reasons); see
# clusterkit/sites/published_manifest.py.
"""
VERDICTS = {"accept", "refuse"}


def load(path: Path = MANIFEST) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:  # equal entries are written out, not aliased
        return True


def dump(manifest: dict, path: Path = MANIFEST) -> None:
    body = yaml.dump(manifest, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + body, encoding="utf-8")


def script_path(entry: dict) -> Path:
    """Where an entry's script is: in the corpus folder, or (``rebuilt``) where
    benchmarks/collect_corpus.py writes the text taken back from the site's repository."""
    return (REBUILT if entry.get("rebuilt") else CORPUS) / entry["file"]


def rebuild_command() -> str:
    return (
        "python benchmarks/collect_corpus.py --manifest tests/corpus/published/manifest.yaml "
        "--out _build/corpus/published"
    )


# --------------------------------------------------------------------------- placeholders
ACCOUNT_DIRECTIVE = re.compile(
    r"^(?P<head>[ \t]*#(?:SBATCH|BSUB)[ \t]+(?:--account[= ]|-A[ \t]*|-P[ \t]+))"
    r"(?P<value>\[[^\]\n]*\]|<<[^>\n]*>>|<[^>\n]*>|\S+)",
    re.M,
)
PLACEHOLDER_SHAPE = re.compile(r"^(\[.*\]|<.*>|[xX]{3,}|X+Y+|project[0-9]*)$", re.I)


def is_account_placeholder(value: str, site: Site) -> bool:
    """A stand-in the reader is meant to replace: one the profile lists, or one shaped like
    ``[budget code]``, ``<project>``, ``<<your account>>``, ``xxx``, ``project123``."""
    return value in site.account.get("placeholders", ()) or bool(PLACEHOLDER_SHAPE.match(value))


def fill_placeholders(text: str, site: Site) -> tuple[str, dict[str, str]]:
    """The script with each account placeholder of its directives replaced by the profile's
    example account, and what was replaced."""
    example = site.account["example"]
    filled: dict[str, str] = {}

    def sub(m: re.Match) -> str:
        value = m["value"]
        if value == example or not is_account_placeholder(value, site):
            return m[0]
        filled[value] = example
        return m["head"] + example

    return ACCOUNT_DIRECTIVE.sub(sub, text), filled


def strip_plugin_options(text: str, site: Site) -> tuple[str, list[str]]:
    """The script with each ``#SBATCH`` line that gives an option of one of the site's SPANK
    plugins (Shifter's ``--image``) turned into a comment (``##SBATCH``, which sbatch skips),
    and the options so removed: a test cluster without the plugin would refuse them."""
    names = {o.name for p in site.plugins for o in p.options if "sbatch" in o.tools}
    removed: list[str] = []

    def sub(m: re.Match) -> str:
        option = m["option"].split("=", 1)[0]
        if option not in names:
            return m[0]
        removed.append(m["option"])
        return "#" + m[0]

    return re.sub(r"^#SBATCH[ \t]+(?P<option>--[^\s]+)[^\n]*$", sub, text, flags=re.M), removed


# --------------------------------------------------------------------------- Slurm's words
def verdict(accepted: bool) -> str:
    return "accept" if accepted else "refuse"


def normalise(says: str) -> str:
    """Slurm's answer without what changes from run to run (job id, start time)."""
    says = re.sub(r"Job \d+ to start at \S+ ", "", says)
    return " ".join(says.split())


def record(manifest: dict, observed: list[dict]) -> int:
    """Write observed Slurm verdicts into the entries; return how many changed."""
    by_file = {e["file"]: e for e in manifest["scripts"]}
    changed = 0
    for obs in observed:
        entry = by_file[obs["file"]]
        slurm = {"verdict": obs["verdict"], "says": obs["says"]}
        if obs.get("placeholders"):
            slurm["placeholders"] = obs["placeholders"]
            slurm["as_published"] = obs["as_published"]
        if obs.get("plugin_options"):
            slurm["plugin_options"] = obs["plugin_options"]
        if entry.get("slurm") != slurm or entry.get("expected") != obs["verdict"]:
            changed += 1
        entry["slurm"] = slurm
        entry["expected"] = obs["verdict"]
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Record Slurm's verdicts in the manifest.")
    ap.add_argument("--record", type=Path, required=True, help="JSON lines from the slurm test")
    args = ap.parse_args(argv)
    lines = args.record.read_text(encoding="utf-8").splitlines()
    manifest = load()
    changed = record(manifest, [json.loads(line) for line in lines if line.strip()])
    dump(manifest)
    print(f"{changed} entries changed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
