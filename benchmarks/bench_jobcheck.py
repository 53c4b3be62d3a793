#!/usr/bin/env python3
"""Seconds to judge a job script against nodes and ranks, from one node to the whole machine.

For each site a job script is written from its profile (partition, QoS, GPUs and cores per node
all come from ``sites/<site>.yaml``) at growing node counts, and judged with the call
``python -m clusterkit check-job`` makes. The partition is the site's largest; a job runs one
rank per GPU on GPU nodes (Bede's gpu, Frontier's batch, Summit's batch with jsrun, one
resource set per GPU), one per core on CPU nodes (ARCHER2's standard, 128 per node), up to the
most nodes the partition takes (all 5,860 of ARCHER2's), then one job over that limit (500
nodes, or twice the limit where that is more: an error case). A site whose profile gives its
largest partition no node count is listed as not benchmarked. A case still running after
``--limit`` seconds is stopped and shown as such. Prints a table; ``--output FILE`` also writes
the rows as JSON. Not a test: the figures depend on the machine.

    python benchmarks/bench_jobcheck.py
    python benchmarks/bench_jobcheck.py --site archer2 --nodes 1 64 5860 --limit 10
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clusterkit.emulate.checkjob import check_job_file  # noqa: E402
from clusterkit.sites.profiles import (  # noqa: E402
    Partition,
    Site,
    duration_seconds,
    load_site,
    profile_paths,
)

TRAINER = "python train_resnet.py --epochs 1 --batch-size 256"


@dataclass
class Case:
    site: str
    partition: str
    nodes: int
    ranks: int
    text: str


@dataclass
class Row:
    site: str
    partition: str
    nodes: int
    ranks: int
    seconds: float | None  # None: stopped at the limit
    errors: int | None
    first_error: str = ""


# --------------------------------------------------------------------------- scripts
def doubling(top: int, start: int = 1, factor: int = 8) -> list[int]:
    sizes, n = [], start
    while n < top:
        sizes.append(n)
        n *= factor
    return [*sizes, top]


def qos_for(site: Site, part: Partition, nodes: int) -> str | None:
    """The first QoS of the partition whose node limits take ``nodes``."""
    for name in part.qos:
        q = site.qos[name]
        if q.get("min_nodes", 1) <= nodes <= q.get("max_nodes", nodes):
            return name
    return None


def slurm_case(
    site: Site, part_name: str, nodes: int, ranks_per_node: int, gpus: int, hint: bool
) -> Case:
    """A job of ``ranks_per_node`` ranks on each node, each with its share of the CPUs: whole
    cores with ``--hint=nomultithread`` (ARCHER2's way), else hardware threads (Bede's)."""
    part = site.partitions[part_name]
    node = part.node_type
    cpus = node.usable_cores if hint else node.cpus
    lines = [
        "#!/bin/bash",
        f"#SBATCH --account={site.account['example']}",
        f"#SBATCH --partition={part.name}",
    ]
    limit = part.max_walltime_s or 365 * 86400  # none of its own: the QoS's limit applies
    qos = qos_for(site, part, nodes)
    if qos:
        lines.append(f"#SBATCH --qos={qos}")
        limit = min(limit, duration_seconds(site.qos[qos].get("max_walltime", "9999:00:00")))
    lines += [
        f"#SBATCH --nodes={nodes}",
        f"#SBATCH --ntasks-per-node={ranks_per_node}",
        f"#SBATCH --cpus-per-task={cpus // ranks_per_node}",
        f"#SBATCH --time={min(limit, 3600) // 60}",
    ]
    if not part.exclusive:  # the case is a whole-node job; shared partitions must be told so
        lines.append("#SBATCH --exclusive")
    if gpus:
        lines.append(f"#SBATCH --gres=gpu:{gpus}")
    lines += [
        "set -euo pipefail",
        "export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK",
        f"srun {'--hint=nomultithread ' if hint else ''}--distribution=block:block {TRAINER}",
        "",
    ]
    return Case(site.name, part.name, nodes, nodes * ranks_per_node, "\n".join(lines))


def summit_case(site: Site, part: Partition, nodes: int) -> Case:
    node = part.node_type
    cores = node.usable_cores // node.gpus
    text = "\n".join(
        [
            "#!/bin/bash",
            f"#BSUB -P {site.account['example']}",
            f"#BSUB -q {part.name}",
            f"#BSUB -nnodes {nodes}",
            "#BSUB -W 1:00",
            "set -euo pipefail",
            f"jsrun -n {nodes * node.gpus} -r {node.gpus} -a 1 -c {cores} -g 1 -b packed:{cores} "
            f"{TRAINER}",
            "",
        ]
    )
    return Case(site.name, part.name, nodes, nodes * node.gpus, text)


def largest_partition(site: Site) -> Partition:
    return max(
        (p for p in site.partitions.values() if p.status != "removed"),
        key=lambda p: p.max_nodes or p.size or 0,
    )


def most_nodes(part: Partition) -> int | None:
    """The largest job the partition takes: its node limit, else every node it has."""
    return min((n for n in (part.max_nodes, part.size) if n), default=None)


def site_cases(site: Site, nodes: list[int] | None) -> list[Case]:
    part = largest_partition(site)
    top = most_nodes(part)
    sizes = nodes or [*doubling(top, factor=2 if top <= 64 else 8), max(500, 2 * top)]
    if site.scheduler == "lsf":
        return [summit_case(site, part, n) for n in sizes]
    node = part.node_type
    ranks = node.gpus or node.usable_cores
    return [slurm_case(site, part.name, n, ranks, node.gpus, hint=not node.gpus) for n in sizes]


def unmeasurable(site: Site) -> str | None:
    """Why the site cannot be benchmarked up to its whole machine, or None."""
    part = largest_partition(site)
    if most_nodes(part) is None:
        return f"its largest partition, {part.name}, has no node count in sites/{site.name}.yaml"
    return None


def cases(sites: list[str], nodes: list[int] | None) -> tuple[list[Case], dict[str, str]]:
    """The cases to time, and the sites left out with the reason."""
    out, left = [], {}
    for name in sites:
        site = load_site(name)
        why = unmeasurable(site)
        if why:
            left[name] = why
        else:
            out += site_cases(site, nodes)
    return out, left


# --------------------------------------------------------------------------- timing
class Stopped(Exception):
    pass


def _stop(_signum, _frame):
    raise Stopped


def judge(case: Case, limit: float, workdir: Path) -> Row:
    path = workdir / f"{case.site}-{case.nodes}.job"
    path.write_text(case.text)
    site = load_site(case.site)
    old = signal.signal(signal.SIGALRM, _stop)
    signal.setitimer(signal.ITIMER_REAL, limit)
    start = time.perf_counter()
    try:
        report = check_job_file(path, site)
    except Stopped:
        return Row(case.site, case.partition, case.nodes, case.ranks, None, None)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    seconds = time.perf_counter() - start
    errors = report.errors
    first = f"[{errors[0].rule}]" if errors else ""
    return Row(case.site, case.partition, case.nodes, case.ranks, seconds, len(errors), first)


def table(rows: list[Row], limit: float) -> str:
    head = f"{'site':8} {'partition':10} {'nodes':>6} {'ranks':>8} {'seconds':>9}  verdict"
    lines = [head, "-" * len(head)]
    for r in rows:
        shown = f"{r.seconds:9.4f}" if r.seconds is not None else f"{'>' + format(limit, 'g'):>9}"
        verdict = (
            "stopped"
            if r.errors is None
            else "ok"
            if not r.errors
            else f"{r.errors} error(s) {r.first_error}"
        )
        lines.append(f"{r.site:8} {r.partition:10} {r.nodes:>6} {r.ranks:>8} {shown}  {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    names = [path.stem for path in profile_paths()]
    p.add_argument("--site", action="append", choices=names)
    p.add_argument("--nodes", type=int, nargs="+", help="node counts instead of the ladder")
    p.add_argument("--limit", type=float, default=30.0, help="seconds before a case is stopped")
    p.add_argument("--output", help="also write the rows (and the machine) as JSON here")
    args = p.parse_args(argv)
    todo, left = cases(args.site or names, args.nodes)
    with tempfile.TemporaryDirectory() as tmp:
        for case in todo[:1]:  # first use: imports and the trainer's contract
            judge(case, args.limit, Path(tmp))
        rows = [judge(c, args.limit, Path(tmp)) for c in todo]
    print(table(rows, args.limit))
    for name, why in left.items():
        print(f"{name}: not benchmarked: {why}")
    if args.output:
        record = {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "machine": platform.machine(),
            "limit_s": args.limit,
            "rows": [asdict(r) for r in rows],
            "not_benchmarked": left,
        }
        Path(args.output).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
