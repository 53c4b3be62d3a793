"""Judge the inline code spans of a page as a reader would use them.

* A command span goes through the checker a block's command goes through
  (:func:`clusterkit.commands.shell.check_shell_text`) with the page's (or tab's) site, and
  through the stale-command registry. A span that leaves parts out (``jsrun -n 1 ... ``,
  ``torchrun --nproc_per_node=4``) is completed with a stand-in program; one with metavariables
  (``sbatch FILE``, ``--cpus-per-task=...``) is judged on its grammar only.
* An option span (``--gres=gpu:5``) is an option of the tool named nearest before it in its
  sentence (in a table: the tool its column's header names), else of the job script or program
  the page includes nearest above, else of a tool named after it or elsewhere in the paragraph,
  else of the launchers, the trainers, pip and the programs the page names elsewhere: the first
  of these whose grammar knows every option of the span (pip, ``python -m venv``, ``ddlrun``:
  :mod:`clusterkit.commands.tool_options`). A span no tool takes is an error. Site facts
  (``{{ bede_gh_cores }}``) are substituted first. It is then judged in the context the page
  gives it: an ``sbatch`` option
  is added to the command line that submits the included job script, an ``srun`` or
  ``torchrun`` option is written into that script's launch lines, and the emulator judges the
  result against the site's profile. Only what the change adds is reported. Earlier option
  spans of the same sentence are applied first ("set `--nodes=2` and change the `srun` line to
  `--ntasks=8`").
* Inside a historical admonition (see ``docs/contributing.md``) the findings that say a thing is
  historical are notices, not errors; everything else (a resource set larger than the node) is
  still wrong there. So are they for an option span whose sentence speaks of the past ("pip 23.1
  removed `--install-option`").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from clusterkit.commands import deprecations, jobs, tool_options
from clusterkit.commands.shell import check_shell_text
from clusterkit.emulate import accelerate_launch, container_options, deepspeed_launch, torchrun
from clusterkit.emulate.script import body_commands
from clusterkit.grammars import myst as P
from clusterkit.grammars import prose, reframe_cli
from clusterkit.sites import contracts
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import ROOT, Site, all_sites, load_site

# Findings that only say a command line is not the tool's (unknown option, missing value).
GRAMMAR_RULES = {
    "sbatch-option",
    "srun-option",
    "salloc-option",
    "torchrun-option",
    "accelerate-option",
    "deepspeed-option",
    "jsrun-option",
    "bsub-option",
    "container-option",
    "module-subcommand",
    "script-flag-unknown",
    "script-flag-arity",
    "script-flags",
    "query-option",
    "pip-option",
    "python-syntax",
    "reframe-option",
    "conda-option",
    "tensorboard-option",
    "git-option",
    "profiler-option",
    "ddlrun-option",
}
# Findings that, inside a historical admonition, describe the history rather than a mistake.
# Findings that a jsrun resource set does not fit the node: judged in a span with placeholders
# too (see judge_command). A resource set is whole in its own line; an srun step is not (it is
# judged against a job the span does not show), so srun's are left to the grammar there.
SHAPE_RULES = {"rs-cores", "rs-gpus", "bind-cores"}
HISTORICAL_RULES = {"launcher-historical", "module-historical", "module-removed"}
LAUNCHERS = {"srun", "jsrun", "torchrun", "mpirun", "mpiexec", "accelerate", "deepspeed"}
STAND_IN = "true"  # the program put where a span leaves the command out
_METAVAR = re.compile(r"^(?:[NMKH]|HH|MM|SS|KHz|[A-Z]{2,}[A-Z_]*)$")
# getopt's and argparse's words for an option given without its value
_NEEDS_VALUE = re.compile(r"requires an argument|expected one argument")
_MISSING_PROGRAM = re.compile(
    r"No command given|required: (?:training|user)_script|no program|no command", re.I
)


@dataclass
class SpanResult:
    how: str  # command-checked, option-checked, not-a-command, skipped
    findings: list[Finding] = field(default_factory=list)
    detail: str = ""

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]


@dataclass(frozen=True)
class Include:
    """A script the page shows above a span: an included file, or a shell block."""

    line: int
    path: Path
    body: str | None = None  # a block's text; None for an included file

    @cached_property
    def text(self) -> str:
        if self.body is not None:
            return self.body
        return self.path.read_text(encoding="utf-8", errors="replace")

    @property
    def site(self) -> Site | None:
        name = P.example_site(self.path) if self.body is None else None
        return load_site(name) if name else None

    @cached_property
    def commands(self) -> list:
        if self.body is None and P.file_kind(self.path, self.text) != "shell":
            return []
        try:
            return body_commands(self.text)
        except Exception:  # bashlex refuses some scripts: they name no tools then
            return []

    @property
    def scheduler(self) -> str | None:
        if "#SBATCH" in self.text:
            return "sbatch"
        if "#BSUB" in self.text:
            return "bsub"
        return None


class PageContext:
    """What a span's judgement needs from its page: sites, includes, historical sections."""

    def __init__(self, path: Path | str, text: str | None = None):
        self.page = P.scan_page(Path(path), text)
        self.rel = self.page.rel
        self.markers, _problems = deprecations.page_markers(self.page)
        self.includes = [
            Include(b.line, b.include_path())
            if b.is_include
            else Include(b.line, self.page.path, _commands_of(b))
            for b in self.page.blocks
            if (b.is_include and b.include_path() and b.include_path().is_file()) or b.is_shell
        ]

    @cached_property
    def spans(self) -> list[prose.Span]:
        return prose.spans(self.page)

    @cached_property
    def named_programs(self) -> list[str]:
        """The programs (``NAME.py``) the page's prose names that have a contract: NVIDIA's
        ``main.py`` in a table of the ResNet-50 benchmark page, for example."""
        named = {
            m.tool: None
            for para in prose.paragraphs(self.page)
            for m in para.mentions
            if m.tool.endswith(".py")
        }
        return [p for p in named if _contract(p, self, None) is not None]

    def span_at(self, line: int, code: str) -> prose.Span | None:
        return next((s for s in self.spans if s.line == line and s.code == code), None)

    def site(self, span: prose.Span) -> Site | None:
        row = span.paragraph.text.lstrip()
        cell = row.split("|")[1] if span.paragraph.table_row and row.count("|") > 1 else None
        name = (
            P.site_from_title(span.tab)
            or P.site_from_title(cell)
            or self.page.front_matter.get("site")
        )
        return load_site(str(name)) if name else None

    def historical(self, line: int) -> bool:
        return any(m.start <= line <= m.end for m in self.markers)

    def include_above(self, line: int, since: int = 0) -> Include | None:
        """The last script or shell block above ``line`` (and below the line ``since``, the
        heading of the span's section: a script of another section speaks of other things)."""
        above = [i for i in self.includes if since < i.line < line]
        return above[-1] if above else None


