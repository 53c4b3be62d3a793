"""The options well-known Slurm SPANK plugins add to sbatch, srun and salloc, as data.

A SPANK plugin registers options (``struct spank_option``: name, argument text, usage,
``has_arg`` 0/1/2) that Slurm's clients then take beside their own, so a site that runs one
accepts ``--container-image`` or ``--image`` and a site that does not refuses them as
unrecognized. A profile declares the plugins its site runs (``plugins:``); the registry here
gives the options of those it knows, read from the plugins' own sources, and lets ``--site
generic`` tell a known plugin's option from a misspelling of one of Slurm's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

TOOLS = ("sbatch", "srun", "salloc")


@dataclass(frozen=True)
class PluginOption:
    """One option a plugin adds: ``--name``, whether it takes a value, and its grammar."""

    plugin: str
    name: str  # "--image"
    value: str  # required, optional, none
    pattern: str | None = None  # what the whole value matches
    tools: tuple[str, ...] = TOOLS
    description: str = ""

    @property
    def takes_value(self) -> bool:
        return self.value != "none"

    def value_problem(self, value: str | None) -> str | None:
        """Why ``value`` does not fit the option's grammar, or None."""
        if self.value == "required" and not value:
            return f"{self.name} needs a value"
        if self.pattern and value is not None and not re.fullmatch(self.pattern, value):
            return f"{self.name}={value!r} is not of the form {self.pattern}"
        return None


@dataclass(frozen=True)
class Plugin:
    name: str
    options: tuple[PluginOption, ...]
    sources: tuple[dict, ...] = field(default_factory=tuple)


def _list(item: str, sep: str) -> str:
    """A pattern for ``item[SEP item...]``."""
    return f"{item}({sep}{item})*"


def _opts(plugin: str, rows: list[tuple]) -> tuple[PluginOption, ...]:
    return tuple(PluginOption(plugin, *row) for row in rows)


# NVIDIA/pyxis args.c (spank_opts[], at 1075199): every option is registered for srun, salloc
# and sbatch; has_arg 1 -> required, 0 -> none. The argument texts become the patterns.
_PYXIS = _opts(
    "pyxis",
    [
        ("--container-image", "required", r"\S+", TOOLS, "[USER@][REGISTRY#]IMAGE[:TAG]|PATH"),
        ("--container-mounts", "required", _list(r"[^\s:,]+(:[^\s:,]+(:[^\s:,]+)?)?", ","),
         TOOLS, "SRC:DST[:FLAGS][,SRC:DST...], flags joined with +"),
        ("--container-workdir", "required", r"\S+", TOOLS, "PATH"),
        ("--container-name", "required", r"\S+", TOOLS, "NAME"),
        ("--container-save", "required", r"\S+", TOOLS, "PATH"),
        ("--container-mount-home", "none", None, TOOLS, "bind mount the user's home"),
        ("--no-container-mount-home", "none", None, TOOLS, "do not bind mount the user's home"),
        ("--container-remap-root", "none", None, TOOLS, "remapped to root in the container"),
        ("--no-container-remap-root", "none", None, TOOLS, "not remapped to root"),
        ("--container-entrypoint", "none", None, TOOLS, "run the image's entrypoint"),
        ("--no-container-entrypoint", "none", None, TOOLS, "do not run the entrypoint"),
        ("--container-entrypoint-log", "none", None, TOOLS, "print the entrypoint's output"),
        ("--container-writable", "none", None, TOOLS, "writable container file system"),
        ("--container-readonly", "none", None, TOOLS, "read-only container file system"),
        ("--container-env", "required", r"[A-Za-z_][A-Za-z0-9_]*(,[A-Za-z_][A-Za-z0-9_]*)*",
         TOOLS, "NAME[,NAME...]"),
        ("--container-unshare", "required", r"(net|ipc|uts)(,(net|ipc|uts))*", TOOLS,
         "NS[,NS...] of net, ipc, uts"),
    ],
)  # fmt: skip

# NERSC/shifter wlm_integration/slurm/wrapper.c (spank_option_array, at 84b7d34): --image,
# --volume, --module with a value; --ccm only where the site enables CCM mode (not here); the
# "shifter."-prefixed long forms only where the site configures them instead.
_SHIFTER = _opts(
    "shifter",
    [
        ("--image", "required", r"((docker|custom|id):)?[^\s:]+(:[^\s:]+)?", TOOLS,
         "[docker:]IMAGE[:TAG], the Shifter image the job's shifter commands use"),
        ("--volume", "required", _list(r"[^\s:;]+:[^\s:;]+(:[a-z,=0-9]+)?", ";"),
         TOOLS, "SRC:DST[:FLAGS][;SRC:DST...]"),
        ("--module", "required", r"[A-Za-z0-9_.+-]+(,[A-Za-z0-9_.+-]+)*", TOOLS,
         "MODULE[,MODULE...] (site-defined Shifter modules such as gpu, nccl-plugin; none)"),
    ],
)  # fmt: skip

REGISTRY: dict[str, Plugin] = {
    "pyxis": Plugin(
        "pyxis",
        _PYXIS,
        (
            {
                "title": "NVIDIA/pyxis, args.c (spank_opts) and README",
                "url": "https://github.com/NVIDIA/pyxis/blob/107519944221822ea1dace4db8e7234b2eaa4cd5/args.c",
                "retrieved": "2026-11-28",
            },
        ),
    ),
    "shifter": Plugin(
        "shifter",
        _SHIFTER,
        (
            {
                "title": "NERSC/shifter, wlm_integration/slurm/wrapper.c (spank_option_array)",
                "url": "https://github.com/NERSC/shifter/blob/84b7d34911bb416ffe74e717b09969396523ff6e/wlm_integration/slurm/wrapper.c",
                "retrieved": "2026-11-28",
            },
        ),
    ),
}


def from_profile(name: str, raw: dict) -> Plugin:
    """A plugin a profile declares: its own options where it lists them, else the registry's."""
    options = tuple(
        PluginOption(
            name,
            o["name"],
            o["value"],
            o.get("pattern"),
            tuple(o.get("tools", TOOLS)),
            o.get("description", ""),
        )
        for o in raw.get("options", ())
    )
    if not options and name in REGISTRY:
        options = REGISTRY[name].options
    return Plugin(name, options, tuple(raw.get("sources", ())))


def option_table(plugins: list[Plugin], tool: str) -> dict[str, PluginOption]:
    """``name without dashes`` -> option, for the options the plugins add to ``tool``."""
    return {o.name[2:]: o for p in plugins for o in p.options if tool in o.tools}
