"""Node features, constraints, QoS and SPANK plugins as Slurm has them.

Slurm's --constraint grammar (sbatch(1), slurmctld's _feature_string2list); a job's constraint
picking node types out of a partition that pools several; a job that names no partition routed
through the site's partitions; the default QoS, limits per QoS and per node type, the stricter
of QoS and partition (Slurm's "Resource Limits": unless the QoS has PartitionTimeLimit); the
options of SPANK plugins a profile declares, and on the generic site those of the plugins the
registry knows; a node type that no partition holds refused when the profile is validated.
Judged against a small profile written here and against Perlmutter's.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from clusterkit.emulate import slurm_options
from clusterkit.emulate.sbatch import check_slurm_script
from clusterkit.grammars.slurm_constraint import ConstraintError, parse
from clusterkit.sites.errors import ProfileError
from clusterkit.sites.profiles import generic_site, load_profile, load_site

# ----------------------------------------------------------------------------- the grammar


@pytest.mark.parametrize(
    "text, node, expected",
    [
        ("gpu", {"gpu", "hbm40g"}, True),
        ("gpu&hbm80g", {"gpu", "hbm40g"}, False),
        ("gpu&hbm80g", {"gpu", "hbm80g"}, True),
        ("gpu,hbm80g", {"gpu", "hbm80g"}, True),  # a comma is read as &
        ("cpu|gpu", {"cpu"}, True),
        ("foo|bar&baz", {"foo"}, False),  # left to right: (foo|bar)&baz
        ("foo|bar&baz", {"bar", "baz"}, True),
        ("foo&(bar|baz)", {"foo", "baz"}, True),
        ("[rack1|rack2]", {"rack2"}, True),
        ("[rack1*2&rack2*4]", {"rack2"}, True),  # a node serves one of the counts
        ("[rack1*2&rack2*4]", {"rack3"}, False),
    ],
)
def test_constraint_expressions_match_as_slurm_reads_them(text, node, expected):
    assert parse(text).matches(node) is expected


def test_counts_are_read_from_names_and_groups():
    assert [(t.name, n) for t, n in parse("graphics*4").counts] == [("graphics", 4)]
    assert [n for _t, n in parse("[(rack1|rack2)*1&(rack3)*2]").counts] == [1, 2]
    assert parse("[rack1|rack2]").matching_or and not parse("rack1|rack2").matching_or


@pytest.mark.parametrize(
    "text, why",
    [
        ("gpu&", "without a feature"),
        ("a&&b", "without a feature"),
        ("[a|b]&[c|d]", "more than one set of brackets"),
        ("(a*2)", "positive integer"),
        ("gpu*0", "positive integer"),
        ("a*2&b", "outside of brackets"),
        ("[a&b]", "count must be used with XAND"),
        ("[a*2|b]", "count must not be used with MOR"),
        ("(a", "unbalanced parenthesis"),
        ("((a))", "imbalanced parentheses"),
        ("gpu]", "imbalanced brackets"),
    ],
)
def test_malformed_constraints_are_refused_with_slurmctlds_reason(text, why):
    with pytest.raises(ConstraintError, match=why.replace("(", r"\(")):
        parse(text)


# ----------------------------------------------------------------------------- a small site
BASE = {
    "name": "pool",
    "title": "Pool",
    "operator": "test",
    "summary": "a site with a partition that pools two node types",
    "lifecycle": {"status": "current", "sources": [{"title": "t", "url": "https://e.org/"}]},
    "scheduler": {"kind": "slurm", "submit": "sbatch", "default_partition": "gpu"},
    "launchers": [{"name": "srun", "status": "current"}],
    "account": {"required": False, "pattern": "^[a-z0-9]+$", "example": "p1"},
    "placeholders": [],
    "node_types": {
        "small": {
            "arch": "x86_64",
            "cpu": "c",
            "sockets": 1,
            "cores_per_socket": 64,
            "threads_per_core": 2,
            "memory_gb": 256,
            "features": ["gpu", "hbm40g"],
            "gpus": {"count": 4, "model": "A100 40GB", "vendor": "nvidia"},
            "count": 8,
        },
        "big": {
            "arch": "x86_64",
            "cpu": "c",
            "sockets": 1,
            "cores_per_socket": 64,
            "threads_per_core": 2,
            "memory_gb": 256,
            "features": ["gpu", "hbm80g"],
            "gpus": {"count": 4, "model": "A100 80GB", "vendor": "nvidia"},
            "count": 2,
        },
        "cpu": {
            "arch": "x86_64",
            "cpu": "c",
            "sockets": 2,
            "cores_per_socket": 64,
            "threads_per_core": 2,
            "memory_gb": 512,
            "features": ["cpu"],
            "count": 4,
        },
    },
    "partitions": {
        "gpu": {"node_types": ["small", "big"], "max_walltime": "12:00:00", "exclusive": True},
        "cpu": {"node_type": "cpu", "max_walltime": "12:00:00", "exclusive": True},
    },
    "qos": {
        "debug": {"default": True, "max_walltime": "00:30:00", "max_nodes": 2},
        "regular": {
            "max_walltime": "48:00:00",
            "by_node_type": {"small": {"max_walltime": "24:00:00"}},
        },
        "long": {"max_walltime": "48:00:00", "flags": ["PartitionTimeLimit"]},
    },
    "module_inventory": {"coverage": "partial", "note": "none"},
    "modules": [],
    "paths": {},
    "stacks": {},
    "sources": [{"title": "t", "url": "https://e.org/"}],
}


def _site(tmp_path: Path, change=None, name: str = "pool"):
    data = copy.deepcopy(BASE)
    data["name"] = name
    if change:
        change(data)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return load_profile(path)


def _judge(site, *directives: str, body: str = "hostname\n"):
    text = "#!/bin/bash\n" + "".join(f"#SBATCH {d}\n" for d in directives) + body
    return check_slurm_script("job.sbatch", site, text=text)


def _errors(report) -> list[str]:
    return [f.rule for f in report.errors]


def test_a_partition_may_pool_two_node_types(tmp_path):
    site = _site(tmp_path)
    part = site.partitions["gpu"]
    assert part.pools and [nt.name for nt in part.node_types] == ["small", "big"]
    assert part.size == 10  # 8 + 2 nodes
    assert _judge(site, "-q regular", "-N 9", "-t 10").errors == []
    assert "node-count" in _errors(_judge(site, "-q regular", "-N 11", "-t 10"))


@pytest.mark.parametrize(
    "constraint, node_type",
    [("gpu", "small"), ("gpu&hbm80g", "big"), ("hbm80g|cpu", "big"), ("[hbm40g|hbm80g]", "small")],
)
def test_the_constraint_picks_the_node_type(tmp_path, constraint, node_type):
    report = _judge(_site(tmp_path), f"--constraint={constraint}", "-t 10")
    assert report.errors == [], report.errors
    assert report.plan["node_type"] == node_type


def test_a_job_lands_on_the_first_node_type_that_can_take_it(tmp_path):
    """Two nodes of 80 GB exist: a 3-node job on -C gpu lands on the 40 GB ones, and a 3-node
    job on -C hbm80g is refused for lack of nodes."""
    site = _site(tmp_path)
    three = _judge(site, "-q regular", "-C gpu", "-N 3", "-t 10")
    assert (three.errors, three.plan["node_type"]) == ([], "small")
    assert _judge(site, "-C gpu&hbm80g", "-N 2", "-t 10").plan["node_type"] == "big"
    assert _errors(_judge(site, "-q regular", "-C gpu&hbm80g", "-N 3", "-t 10")) == ["node-count"]


def test_features_no_node_has_or_no_node_of_the_partition_has_are_refused(tmp_path):
    site = _site(tmp_path)
    unknown = _judge(site, "-C volta", "-t 10")
    assert _errors(unknown) == ["constraint-feature"]
    assert "Invalid feature specification" in unknown.errors[0].message
    wrong_partition = _judge(site, "-p gpu", "-C cpu", "-t 10")
    assert _errors(wrong_partition) == ["constraint-nodes"]
    syntax = _judge(site, "-C 'gpu&'", "-t 10")
    assert _errors(syntax) == ["constraint-syntax"]


def test_node_counts_in_a_constraint_need_that_many_nodes(tmp_path):
    site = _site(tmp_path)
    counts = "-C '[hbm40g*2&hbm80g*1]'"
    assert _judge(site, counts, "-q regular", "-N 3", "-t 10").errors == []
    assert _errors(_judge(site, counts, "-q regular", "-N 2", "-t 10")) == ["constraint-count"]


def test_a_cpu_job_is_judged_on_cpu_nodes(tmp_path):
    """A site whose users name no partition routes each job by its constraint: -C cpu lands
    on the CPU nodes, so a step that uses all 256 of their CPUs fits."""

    def routed(data):
        data["scheduler"].pop("default_partition")
        data["scheduler"]["default_partitions"] = ["gpu", "cpu"]

    site = _site(tmp_path, routed)
    report = _judge(site, "-C cpu", "-N 2", "-t 10", body="srun -n 64 -c 8 ./mpi-hello\n")
    assert report.errors == [], report.errors
    assert (report.plan["partition"], report.plan["node_type"]) == ("cpu", "cpu")
    assert report.plan["cpus_per_node"] == 256
    gpu = _judge(site, "-C gpu", "-N 1", "--gpus-per-node=4", "-t 10")
    assert (gpu.errors, gpu.plan["partition"]) == ([], "gpu")


def test_the_default_qos_applies_to_a_job_that_names_none(tmp_path):
    site = _site(tmp_path)
    assert site.default_qos == "debug"
    report = _judge(site, "-t 00:20:00")
    assert report.errors == [] and report.plan["qos"] == "debug"
    assert report.plan["job_env"]["SLURM_JOB_QOS"] == "debug"
    over = _judge(site, "-t 01:00:00")
    assert _errors(over) == ["qos-time-limit"]
    assert "debug is the site's default" in over.errors[0].message
    assert _errors(_judge(site, "-N 3", "-t 10")) == ["qos-node-limit"]


def test_walltime_limits_per_qos_and_per_node_type(tmp_path):
    site = _site(tmp_path)
    # regular: 24 hours on the 40 GB nodes, 48 elsewhere; the partition allows 12
    assert _judge(site, "-q regular", "-t 10:00:00").errors == []
    assert _errors(_judge(site, "-q regular", "-C cpu", "-p cpu", "-t 13:00:00")) == ["time-limit"]
    assert site.qos_limits("regular", "small")["max_walltime"] == "24:00:00"
    assert site.qos_limits("regular", "big")["max_walltime"] == "48:00:00"


def test_the_stricter_of_qos_and_partition_applies_unless_the_qos_overrides(tmp_path):
    """Slurm bounds a QoS's MaxWall by the partition's MaxTime unless the QoS has the
    PartitionTimeLimit flag (resource_limits.shtml, Hierarchy)."""
    site = _site(tmp_path)
    assert _errors(_judge(site, "-q regular", "-t 20:00:00")) == ["time-limit"]
    assert _judge(site, "-q long", "-t 40:00:00").errors == []
    assert _errors(_judge(site, "-q long", "-t 50:00:00")) == ["qos-time-limit"]


def test_a_partition_without_a_limit_of_its_own_takes_the_qos_limits(tmp_path):
    def unlimited(data):
        data["partitions"]["gpu"].pop("max_walltime")

    site = _site(tmp_path, unlimited)
    assert site.partitions["gpu"].max_walltime_s is None
    assert site.partitions["gpu"].max_walltime == "UNLIMITED"
    assert _judge(site, "-q regular", "-C hbm80g", "-t 40:00:00").errors == []
    # no -C: the job is judged on each node type in turn and lands where 30 hours are allowed
    assert _judge(site, "-q regular", "-t 30:00:00").plan["node_type"] == "big"
    assert _errors(_judge(site, "-q regular", "-C hbm40g", "-t 30:00:00")) == ["qos-time-limit"]


def test_an_account_is_optional_where_a_default_is_charged(tmp_path):
    def defaulted(data):
        data["account"]["default"] = "the user's default project"

    site = _site(tmp_path, defaulted)
    assert _judge(site, "-t 10").errors == []
    assert _errors(_judge(site, "-A 'Bad Name'", "-t 10")) == ["account-form"]


# ----------------------------------------------------------------------------- validation
def test_a_node_type_no_partition_holds_is_refused_at_validation(tmp_path):
    def orphan(data):
        data["partitions"]["cpu"]["status"] = "removed"

    with pytest.raises(ProfileError) as exc:
        _site(tmp_path, orphan)
    (finding,) = [f for f in exc.value.findings if f.rule == "node-type-reached"]
    assert "node type cpu: no partition holds it" in finding.message
    assert finding.line > 0 and finding.path.name == "pool.yaml"


@pytest.mark.parametrize(
    "change, rule",
    [
        (lambda d: d["qos"]["regular"].update(default=True), "qos-default"),
        (lambda d: d["qos"]["regular"]["by_node_type"].update(x={"max_nodes": 1}), "qos-node-type"),
        (lambda d: d["partitions"]["gpu"].update(node_types=["small", "x"]), "partition-node-type"),
        (lambda d: d["scheduler"].update(default_partitions=["gpu"]), "default-partition"),
        (lambda d: d.update(plugins={"uenv": {"sources": BASE["sources"]}}), "plugin-options"),
    ],
)  # fmt: skip
def test_inconsistent_profiles_name_the_rule(tmp_path, change, rule):
    with pytest.raises(ProfileError) as exc:
        _site(tmp_path, change)
    assert rule in {f.rule for f in exc.value.findings}


# ----------------------------------------------------------------------------- plugins
SHIFTER_JOB = (
    "--image=nersc/pytorch:ngc-23.07-v0",
    "--module=gpu,nccl-2.18",
    "-t 10",
)
PYXIS_JOB = ("--container-image=nvcr.io/nvidia/pytorch:24.01-py3", "--container-mounts=/a:/b")


def _plugins(*names):
    def declare(data):
        data["plugins"] = {n: {"sources": BASE["sources"]} for n in names}

    return declare


def test_options_of_a_declared_plugin_are_judged_not_refused(tmp_path):
    site = _site(tmp_path, _plugins("shifter", "pyxis"))
    report = _judge(
        site, *SHIFTER_JOB, *PYXIS_JOB, body="srun --container-workdir=/w shifter python -V\n"
    )
    assert report.errors == [] and report.warnings == [], report.findings
    bad = _judge(site, "--image=a:b:c:d", "-t 10")
    assert _errors(bad) == ["plugin-option-value"]
    assert "--image='a:b:c:d' is not of the form" in bad.errors[0].message
    assert _errors(_judge(site, "--container-unshare=pid", "-t 10")) == ["plugin-option-value"]


def test_a_plugin_the_profile_does_not_declare_is_refused_with_its_name(tmp_path):
    report = _judge(_site(tmp_path, _plugins("shifter")), *PYXIS_JOB, "-t 10")
    assert _errors(report) == ["sbatch-option", "sbatch-option"]
    assert "option of the pyxis SPANK plugin" in report.errors[0].message


def test_known_plugin_options_are_warnings_on_the_generic_site():
    report = _judge(
        generic_site(),
        *SHIFTER_JOB,
        *PYXIS_JOB,
        "--container-workdir=/w",
        body="srun --container-image=x python -V\n",
    )
    assert report.errors == [], report.errors
    messages = [f.message for f in report.warnings if f.rule == "plugin-option"]
    assert "plugin option (pyxis): --container-image is not an option of Slurm's sbatch; " \
        "accepted if the site runs pyxis" in messages  # fmt: skip
    assert any(m.startswith("plugin option (shifter): --image") for m in messages)
    assert any("srun; accepted if the site runs pyxis" in m for m in messages)
    assert not any("did you mean" in f.message for f in report.findings)


def test_a_misspelt_slurm_option_is_still_a_misspelling_on_the_generic_site():
    report = _judge(generic_site(), "--partion=gpu")
    assert _errors(report) == ["sbatch-option"]
    assert "did you mean --partition" in report.errors[0].message


def test_plugin_values_follow_their_arity():
    plugins = slurm_options.Plugins(generic=True)
    parsed = slurm_options.parse("sbatch", ["--image", "ubuntu:22.04", "job.sh"], plugins)
    (option, value, declared) = parsed[slurm_options.PLUGIN_KNOWN][0]
    assert (option.name, value, declared, parsed["script"]) == (
        "--image",
        "ubuntu:22.04",
        False,
        "job.sh",
    )
    with pytest.raises(slurm_options.OptionError, match="doesn't allow an argument"):
        slurm_options.parse("srun", ["--container-writable=yes", "true"], plugins)


# ----------------------------------------------------------------------------- Perlmutter
PERLMUTTER = load_site("perlmutter")


@pytest.mark.parametrize(
    "directives, partition, node_type",
    [
        (("-C gpu", "-N 1", "--gpus-per-node=4", "-t 10"), "gpu", "a100-40gb"),
        (("-C gpu&hbm80g", "-N 1", "--gpus-per-node=4", "-t 10"), "gpu", "a100-80gb"),
        (("-C cpu", "-N 2", "-t 10"), "cpu", "epyc7763-cpu"),
        (("-C gpu", "-q shared", "-n 1", "--gpus-per-task=1", "-c 32", "-t 10"),
         "gpu-shared", "a100-40gb"),
    ],
)  # fmt: skip
def test_perlmutter_routes_jobs_by_constraint_and_qos(directives, partition, node_type):
    report = _judge(PERLMUTTER, *directives)
    assert report.errors == [], report.errors
    assert (report.plan["partition"], report.plan["node_type"]) == (partition, node_type)


def test_perlmutter_runs_a_job_without_qos_in_debug():
    assert PERLMUTTER.default_qos == "debug"
    assert _judge(PERLMUTTER, "-C gpu", "-t 30").plan["qos"] == "debug"
    assert _errors(_judge(PERLMUTTER, "-C gpu", "-t 45")) == ["qos-time-limit"]
    long_gpu = _judge(PERLMUTTER, "-C gpu", "-q regular", "-t 30:00:00")
    assert _errors(long_gpu) == ["qos-time-limit"]
    assert "24:00:00" in long_gpu.errors[0].message
    assert _judge(PERLMUTTER, "-C gpu", "-q regular", "-t 23:00:00").errors == []


# ----------------------------------------------------------------------------- the real Slurm's
LUA = shutil.which("lua5.3") or shutil.which("lua")
HARNESS = """
slurm = {SUCCESS = 0, ERROR = -1, log_user = function(fmt, ...)
  io.stderr:write(string.format(fmt, ...) .. "\\n") end}