def _commands_of(block: P.Block) -> str:
    """A shell block's commands as text (console prompts and output dropped)."""
    lines = P.logical_commands(list(block.body), console=block.lang.lower() == "console")
    return "".join(c.text + "\n" for c in lines)


# --------------------------------------------------------------------------- entry point
def judge(ctx: PageContext, span: prose.Span) -> SpanResult:
    kind = span.kind
    if kind in {"command", "option"} and span.unknown_substitutions:
        keys = ", ".join(span.unknown_substitutions)
        msg = (
            f"`{span.code}`: no site fact is called {keys} (see clusterkit/sites/substitutions.py)"
        )
        return SpanResult(kind + "-checked", [Finding(ctx.rel, span.line, "substitution", msg)])
    if kind == "command":
        result = judge_command(ctx, span)
    elif kind == "option":
        result = judge_option(ctx, span)
    else:
        return SpanResult("not-a-command", detail=kind)
    if ctx.historical(span.line):
        result.findings = [_as_history(f, "historical section") for f in result.findings]
    elif kind == "option" and prose.told_as_past(span):
        # "pip 23.1 removed `--install-option`": the sentence tells the option's history (the
        # stale-command lint reads command spans, which need a historical admonition)
        result.findings = [_as_history(f, "the sentence tells it as past") for f in result.findings]
    return result


