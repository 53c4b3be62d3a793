"""Generate a ReFrame configuration from the site profiles (``sites/<name>.yaml``).

One ReFrame *system* per site and one *partition* per profile partition. Everything a partition
entry holds is read from the profile:

* scheduler (``slurm`` or ``lsf``) and launcher: ``srun`` on Slurm sites; on LSF sites (Summit)
  a ``jsrun`` launcher defined in the generated file and registered with ReFrame's launcher
  registry, whose resource sets come from the node type (usable cores, GPUs);
* ``access``: the partition (``--partition=NAME`` or ``-q NAME``), the account (the profile's
  placeholder unless ``--account`` gives a real one; none where the profile says jobs need none,
  ``account.required: false``) and, where the partition requires one, the first QoS it lists
  (a check that needs another QoS adds ``--qos`` itself; see :func:`qos_for`);
* ``resources``: ``gpu`` as ``--gres=gpu:{num_gpus_per_node}`` on NVIDIA nodes and as
  ``--gpus={num_gpus}`` (GPUs for the whole job) on AMD nodes, the form ARCHER2 documents;
* ``processor`` and ``devices`` from the node type, ``max_jobs`` capped by the partition's nodes;
* ``environs``: one environment per current framework module the partition's node type can
  load (``pytorch/2.9.1-gpu`` becomes ``pytorch-2_9_1-gpu``, with the feature ``pytorch``).
  A site with no framework module (Bede: users install them with conda or pip) gets
  ``pytorch-user`` and ``tensorflow-user``, which run in the environment ReFrame was started
  from, or in one set up by ``--setup FRAMEWORK=COMMAND``;
* ``extras``: facts checks need and ReFrame has no field for (site, partition, node limits,
  QoS limits, data set paths).

Sites that are not in service (end of service, retired) are generated only with
``include_historical`` (``--include-historical``): their partitions no longer accept jobs.

``python -m clusterkit.reframe.config --out DIR [--site S] [--include-historical]`` writes
``DIR/clusterkit_reframe.py``; run ReFrame with ``-C DIR/clusterkit_reframe.py``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import pprint
import re
import sys
from pathlib import Path

from clusterkit.sites.errors import CheckError, Finding
from clusterkit.sites.profiles import (
    Module,
    NodeType,
    Partition,
    Site,
    duration_seconds,
    load_profile,
    profile_paths,
)

FRAMEWORKS = ("pytorch", "tensorflow")
# "PyTorch 2.9.1", "TensorFlow 2.13.0, PyTorch 2.0.1": a framework named with its version
_PROVIDES = re.compile(r"\b(PyTorch|TensorFlow)\s+\d", re.IGNORECASE)
DEFAULT_MAX_JOBS = 4
CONFIG_NAME = "clusterkit_reframe.py"


# --------------------------------------------------------------------------- selection
def select_sites(
    names: list[str] | None = None,
    include_historical: bool = False,
    sites_dir: Path | None = None,
) -> list[Site]:
    """The profiles to generate: the named ones (or all), current sites only by default."""
    paths = profile_paths(sites_dir) if sites_dir else profile_paths()
    by_name = {p.stem: p for p in paths}
    if names:
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise CheckError(
                [
                    Finding(
                        sites_dir or "sites",
                        0,
                        "site-exists",
                        f"no profile for {', '.join(unknown)} (known: {', '.join(by_name)})",
                    )
                ]
            )
        paths = [by_name[n] for n in names]
    sites = [load_profile(p) for p in paths]
    out = [s for s in sites if s.is_current or include_historical]
    if names and not out:
        skipped = ", ".join(f"{s.name} ({s.status})" for s in sites)
        raise CheckError(
            [
                Finding(
                    sites[0].path,
                    sites[0].line("lifecycle", "status"),
                    "site-historical",
                    f"{skipped} is not in service: add --include-historical to generate it",
                )
            ]
        )
    return out


# --------------------------------------------------------------------------- environments
def module_frameworks(mod: Module, site: Site | None = None) -> set[str]:
    """Frameworks a module provides: by its name, or named with a version in ``provides``
    (``provides: as 1.7.0-1`` refers to another version of the same module)."""
    if mod.name in FRAMEWORKS:
        return {mod.name}
    provides = mod.raw.get("provides", "")
    same = re.fullmatch(r"as (\S+)", provides.strip())
    if same and site is not None:
        other, _ = site.find_module(f"{mod.name}/{same[1]}")
        provides = other.raw.get("provides", "") if other else ""
    return {m.lower() for m in _PROVIDES.findall(provides)}


def env_name(module: Module | str) -> str:
    """A ReFrame environment name (letters, digits, ``_`` and ``-``) for a module:
    ``pytorch/2.9.1-gpu`` becomes ``pytorch-2_9_1-gpu``."""
    full = module if isinstance(module, str) else module.full_name
    return re.sub(r"[^A-Za-z0-9_-]", "_", full.replace("/", "-"))


def framework_modules(site: Site) -> list[tuple[Module, set[str]]]:
    """Modules that provide a framework: every current one; on a site that has none current,
    the version a bare ``module load NAME`` gave (historical sites, kept for the record)."""
    found = [(m, module_frameworks(m, site)) for m in site.modules]
    found = [(m, fw) for m, fw in found if fw]
    current = [(m, fw) for m, fw in found if m.status == "current"]
    if current or site.is_current:
        return current
    out, seen = [], set()
    for m, _fw in found:
        if m.name in seen or m.status == "removed":
            continue
        seen.add(m.name)
        default, _ = site.find_module(m.name)
        if default is not None:
            out.append((default, module_frameworks(default, site)))
    return out


def environments(site: Site, setup: dict[str, str] | None = None) -> list[dict]:
    """The site's ReFrame environments, each limited to the site with ``target_systems``."""
    setup = setup or {}
    envs = []
    mods = framework_modules(site)
    for mod, fws in mods:
        env = {
            "name": env_name(mod),
            "modules": [mod.full_name],
            "features": sorted(fws),
            "target_systems": [site.name],
            "extras": {
                "module": mod.full_name,
                "provides": mod.raw.get("provides", ""),
                "node_types": list(mod.raw.get("node_types", [])),
            },
        }
        if mod.raw.get("modulepath"):
            env["prepare_cmds"] = [f"module use {mod.raw['modulepath']}"]
        envs.append(env)
    if not mods:
        # No framework module: users bring their own (conda, venv, container).
        for fw in FRAMEWORKS:
            env = {
                "name": f"{fw}-user",
                "features": [fw],
                "target_systems": [site.name],
                "extras": {"module": "", "provides": f"{fw} from the user's environment"},
            }
            if setup.get(fw):
                env["prepare_cmds"] = [setup[fw]]
            envs.append(env)
    return envs


