"""``shifter`` in a job: NERSC's container runtime, which runs a command in a Docker image.

The options are Shifter's own (``src/shifter.c`` of NERSC/shifter at 84b7d34: getopt_long with
``"hnvV:i:e:Ew::m:"`` and ``--volume``, ``--image``, ``--entry``/``--entrypoint`` and
``--workdir`` with an optional value, ``--module``, ``--env``, ``--env-file``,
``--clearenv``), read as getopt does with POSIXLY_CORRECT set: the first word that is not an
option starts the command run inside the image. That command is handed back to the body's
judges, where the launcher that started Shifter runs it (``srun shifter python train.py``).
The image comes from ``--image`` here or from the job's own ``#SBATCH --image`` (the Shifter
plugin's option); no image is pulled or run here.
"""

from __future__ import annotations

from pathlib import Path

from clusterkit.emulate.body import Context, Placement
from clusterkit.emulate.registry import register_command
from clusterkit.sites.errors import Finding

# long name -> takes a value: 1 required, 2 optional (only attached), 0 none
_LONG = {
    "help": 0, "volume": 1, "verbose": 0, "image": 1, "entry": 2, "entrypoint": 2,
    "workdir": 2, "module": 1, "env": 1, "env-file": 1, "clearenv": 0,
}  # fmt: skip
_SHORT = {"h": 0, "n": 0, "v": 0, "V": 1, "i": 1, "e": 1, "E": 0, "w": 2, "m": 1}


class ShifterOptionError(ValueError):
    """What shifter's getopt says of an option it cannot read."""


def parse(args: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """(options by long or short name, the command after them)."""
    opts: dict[str, list[str]] = {}
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            return opts, args[i + 1 :]
        if not word.startswith("-") or word == "-":
            break
        i += 1
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            hits = [n for n in _LONG if n == name] or [n for n in _LONG if n.startswith(name)]
            if len(hits) != 1:
                why = "ambiguous" if hits else "unrecognized"
                raise ShifterOptionError(f"shifter: {why} option '{word}'")
            name, arity = hits[0], _LONG[hits[0]]
            if arity == 0 and eq:
                raise ShifterOptionError(f"shifter: option '--{name}' doesn't allow an argument")
            if arity == 1 and not eq:
                if i >= len(args):
                    raise ShifterOptionError(f"shifter: option '--{name}' requires an argument")
                value, i = args[i], i + 1
            opts.setdefault(name, []).append(value)
            continue
        i = _shorts(word, args, i, opts)
    return opts, args[i:]


def _shorts(word: str, args: list[str], i: int, opts: dict[str, list[str]]) -> int:
    for k, letter in enumerate(word[1:], start=1):
        if letter not in _SHORT:
            raise ShifterOptionError(f"shifter: invalid option -- '{letter}'")
        arity, rest = _SHORT[letter], word[k + 1 :]
        if arity == 0:
            opts.setdefault(letter, []).append("")
            continue
        if rest or arity == 2:
            opts.setdefault(letter, []).append(rest)
        elif i < len(args):
            opts.setdefault(letter, []).append(args[i])
            i += 1
        else:
            raise ShifterOptionError(f"shifter: option requires an argument -- '{letter}'")
        break
    return i


def check(path, line: int, args: list[str]) -> tuple[list[str], list[Finding]]:
    """(the command run in the image, findings) for ``shifter args``."""
    try:
        opts, command = parse(args)
    except ShifterOptionError as exc:
        return [], [Finding(path, line, "shifter-option", str(exc))]
    findings = []
    for spec in opts.get("volume", []) + opts.get("V", []):
        for item in spec.split(";"):
            if item.count(":") not in (1, 2) or not all(item.split(":")[:2]):
                findings.append(
                    Finding(
                        path,
                        line,
                        "shifter-volume",
                        f"shifter: volume {item!r} is not SRC:DST[:FLAGS]",
                    )
                )
    if not command and not any(k in opts for k in ("entry", "entrypoint", "help", "h")):
        findings.append(
            Finding(path, line, "shifter-command", "shifter: no command to run in the image")
        )
    return command, findings


@register_command("shifter")
def judge_shifter(ctx: Context, line: int, words: list[str], placement: Placement | None) -> None:
    """Judge Shifter's options, then the command it runs inside the image, where it runs."""
    inner, findings = check(ctx.path, line, ctx.expanded(words[1:]))
    ctx.extend(findings)
    if inner and Path(words[0]).name == "shifter":
        ctx.judge(line, inner, placement)
