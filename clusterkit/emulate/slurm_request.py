"""A Slurm job request: what a script's ``#SBATCH`` lines and the command line ask for.

sbatch first refuses a script it will not read at all (empty, no ``#!``, NUL bytes, DOS line
breaks); then it reads the directives (:func:`clusterkit.emulate.slurm_options.read_directives`)
and the command line, which wins. Each value remembers the line it came from, so that a finding
names it. A heterogeneous job (``#SBATCH hetjob``) is one request per component, each taking
Slurm's propagated options from the one before it. A value the site's docs print as a
placeholder (``--time=<upper_bound>``) stands for the reader's own and is set aside unjudged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from clusterkit.emulate import slurm_options
from clusterkit.emulate.script import JobScript
from clusterkit.emulate.slurm_option_table import RELEASES
from clusterkit.grammars.placeholders import is_ellipsis, placeholder_in
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import Site

# options whose value names what the reader owns: there the docs' "your_project"/"myproject"
# words are placeholders too (elsewhere, a job called my_job is a name the reader may keep)
OWNED = frozenset({"account", "partition", "qos", "reservation", "mail_user", "wckey"})


def script_refusals(script: JobScript) -> list[Finding]:
    """What sbatch refuses before it reads a single option, in its order (sbatch.c,
    _get_script_buffer; it stops at the first): an empty script, one of whitespace only, one
    whose first line is not ``#!``, one holding a NUL byte, one with DOS line breaks. Only a
    file is judged so: a page snippet is part of a script."""
    src, text = script.source, script.text
    if not src.from_file:
        return []
    checks = [
        (src.empty, 0, "script-empty", "Batch script is empty!"),
        (not text.strip(), 1, "script-empty", "Batch script contains only whitespace!"),
        (
            not text.startswith("#!"),
            1,
            "script-shebang",
            "This does not look like a batch script.  The first line must start with #! "
            "followed by the path to an interpreter. For instance: #!/bin/sh",
        ),
        (
            src.nul_line > 0,
            src.nul_line,
            "script-null",
            "The Slurm controller does not allow scripts that contain a NULL character '\\0'.",
        ),
        (
            src.crlf_line > 0,
            src.crlf_line,
            "script-dos-line-breaks",
            "Batch script contains DOS line breaks (\\r\\n) instead of expected UNIX line "
            "breaks (\\n).",
        ),
    ]
    for refused, line, rule, message in checks:
        if refused:
            return [Finding(script.path, line, rule, f"sbatch: error: {message}")]
    return []


@dataclass(frozen=True)
class Value:
    """An option's value and where it was given (script line, or 0 for the command line)."""

    text: str
    line: int


@dataclass
class JobRequest:
    path: Path
    options: dict[str, Value] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    # options given as one of the site docs' placeholders (--time=<upper_bound>): not judged
    placeholders: dict[str, Value] = field(default_factory=dict)
    # options of the site's SPANK plugins (--image=...): name -> value (True for a flag)
    plugin_values: dict[str, Value] = field(default_factory=dict)

    def get(self, dest: str) -> str | None:
        v = self.options.get(dest)
        return v.text if v else None

    def line(self, dest: str) -> int:
        v = self.options.get(dest) or self.placeholders.get(dest)
        return v.line if v else 0

    def has(self, dest: str) -> bool:
        return dest in self.options


def _merge(
    req: JobRequest, parsed: dict[str, list], line: int, placeholders: tuple[str, ...] = ()
) -> None:
    for dest, values in parsed.items():
        if dest in {
            "script",
            "script_args",
            "command",
            slurm_options.PLUGIN,
            slurm_options.PLUGIN_KNOWN,
        }:
            continue
        value = Value("" if values[-1] is True else str(values[-1]), line)
        # a placeholder stands for a value the reader fills in, and is not judged; an account
        # placeholder stays in the request too, for SLURM_JOB_ACCOUNT to show it
        if placeholder_in(value.text, placeholders, words=dest in OWNED):
            req.placeholders[dest] = value
            if dest == "account":
                req.options[dest] = value
            else:
                req.options.pop(dest, None)
        else:
            req.options[dest] = value
            req.placeholders.pop(dest, None)


# Options a component of a heterogeneous job takes from the one before it unless it sets its
# own (Slurm, "Heterogeneous Job Support": the propagated options).
HET_PROPAGATED = frozenset(
    """account acctg_freq begin cluster_constraint clusters comment deadline delay_boot
    dependency distribution error export export_file exclude get_user_env gid hold ignore_pbs
    immediate input job_name mcs_label mem no_requeue nice no_kill output parsable priority
    profile propagate qos quiet reboot reservation requeue signal time test_only time_min uid
    verbose wait wait_all_nodes wckey chdir""".split()
)


