"""Apptainer's (and Singularity's) command-line grammar: global options, the sub-command, its
options and arguments.

The flag tables are those of Apptainer's own sources (``cmd/internal/cli/action_flags.go``,
``build.go``, ``apptainer.go``), parsed as pflag parses them: ``--long``, ``--long=value``,
``-s value``, ``-svalue``, bundled boolean shorthands. An unknown flag is refused as Apptainer
refuses it (``Error for command "build": unknown flag: --writable``). What the command means
is judged in :mod:`clusterkit.emulate.containers`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# (long name, short letter or None, takes a value)
_ACTION_FLAGS = [
    ("app", None, True), ("bind", "B", True), ("mount", None, True), ("home", "H", True),
    ("overlay", "o", True), ("scratch", "S", True), ("workdir", "W", True),
    ("disable-cache", None, False), ("shell", "s", True), ("cwd", None, True),
    ("pwd", None, True), ("hostname", None, True), ("network", None, True),
    ("network-args", None, True), ("dns", None, True), ("security", None, True),
    ("apply-cgroups", None, True), ("containlibs", None, True), ("fusemount", None, True),
    ("tmpdir", None, True), ("boot", None, False), ("fakeroot", "f", False),
    ("cleanenv", "e", False), ("compat", None, False), ("contain", "c", False),
    ("containall", "C", False), ("nv", None, False), ("nvccli", None, False),
    ("compat32", None, False), ("rocm", None, False), ("writable", "w", False),
    ("writable-tmpfs", None, False), ("no-home", None, False), ("no-mount", None, True),
    ("no-init", None, False), ("no-nv", None, False), ("no-rocm", None, False),
    ("pid", "p", False), ("no-pid", None, False), ("ipc", "i", False), ("net", "n", False),
    ("uts", None, False), ("userns", "u", False), ("keep-privs", None, False),
    ("no-privs", None, False), ("add-caps", None, True), ("drop-caps", None, True),
    ("allow-setuid", None, False), ("env", None, True), ("no-env", None, True),
    ("env-file", None, True), ("no-umask", None, False), ("no-eval", None, False),
    ("dmtcp-launch", None, True), ("dmtcp-restart", None, True), ("blkio-weight", None, True),
    ("blkio-weight-device", None, True), ("cpu-shares", None, True), ("cpus", None, True),
    ("cpuset-cpus", None, True), ("cpuset-mems", None, True), ("memory", None, True),
    ("memory-reservation", None, True), ("memory-swap", None, True),
    ("oom-kill-disable", None, False), ("pids-limit", None, True), ("unsquash", None, False),
    ("ignore-subuid", None, False), ("ignore-fakeroot-command", None, False),
    ("ignore-userns", None, False), ("underlay", None, False), ("sharens", None, False),
    ("runscript-timeout", None, True), ("netns-path", None, True), ("intel-hpu", None, False),
    ("device", None, True), ("cdi-dirs", None, True), ("oci", None, False),
    ("passphrase", None, False), ("pem-path", None, True), ("authfile", None, True),
    ("docker-login", None, False), ("no-https", None, False), ("help", "h", False),
]  # fmt: skip
_BUILD_FLAGS = [
    ("sandbox", "s", False), ("section", None, True), ("json", None, False),
    ("update", "u", False), ("notest", "T", False), ("arch", None, True),
    ("arch-variant", None, True), ("library", None, True), ("disable-cache", None, False),
    ("no-cleanup", None, False), ("fakeroot", "f", False), ("encrypt", "e", False),
    ("fix-perms", None, False), ("mksquashfs-args", None, True), ("nv", None, False),
    ("compat32", None, False), ("nvccli", None, False), ("rocm", None, False),
    ("bind", "B", True), ("mount", None, True), ("writable-tmpfs", None, False),
    ("userns", None, False), ("reproducible", None, False), ("build-arg", None, True),
    ("build-arg-file", None, True), ("warn-unused-build-args", None, False),
    ("force", "F", False), ("no-https", None, False), ("nohttps", None, False),
    ("tmpdir", None, True), ("docker-host", None, True), ("docker-login", None, False),
    ("passphrase", None, False), ("pem-path", None, True), ("authfile", None, True),
    ("data", None, False), ("help", "h", False),
]  # fmt: skip
_GLOBAL_FLAGS = [
    ("debug", "d", False), ("nocolor", None, False), ("silent", "s", False),
    ("quiet", "q", False), ("verbose", "v", False), ("config", "c", True),
    ("build-config", None, False), ("help", "h", False), ("version", None, False),
]  # fmt: skip
_PULL_FLAGS = [
    ("force", "F", False), ("name", None, True), ("dir", None, True), ("arch", None, True),
    ("library", None, True), ("disable-cache", None, False), ("no-https", None, False),
    ("authfile", None, True), ("docker-login", None, False), ("oci", None, False),
    ("help", "h", False),
]  # fmt: skip
# sub-command -> (flags, positional arguments: minimum, maximum or None, rest is a command)
_COMMANDS = {
    "exec": (_ACTION_FLAGS, 2, None),
    "run": (_ACTION_FLAGS, 1, None),
    "shell": (_ACTION_FLAGS, 1, 1),
    "test": (_ACTION_FLAGS, 1, 1),
    "build": (_BUILD_FLAGS, 2, 2),
    "pull": (_PULL_FLAGS, 1, 2),
    "inspect": ([("help", "h", False), ("json", "j", False), ("runscript", "r", False),
                 ("labels", "l", False), ("environment", "e", False), ("deffile", "d", False),
                 ("app", None, True), ("all", None, False)], 1, 1),
    "version": ([("help", "h", False)], 0, 0),
    "instance": (_ACTION_FLAGS, 1, None),
    "cache": ([("help", "h", False)], 0, None),
    "remote": ([("help", "h", False)], 0, None),
}  # fmt: skip


class ContainerOptionError(Exception):
    pass


@dataclass
class Parsed:
    sub: str
    flags: dict[str, list[str]] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)

    def has(self, name: str) -> bool:
        return name in self.flags


def _parse_flags(words: list[str], table, sub: str, stop_at_positional: bool):
    """pflag-style parsing: --long, --long=value, -s value, -svalue, -abc (bool shorthands)."""
    reader = _FlagReader(words, table, sub)
    rest: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w == "--":
            rest.extend(words[i + 1 :])
            break
        if w.startswith("--"):
            i += reader.long(i)
        elif w.startswith("-") and len(w) > 1:
            i += reader.shorts(i)
        else:
            rest.append(w)
            i += 1
            if stop_at_positional:
                rest.extend(words[i:])
                break
    return reader.flags, rest


class _FlagReader:
    def __init__(self, words: list[str], table, sub: str):
        self.words, self.sub = words, sub
        self.longs = {name: takes for name, _s, takes in table}
        self.short = {s: (name, takes) for name, s, takes in table if s}
        self.flags: dict[str, list[str]] = {}

    def fail(self, what: str) -> ContainerOptionError:
        return ContainerOptionError(f'Error for command "{self.sub}": {what}')

    def long(self, i: int) -> int:
        """``--name`` or ``--name=value`` at ``i``; the words it took."""
        name, eq, value = self.words[i][2:].partition("=")
        if name not in self.longs:
            raise self.fail(f"unknown flag: --{name}")
        took = 1
        if self.longs[name] and not eq:
            if i + 1 >= len(self.words):
                raise self.fail(f"flag needs an argument: --{name}")
            value, took = self.words[i + 1], 2
        self.flags.setdefault(name, []).append(value if self.longs[name] else "true")
        return took

    def shorts(self, i: int) -> int:
        """``-abc`` (booleans) or ``-s value``/``-svalue`` at ``i``; the words it took."""
        w = self.words[i]
        for j, ch in enumerate(w[1:], start=1):
            if ch not in self.short:
                raise self.fail(f"unknown shorthand flag: '{ch}' in {w}")
            name, takes = self.short[ch]
            if not takes:
                self.flags.setdefault(name, []).append("true")
                continue
            value, took = w[j + 1 :], 1
            if not value:
                if i + 1 >= len(self.words):
                    raise self.fail(f"flag needs an argument: '{ch}' in -{ch}")
                value, took = self.words[i + 1], 2
            self.flags.setdefault(name, []).append(value.lstrip("="))
            return took
        return 1


def parse(tool: str, args: list[str]) -> Parsed:
    """Global flags, the sub-command, its flags and arguments."""
    gflags, rest = _parse_flags(args, _GLOBAL_FLAGS, tool, stop_at_positional=True)
    if not rest:
        if "version" in gflags:
            return Parsed("version")
        raise ContainerOptionError(f"{tool}: no sub-command (exec, run, shell, build, pull, ...)")
    sub, words = rest[0], rest[1:]
    if sub not in _COMMANDS:
        raise ContainerOptionError(f'Error: unknown command "{sub}" for "{tool}"')
    table, lo, hi = _COMMANDS[sub]
    # action commands stop at the image: what follows is the command and its own options
    flags, positional = _parse_flags(words, table, sub, stop_at_positional=sub in {"exec", "run"})
    if "help" in flags:
        return Parsed(sub, flags, positional)
    if len(positional) < lo or (hi is not None and len(positional) > hi):
        want = f"exactly {lo}" if lo == hi else f"at least {lo}" if hi is None else f"{lo}-{hi}"
        raise ContainerOptionError(
            f'Error for command "{sub}": requires {want} arg(s), only received {len(positional)}'
            if len(positional) < lo
            else f'Error for command "{sub}": accepts {want} arg(s), received {len(positional)}'
        )
    return Parsed(sub, flags, positional)
