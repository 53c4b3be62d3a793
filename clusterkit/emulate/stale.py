"""Stale commands in a job script: the entries of the registry ``lint/deprecations.yaml``
(:mod:`clusterkit.grammars.stale_commands`) that the script's commands match, each a warning
with what replaced it and the source that says so (``python -m torch.distributed.launch``:
torchrun). The job still runs them; a removed one fails where it is reached. A file that says
at its top that it is kept as history (``HISTORICAL:`` ... ``Replaced by``) is not told again
about the entries it names. The pages and examples are held to the same registry as errors by
:mod:`clusterkit.commands.deprecations`.
"""

from __future__ import annotations

from clusterkit.emulate.script import JobScript, heredoc_lines, text_lines
from clusterkit.grammars import stale_commands
from clusterkit.sites.errors import Finding


def findings(script: JobScript) -> list[Finding]:
    marker, _ = stale_commands.file_marker(script.path, script.text)

    def covered(entry: stale_commands.Entry, line: int) -> bool:
        return marker is not None and marker.covers(entry, line)

    skip = heredoc_lines(script.text)
    lines = [(n, t) for n, t in enumerate(text_lines(script.text), 1) if n not in skip]
    try:
        found = stale_commands.lint_lines(script.path, lines, "shell", covered)
    except stale_commands.RegistryError:
        return []  # the registry's own check reports it (python -m clusterkit check)
    seen, out = set(), []
    for f in found:
        if (f.line, f.rule) not in seen:
            seen.add((f.line, f.rule))
            out.append(Finding(f.path, f.line, f.rule, f.message, "warning"))
    return out
