"""``pip install`` and ``pip download`` command lines, read by pip's own option parser.

pip's parser (``pip._internal``, the one ``pip install`` uses) refuses what pip refuses: an
option pip no longer has (``--install-option``, removed in 23.1), a missing value. It is built
isolated (``isolated=True``), so the test machine's pip configuration and ``PIP_*`` variables
do not leak into what a page's command means.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass, field

SUBCOMMANDS = {"install", "download", "wheel"}


class PipOptionError(ValueError):
    pass


@dataclass
class PipInstall:
    sub: str
    requirements: list[str] = field(default_factory=list)  # positional requirement specifiers
    editables: list[str] = field(default_factory=list)  # -e values
    files: list[str] = field(default_factory=list)  # -r values
    index_url: str = "https://pypi.org/simple"
    extra_index_urls: list[str] = field(default_factory=list)

    @property
    def indexes(self) -> list[str]:
        return [self.index_url, *self.extra_index_urls]


def parse(words: list[str]) -> PipInstall:
    """``words`` after ``pip`` (``install torch ...``); raises :class:`PipOptionError` with
    pip's own complaint."""
    if not words or words[0] not in SUBCOMMANDS:
        got = words[0] if words else "nothing"
        raise PipOptionError(f"pip: {got}: only install, download and wheel are judged here")
    from pip._internal.commands import create_command

    command = create_command(words[0], isolated=True)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            opts, rest = command.parser.parse_args(list(words[1:]))
    except SystemExit:
        lines = [x for x in err.getvalue().strip().splitlines() if x.strip()]
        raise PipOptionError(f"pip {words[0]}: {lines[-1] if lines else 'bad options'}") from None
    # pip download has no -e: an option a sub-command lacks is simply not set
    return PipInstall(
        words[0],
        list(rest),
        list(getattr(opts, "editables", None) or []),
        list(getattr(opts, "requirements", None) or []),
        getattr(opts, "index_url", None) or "https://pypi.org/simple",
        list(getattr(opts, "extra_index_urls", None) or []),
    )