def site_plugins(site: Site) -> slurm_options.Plugins:
    """The SPANK plugins whose options ``site``'s Slurm clients take."""
    return slurm_options.Plugins(tuple(site.plugins), generic=site.generic)


def job_requests(
    script: JobScript,
    argv: list[str] | None = None,
    tool: str = "sbatch",
    placeholders: tuple[str, ...] = (),
    plugins: bool | slurm_options.Plugins = False,
    release: str = RELEASES[0],
    options_release: str | None = None,
) -> list[JobRequest]:
    """One request per component (one, unless ``#SBATCH hetjob`` splits the script): its
    directives, then the command line, which wins. Findings about the script's directives as a
    whole (lines sbatch skips, the old #SLURM prefix, a --mail-type that replaces another in
    Slurm ``release``) go with the first. ``options_release``: hold the options to that
    release's (a site that records the Slurm it runs); None: any release's."""
    found = slurm_options.read_directives(script.text, placeholders)
    reqs: list[JobRequest] = []
    for k in range(found.components):
        req = JobRequest(script.path)
        if reqs:
            before = reqs[-1].options
            req.options = {d: v for d, v in before.items() if d in HET_PROPAGATED}
        for d in (d for d in found.read if d.component == k):
            _merge_directive(req, d, tool, placeholders, plugins, options_release)
        reqs.append(req)
    if argv:
        try:
            parsed = slurm_options.parse(tool, list(argv), plugins, options_release)
            reqs[0].findings += plugin_findings(reqs[0], "<command line>", 0, tool, parsed)
            _merge(reqs[0], parsed, 0, placeholders)
        except slurm_options.OptionError as exc:
            reqs[0].findings.append(
                Finding(
                    "<command line>",
                    0,
                    "sbatch-option",
                    f"{tool}: {slurm_options.option_message(exc)}",
                )
            )
    reqs[0].findings[:0] = _directive_notes(script.path, found, tool)
    reqs[0].findings += mail_type_notes(script.path, found, tool, release)
    reqs[0].findings += fill_in_notes(script.path, reqs, tool)
    return reqs


# Slurm 25.05 changed --mail-type from "add to the types given before" (opt->mail_type |= ...)
# to "replace them" (opt->mail_type = ...), like every other option: SchedMD/slurm commit
# fac544cef5, CHANGELOG/slurm-25.05.md ("multiple --mail-type arguments will not be merged").
MAIL_TYPE_REPLACES = "25.05:"


def mail_type_notes(
    path: Path, found: slurm_options.Directives, tool: str, release: str
) -> list[Finding]:
    """A warning where a later ``--mail-type`` directive drops the types of an earlier one:
    Slurm before 25.05 merged them, 25.05 and later keep the last."""
    given: list[tuple[int, str]] = []
    for d in found.read:
        try:
            parsed = slurm_options.parse(tool, list(d.words), plugins=True)
        except slurm_options.OptionError:
            continue  # reported where the directive is judged
        given += [(d.line, str(v)) for v in parsed.get("mail_type", [])]
    if len(given) < 2 or not slurm_options.in_spans(MAIL_TYPE_REPLACES, release):
        return []
    types = [{t.strip().upper() for t in v.split(",")} for _, v in given]
    lost = sorted(set().union(*types[:-1]) - types[-1])
    if not lost:
        return []
    line, last = given[-1]
    earlier = ", ".join(f"line {n}" for n, _ in given[:-1])
    merged = ",".join(sorted(set().union(*types)))
    return [
        Finding(
            path,
            line,
            "mail-type-replaced",
            f"{tool} of Slurm {release} keeps only the last --mail-type ({last}): the types "
            f"asked for on {earlier} ({', '.join(lost)}) are dropped (Slurm 25.05 and later "
            f"replace, earlier releases merged them); ask for all at once: --mail-type={merged}",
            level="warning",
        )
    ]


def fill_in_notes(path: Path, reqs: list[JobRequest], tool: str) -> list[Finding]:
    """One "fill in" warning per option given as a placeholder (``-A <project>``), saying
    what the tool makes of it as written."""
    out, seen = [], set()
    for req in reqs:
        for dest, value in req.placeholders.items():
            if (dest, value) in seen:
                continue
            seen.add((dest, value))
            option = "--" + dest.replace("_", "-")
            out.append(
                Finding(
                    path,
                    value.line,
                    "placeholder",
                    f"fill in {option}: {value.text!r} is a placeholder for your own value; "
                    + AS_WRITTEN.get(dest, f"{tool} would refuse it as written").format(tool=tool),
                    level="warning",
                )
            )
    return out