def _env_fits(env: dict, node: NodeType) -> bool:
    types = env["extras"].get("node_types") or []
    return not types or node.name in types


# --------------------------------------------------------------------------- partitions
def qos_limits(site: Site, part: Partition) -> dict[str, dict]:
    """The QoS a partition accepts and their limits, in the profile's order."""
    return {q: dict(site.qos.get(q, {})) for q in part.qos}


def qos_for(
    extras: dict,
    nodes: int,
    gpus: int = 0,
    time_s: int | None = None,
) -> str | None:
    """The first QoS of a partition (from its ReFrame ``extras``) that admits a job shape.

    None when the partition needs no QoS, or when none fits (the scheduler will refuse).
    """
    for name, lim in extras.get("qos", {}).items():
        if lim.get("max_nodes") and nodes > lim["max_nodes"]:
            continue
        if lim.get("min_nodes") and nodes < lim["min_nodes"]:
            continue
        if lim.get("max_gpus") and gpus > lim["max_gpus"]:
            continue
        if lim.get("max_walltime_s") and time_s and time_s > lim["max_walltime_s"]:
            continue
        return name
    return None


def access_options(site: Site, part: Partition, account: str | None) -> list[str]:
    """How a job reaches the partition: by name, or where the site's users name no partition
    (it routes jobs by constraint and QoS, NERSC's -C gpu) by the features every node of the
    partition has, and a QoS the partition takes when the site's default is not one."""
    if site.scheduler == "lsf":
        opt = site.account.get("option", "-P")
        return [f"-q {part.name}"] + ([f"{opt} {account}"] if account else [])
    routed = len(site.default_partitions) > 1 and part.name in site.default_partitions
    features = routing_constraint(site, part) if routed else ""
    where = [f"--constraint={features}"] if features else []
    out = (where or [f"--partition={part.name}"]) + ([f"--account={account}"] if account else [])
    default = site.default_qos
    if part.qos and (part.qos_required or (routed and default not in part.qos)):
        out.append(f"--qos={part.qos[0]}")
    return out


