"""Installs and images on pages must name their versions.

The environment page tells readers to pin versions; a page that then shows ``pip install
torch`` or ``docker://rocm/pytorch:latest`` gives them something that changes under them. In
every shell block of every page (skipped blocks included: install commands are the ones CI
cannot run) and every example file:

* ``pip install`` requirements need ``==`` (paths, URLs and wheel files are exact already);
  rule ``unpinned-install``;
* ``conda create`` / ``conda install`` packages need ``=VERSION``; rule ``unpinned-install``;
* container images (``docker://...``, ``From:``/``FROM``) need a tag other than ``latest``, or
  a digest; rule ``unpinned-image``.
"""

from __future__ import annotations

import re
from pathlib import Path

from clusterkit.grammars import myst as P
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import ROOT

# pip and conda options that take a value (the value is not a package)
PIP_VALUED = {
    "-r", "--requirement", "-c", "--constraint", "-i", "--index-url", "--extra-index-url",
    "-f", "--find-links", "--prefix", "--target", "-t", "--root", "-C", "--config-settings",
    "--platform", "--python-version", "--implementation", "--abi", "--only-binary",
    "--no-binary", "--progress-bar", "--log", "--cache-dir", "--src", "-e", "--editable",
    "--report", "--upgrade-strategy", "--global-option", "--install-option", "--build-option",
}  # fmt: skip
CONDA_VALUED = {
    "-n", "--name", "-p", "--prefix", "-c", "--channel", "--file", "--clone", "--solver",
    "--repodata-fn", "--subdir", "--platform",
}  # fmt: skip
_IMAGE = re.compile(r"docker://(?P<ref>[^\s\"']+)")
_FROM = re.compile(r"^\s*(?:From:|FROM)\s+(?P<ref>\S+)")


def image_problem(ref: str) -> str | None:
    """Why an image reference is not pinned, or None."""
    if "@sha256:" in ref:
        return None
    last = ref.rsplit("/", 1)[-1]
    if ":" not in last:
        return f"image {ref} has no tag (Docker takes `latest`)"
    tag = last.split(":", 1)[1]
    if tag == "latest" or not tag or "$" in tag:
        return f"image {ref} is not pinned to a release tag"
    return None


def _pip_args(words: list[str]) -> list[str] | None:
    """The arguments after ``pip install``, or None if this is not a pip install."""
    for i, w in enumerate(words):
        if Path(w).name in {"pip", "pip3"} or (w == "pip" and i > 0 and words[i - 1] == "-m"):
            if words[i + 1 : i + 2] == ["install"]:
                return words[i + 2 :]
            return None
    return None


def _conda_args(words: list[str]) -> list[str] | None:
    if words and Path(words[0]).name in {"conda", "mamba", "micromamba"}:
        if words[1:2] in (["install"], ["create"]):
            return words[2:]
    return None


def _packages(args: list[str], valued: set[str]) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a.startswith("-"):
            skip = a in valued
            continue
        out.append(a)
    return out


def _exact(spec: str) -> bool:
    return "/" in spec or spec.startswith(".") or spec.endswith((".whl", ".tar.gz", ".zip"))


def check_command(path: Path | str, words: list[P.Word]) -> list[Finding]:
    texts = [w.text for w in words]
    out = []
    pip = _pip_args(texts)
    if pip is not None:
        for pkg in _packages(pip, PIP_VALUED):
            if "==" not in pkg and not _exact(pkg):
                out.append(
                    _finding(
                        path,
                        words,
                        pkg,
                        "unpinned-install",
                        f"pip installs {pkg} without a version: give it one (`NAME==VERSION`)",
                    )
                )
    conda = _conda_args(texts)
    if conda is not None:
        for pkg in _packages(conda, CONDA_VALUED):
            if "=" not in pkg and not _exact(pkg):
                out.append(
                    _finding(
                        path,
                        words,
                        pkg,
                        "unpinned-install",
                        f"conda installs {pkg} without a version: give it one (`NAME=VERSION`)",
                    )
                )
    for w in words:
        m = _IMAGE.search(w.text)
        why = image_problem(m["ref"]) if m else None
        if why:
            out.append(Finding(path, w.line, "unpinned-image", why))
    return out


def _finding(path, words, pkg: str, rule: str, message: str) -> Finding:
    line = next((w.line for w in words if w.text == pkg), words[0].line)
    return Finding(path, line, rule, message)


def check_lines(path: Path | str, lines: list[tuple[int, str]], console: bool) -> list[Finding]:
    out = []
    for cmd in P.logical_commands(lines, console=console):
        for simple in P.split_commands(cmd.words):
            out += check_command(path, list(P.command_words(simple)))
    for n, raw in lines:
        m = _FROM.match(raw)
        why = image_problem(m["ref"]) if m else None
        if why:
            out.append(Finding(path, n, "unpinned-image", why))
    return out


def check_page(page: P.Page) -> list[Finding]:
    out = []
    for b in page.blocks:
        if b.is_shell and not b.is_include:
            out += check_lines(page.path, list(b.body), console=b.lang == "console")
    return out


def check_file(path: Path) -> list[Finding]:
    text = path.read_text(encoding="utf-8")
    lines = list(enumerate(text.splitlines(), 1))
    out = check_lines(path, lines, console=False)
    # images named in comments (the "build the image first" line of a job script)
    for n, raw in lines:
        if raw.lstrip().startswith("#"):
            for m in _IMAGE.finditer(raw):
                why = image_problem(m["ref"])
                if why:
                    out.append(Finding(path, n, "unpinned-image", why))
    return out


def lint_all(root: Path = ROOT) -> list[Finding]:
    out: list[Finding] = []
    for page in P.scan_pages(root / "docs"):
        out += check_page(page)
    for path in P.example_files(root / "examples"):
        if P.file_kind(path, path.read_text(encoding="utf-8")) == "shell":
            out += check_file(path)
    return out