def _as_history(f: Finding, why: str) -> Finding:
    if f.rule in HISTORICAL_RULES or f.rule.startswith("deprecated:"):
        return Finding(f.path, f.line, f.rule, f"{f.message} ({why})", "warning")
    return f


def _at(ctx: PageContext, span: prose.Span, findings: list[Finding], prefix: str = ""):
    """Findings moved to the span's page line (the emulator numbers lines of its own input)."""
    return [
        Finding(ctx.rel, span.line, f.rule, f"{prefix}{f.message}", f.level)
        for f in findings
        if f.level in {"error", "warning"}
    ]


# --------------------------------------------------------------------------- commands
def _placeholder(word: str) -> bool:
    """``...``, ``FILE``, ``packed:N``, ``HOST:PORT``, ``[B:]SIG@SECONDS``: a metavariable."""
    if "..." in word or "…" in word:
        return True
    return any(_METAVAR.match(p) for p in re.split(r"[\[\]:=,@/]", word) if p)


def _completed(words: list[str], command: bool = False) -> tuple[list[str], bool]:
    """(words with metavariables replaced, grammar only?); for a command, a trailing ``...``
    stands for the rest of it and is dropped."""
    grammar_only = False
    if command and words and words[-1] in {"...", "…"}:
        words = words[:-1]
    out = []
    for w in words:
        name, eq, value = w.partition("=")
        if eq and (name.startswith("-") or name.isidentifier()) and _placeholder(value):
            out.append(f"{name}=1")  # `--mem=...`, `KEY=VALUE`: the shape stays
            grammar_only = True
        elif _placeholder(w):
            out.append("1")
            grammar_only = True
        else:
            out.append(w)
    return out, grammar_only


def judge_command(ctx: PageContext, span: prose.Span) -> SpanResult:
    words, grammar_only = _completed(span.words, command=True)
    i = prose.command_word(words)
    name = Path(words[i]).name
    findings = _stale(ctx, span)
    site = ctx.site(span)
    if site is None:  # a page for every site: the command's grammar, on a site that has it
        site, grammar_only = _any_site_for(name), True
    how, found = _check_words(ctx, span, words, site)
    if name in LAUNCHERS and any(_MISSING_PROGRAM.search(f.message) for f in found):
        how, found = _check_words(ctx, span, [*words, STAND_IN], site)
    if words and words[-1].startswith("-") and "=" not in words[-1]:
        # `srun --cpu-bind`: the span names an option of the command, not a setting
        found = [f for f in found if not _NEEDS_VALUE.search(f.message)]
    if grammar_only:
        # a placeholder stands in as 1, the least a value can ask for, so a resource set or
        # step too large for the node is too large whatever the reader fills in
        shape = SHAPE_RULES if name == "jsrun" else set()
        found = [f for f in found if f.rule in GRAMMAR_RULES | shape]
        how = "command-checked"
    untested = [f for f in found if f.rule == "block-untested"]
    if untested:
        return SpanResult("skipped", findings, f"no checker for `{name}` yet")
    detail = f"{name} ({site.name})" if site else name
    if grammar_only:
        detail += ", grammar only: the span has placeholders"
    return SpanResult(how if how != "emulated-job" else "command-checked", findings + found, detail)


def _check_words(ctx, span, words, site) -> tuple[str, list[Finding]]:
    source = " ".join(_quote(w) for w in words) + "\n"
    how, found, _detail = check_shell_text(source, ctx.rel, span.line, site)
    return how, _at(ctx, span, found)


def _quote(word: str) -> str:
    return word if re.fullmatch(r"[\w@%+=:,./-]+", word) else "'" + word.replace("'", "") + "'"


def _stale(ctx: PageContext, span: prose.Span) -> list[Finding]:
    return deprecations.lint_lines(ctx.rel, [(span.line, span.code)], "text")


