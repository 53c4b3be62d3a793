"""``reframe`` command lines, read by ReFrame's own argument parser.

ReFrame builds its parser inside ``reframe.frontend.cli.main``; it is taken from there (the
call stops where ``main`` would parse ``sys.argv``) and given the page's words instead, so a
command line is judged by the ReFrame release CI installs (``requirements/ml.txt``), required
action group included (``-r``, ``--dry-run``, ``-l``, ...).
"""

from __future__ import annotations

import contextlib
import io
from functools import cache

from clusterkit.sites.errors import Finding


class ReframeOptionError(ValueError):
    pass


class _Captured(Exception):
    def __init__(self, parser):
        super().__init__("parser captured")
        self.parser = parser


@cache
def parser():
    """ReFrame's own ``argparse`` parser (the one its ``main`` builds)."""
    from reframe.frontend import argparse as rfm_argparse
    from reframe.frontend import cli

    def capture(self, *args, **kwargs):
        raise _Captured(self)

    original = rfm_argparse.ArgumentParser.parse_args
    rfm_argparse.ArgumentParser.parse_args = capture
    try:
        cli.main()
    except _Captured as got:
        got.parser._holder.prog = "reframe"
        return got.parser._holder
    finally:
        rfm_argparse.ArgumentParser.parse_args = original
    raise ReframeOptionError("reframe's main() parsed no command line")


def parse(argv: list[str]):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser().parse_args(list(argv))
    except SystemExit:
        lines = [x for x in err.getvalue().splitlines() if x.strip()]
        raise ReframeOptionError(lines[-1] if lines else "bad options") from None


def check(page, line: int, words: list[str], site=None, snippet: str = "") -> list[Finding]:
    try:
        parse(list(words[1:]))
    except ImportError as exc:
        return [Finding(page, line, "reframe-option", f"ReFrame is not installed here ({exc})")]
    except ReframeOptionError as exc:
        return [Finding(page, line, "reframe-option", str(exc))]
    return []
