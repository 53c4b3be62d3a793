"""``singularity`` / ``apptainer``: no container runtime exists on the test machine.

The command line is parsed with Apptainer's own options (the flag tables of
``cmd/internal/cli/action_flags.go``, ``build.go`` and ``apptainer.go``): global options before
the sub-command, then ``exec [options] IMAGE COMMAND...``, ``run``/``shell [options] IMAGE``,
``build [options] TARGET SOURCE`` (exactly two arguments), ``pull``, ``inspect``, ``version``.
An unknown flag is refused as Apptainer refuses it (``Error for command "build": unknown flag:
--writable``, exit status 1).

``exec`` is what jobs use: the command inside the container is checked like any other (dry run,
through :data:`clusterkit.emulate.jobcheck.WRAPPERS`) and then run directly (run mode), with a
note on stderr that no container runtime exists here. ``build --writable`` was Singularity 2's
writable ext3 image, removed in Singularity 3.0: it is refused with its replacement (a
``--sandbox`` directory, then a SIF image built from it). ``shell`` and ``build`` say what they
would do.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field

from clusterkit.errors import Finding

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
    longs = {name: takes for name, _s, takes in table}
    shorts = {s: (name, takes) for name, s, takes in table if s}
    flags: dict[str, list[str]] = {}
    rest: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w == "--":
            rest.extend(words[i + 1 :])
            break
        if w.startswith("--"):
            name, eq, value = w[2:].partition("=")
            if name not in longs:
                raise ContainerOptionError(f'Error for command "{sub}": unknown flag: --{name}')
            if longs[name] and not eq:
                if i + 1 >= len(words):
                    raise ContainerOptionError(
                        f'Error for command "{sub}": flag needs an argument: --{name}'
                    )
                value = words[i + 1]
                i += 1
            flags.setdefault(name, []).append(value if longs[name] else "true")
            i += 1
            continue
        if w.startswith("-") and len(w) > 1:
            j = 1
            while j < len(w):
                ch = w[j]
                if ch not in shorts:
                    raise ContainerOptionError(
                        f"Error for command \"{sub}\": unknown shorthand flag: '{ch}' in {w}"
                    )
                name, takes = shorts[ch]
                if takes:
                    value = w[j + 1 :]
                    if not value:
                        if i + 1 >= len(words):
                            raise ContainerOptionError(
                                f"Error for command \"{sub}\": flag needs an argument: '{ch}' "
                                f"in -{ch}"
                            )
                        value = words[i + 1]
                        i += 1
                    flags.setdefault(name, []).append(value.lstrip("="))
                    break
                flags.setdefault(name, []).append("true")
                j += 1
            i += 1
            continue
        rest.append(w)
        i += 1
        if stop_at_positional:
            rest.extend(words[i:])
            break
    return flags, rest


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


_SIF_SUFFIXES = (".sif",)
_V2_SUFFIXES = (".simg", ".img")


def _is_image_file(name: str) -> bool:
    return name.endswith(_SIF_SUFFIXES + _V2_SUFFIXES) or "://" in name


def check(path, line: int, tool: str, args: list[str]) -> tuple[list[str], list[Finding]]:
    """(command run inside the container, findings) for ``tool args``."""

    def finding(rule: str, msg: str, level: str = "error") -> Finding:
        return Finding(path, line, rule, msg, level)

    if not args:
        return [], [finding("container-command", f"{tool}: no sub-command")]
    # Singularity 2's `build --writable` gets its own message (Apptainer only says unknown flag)
    if args[0] == "build" and any(a in {"--writable", "-w"} for a in args[1:]):
        return [], [
            finding(
                "container-writable",
                f"{tool} build --writable made Singularity 2 writable ext3 images, removed in "
                "Singularity 3.0 (Apptainer: unknown flag): build a --sandbox directory to "
                "change as root or with --fakeroot, then a read-only image (.sif) from it",
            )
        ]
    try:
        parsed = parse(tool, list(args))
    except ContainerOptionError as exc:
        if 'command "exec": requires' in str(exc):
            return [], [
                finding("container-command", f"{tool} exec: no command after the image ({exc})")
            ]
        return [], [finding("container-option", str(exc))]
    findings: list[Finding] = []
    for spec in parsed.flags.get("bind", []):
        for item in spec.split(","):
            parts = item.split(":")
            if not parts[0] or len(parts) > 3 or (len(parts) == 3 and parts[2] not in {"ro", "rw"}):
                findings.append(
                    finding(
                        "container-bind",
                        f"{tool} {parsed.sub}: bind {item!r} is not src[:dest[:ro|rw]]",
                    )
                )
    if parsed.sub == "exec":
        image, command = parsed.args[0], parsed.args[1:]
        if image.endswith(_V2_SUFFIXES):
            findings.append(_v2_image(finding, tool, image))
        return command, findings
    if parsed.sub in {"shell", "run", "test"}:
        image = parsed.args[0]
        if image.endswith(_V2_SUFFIXES):
            findings.append(_v2_image(finding, tool, image))
        if parsed.has("writable") and _is_image_file(image):
            findings.append(
                finding(
                    "container-writable",
                    f"{tool} {parsed.sub} --writable needs a sandbox directory (or an overlay); "
                    f"{image} is an image file, read-only",
                    level="warning",
                )
            )
        return [], findings
    if parsed.sub == "build":
        target = parsed.args[0]
        if target.endswith(_V2_SUFFIXES) and not parsed.has("sandbox"):
            findings.append(
                finding(
                    "container-simg",
                    f"{tool} build {target}: Singularity 3 and Apptainer write a SIF image "
                    "whatever the name; .simg was Singularity 2's format: name it .sif",
                    level="warning",
                )
            )
    return [], findings


def _v2_image(finding, tool: str, image: str) -> Finding:
    return finding(
        "container-simg",
        f"{image}: a Singularity 2 image name; Singularity 3 and Apptainer read SIF images "
        "(rebuild: apptainer build image.sif docker://...)",
        level="warning",
    )


def wrapper(tool: str):
    """WRAPPERS entry: the command run inside the container, and findings."""

    def inner(path, line, args, site):
        return check(path, line, tool, list(args))

    return inner


def _note(tool: str, msg: str) -> None:
    print(f"[{tool} emulator] {msg}", file=sys.stderr, flush=True)


def shim(tool: str):
    def run(argv: list[str]) -> int:
        command, findings = check("<command line>", 0, tool, argv)
        for f in findings:
            print(f, file=sys.stderr)
        if any(f.level == "error" for f in findings):
            return 1 if any(f.rule == "container-option" for f in findings) else 255
        try:
            parsed = parse(tool, list(argv))
        except ContainerOptionError:  # pragma: no cover - check() has reported it
            return 1
        sub = parsed.sub
        if sub == "exec":
            opts = ", ".join(f"--{k}" for k in parsed.flags) or "no options"
            _note(
                tool,
                f"no container runtime here: running {command[0]} directly "
                f"(image {parsed.args[0]}, {opts})",
            )
            try:
                return subprocess.call(command)
            except OSError as exc:
                print(f"{tool}: {command[0]}: {exc.strerror}", file=sys.stderr)
                return 127
        if sub == "shell":
            binds = ", ".join(parsed.flags.get("bind", [])) or "none"
            _note(
                tool,
                f"no container runtime here: would start an interactive shell in "
                f"{parsed.args[0]} (GPUs: {'NVIDIA' if parsed.has('nv') else 'none'}, "
                f"binds: {binds}, writable: {'yes' if parsed.has('writable') else 'no'})",
            )
            return 0
        if sub == "build":
            target, source = parsed.args
            kind = "sandbox directory" if parsed.has("sandbox") else "SIF image"
            how = " with --fakeroot" if parsed.has("fakeroot") else ""
            _note(
                tool, f"no container runtime here: would build {kind} {target} from {source}{how}"
            )
            return 0
        if sub == "version":
            print(f"{tool} version 0.0.0-clusterkit-emulator")
            return 0
        _note(tool, f"no container runtime here: {sub} not performed")
        return 0

    return run


HANDLERS = {"singularity": shim("singularity"), "apptainer": shim("apptainer")}
WRAPPERS = {"singularity": wrapper("singularity"), "apptainer": wrapper("apptainer")}