_SCHEDULER_OF = {t: "slurm" for t in ("sbatch", "srun", "salloc")} | {
    t: "lsf" for t in ("bsub", "jsrun")
}


def _any_site_for(tool: str) -> Site | None:
    """A site whose scheduler has ``tool``, for judging a site-less span's grammar."""
    want = _SCHEDULER_OF.get(tool, "slurm")
    return next((s for s in all_sites() if s.scheduler == want), None)


# --------------------------------------------------------------------------- options
def _name_only(span: prose.Span) -> bool:
    """`--cpus-per-task`: the name of an option, not a setting."""
    words = span.words
    return len(words) == 1 and "=" not in words[0]


def judge_option(ctx: PageContext, span: prose.Span) -> SpanResult:
    site = ctx.site(span)
    include = ctx.include_above(span.line, span.paragraph.section_line)
    if include is not None and include.site is not None:
        if site is None:
            site = include.site
        elif include.site.name != site.name:
            include = None  # a script of another site says nothing about this span
    candidates = _candidates(ctx, span, include)
    options, grammar_only = _completed(span.words)
    name_only = _name_only(span)
    for tool in candidates:
        judged = site or _any_site_for(tool)
        notes = None if judged is None else _knows(tool, options, judged, ctx, include, name_only)
        if notes is None:
            continue
        if grammar_only or name_only or tool not in VALUE_TOOLS:
            what = "name" if name_only else "grammar"
            # the one thing a grammar says besides refusing: the option was removed (pip's)
            stale = [f for f in notes if f.rule.startswith("deprecated:")]
            found = _at(ctx, span, stale, f"`{span.code}` ({tool}): ")
            return SpanResult("option-checked", found, f"{tool}: {what} only")
        findings = _judge_as(tool, ctx, span, options, judged, include)
        return SpanResult("option-checked", findings, f"{tool} ({judged.name})")
    wrong_value = _wrong_value(ctx, span, options, site, include, candidates)
    if wrong_value:
        return SpanResult("option-checked", wrong_value)
    named = _named_before(span)
    if named:
        msg = f"`{span.code}` is not an option of {named}, which the sentence names before it"
        return SpanResult("option-checked", [Finding(ctx.rel, span.line, "option-unknown", msg)])
    tried = ", ".join(candidates)
    msg = f"`{span.code}`: no tool around it has this option (tried {tried})"
    return SpanResult("option-checked", [Finding(ctx.rel, span.line, "option-unknown", msg)])


def _wrong_value(ctx, span, options, site, include, candidates) -> list[Finding]:
    """For a span no tool takes: the findings of the first program (argparse contract) that
    has every option of the span and refuses only a value (`--mp-start-method=thread`)."""
    for tool in candidates:
        if not (tool.endswith(".py") or tool.startswith(tool_options.MODULE_PREFIX)):
            continue
        judged = site or _any_site_for(tool)
        refused = _refusals(_grammar(tool, options, judged, ctx, include)) if judged else []
        if refused and all(f.rule == "script-flag-value" for f in refused):
            return _at(ctx, span, refused, f"`{span.code}` ({tool}): ")
    return []


def _named_before(span: prose.Span) -> str | None:
    """The tool named nearest before ``span`` in its sentence (or its table column's header),
    if any."""
    column = prose.column_tools(span)
    if column:
        return column[-1]
    lo = span.sentence[0]
    before = [m for m in span.paragraph.mentions if lo <= m.offset < span.offset]
    tools = [m.tool for m in before if not m.tool.endswith(".py")]
    return tools[-1] if tools else None


# Launchers whose options a sentence names, read by their option tables (``accelerate`` is
# ``accelerate launch``'s)
LAUNCH_TABLES = {"accelerate": accelerate_launch, "deepspeed": deepspeed_launch}
# Tools whose option values are judged against the profile (the others: their grammar).
VALUE_TOOLS = {"sbatch", "srun", "torchrun", "jsrun"}


