"""Directives of another scheduler in a job script (``#PBS`` or ``#BSUB`` lines in a script
judged for Slurm, ``#SBATCH`` lines in one judged for LSF): a script written for a site this
checker does not emulate. Each scheduler reads its own prefix and takes the others for
comments, with one exception that the messages say: sbatch translates a few ``#PBS`` and
``#BSUB`` options itself (``src/sbatch/xlate.c``; ``--ignore-pbs`` turns that off), a
translation this checker does not emulate. So such a script is an error, ``foreign-directives``,
unless the reader asks for it to be judged as it stands (``check-job --allow-foreign``, which
makes the finding a warning).
"""

from __future__ import annotations

from clusterkit.emulate.report import Report
from clusterkit.emulate.script import JobScript, heredoc_lines, text_lines
from clusterkit.sites.errors import Finding

RULE = "foreign-directives"
# prefix -> the scheduler that reads it
PREFIXES = {"#SBATCH": "Slurm", "#PBS": "PBS", "#BSUB": "LSF"}
OWN = {"slurm": "#SBATCH", "lsf": "#BSUB"}
SUBMIT = {"Slurm": "sbatch", "PBS": "qsub", "LSF": "bsub"}
# what sbatch's PBS and LSF translations take (src/sbatch/xlate.c, _set_pbs_options and
# _set_bsub_options); everything else there is dropped, or refused as an unknown option
SBATCH_TRANSLATES = {
    "PBS": "-N, -q, -A, -o, -e, -a, -M, -m, -W depend= and -l walltime, nodes, ppn, select, "
    "ncpus, mem",
    "LSF": "-J, -q, -n, -W, -o, -e, -M, -m, -x and -cwd",
}


def directive_lines(script: JobScript) -> dict[str, list[int]]:
    """The lines of each scheduler's directives (prefix in the first column), outside the
    bodies of here-documents."""
    out: dict[str, list[int]] = {}
    skip = heredoc_lines(script.text)
    for n, line in enumerate(text_lines(script.text), start=1):
        if n in skip:
            continue
        for prefix in PREFIXES:
            rest = line[len(prefix) :]
            if line.startswith(prefix) and (not rest or rest[0].isspace()):
                out.setdefault(prefix, []).append(n)
    return out


def findings(script: JobScript, scheduler: str) -> list[Finding]:
    """One error per other scheduler whose directives the script holds."""
    own = OWN[scheduler]
    found = directive_lines(script)
    out = []
    for prefix, lines in found.items():
        if prefix == own:
            continue
        other = PREFIXES[prefix]
        where = f"line {lines[0]}" if len(lines) == 1 else f"lines {lines[0]}-{lines[-1]}"
        ours = f"it also has {own} lines" if own in found else f"it has no {own} line"
        if scheduler == "slurm":
            what = (
                f"sbatch translates a few {prefix} options itself ({SBATCH_TRANSLATES[other]}; "
                "unless --ignore-pbs) and drops the rest, a translation check-job does not "
                "emulate: those lines are not judged"
            )
        else:
            what = f"bsub reads {own} lines only and takes these for comments: they ask for nothing"
        out.append(
            Finding(
                script.path,
                lines[0],
                RULE,
                f"{len(lines)} {prefix} line(s) ({where}): written for {other} "
                f"({SUBMIT[other]}), and {ours}; {what}. Submit it with {SUBMIT[other]} on a "
                f"{other} site, or write its request as {own} lines (check-job --allow-foreign "
                "judges the rest as it stands)",
            )
        )
    return out


def allow(report: Report) -> Report:
    """``--allow-foreign``: the script is judged as it stands; its other scheduler's
    directives are a warning, not an error."""
    report.findings = [
        Finding(f.path, f.line, f.rule, f.message, "warning") if f.rule == RULE else f
        for f in report.findings
    ]
    return report
