"""``conda`` command lines: the options of the sub-commands pages use, as data.

Names and arities from conda's argument parsers (``conda/cli/helpers.py`` and the
``main_create``, ``main_install``, ``main_config``, ``main_remove``, ``main_list``,
``main_info`` modules of conda 26.7, and ``conda/activate.py`` for ``activate``), which are
argparse parsers; conda is not installable from PyPI, so the tables are kept here. A
sub-command's options are its own plus the groups conda adds to it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

_V, _F = True, False
# (short, long, takes a value)
_PREFIX = [("-n", "--name", _V), ("-p", "--prefix", _V)]
_CHANNELS = [
    ("-c", "--channel", _V), (None, "--use-local", _F), ("-O", "--override-channels", _F),
    (None, "--repodata-fn", _V), (None, "--no-lock", _F), (None, "--repodata-use-zst", _F),
    (None, "--no-repodata-use-zst", _F), (None, "--repodata-use-shards", _F),
    (None, "--no-repodata-use-shards", _F),
]  # fmt: skip
_SOLVER_MODE = [
    (None, "--strict-channel-priority", _F), (None, "--channel-priority", _F),
    (None, "--no-channel-priority", _F), (None, "--no-deps", _F), (None, "--only-deps", _F),
    (None, "--no-pin", _F), (None, "--exclude-newer", _V), (None, "--solver", _V),
]  # fmt: skip
_PACKAGE_INSTALL = [
    (None, "--force", _F), (None, "--copy", _F), (None, "--shortcuts", _F),
    (None, "--no-shortcuts", _F), (None, "--shortcuts-only", _V), (None, "--clobber", _F),
]  # fmt: skip
_NETWORK = [("-C", "--use-index-cache", _F), ("-k", "--insecure", _F), (None, "--offline", _F)]
_OUTPUT = [
    (None, "--json", _F), (None, "--console", _V), ("-q", "--quiet", _F),
    ("-v", "--verbose", _F), (None, "--debug", _F), (None, "--trace", _F),
    ("-d", "--dry-run", _F), ("-y", "--yes", _F), (None, "--download-only", _F),
    (None, "--show-channel-urls", _F), (None, "--no-show-channel-urls", _F),
]  # fmt: skip
_CREATE_INSTALL = [
    *_PREFIX, *_CHANNELS, *_SOLVER_MODE, *_PACKAGE_INSTALL, *_NETWORK, *_OUTPUT,
    (None, "--force-pscheck", _F), (None, "--unknown", _F), ("-f", "--file", _V),
    (None, "--format", _V), (None, "--dev", _F),
]  # fmt: skip
TABLES: dict[str, list] = {
    "create": [
        *_CREATE_INSTALL, (None, "--clone", _V), (None, "--no-default-packages", _F),
        (None, "--subdir", _V), (None, "--platform", _V),
    ],
    "install": [
        *_CREATE_INSTALL, (None, "--revision", _V), (None, "--force-reinstall", _F),
        (None, "--override-frozen", _F), (None, "--prune", _F),
        (None, "--freeze-installed", _F), (None, "--no-update-deps", _F),
        (None, "--update-deps", _F), ("-S", "--satisfied-skip-solve", _F),
        (None, "--update-all", _F), (None, "--all", _F), (None, "--update-specs", _F),
    ],
    "remove": [
        *_PREFIX, *_CHANNELS, *_NETWORK, *_OUTPUT, (None, "--features", _F),
        (None, "--force-remove", _F), (None, "--force", _F), (None, "--no-pin", _F),
        (None, "--all", _F), (None, "--keep-env", _F), (None, "--dev", _F),
    ],
    "config": [
        (None, "--system", _F), (None, "--env", _F), (None, "--file", _V),
        (None, "--show-sources", _F), (None, "--validate", _F), (None, "--write-default", _F),
        (None, "--stdin", _F), ("-f", "--force", _F), (None, "--json", _F),
        ("-q", "--quiet", _F), ("-v", "--verbose", _F),
    ],
    "list": [
        *_PREFIX, (None, "--fields", _V), (None, "--reverse", _F), ("-c", "--canonical", _F),
        ("-f", "--full-name", _F), (None, "--explicit", _F), (None, "--md5", _F),
        (None, "--sha256", _F), ("-e", "--export", _F), ("-r", "--revisions", _F),
        (None, "--size", _F), (None, "--no-pip", _F), (None, "--json", _F),
    ],
    "info": [
        (None, "--offline", _F), ("-a", "--all", _F), (None, "--base", _F),
        ("-e", "--envs", _F), ("-s", "--system", _F), (None, "--json", _F),
    ],
    "activate": [(None, "--stack", _F), (None, "--no-stack", _F)],
    "init": [
        (None, "--all", _F), (None, "--user", _F), (None, "--no-user", _F),
        (None, "--system", _F), (None, "--reverse", _F), (None, "--condabin", _F),
        ("-d", "--dry-run", _F), (None, "--json", _F), ("-q", "--quiet", _F),
        ("-v", "--verbose", _F),
    ],
    "deactivate": [],
}  # fmt: skip
# conda config options that take two values (KEY VALUE) or any number (KEY ...)
_CONFIG_PAIRS = ("--set", "--append", "--prepend", "--add", "--remove")
_CONFIG_LISTS = ("--get", "--show", "--describe", "--clear", "--remove-key")
# settings pages change with ``conda config --set``, and the values conda accepts
CONFIG_VALUES = {
    "channel_priority": {"strict", "flexible", "disabled"},
    "auto_activate_base": {"true", "false"},
    "auto_activate": {"true", "false"},
    "always_yes": {"true", "false"},
    "env_prompt": None,
    "solver": {"libmamba", "classic"},
    "pip_interop_enabled": {"true", "false"},
}
CONFIG_LISTS = {"channels", "envs_dirs", "pkgs_dirs", "default_channels", "create_default_packages"}


class CondaOptionError(ValueError):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise CondaOptionError(message)


@dataclass
class CondaCommand:
    sub: str
    options: dict = field(default_factory=dict)
    positionals: list[str] = field(default_factory=list)

    def values(self, dest: str) -> list[str]:
        got = self.options.get(dest) or []
        return [v for group in got for v in (group if isinstance(group, list) else [group])]


def parse(words: list[str]) -> CondaCommand:
    """``words`` after ``conda``; raises :class:`CondaOptionError` as conda would refuse."""
    if not words:
        raise CondaOptionError("conda: no sub-command")
    sub = words[0]
    if sub not in TABLES:
        raise CondaOptionError(f"conda {sub}: not a sub-command judged here ({', '.join(TABLES)})")
    p = _Parser(prog=f"conda {sub}", add_help=True, allow_abbrev=False)
    for short, long, takes in TABLES[sub]:
        names = [n for n in (short, long) if n]
        p.add_argument(*names, action="append" if takes else "store_true")
    if sub == "config":
        for name in _CONFIG_PAIRS:
            p.add_argument(name, nargs=2, action="append")
        for name in _CONFIG_LISTS:
            p.add_argument(name, nargs="*", action="append")
    elif sub == "activate":
        p.add_argument("env", nargs="?")
    elif sub != "deactivate":
        p.add_argument("specs", nargs="*")
    ns = vars(p.parse_args(list(words[1:])))
    env = ns.pop("env", None)
    positionals = [env] if env else list(ns.pop("specs", None) or [])
    return CondaCommand(sub, {k: v for k, v in ns.items() if v not in (None, False)}, positionals)