def _candidates(ctx: PageContext, span: prose.Span, include: Include | None) -> list[str]:
    """Whose option a span is, most likely first (see the module's docstring)."""
    para = span.paragraph
    named = prose.candidate_tools(span)
    lo = span.sentence[0]
    before = [m.tool for m in para.mentions if lo <= m.offset < span.offset]
    first = [t for t in named if t in before]
    setting = _tools_setting(include, span.words)
    heading = list(para.heading_tools)
    if para.table_row:
        order = prose.column_tools(span) + first + heading + named + _include_tools(include)
    else:
        order = setting + first + _include_tools(include) + named + heading
    order += _page_programs(ctx) + list(FALLBACK_TOOLS) + ctx.named_programs
    elsewhere = prose.column_tools(span, other=True)  # a table tells its columns apart
    seen: list[str] = []
    for t in order:
        if t not in seen and t not in elsewhere:
            seen.append(t)
    return seen


def _option_names(words: list[str]) -> set[str]:
    return {w.split("=", 1)[0] for w in words if w.startswith("-")}


def _tools_setting(include: Include | None, words: list[str]) -> list[str]:
    """The tools whose lines in the included script already set every option of the span."""
    if include is None:
        return []
    want = _option_names(words)
    out = []
    directive = "#SBATCH" if include.scheduler == "sbatch" else "#BSUB"
    if include.scheduler:
        given = set()
        for raw in include.text.splitlines():
            if raw.startswith(directive):
                given |= _option_names(raw[len(directive) :].split("#")[0].split())
        if want and want <= given:
            out.append(include.scheduler)
    for cmd in include.commands:
        words_ = [str(w) for w in cmd.words]
        for tool, i in _command_tools(words_):
            if want and want <= _option_names(words_[i:]):
                out.append(tool)
    return out


def _command_tools(words: list[str]) -> list[tuple[str, int]]:
    """(tool, index of the word after its name) for each tool a command line runs:
    ``srun``, ``pip`` (also as ``python -m pip``), ``python -m MODULE``."""
    out = []
    for i, w in enumerate(words):
        base = Path(w).name
        if base in prose.TOOLS:
            out.append((base, i + 1))
        elif base in {"pip", "pip3"}:
            out.append(("pip", i + 1))
        elif base in prose.PYTHONS and words[i + 1 : i + 2] == ["-m"] and i + 2 < len(words):
            module = words[i + 2]
            tool = "pip" if module == "pip" else tool_options.MODULE_PREFIX + module
            out.append((tool, i + 3))
    return out


# Last resorts: the launchers and the project's trainers, whose options pages speak of most.
FALLBACK_TOOLS = (
    "sbatch",
    "srun",
    "bsub",
    "jsrun",
    "torchrun",
    "accelerate",
    "deepspeed",
    "apptainer",
    "train_resnet.py",
    "train_resnet_keras.py",
    "reframe",
    "pip",
)


def _page_programs(ctx: PageContext) -> list[str]:
    """The project's programs the page is about (front matter ``frameworks``); the other
    programs the page names come last (:attr:`PageContext.named_programs`)."""
    frameworks = ctx.page.front_matter.get("frameworks") or []
    out = []
    if "pytorch" in frameworks:
        out.append("train_resnet.py")
    if "tensorflow" in frameworks:
        out.append("train_resnet_keras.py")
    return out


def _include_tools(include: Include | None) -> list[str]:
    """The tools whose options a reader of an included file may be told about."""
    if include is None:
        return []
    if include.path.suffix == ".py":
        return [include.path.name]
    out = [include.scheduler] if include.scheduler else []
    for cmd in include.commands:
        words = [str(w) for w in cmd.words]
        tools = [t for t, _i in _command_tools(words)]
        tools += [Path(w).name for w in words if w.endswith(".py")]
        out += [t for t in tools if t not in out]
    return out


_VALUE_RULE = re.compile(r"(^|-)value$|^option-value$")


