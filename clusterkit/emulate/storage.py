"""The paths a job script's commands name, held to what the job asked for.

A site's profile says of each of its file systems what kind it is (``paths:``, ``kind``) and,
for node-local storage that a job gets only on request, the node feature to ask for
(``constraint``: Frontier mounts each node's NVMe at ``/mnt/bb/<user>`` only for jobs that give
``-C nvme``). A command of the body that names such a path (``mkdir``, ``sbcast``, ``cp``, the
trainer's ``--data-dir``), in a job that did not ask for the feature, is an error at its line
(rule ``path-needs-constraint``), once per path a script: on the cluster the directory would not
be there. A command shown on its own (a page snippet) is not judged so: its job is not known.
"""

from __future__ import annotations

import re

from clusterkit.emulate.script import expand
from clusterkit.sites.profiles import Place, Site

_PATH = re.compile(r"(?:^|(?<=[=:,]))(/[^\s:,;]*)")
_FEATURE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


def features(constraint: str | None) -> frozenset[str]:
    """The node features a ``--constraint`` expression names (``nvme``, ``nvme&intel``,
    ``[rack1|rack2]``): a feature named anywhere in it counts as asked for."""
    return frozenset(_FEATURE.findall(constraint or ""))


def absolute_paths(word: str) -> list[str]:
    """The absolute paths in one (expanded) word: the word itself, or the value of
    ``--opt=/path`` and the parts of ``a:/b,/c`` lists."""
    return _PATH.findall(word)


def place_of(path: str, site: Site) -> Place | None:
    """The profile's path that ``path`` lies under, the deepest where several hold it (a
    placeholder segment of the profile, such as ``<user>``, takes any one segment), or None."""
    got = [s for s in path.split("/") if s]
    best, depth = None, -1
    for place in site.places.values():
        want = [s for s in place.path.split("/") if s]
        if (
            len(want) > depth
            and len(got) >= len(want)
            and all(
                w == g or (w.startswith("<") and w.endswith(">"))
                for w, g in zip(want, got, strict=False)
            )
        ):
            best, depth = place, len(want)
    return best


def check_places(ctx, line: int, words: list[str]) -> None:
    """Report, once per script, a path the job could only use had it asked for a node feature.
    ``ctx`` is the body's :class:`clusterkit.emulate.body.Context`."""
    if ctx.features is None:
        return
    for word in words:
        for path in absolute_paths(expand(word, ctx.env)):
            place = place_of(path, ctx.site)
            if place is None or not place.constraint or place.constraint in ctx.features:
                continue
            key = f"path-needs-constraint:{place.name}"
            if key in ctx.told:
                continue
            ctx.told.add(key)
            ctx.add(
                line,
                "path-needs-constraint",
                f"{path} is on {ctx.site.title}'s {place.kind} storage {place.path}, which a "
                f"node has only in a job that asks for it: add #SBATCH -C {place.constraint} "
                f"(--constraint={place.constraint})",
            )
