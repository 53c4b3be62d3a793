"""``hf`` command lines (the Hugging Face Hub's CLI), read by the CLI's own parser.

``huggingface_hub`` builds ``hf`` with click (through typer): the group and each sub-command
parse a command line into their parameters without running it, so a page's or a job script's
``hf download ...`` is judged by the ``huggingface_hub`` CI installs (``requirements/ml.txt``),
with its own messages ("No such option '--local_dir'. (Did you mean ... '--local-dir'?)").
"""

from __future__ import annotations

import contextlib
import io


class HfOptionError(ValueError):
    pass


def parse(argv: list[str]) -> tuple[str, dict]:
    """(sub-command, its parameters) of ``hf ARGV``; raises :class:`HfOptionError` with the
    CLI's complaint (first line), or when ``huggingface_hub`` is not installed."""
    try:
        import click
        from huggingface_hub.cli.hf import app
    except ImportError as exc:
        raise HfOptionError(f"huggingface_hub's CLI is not installed here ({exc})") from None
    if not argv:
        raise HfOptionError("no sub-command (download, upload, auth, ...)")
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            ctx = app.make_context("hf", list(argv))
            args = [*getattr(ctx, "_protected_args", []), *ctx.args]
            name, command, rest = app.resolve_command(ctx, args)
            sub = command.make_context(name, rest, parent=ctx)
            return name, dict(sub.params)
    except click.exceptions.Exit:  # help printed: an argument is missing, or --help
        raise HfOptionError(f"hf {' '.join(argv)}: incomplete (it only prints its help)") from None
    except click.ClickException as exc:
        raise HfOptionError(exc.format_message().splitlines()[0]) from None


HOME_FORMS = ("~", "$HOME", "${HOME}")


def in_home(path: str | None) -> bool:
    """Whether a path as written is under the home directory."""
    return bool(path) and any(path == h or path.startswith(h + "/") for h in HOME_FORMS)