# options whose value Slurm takes as any text: a placeholder there is not refused. slurmctld
# checks a --mail-user only for its length (job_mgr.c: _test_strlen(job_desc->mail_user,
# "mail_user", 1024)); sbatch opens no --output or --error file, the job's step does.
AS_WRITTEN = {
    "mail_user": "{tool} takes any text here (Slurm checks only that it is at most 1024 "
    "characters), and the mail would go to it as written",
    "job_name": "{tool} takes any text as a job name",
    "comment": "{tool} takes any text as a comment",
    "output": "{tool} takes any path here; the job's output goes there only if its folder exists",
    "error": "{tool} takes any path here; the job's errors go there only if its folder exists",
}


def job_request(
    script: JobScript, argv: list[str] | None = None, tool: str = "sbatch"
) -> JobRequest:
    """The request of the first (usually the only) component."""
    return job_requests(script, argv, tool)[0]


def _merge_directive(
    req: JobRequest,
    d: slurm_options.SbatchDirective,
    tool: str,
    placeholders: tuple[str, ...],
    plugins: bool | slurm_options.Plugins = False,
    release: str | None = None,
) -> None:
    if d.words and all(is_ellipsis(w) for w in d.words):
        message = f"fill in this line: #SBATCH {' '.join(d.words)} stands for your own options"
        req.findings.append(Finding(req.path, d.line, "placeholder", message, "warning"))
        return
    if d.problem:
        message = f"{tool}: fatal: line {d.line}: {d.problem}"
        req.findings.append(Finding(req.path, d.line, "directive-syntax", message))
        return
    try:
        parsed = slurm_options.parse(tool, list(d.words), plugins, release)
    except slurm_options.OptionError as exc:
        req.findings.append(
            Finding(
                req.path, d.line, "sbatch-option", f"{tool}: {slurm_options.option_message(exc)}"
            )
        )
        return
    req.findings += plugin_findings(req, req.path, d.line, tool, parsed)
    stray = parsed.get("script") or parsed.get("command")  # a word that is not an option
    if stray:
        word = stray if isinstance(stray, str) else stray[0]
        message = f"{tool}: error: Invalid directive found in batch script: {word}"
        req.findings.append(Finding(req.path, d.line, "sbatch-option", message))
    _merge(req, parsed, d.line, placeholders)


def plugin_findings(
    req: JobRequest | None, path: Path | str, line: int, tool: str, parsed: dict[str, list]
) -> list[Finding]:
    """What the plugin options of one parsed line amount to: an option of a plugin the site
    runs is judged against its value grammar (and kept in ``req.plugin_values``); one of a
    plugin the registry knows, on a site whose plugins are not known, is a warning that names
    the plugin; any other one there is set aside with :func:`plugin_option`'s warning."""
    out = [plugin_option(path, line, tool, w) for w in parsed.get(slurm_options.PLUGIN, [])]
    for option, value, declared in parsed.get(slurm_options.PLUGIN_KNOWN, []):
        if not declared:
            out.append(known_plugin_option(path, line, tool, option))
            continue
        problem = option.value_problem(value)
        if problem:
            out.append(
                Finding(path, line, "plugin-option-value", f"{tool}: {option.plugin}: {problem}")
            )
        if req is not None:
            req.plugin_values[option.name] = Value("" if value is None else value, line)
    return out


def known_plugin_option(path: Path | str, line: int, tool: str, option) -> Finding:
    """A warning for the option of a plugin the registry knows, on a site whose plugins are
    not known (``--site generic``): not a misspelling, and only such a site takes it."""
    return Finding(
        path,
        line,
        "plugin-option",
        f"plugin option ({option.plugin}): {option.name} is not an option of Slurm's {tool}; "
        f"accepted if the site runs {option.plugin}",
        level="warning",
    )


def plugin_option(path: Path | str, line: int, tool: str, word: str) -> Finding:
    """A warning for an option Slurm's ``tool`` does not have, on a site whose plugins are not
    known: a SPANK plugin may add it there, and nowhere else."""
    name = word.split("=", 1)[0]
    return Finding(
        path,
        line,
        "plugin-option",
        f"{tool}: {name} is not an option of Slurm's {tool} ({RELEASES[0]}-{RELEASES[-1]}): "
        "only a site plugin (SPANK) can add it, and only that site's Slurm takes it; not judged",
        level="warning",
    )


def _directive_notes(path: Path, found: slurm_options.Directives, tool: str) -> list[Finding]:
    """Warnings for what sbatch does not read as a reader would expect."""
    notes = [
        Finding(
            path,
            line,
            "directive-ignored",
            f"{tool} ignores this line ({why}): it reads #SBATCH lines that start in the first "
            "column, before the first command, and nothing else; what it asks for is lost",
            level="warning",
        )
        for line, why in found.ignored
    ]
    if found.old_prefix_line:
        notes.append(
            Finding(
                path,
                found.old_prefix_line,
                "directive-prefix",
                f"{tool}: error: Change from #SLURM to #SBATCH in your script and verify the "
                "options are valid in sbatch",
                level="warning",
            )
        )
    return notes
