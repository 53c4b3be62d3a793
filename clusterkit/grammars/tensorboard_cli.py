"""``tensorboard`` command lines, read by TensorBoard's own flag parser.

``tensorboard.program.TensorBoard.configure`` parses a command line into flags without
starting the server (the parser includes the flags its plugins add), so a page's command is
judged by the TensorBoard CI installs (``requirements/ml.txt``).
"""

from __future__ import annotations

import contextlib
import io


class TensorBoardOptionError(ValueError):
    pass


def parse(argv: list[str]):
    """The flags of ``tensorboard ARGV``; raises :class:`TensorBoardOptionError` with
    TensorBoard's complaint, or when TensorBoard is not installed."""
    try:
        from tensorboard import program
    except ImportError as exc:
        raise TensorBoardOptionError(f"tensorboard is not installed here ({exc})") from None
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return program.TensorBoard().configure(argv=[None, *argv])
    except SystemExit:
        lines = [x for x in err.getvalue().splitlines() if x.strip()]
        raise TensorBoardOptionError(lines[-1] if lines else "bad options") from None


def check(page, line: int, words: list[str], site=None, snippet: str = "") -> list:
    from clusterkit.sites.errors import Finding

    try:
        parse(list(words[1:]))
    except TensorBoardOptionError as exc:
        return [Finding(page, line, "tensorboard-option", str(exc))]
    return []