dofile(arg[1])
local job = {features = arg[2] ~= "" and arg[2] or nil, qos = arg[3] ~= "" and arg[3] or nil,
  time_limit = tonumber(arg[4]), min_nodes = 1, num_tasks = 4294967294,
  ntasks_per_node = 65534, max_nodes = 4294967294}
print(slurm_job_submit(job, {}, 0), job.partition)
"""


@pytest.mark.skipif(LUA is None, reason="no Lua interpreter here (Debian: lua5.3)")
@pytest.mark.parametrize(
    "features, qos, minutes, rc, partition",
    [
        ("cpu", "", 10, "0", "cpu"),
        ("gpu", "", 10, "0", "gpu"),
        ("gpu", "shared", 10, "0", "gpu-shared"),
        ("gpu", "", 60, "2050", "gpu"),  # debug, the default: 30 minutes
        ("gpu&hbm80g", "regular", 25 * 60, "2050", "gpu"),  # 24 hours on GPU nodes
        ("cpu", "regular", 48 * 60, "0", "cpu"),  # no CPU limit in the profile
        ("nope", "", 10, "2066", "nil"),  # no partition's nodes have it
    ],
)
def test_the_generated_policy_routes_and_limits_as_the_emulator_does(
    tmp_path, features, qos, minutes, rc, partition
):
    from clusterkit.runs import slurmconf

    (tmp_path / "job_submit.lua").write_text(slurmconf.job_submit_lua(PERLMUTTER))
    (tmp_path / "harness.lua").write_text(HARNESS)
    out = subprocess.run(
        [LUA, str(tmp_path / "harness.lua"), str(tmp_path / "job_submit.lua"), features, qos,
         str(minutes)],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert out[0] == rc and out[1].split(",")[0] == partition, out
    directives = [f"-C {features}", f"-t {minutes}"] + ([f"-q {qos}"] if qos else [])
    emulated = _judge(PERLMUTTER, *directives)
    assert bool(emulated.errors) == (rc != "0"), emulated.errors


def test_gpus_per_task_needs_the_task_count():
    """Slurm's GRES validation refuses --gpus-per-task without --ntasks or --gpus (a tutorial
    script of NERSC's, in the published corpus, does this)."""
    refused = _judge(PERLMUTTER, "-C gpu", "-q shared", "--gpus-per-task=1", "-c 32", "-t 10")
    assert _errors(refused) == ["gpus-per-task"]
    for given in ("-n 1", "--ntasks-per-node=1", "--gpus=1"):
        ok = _judge(PERLMUTTER, "-C gpu", "-q shared", given, "--gpus-per-task=1", "-t 10")
        assert ok.errors == [], (given, ok.errors)
