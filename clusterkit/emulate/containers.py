"""``singularity`` / ``apptainer`` in a job script: no container runtime exists on the test
machine, so the command line is judged, and the command run inside the container is judged in
turn, where the launcher that started the container runs it.

``exec`` is what jobs use: the command after the image is handed back to the body's judges
(and run directly in a scaled-down run, with a note that no runtime exists here). ``run`` with
words after the image is followed the same way: the image's run script is taken to hand them on
as a command, as the run scripts of Docker-built images without an entry point, and NGC's
entry point, do (``singularity run --rocm image.sif python train.py``, as LUMI writes it). ``build
--writable`` was Singularity 2's writable ext3 image, removed in Singularity 3.0: it is refused
with its replacement (a ``--sandbox`` directory, then a SIF image built from it). An image
named ``.simg`` or ``.img`` (Singularity 2's names) is run as any other: Apptainer tells an
image's format from its content -- SIF, squashfs (what Singularity 2.4 and later built as
``.simg``), ext3, a sandbox directory or a tar file, never from its name (apptainer/apptainer,
``pkg/image/image.go``, ``registeredFormats``) -- and only ``build`` to such a name is noted,
since it writes a SIF whatever the name says.
"""

from __future__ import annotations

from pathlib import Path

from clusterkit.emulate.body import Context, Placement
from clusterkit.emulate.container_options import ContainerOptionError, Parsed, parse
from clusterkit.emulate.registry import register_command
from clusterkit.sites.errors import Finding

_SIF_SUFFIXES = (".sif",)
# sub-commands whose words after the image are a command run inside the container
FOLLOWED = frozenset({"exec", "run"})
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
            message = f"{tool} exec: no command after the image ({exc})"
            return [], [finding("container-command", message)]
        return [], [finding("container-option", str(exc))]
    findings = _binds(finding, tool, parsed) + _images(finding, tool, parsed)
    return (parsed.args[1:] if parsed.sub in FOLLOWED else []), findings


def _bind_option_ok(option: str) -> bool:
    """The third field of a bind: ro, rw, or for an image file mounted into the container the
    path inside it (image-src=) or its partition (id=), as Apptainer's and SingularityCE's
    user guides describe image mounts ("Bind Paths and Mounts", Image Mounts)."""
    return option in {"ro", "rw"} or option.startswith(("image-src=", "id="))


def _binds(finding, tool: str, parsed: Parsed) -> list[Finding]:
    out = []
    for spec in parsed.flags.get("bind", []):
        for item in spec.split(","):
            parts = item.split(":")
            if (
                not parts[0]
                or len(parts) > 3
                or (len(parts) == 3 and not _bind_option_ok(parts[2]))
            ):
                form = "src[:dest[:ro|rw|image-src=PATH|id=N]]"
                message = f"{tool} {parsed.sub}: bind {item!r} is not {form}"
                out.append(finding("container-bind", message))
    return out


def _images(finding, tool: str, parsed: Parsed) -> list[Finding]:
    """--writable on an image file, and a Singularity 2 name given to a new image."""
    out = []
    if parsed.sub in {"exec", "shell", "run", "test"}:
        image = parsed.args[0]
        if parsed.sub != "exec" and parsed.has("writable") and _is_image_file(image):
            out.append(
                finding(
                    "container-writable",
                    f"{tool} {parsed.sub} --writable needs a sandbox directory (or an overlay); "
                    f"{image} is an image file, read-only",
                    level="warning",
                )
            )
    elif parsed.sub == "build":
        target = parsed.args[0]
        if target.endswith(_V2_SUFFIXES) and not parsed.has("sandbox"):
            out.append(
                finding(
                    "container-simg",
                    f"{tool} build {target}: Singularity 3 and Apptainer write a SIF image "
                    "whatever the name; .simg was Singularity 2's format: name it .sif",
                    level="warning",
                )
            )
    return out


@register_command("singularity", "apptainer")
def judge_container(ctx: Context, line: int, words: list[str], placement: Placement | None) -> None:
    """Judge the container command, then the command it runs inside, where it runs."""
    inner, findings = check(ctx.path, line, Path(words[0]).name, ctx.expanded(words[1:]))
    ctx.extend(findings)
    if inner:
        ctx.judge(line, inner, placement)
