"""MLCommons HPC DeepCam and CosmoFlow, where a site recorded them (ARCHER2).

One test case per recorded figure in ``results/*.yaml`` (``deepcam`` and ``cosmoflow``
results that name a partition and a node count): the case runs on that site and partition,
replays the site's example job script for that benchmark and shape (``examples/<site>/``:
nodes, tasks, CPUs, GPUs, QoS, time limit, ``srun`` options, ``export``/``source`` lines,
the program's arguments) and holds the outcome to the recorded figure: IoU and MAE within 10 %,
time to solution at most 10 % longer.

The MLCommons code is not part of this project: point the checks at a checkout of
``github.com/mlcommons/hpc`` with ``-S mlperf_hpc_dir=/path/to/hpc`` (or ``$MLPERF_HPC`` in the
job's environment). Both programs log in MLPerf's ``:::MLLOG {json}`` format, read here with
:mod:`clusterkit.runs.trainlog`; until that parser knows those lines, real runs are skipped
(dry runs still write the job scripts).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
import reframe.utility.typecheck as typ
from reframe.core.builtins import (
    parameter,
    run_after,
    run_before,
    sanity_function,
    variable,
)

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    # appended, not inserted: ReFrame restores sys.path by position after loading a file
    sys.path.append(_ROOT)
from clusterkit.reframe.config import env_name  # noqa: E402
from reframe_checks import support as common  # noqa: E402

# per benchmark: (script inside the mlcommons/hpc checkout, output option, run tag option,
# extra options a check adds, MLLOG file relative to the output directory)
PROGRAMS = {
    "deepcam": {
        "script": "deepcam/src/deepCam/train.py",
        "output": "--output_dir",
        "tag": "--run_tag",
        "extra": [],
        "mllog": "logs/{tag}.log",
        "metrics": {"iou": "eval_accuracy"},
    },
    "cosmoflow": {
        "script": "cosmoflow/train.py",
        "output": "--output-dir",
        "tag": "--run-tag",
        "extra": ["--mlperf"],
        # its settings file, which the example finds relative to the checkout's cosmoflow/
        "positional": ["cosmoflow/configs/cosmo.yaml"],
        "mllog": "mlperf.log",
        "metrics": {"mae": "eval_error"},
    },
}


SECONDS = {"s": 1.0, "min": 60.0, "h": 3600.0}
# how each recorded metric is read from the MLLOG lines
MLLOG_KEYS = {"iou": ("eval_accuracy", max), "mae": ("eval_error", min)}


def _targets(benchmark: str) -> list[str]:
    """``site:partition:nodes`` of every job shape with a recorded figure for the benchmark."""
    keys = {
        f"{r.site}:{r.data['partition']}:{r.data['nodes']}"
        for r in common.load_results()
        if r.benchmark == benchmark
        and r.kind in {"reported", "measured"}
        and r.data.get("partition")
        and r.data.get("nodes")
        and (r.metric in MLLOG_KEYS or r.metric == "time_to_solution")
    }
    return sorted(keys)


class MLCommonsHPCBase(rfm.RunOnlyRegressionTest):
    """Shared by DeepCam and CosmoFlow; not a test itself."""

    benchmark = variable(str, value="")
    nodes_used = variable(int, value=0)
    gpus_used = variable(int, value=0)
    mlperf_hpc_dir = variable(str, value="$MLPERF_HPC")
    #: a venv to use instead of the one the example job script activates
    venv = variable(str, value="")
    run_tag = variable(str, value="rfm")
    clusterkit_commit = variable(str, value=common.project_commit())
    software = variable(typ.Dict[str, str], value={})
    example = variable(str, value="")
    tags = {"mlcommons-hpc", "benchmark"}  # noqa: RUF012 (ReFrame test variables, set per class)
    maintainers = ["clusterkit"]  # noqa: RUF012 (ReFrame test variables, set per class)

    @run_after("init")
    def target_partition(self):
        site, partition, nodes = self.target.split(":")
        self.site, self.partition_name, self.nodes_used = site, partition, int(nodes)
        self.valid_systems = [f"{site}:{partition}"]
        self.valid_prog_environs = [f"+{self.framework}"]
        self.program = PROGRAMS[self.benchmark]
        self.example_run = self.find_example()
        if self.example_run is not None and self.example_run.modules:
            # the environment of the module the example loads
            self.valid_prog_environs = sorted({env_name(m) for m in self.example_run.modules})
        self.descr = f"{self.benchmark} on {nodes} {partition} node(s) of {site}"

    def find_example(self):
        runs = [
            run
            for run in common.example_runs(self.site, "train.py")
            if self.benchmark in run.path.name
            and run.partition == self.partition_name
            and run.nodes == self.nodes_used
        ]
        return runs[0] if runs else None

    @run_after("setup")
    def replay_example(self):
        self.skip_if(
            self.example_run is None,
            f"no example job script in examples/{self.site}/ runs {self.benchmark} "
            f"on {self.nodes_used} {self.partition_name} node(s)",
        )
        self.skip_if(
            not self.is_dry_run() and not common.reads_mllog(),
            "clusterkit.runs.trainlog does not read MLPerf :::MLLOG lines yet",
        )
        run, part = self.example_run, self.current_partition
        ex = part.extras
        self.example = os.path.relpath(run.path, common.ROOT)
        self.num_tasks = run.ntasks
        self.num_tasks_per_node = run.tasks_per_node
        if run.cpus_per_task:
            self.num_cpus_per_task = run.cpus_per_task
        if run.gpus_per_node:
            self.extra_resources = {
                "gpu": {
                    "num_gpus_per_node": run.gpus_per_node,
                    "num_gpus": run.gpus_per_node * run.nodes,
                }
            }
        self.exclusive_access = run.exclusive
        self.gpus_used = run.gpus_per_node * run.nodes
        if run.time_s:
            self.time_limit = min(run.time_s, int(ex.get("max_walltime_s") or run.time_s))
        qos = run.qos or common.qos_for(ex, run.nodes, run.gpus_per_node * run.nodes, run.time_s)
        if qos and f"--qos={qos}" not in part.access:
            self.job.options += [f"--qos={qos}"]
        setup = list(run.setup)
        if self.venv:
            setup = [s for s in setup if not s.startswith(("source ", ". "))]
            setup.insert(0, f'source "{self.venv}/bin/activate"')
        self.prerun_cmds = [
            *setup,
            "mkdir -p output/logs",
            common.versions_command([self.framework_module]),
        ]
        self.job.launcher.options = list(run.launcher_args)
        prog = self.program
        args = common.set_option(list(run.args), prog["output"], "output")
        args = common.set_option(args, prog["tag"], self.run_tag)
        for extra in prog["extra"]:
            if extra not in args:
                args.append(extra)
        self.executable = "python"
        positional = [f"{self.mlperf_hpc_dir}/{p}" for p in prog.get("positional", [])]
        self.executable_opts = [f"{self.mlperf_hpc_dir}/{prog['script']}", *positional, *args]
        self.set_performance(part.fullname)

    def set_performance(self, fullname: str) -> None:
        """A performance variable per recorded metric of this shape, in the recorded unit,
        held to the recorded figure; the time to solution always."""
        log = self.mllog_file
        self.perf_variables = {}
        found = {}
        for metric in [*MLLOG_KEYS, "time_to_solution"]:
            hit = common.pick_result(
                common.load_results(),
                (self.benchmark,),
                self.site,
                self.partition_name,
                metric,
                self.nodes_used,
            )
            if hit is not None:
                found[metric] = dict(hit.data)
        for metric, (key, pick) in MLLOG_KEYS.items():
            if metric in found:
                values = common.mllog_values(key, log)
                expr = sn.max(values) if pick is max else sn.min(values)
                self.perf_variables[metric] = sn.make_performance_function(
                    expr, found[metric]["unit"]
                )
        unit = found.get("time_to_solution", {}).get("unit", "min")
        seconds = common.mllog_time_s("run_start", "run_stop", log)
        self.perf_variables["time_to_solution"] = sn.make_performance_function(
            seconds / SECONDS.get(unit, 1.0), unit
        )
        self.reference = {
            fullname: {metric: common.reference_tuple(data) for metric, data in found.items()}
        }

    @run_before("sanity")
    def record_versions(self):
        self.software = common.read_versions(os.path.join(self.stagedir, "versions.txt"))

    @property
    def mllog_file(self) -> str:
        return os.path.join("output", self.program["mllog"].format(tag=self.run_tag))

    @sanity_function
    def finished(self):
        stops = common.mllog_values("run_stop", self.mllog_file, self.stdout)
        return sn.assert_true(stops, msg=f"no MLLOG run_stop in {self.mllog_file}")


@rfm.simple_test
class DeepCam(MLCommonsHPCBase):
    benchmark = "deepcam"
    framework = "pytorch"
    framework_module = "torch"
    target = parameter(_targets("deepcam"))


@rfm.simple_test
class CosmoFlow(MLCommonsHPCBase):
    benchmark = "cosmoflow"
    framework = "tensorflow"
    framework_module = "tensorflow"
    target = parameter(_targets("cosmoflow"))