def routing_constraint(site: Site, part: Partition) -> str:
    """The features every node type of ``part`` has, joined with ``&`` (``gpu``)."""
    common = set.intersection(*(set(site.node_features(nt)) for nt in part.node_types))
    return "&".join(sorted(common - set(site.mount_features)))


def gpu_resources(site: Site, node: NodeType) -> list[dict]:
    if not node.gpus or site.scheduler != "slurm":
        return []
    if node.gpu_vendor == "amd":
        # ARCHER2's GPU nodes: GPUs are requested with --gpus (a total for the job) and
        # Slurm assigns cores and memory pro rata.
        return [{"name": "gpu", "options": ["--gpus={num_gpus}"]}]
    return [{"name": "gpu", "options": ["--gres=gpu:{num_gpus_per_node}"]}]


def processor(node: NodeType) -> dict:
    return {
        "arch": node.arch,
        "model": node.cpu,
        "num_cpus": node.cpus,
        "num_cpus_per_core": node.threads_per_core,
        "num_sockets": node.sockets,
        "num_cpus_per_socket": node.cpus // node.sockets,
    }


def launcher_name(site: Site, node: NodeType) -> str:
    if site.scheduler == "slurm":
        return "srun"
    shapes = {(n.usable_cores, n.gpus) for n in _used_node_types(site)}
    return "jsrun" if len(shapes) == 1 else f"jsrun-{node.name}"


def _used_node_types(site: Site) -> list[NodeType]:
    seen: dict[str, NodeType] = {}
    for p in site.partitions.values():
        seen.setdefault(p.node_type.name, p.node_type)
    return list(seen.values())


def partition_entry(site: Site, part: Partition, envs: list[dict], account: str | None) -> dict:
    node = part.node_type
    features = ["gpu", node.gpu_vendor] if node.gpus else ["cpu"]
    features += [node.arch.replace("_", "-"), site.scheduler, site.status]
    nodes = part.raw.get("nodes") or part.max_nodes
    entry: dict = {
        "name": part.name,
        "descr": " ".join(part.raw.get("description", part.name).split()),
        "scheduler": site.scheduler,
        "launcher": launcher_name(site, node),
        "access": access_options(site, part, account),
        "environs": [e["name"] for e in envs if _env_fits(e, node)],
        "max_jobs": min(DEFAULT_MAX_JOBS, nodes) if nodes else DEFAULT_MAX_JOBS,
        "processor": processor(node),
        "features": features,
        "extras": {
            "site": site.name,
            "partition": part.name,
            "node_type": node.name,
            "node_types": [nt.name for nt in part.node_types],
            "nodes": part.raw.get("nodes"),
            "max_nodes": part.max_nodes or part.raw.get("nodes"),
            "max_walltime_s": part.max_walltime_s,
            "usable_cores": node.usable_cores,
            "gpus_per_node": node.gpus,
            "gpu_vendor": node.gpu_vendor or "",
            "qos": {
                name: {
                    k: v
                    for k, v in {
                        "max_nodes": lim.get("max_nodes"),
                        "min_nodes": lim.get("min_nodes"),
                        "max_gpus": lim.get("max_gpus"),
                        "max_walltime_s": _seconds(lim.get("max_walltime")),
                    }.items()
                    if v
                }
                for name, lim in qos_limits(site, part).items()
            },
            "paths": {k: v["path"] for k, v in site.data.get("paths", {}).items()},
        },
    }
    if node.gpus:
        entry["devices"] = [{"type": "gpu", "model": node.gpu_model, "num_devices": node.gpus}]
    res = gpu_resources(site, node)
    if res:
        entry["resources"] = res
    if part.raw.get("default_walltime"):
        entry["time_limit"] = _hms(part.raw["default_walltime"])
    return entry