def _knows(tool, options, site, ctx, include, name_only=False) -> list[Finding] | None:
    """The findings of ``options`` given to ``tool`` on ``site`` if the tool takes them, else
    None (a tool of another scheduler does not: its options are not what a sentence on this
    site's page speaks of)."""
    found = _grammar(tool, options, site, ctx, include)
    if not _refusals(found):
        return found
    if not name_only:
        return None
    found = _grammar(tool, [*options, "1"], site, ctx, include)  # a value put after the name
    refused = _refusals(found)
    # `--mp-start-method`: the value "1" is ours, so a refusal of it (not one of the option's
    # choices) still says the tool has the option. Not for a short form: `-nnodes` would be
    # jsrun's `-n` with the value "nodes".
    if refused and options[0].startswith("--"):
        refused = [f for f in refused if not _VALUE_RULE.search(f.rule)]
    return None if refused else [f for f in found if f not in _refusals(found)]


REFUSING_RULES = GRAMMAR_RULES | {"scheduler-mismatch"}


def _refusals(found: list[Finding]) -> list[Finding]:
    return [
        f
        for f in found
        if f.level == "error" and (f.rule in REFUSING_RULES or _VALUE_RULE.search(f.rule))
    ]


def _grammar(tool: str, options: list[str], site: Site, ctx, include) -> list[Finding]:
    """The findings of ``options`` given to ``tool`` with nothing else around them."""
    scheduler = _SCHEDULER_OF.get(tool)
    if scheduler and scheduler != site.scheduler:
        return [Finding("<span>", 1, "scheduler-mismatch", f"{tool} is not {site.title}'s")]
    if tool == "sbatch":
        return jobs.slurm_job("<span>", site, options, text="#!/bin/bash\ntrue\n").findings
    if tool in {"srun", "salloc"}:
        return jobs.launch_line("<span>", 1, ["srun", *options, STAND_IN], site).findings
    if tool == "torchrun":
        try:
            torchrun.parse([*options, STAND_IN])
        except torchrun.TorchrunError as exc:
            return [Finding("<span>", 1, "torchrun-option", str(exc))]
        return []
    if tool in LAUNCH_TABLES:
        table = LAUNCH_TABLES[tool]
        try:
            table.parse([*options, STAND_IN])
        except table.LaunchError as exc:
            return [Finding("<span>", 1, f"{tool}-option", str(exc))]
        return []
    if tool == "jsrun":
        return jobs.jsrun_line("<span>", 1, ["jsrun", *options, STAND_IN], site)
    if tool == "bsub":
        text = "#!/bin/bash\n#BSUB " + " ".join(options) + "\ntrue\n"
        return jobs.lsf_job("<span>", site, text=text).findings
    if tool in {"apptainer", "singularity"}:
        try:
            container_options.parse(tool, ["exec", *options, "image.sif", STAND_IN])
        except container_options.ContainerOptionError as exc:
            return [Finding("<span>", 1, "container-option", str(exc))]
        return []
    if tool == "reframe":
        try:
            reframe_cli.parse([*options, "--dry-run"])  # ReFrame requires one action
        except reframe_cli.ReframeOptionError as exc:
            return [Finding("<span>", 1, "reframe-option", str(exc))]
        return []
    if tool_options.knows(tool):
        return tool_options.check(tool, "<span>", 1, options)
    if tool.endswith(".py"):
        contract = _contract(tool, ctx, include)
        if contract is None:
            return [Finding("<span>", 1, "script-flags", f"no contract for {tool}")]
        return contracts.check_invocation("<span>", 1, contract, options)
    return [Finding("<span>", 1, "query-option", f"no grammar for {tool}")]


def _contract(program: str, ctx, include: Include | None):
    """The command-line contract of ``program``: a third-party one kept under contracts/
    (told apart by the included script, then the page), else the project's own example."""
    for context in (include.text if include is not None else "", ctx.page.text):
        found = contracts.find_third_party(program, context)
        if found is not None:
            return found
    named = [
        c
        for data, c in contracts.third_party_contracts()
        if any(Path(p).name == program for p in data.get("invoked_as", []))
    ]
    if len(named) == 1:
        return named[0]
    hits = sorted((ROOT / "examples").rglob(Path(program).name))
    if include is not None and include.path.name == program:
        hits = [include.path]
    if len(hits) == 1:
        try:
            return contracts.own_contract(hits[0])
        except contracts.ContractError:
            return None
    return None


