"""ResNet-50 with the project's own trainers, on synthetic images: one GPU, one node, N nodes.

The checks run ``examples/pytorch/train_resnet.py`` (one rank per GPU, started by the
partition's launcher) and ``examples/tensorflow/train_resnet_keras.py`` (one worker per node
holding its GPUs). Settings (batch size, precision, memory format, loader workers) are those of
the site's example job script for the partition (the files the how-to and benchmark pages
show); only the length of the run is the check's own. The trainers' log lines are read by
:mod:`clusterkit.runs.trainlog`, and the throughput is held to the figure recorded in
``results/*.yaml`` for the same site, partition and number of GPUs, where one exists.

Run on a real cluster (see docs/howto/site-staff/run-reframe.md)::

    reframe -C config/clusterkit_reframe.py -c reframe_checks/ --system bede:gpu -r
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import reframe as rfm
import reframe.utility.typecheck as typ
from reframe.core.builtins import (
    parameter,
    performance_function,
    run_after,
    run_before,
    sanity_function,
    variable,
)

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    # appended, not inserted: ReFrame restores sys.path by position after loading a file
    sys.path.append(_ROOT)
from reframe_checks import support as common  # noqa: E402


class ResNet50Base(rfm.RunOnlyRegressionTest):
    """Shared by the PyTorch and TensorFlow checks; not a test itself."""

    #: ``1gpu``: one GPU of one node; ``1node``: every GPU of one node; ``nnodes``: every GPU
    #: of ``num_nodes`` nodes
    scale = parameter(["1gpu", "1node", "nnodes"])
    valid_systems = ["+gpu"]  # noqa: RUF012 (ReFrame test variables, set per class)
    num_nodes = variable(int, value=2)
    steps = variable(int, value=200)
    #: trainer options used where the site has no example job script for the node type
    fallback_options = variable(typ.List[str], value=["--batch-size", "256", "--precision", "fp16"])
    #: the interpreter that has the framework (from the environment's module or user setup)
    python = variable(str, value="python")
    #: CI setting of the trainers (tiny images, CPU is enough); for rehearsals off the cluster
    tiny = variable(bool, value=False)
    max_minutes = variable(int, value=20)
    #: where the run came from, recorded in the report (see clusterkit.reframe.results)
    clusterkit_commit = variable(str, value=common.project_commit())
    software = variable(typ.Dict[str, str], value={})
    example = variable(str, value="")
    #: what the run is recorded as (results/*.yaml): benchmark name and job shape
    benchmark = variable(str, value="resnet50")
    nodes_used = variable(int, value=0)
    gpus_used = variable(int, value=0)
    reference_benchmarks: tuple[str, ...] = ()
    trainer_dir = ""
    trainer = ""
    ranks_per_gpu = True  # PyTorch: one rank per GPU; TensorFlow: one worker per node
    framework_modules: tuple[str, ...] = ()
    tags = {"resnet50", "benchmark"}  # noqa: RUF012 (ReFrame test variables, set per class)
    maintainers = ["clusterkit"]  # noqa: RUF012 (ReFrame test variables, set per class)

    @run_after("init")
    def set_sources(self):
        self.sourcesdir = os.path.join(common.EXAMPLES, self.trainer_dir)
        self.executable = self.python
        self.descr = f"ResNet-50 {self.benchmark} on synthetic data, {self.scale}"

    @run_after("setup")
    def set_shape(self):
        part = self.current_partition
        ex = part.extras
        gpn = int(ex.get("gpus_per_node") or 0)
        self.skip_if(not gpn, f"{part.fullname} has no GPUs")
        self.skip_if(
            self.scale == "1node" and gpn == 1,
            f"{part.fullname} nodes have one GPU: the 1gpu case is the same job",
        )
        nodes = self.num_nodes if self.scale == "nnodes" else 1
        self.skip_if(nodes < 2 and self.scale == "nnodes", "num_nodes must be 2 or more")
        max_nodes = ex.get("max_nodes")
        self.skip_if(
            bool(max_nodes) and nodes > max_nodes,
            f"{part.fullname} takes at most {max_nodes} nodes per job",
        )
        sched = part.scheduler.registered_name
        self.skip_if(
            not self.ranks_per_gpu and nodes > 1 and sched != "slurm",
            "multi-worker TensorFlow finds its peers through Slurm only",
        )
        gpus = 1 if self.scale == "1gpu" else gpn
        self.nodes_used, self.gpus_used = nodes, gpus * nodes
        tpn = gpus if self.ranks_per_gpu else 1
        self.num_tasks_per_node = tpn
        self.num_tasks = tpn * nodes
        self.exclusive_access = gpus == gpn and self.scale != "1gpu"
        self.extra_resources = {"gpu": {"num_gpus_per_node": gpus, "num_gpus": gpus * nodes}}
        # CPUs follow the GPUs: a task gets its GPUs' share of the node.
        procs = part.processor
        cpus_per_gpu = max(1, (procs.num_cpus or gpn) // gpn)
        cores_per_gpu = max(1, int(ex.get("usable_cores") or gpn) // gpn)
        gpus_per_task = gpus // tpn
        if sched == "slurm" and ex.get("gpu_vendor") != "amd":
            # (on AMD nodes ARCHER2 assigns cores and memory pro rata to the GPUs asked for)
            self.num_cpus_per_task = cpus_per_gpu * gpus_per_task
        threads = cores_per_gpu * gpus_per_task
        self.env_vars = {"OMP_NUM_THREADS": str(threads), "MASTER_PORT": "29500"}
        if self.tiny:
            self.env_vars["TRAIN_TINY_STEPS"] = str(self.steps)
        if sched == "slurm":
            # the batch script runs on the first node: ask there which versions the job uses
            self.prerun_cmds = [
                'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
                "export MASTER_ADDR",
                common.versions_command(list(self.framework_modules), self.python),
            ]
        elif sched == "lsf":
            # the batch script runs on a launch node: only jsrun reaches the compute nodes
            self.prerun_cmds = [
                "MASTER_ADDR=$(echo \"$LSB_MCPU_HOSTS\" | cut -d ' ' -f 3)",
                "export MASTER_ADDR",
            ]
        else:  # a rehearsal on this machine (clusterkit.reframe.config --local)
            self.env_vars["MASTER_ADDR"] = "127.0.0.1"
            self.prerun_cmds = [common.versions_command(list(self.framework_modules), self.python)]
        limit = min(self.max_minutes * 60, int(ex.get("max_walltime_s") or 10**9))
        self.time_limit = limit
        qos = common.qos_for(ex, nodes, gpus * nodes, limit)
        self.skip_if(
            bool(ex.get("qos")) and qos is None,
            f"no QoS of {part.fullname} admits {nodes} node(s) with {gpus * nodes} GPU(s)",
        )
        if qos and f"--qos={qos}" not in part.access:
            self.job.options += [f"--qos={qos}"]
        self.executable_opts = [self.trainer, *self.trainer_args(ex, gpus_per_task)]
        self.set_reference(ex, nodes, gpus * nodes)

    def trainer_args(self, ex: dict, gpus_per_task: int) -> list[str]:
        run = common.example_settings(ex["site"], ex["partition"], ex["node_type"], self.trainer)
        if run is not None:
            self.example = os.path.relpath(run.path, common.ROOT)
            args = common.trainer_options(run.args)
            if not self.ranks_per_gpu and run.gpus_per_node:
                # a worker's batch covers its GPUs: scale the example's per-GPU share
                per_gpu = int(common.option_value(args, "--batch-size") or 0) // run.gpus_per_node
                if per_gpu:
                    args = common.set_option(args, "--batch-size", str(per_gpu * gpus_per_task))
        else:
            self.example = ""
            args = list(self.fallback_options)
            if not self.ranks_per_gpu:
                bs = int(common.option_value(args, "--batch-size") or 256)
                args = common.set_option(args, "--batch-size", str(bs * gpus_per_task))
        args += ["--steps", str(self.steps), "--checkpoint-every", str(self.steps)]
        if self.tiny:
            args.append("--tiny")
        return args

    def set_reference(self, ex: dict, nodes: int, gpus: int) -> None:
        found = common.pick_result(
            common.load_results(),
            self.reference_benchmarks,
            ex["site"],
            ex["partition"],
            "throughput",
            nodes,
            gpus,
        )
        if found is not None:
            self.reference = {
                self.current_partition.fullname: {"throughput": common.reference_tuple(found)}
            }

    @run_before("sanity")
    def record_versions(self):
        self.software = common.read_versions(os.path.join(self.stagedir, "versions.txt"))

    @sanity_function
    def trained(self):
        return common.assert_trained(self.stdout, self.num_tasks, self.steps)

    @performance_function("img/s")
    def throughput(self):
        return common.summary(self.stdout)["img_s"]


@rfm.simple_test
class ResNet50PyTorch(ResNet50Base):
    valid_prog_environs = ["+pytorch"]  # noqa: RUF012 (ReFrame test variables, set per class)
    benchmark = "resnet50-pytorch"
    reference_benchmarks = ("resnet50-pytorch", "resnet50-wmlce")
    trainer_dir = "pytorch"
    trainer = "train_resnet.py"
    framework_modules = ("torch", "torchvision")
    ranks_per_gpu = True


@rfm.simple_test
class ResNet50TensorFlow(ResNet50Base):
    valid_prog_environs = ["+tensorflow"]  # noqa: RUF012 (ReFrame test variables, set per class)
    benchmark = "resnet50-tensorflow"
    reference_benchmarks = ("resnet50-tensorflow", "resnet50-wmlce")
    trainer_dir = "tensorflow"
    trainer = "train_resnet_keras.py"
    framework_modules = ("tensorflow",)
    ranks_per_gpu = False


@rfm.simple_test
class ResNet50PyTorchCPU(ResNet50Base):
    """The PyTorch trainer on a partition without GPUs (Cirrus, ARCHER2's standard nodes), in
    the shape of the site's example job script for that partition: its nodes, ranks per node,
    CPUs per rank, ``srun`` options and ``export`` lines. Skipped where no example runs the
    trainer on the partition. Where the site's framework module is not the environment the
    example uses (Cirrus's examples activate a venv), give the interpreter with
    ``-S python=/path/to/venv/bin/python``."""

    scale = parameter(["example"])
    valid_systems = ["+cpu"]  # noqa: RUF012 (ReFrame test variables, set per class)
    valid_prog_environs = ["+pytorch"]  # noqa: RUF012 (ReFrame test variables, set per class)
    benchmark = "resnet50-pytorch"
    reference_benchmarks = ("resnet50-pytorch",)
    trainer_dir = "pytorch"
    trainer = "train_resnet.py"
    framework_modules = ("torch", "torchvision")
    ranks_per_gpu = True

    @run_after("setup")
    def set_shape(self):
        part = self.current_partition
        ex = part.extras
        run = cpu_example(ex["site"], ex["partition"], self.trainer)
        self.skip_if(
            run is None,
            f"no example job script in examples/{ex['site']}/ runs {self.trainer} on "
            f"{part.fullname}",
        )
        self.example = os.path.relpath(run.path, common.ROOT)
        self.nodes_used, self.gpus_used = run.nodes, 0
        self.num_tasks, self.num_tasks_per_node = run.ntasks, run.tasks_per_node
        if run.cpus_per_task:
            self.num_cpus_per_task = run.cpus_per_task
        self.exclusive_access = run.exclusive
        self.job.launcher.options = [
            w for w in run.launcher_args if not w.startswith(("--ntasks", "--cpus-per-task"))
        ]
        exports = [line for line in run.setup if line.startswith("export ")]
        self.env_vars = {}
        if not any(line.startswith("export MASTER_PORT=") for line in exports):
            self.env_vars["MASTER_PORT"] = "29500"
        if self.tiny:
            self.env_vars["TRAIN_TINY_STEPS"] = str(self.steps)
        self.prerun_cmds = [
            'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            *exports,
            common.versions_command(list(self.framework_modules), self.python),
        ]
        self.time_limit = min(self.max_minutes * 60, run.time_s or 10**9)
        if run.qos and f"--qos={run.qos}" not in part.access:
            self.job.options += [f"--qos={run.qos}"]
        args = common.trainer_options(run.args)
        args += ["--steps", str(self.steps), "--checkpoint-every", str(self.steps)]
        if self.tiny:
            args.append("--tiny")
        self.executable_opts = [self.trainer, *args]
        self.set_reference(ex, run.nodes, 0)


def cpu_example(site: str, partition: str, trainer: str):
    """The site's example run of ``trainer`` on the partition, one on synthetic images first."""
    runs = [r for r in common.example_runs(site, trainer) if r.partition == partition]
    runs.sort(key=lambda r: any(w.split("=")[0] == "--data-dir" for w in r.args))
    return runs[0] if runs else None