def _seconds(text: str | None) -> int | None:
    return duration_seconds(text) if text else None


def _hms(text: str) -> str:
    s = duration_seconds(text)
    return f"{s // 3600}h{s % 3600 // 60}m{s % 60}s"


def system_entry(
    site: Site,
    account: str | None = None,
    setup: dict[str, str] | None = None,
    local: bool = False,
) -> tuple[dict, list[dict]]:
    """(the system entry, its environments).

    ``local``: a rehearsal on the machine ReFrame runs on. Every partition keeps its name and
    its facts (extras, devices) but runs jobs with ReFrame's local scheduler and launcher and
    loads no modules; reports from such runs say ``scheduler: local`` and are imported only as
    examples.
    """
    if account is not None and not site.account_ok(account):
        raise CheckError(
            [
                Finding(
                    site.path,
                    site.line("account", "pattern"),
                    "account-form",
                    f"account {account!r} is not of the form {site.account['pattern']}",
                )
            ]
        )
    if account is None and site.account.get("required", True):
        account = site.account["example"]
    envs = environments(site, setup)
    parts = [partition_entry(site, p, envs, account) for p in site.partitions.values()]
    if local:
        for part in parts:
            part.update(scheduler="local", launcher="local", access=[], max_jobs=1)
            part.pop("resources", None)
            part["descr"] = "REHEARSAL on this machine: " + part["descr"]
        for env in envs:
            env.pop("modules", None)
            env.pop("prepare_cmds", None)
    system = {
        "name": site.name,
        "descr": f"{site.title} ({site.status}); generated from {site.path.name}",
        # ReFrame picks a system by host name only when --system is not given; the runs this
        # project documents always name the system, so no host pattern is claimed here.
        "hostnames": [f"^{site.name}-clusterkit-no-autodetect$"],
        "modules_system": "nomod" if local else "lmod",
        "partitions": parts,
    }
    return system, envs


def site_configuration(
    sites: list[Site],
    account: dict[str, str] | None = None,
    setup: dict[str, str] | None = None,
    modules_system: str | None = None,
    local: bool = False,
) -> dict:
    """A complete ReFrame ``site_configuration`` for the given sites."""
    systems, envs = [], []
    for site in sites:
        system, site_envs = system_entry(site, (account or {}).get(site.name), setup, local)
        if modules_system:
            system["modules_system"] = modules_system
        systems.append(system)
        envs.extend(site_envs)
    return {"systems": systems, "environments": envs}


# --------------------------------------------------------------------------- the file
_JSRUN = '''
from reframe.core.backends import register_launcher
from reframe.core.exceptions import ConfigError
from reframe.core.launchers import JobLauncher


class _Jsrun(JobLauncher):
    """IBM JSM's jsrun: one resource set per node holding the cores and GPUs the job's tasks
    use there (shape of the node type from the site profile)."""

    usable_cores = 1
    gpus = 0

    def command(self, job):
        tpn = job.num_tasks_per_node or job.num_tasks or 1
        nodes = max(1, (job.num_tasks or tpn) // tpn)
        per_task = max(1, self.usable_cores // max(tpn, self.gpus or 1))
        cmd = ["jsrun", f"-n{nodes}", "-r1", f"-a{tpn}", f"-c{per_task * tpn}"]
        if self.gpus:
            cmd.append(f"-g{min(tpn, self.gpus)}")
        return [*cmd, f"-bpacked:{per_task}"]
'''