def _judge_as(tool, ctx, span, options, site, include) -> list[Finding]:
    """``options`` of ``tool`` in the context the page gives them; only what they add."""
    earlier = [
        (s, _completed(s.words)[0]) for s in prose.sentence_spans(span) if s.kind == "option"
    ]
    prefix = f"`{span.code}` ({tool}): "
    if tool in {"sbatch", "srun", "torchrun"} and site.scheduler == "slurm":
        before = _slurm_change(ctx, span, earlier, site, include)
        after = _slurm_change(ctx, span, [*earlier, (span, options)], site, include, tool)
        new = _added(before, after)
        return _at(ctx, span, new, prefix)
    if tool == "jsrun":
        prior = [
            w for s, opts in earlier if _tool_of(ctx, s, site, include) == "jsrun" for w in opts
        ]
        before = jobs.jsrun_line(ctx.rel, 1, ["jsrun", *prior, STAND_IN], site)
        after = jobs.jsrun_line(ctx.rel, 1, ["jsrun", *prior, *options, STAND_IN], site)
        return _at(ctx, span, _added(before, after) if prior else after, prefix)
    return _at(ctx, span, _grammar(tool, options, site, ctx, include), prefix)


def _added(before: list[Finding], after: list[Finding]) -> list[Finding]:
    seen = {(f.rule, f.message) for f in before}
    return [f for f in after if (f.rule, f.message) not in seen]


def _slurm_change(ctx, span, changes, site, include, tool=None) -> list[Finding]:
    """Findings of the included Slurm script (or a stand-in) with ``changes`` applied: sbatch
    options on the command line, srun/torchrun options written into the launch lines."""
    argv: list[str] = []
    launch: dict[str, list[str]] = {"srun": [], "torchrun": []}
    for s, opts in changes:
        t = tool if s is span else _tool_of(ctx, s, site, include)
        if t == "sbatch":
            argv += opts
        elif t in launch:
            launch[t] += opts
    if include is not None and include.scheduler == "sbatch":
        path, text = include.path, include.text
    else:
        # a stand-in job: the site's example account, so that only the span's options count
        head = "#!/bin/bash\n"
        if site.account.get("required"):
            head += f"#SBATCH --account={site.account['example']}\n"
        path, text = Path("<span>"), head + "srun true\n"
        if launch["torchrun"]:
            text = head + "torchrun train.py\n"
    for name, opts in launch.items():
        if opts:
            text = _insert_options(text, name, opts)
    report = jobs.slurm_job(path, site, argv, text=text)
    return report.findings


def _tool_of(ctx, span, site, include) -> str | None:
    options = _completed(span.words)[0]
    for tool in _candidates(ctx, span, include):
        if _knows(tool, options, site, ctx, include) is not None:
            return tool
    return None


_PROGRAM_START = re.compile(
    r"(?<=\s)(?:python3?|torchrun|apptainer|singularity|bash|sh|hostname|true|"
    r"[\w./-]+\.py|\./\S+|\"?\$\S+)(?=\s|$)"
)


def _insert_options(text: str, launcher: str, options: list[str]) -> str:
    """Write ``options`` into every ``launcher`` line of a script, after the launcher's own
    options and before the program it starts, so that they take effect over those (the last
    value of an option wins)."""
    added = " ".join(options) + " "
    out, pos = "", 0
    for m in re.finditer(rf"(?m)^[ \t]*(?:\S+=\S+\s+)*{launcher}(?=\s)", text):
        if m.start() < pos:
            continue
        prog = _PROGRAM_START.search(text, m.end())
        at = prog.start() if prog else text.find("\n", m.end())
        at = len(text) if at < 0 else at
        if not prog:
            added_here = " " + added.rstrip()
        else:
            added_here = added
        out += text[pos:at] + added_here
        pos = at
    return out + text[pos:]