def _launcher_classes(sites: list[Site]) -> str:
    out = []
    for site in sites:
        if site.scheduler != "lsf":
            continue
        done = set()
        for node in _used_node_types(site):
            name = launcher_name(site, node)
            if name in done:
                continue
            done.add(name)
            cls = "Jsrun_" + re.sub(r"\W", "_", f"{site.name}_{node.name}")
            out.append(
                f"\n\nclass {cls}(_Jsrun):\n"
                f"    usable_cores = {node.usable_cores}\n"
                f"    gpus = {node.gpus}\n\n\n"
                f"try:\n"
                f"    register_launcher({name!r})({cls})\n"
                f"except ConfigError:  # already registered: the file was loaded before\n"
                f"    pass\n"
            )
    return (_JSRUN + "".join(out)) if out else ""


def render(config: dict, sites: list[Site], argv: list[str] | None = None) -> str:
    """The text of the configuration file."""
    sources = ", ".join(str(s.path.name) for s in sites)
    head = (
        f'"""ReFrame configuration generated from {sources} by clusterkit.reframe.config.\n\n'
        f"Do not edit: change the profiles and run again\n"
        f"    python -m clusterkit.reframe.config {' '.join(argv or [])}\n"
        f'"""\n'
        f"# generated {dt.date.today().isoformat()}\n"
    )
    body = pprint.pformat(config, indent=1, width=100, sort_dicts=False)
    return head + _launcher_classes(sites) + f"\n\nsite_configuration = {body}\n"


def write_config(
    out_dir: Path,
    sites: list[Site],
    account: dict[str, str] | None = None,
    setup: dict[str, str] | None = None,
    modules_system: str | None = None,
    argv: list[str] | None = None,
    local: bool = False,
) -> Path:
    if not sites:
        raise CheckError([Finding(out_dir, 0, "no-sites", "no site selected")])
    config = site_configuration(sites, account, setup, modules_system, local)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / CONFIG_NAME
    text = render(config, sites, argv)
    compile(text, str(path), "exec")
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- command line
def _pairs(values: list[str], what: str) -> dict[str, str]:
    out = {}
    for v in values:
        key, sep, val = v.partition("=")
        if not sep or not key or not val:
            raise SystemExit(f"{what}: expected NAME=VALUE, got {v!r}")
        out[key] = val
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(
        prog="python -m clusterkit.reframe.config",
        description="Write a ReFrame configuration generated from the site profiles.",
    )
    p.add_argument("--out", type=Path, required=True, help="directory for " + CONFIG_NAME)
    p.add_argument("--site", action="append", help="only this site (repeatable)")
    p.add_argument(
        "--include-historical",
        action="store_true",
        help="also sites that are not in service (end of service, retired), for the record",
    )
    p.add_argument(
        "--account",
        action="append",
        default=[],
        metavar="SITE=ACCOUNT",
        help="a real project/budget code instead of the profile's placeholder",
    )
    p.add_argument(
        "--setup",
        action="append",
        default=[],
        metavar="FRAMEWORK=COMMAND",
        help="shell command that makes FRAMEWORK importable, for sites without framework "
        "modules (e.g. pytorch='source ~/venvs/torch/bin/activate')",
    )
    p.add_argument(
        "--modules-system",
        choices=["lmod", "tmod4", "envmod", "nomod", "spack"],
        help="ReFrame modules system (default: lmod)",
    )
    p.add_argument("--sites-dir", type=Path, help="read profiles from here instead of sites/")
    p.add_argument(
        "--local",
        action="store_true",
        help="rehearsal: run every partition's jobs on this machine (local scheduler, no "
        "modules); reports from it import only as examples",
    )
    args = p.parse_args(argv)
    setup = _pairs(args.setup, "--setup")
    unknown = sorted(set(setup) - set(FRAMEWORKS))
    if unknown:
        p.error(f"--setup: unknown framework {', '.join(unknown)} (known: {FRAMEWORKS})")
    try:
        sites = select_sites(args.site, args.include_historical, args.sites_dir)
        path = write_config(
            args.out,
            sites,
            _pairs(args.account, "--account"),
            setup,
            args.modules_system,
            argv,
            args.local,
        )
    except CheckError as exc:
        print(exc, file=sys.stderr)
        return 1
    names = ", ".join(f"{s.name} ({len(s.partitions)} partitions)" for s in sites)
    print(f"{path}: {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
