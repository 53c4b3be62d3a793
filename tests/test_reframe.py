"""ReFrame: a configuration generated from the profiles, dry runs of the checks judged by the
scheduler emulation, and run reports imported into the recorded results that pages render.

Needs the ``reframe`` executable (reframe-hpc; found next to this interpreter, on PATH or in
$CLUSTERKIT_REFRAME), Lmod (the dry runs emit ``module load`` lines, which ReFrame resolves
with Lmod against modulefiles generated from the profiles) and Sphinx for the rendering test.
Without them those tests skip, unless CLUSTERKIT_REQUIRE_REFRAME=1 (the nox ``reframe``
session) makes a missing tool a failure.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from clusterkit.emulate import lsf
from clusterkit.emulate.sbatch import check_slurm_script
from clusterkit.reframe import config as rc
from clusterkit.reframe import results as rr
from clusterkit.sites import results
from clusterkit.sites.errors import CheckError
from clusterkit.sites.lmod import write_modulefiles
from clusterkit.sites.profiles import ROOT, SITES_DIR, Site, load_profile
from reframe_checks.support import example_runs

REQUIRE = os.environ.get("CLUSTERKIT_REQUIRE_REFRAME") == "1"
LMOD_CMD = Path("/usr/share/lmod/lmod/libexec/lmod")
EXAMPLE_REPORT = ROOT / "results" / "example-reframe-report.json"
CHECKS = ROOT / "reframe_checks"


def _reframe() -> str | None:
    env = os.environ.get("CLUSTERKIT_REFRAME")
    if env:
        return env
    beside = Path(sys.executable).parent / "reframe"
    if beside.is_file():
        return str(beside)
    return shutil.which("reframe")


def _need(ok: bool, what: str) -> None:
    if ok:
        return
    if REQUIRE:
        pytest.fail(f"{what} is missing and CLUSTERKIT_REQUIRE_REFRAME=1")
    pytest.skip(f"{what} is not installed")


# --------------------------------------------------------------------------- helpers
def copy_sites(tmp: Path, rename: tuple[str, str, str] | None = None) -> Path:
    """A copy of sites/ (optionally with ``site``'s partition ``old`` renamed to ``new``)."""
    out = tmp / "sites"
    shutil.copytree(SITES_DIR, out)
    if rename:
        site, old, new = rename
        path = out / f"{site}.yaml"
        data = yaml.safe_load(path.read_text())
        data["partitions"] = {(new if k == old else k): v for k, v in data["partitions"].items()}
        if data["scheduler"].get("default_partition") == old:
            data["scheduler"]["default_partition"] = new
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def partitions_of(config: dict, system: str) -> dict[str, dict]:
    sys_ = next(s for s in config["systems"] if s["name"] == system)
    return {p["name"]: p for p in sys_["partitions"]}


def current_sites() -> list[Site]:
    return rc.select_sites()


def all_sites() -> list[Site]:
    return rc.select_sites(include_historical=True)


# --------------------------------------------------------------------------- (1) the config
def test_every_slurm_partition_appears_with_access_from_its_profile():
    sites = {s.name: s for s in all_sites()}
    config = rc.site_configuration(list(sites.values()))
    checked = 0
    slurm_sites = [s for s in sites.values() if s.scheduler == "slurm"]
    assert {"bede", "archer2"} <= {s.name for s in slurm_sites}
    for site in slurm_sites:
        name = site.name
        parts = partitions_of(config, name)
        assert set(parts) == set(site.partitions)
        for pname, part in site.partitions.items():
            entry = parts[pname]
            node = part.node_type
            routed = len(site.default_partitions) > 1  # reached by constraint, not by name
            where = f"--constraint={rc.routing_constraint(site, part)}"
            expected = [where if routed else f"--partition={pname}"]
            if site.account.get("required", True):  # else users' jobs name no account
                expected.append(f"--account={site.account['example']}")
            if part.qos_required or (routed and site.default_qos not in part.qos):
                expected.append(f"--qos={part.qos[0]}")
            assert entry["access"] == expected, (name, pname)
            assert (entry["scheduler"], entry["launcher"]) == ("slurm", "srun")
            assert entry["processor"]["num_cpus"] == node.cpus
            assert entry["extras"]["max_walltime_s"] == part.max_walltime_s
            if node.gpus:
                assert entry["devices"] == [
                    {"type": "gpu", "model": node.gpu_model, "num_devices": node.gpus}
                ]
                option = {"nvidia": "--gres=gpu:{num_gpus_per_node}", "amd": "--gpus={num_gpus}"}
                assert entry["resources"] == [{"name": "gpu", "options": [option[node.gpu_vendor]]}]
            else:
                assert "devices" not in entry and "resources" not in entry
            for env_name in entry["environs"]:
                # sites may share environment names (pytorch-user): each is limited to its site
                env = next(
                    e
                    for e in config["environments"]
                    if e["name"] == env_name and e["target_systems"] == [name]
                )
                types = env["extras"].get("node_types") or [node.name]
                assert node.name in types
            checked += 1
    assert checked == sum(len(s.partitions) for s in slurm_sites)
    # the forms the sites document: QoS on every ARCHER2 partition, --gpus on its AMD nodes
    a2 = partitions_of(config, "archer2")
    assert all(any(o.startswith("--qos=") for o in p["access"]) for p in a2.values())
    assert a2["gpu"]["resources"][0]["options"] == ["--gpus={num_gpus}"]
    # Perlmutter's users name no partition: -C gpu / -C cpu, and -q shared for a share of a node
    pm = partitions_of(config, "perlmutter")
    assert pm["gpu"]["access"] == ["--constraint=gpu"]
    assert pm["cpu"]["access"] == ["--constraint=cpu"]
    assert pm["gpu-shared"]["access"] == ["--constraint=gpu", "--qos=shared"]
    assert "pytorch-2_9_1-gpu" in a2["gpu"]["environs"]
    assert not any(e.startswith("tensorflow") for e in a2["gpu"]["environs"])


def test_only_sites_in_service_by_default_and_summit_gets_a_jsrun_launcher(tmp_path):
    names = {s.name for s in current_sites()}
    assert names == {s.name for s in all_sites() if s.is_current}
    assert "summit" not in names
    with pytest.raises(CheckError, match="include-historical"):
        rc.select_sites(["summit"])
    summit = rc.select_sites(["summit"], include_historical=True)
    path = rc.write_config(tmp_path, summit)
    text = path.read_text()
    assert "register_launcher('jsrun')" in text
    config = rc.site_configuration(summit)
    for name, entry in partitions_of(config, "summit").items():
        node = summit[0].partitions[name].node_type
        assert entry["scheduler"] == "lsf" and entry["launcher"] == "jsrun"
        assert entry["access"] == [f"-q {name}", f"-P {summit[0].account['example']}"]
        assert f"usable_cores = {node.usable_cores}" in text
        assert f"gpus = {node.gpus}" in text
    # the default framework module of a retired site, kept for the record
    assert any(e["modules"] == ["open-ce/1.10.0-py39-ibm"] for e in config["environments"])


def test_the_command_line_and_a_real_account(tmp_path, capsys):
    assert rc.main(["--out", str(tmp_path / "a"), "--site", "summit"]) == 1
    assert "include-historical" in capsys.readouterr().err
    assert rc.main(["--out", str(tmp_path / "b"), "--account", "bede=bdabc12"]) == 0
    text = (tmp_path / "b" / rc.CONFIG_NAME).read_text()
    assert "'--account=bdabc12'" in text
    assert rc.main(["--out", str(tmp_path / "c"), "--account", "bede=not-a-project"]) == 1


def test_a_site_whose_jobs_need_no_account_gets_one_only_when_given():
    """Where users log in to a project account (account.required: false), the generated jobs
    name no made-up account; one given with --account is passed on."""
    sites = [s for s in all_sites() if s.scheduler == "slurm" and not s.account["required"]]
    assert sites, "no Slurm profile with account.required: false"
    for site in sites:
        plain, _ = rc.system_entry(site)
        assert all(
            not any(o.startswith("--account") for o in p["access"]) for p in plain["partitions"]
        ), plain["partitions"]
        given, _ = rc.system_entry(site, account=site.account["example"])
        assert all(
            f"--account={site.account['example']}" in p["access"] for p in given["partitions"]
        )


def test_a_rehearsal_config_runs_everything_here_but_keeps_the_facts():
    bede = rc.select_sites(["bede"])
    real = partitions_of(rc.site_configuration(bede), "bede")
    local = rc.site_configuration(bede, local=True)
    assert local["systems"][0]["modules_system"] == "nomod"
    for name, entry in partitions_of(local, "bede").items():
        assert (entry["scheduler"], entry["launcher"], entry["access"]) == ("local", "local", [])
        assert "resources" not in entry
        assert entry["extras"] == real[name]["extras"]
        assert entry.get("devices") == real[name].get("devices")


def test_renaming_a_partition_changes_the_config(tmp_path):
    sites_dir = copy_sites(tmp_path, ("bede", "gpu", "v100"))
    site = load_profile(sites_dir / "bede.yaml")
    parts = partitions_of(rc.site_configuration([site]), "bede")
    assert "gpu" not in parts
    assert parts["v100"]["access"][0] == "--partition=v100"
    # the recorded Bede figures name the partition "gpu", which the copy no longer has
    recorded_parts = {r.data.get("partition") for r in results.load_all() if r.site == "bede"}
    assert "gpu" in recorded_parts and "gpu" not in parts


# --------------------------------------------------------------------------- (2) dry runs
@pytest.fixture(scope="module")
def reframe_env(tmp_path_factory) -> dict[str, str]:
    exe = _reframe()
    _need(exe is not None, "reframe (pip install reframe-hpc)")
    _need(LMOD_CMD.is_file(), "Lmod (apt-get install lmod)")
    root = tmp_path_factory.mktemp("modulefiles")
    for site in all_sites():
        write_modulefiles(site, root)
    env = dict(os.environ)
    env.update(
        CLUSTERKIT_REFRAME=exe,
        LMOD_CMD=str(LMOD_CMD),
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        CLUSTERKIT_TEST_MODULE_ROOT=str(root),
        TMPDIR=str(tmp_path_factory.mktemp("rfm-tmp")),
    )
    return env


def dry_run(env: dict, config: Path, system: str, workdir: Path, *extra: str):
    """``reframe --dry-run`` of every check on ``system``; (process, job scripts)."""
    site = system.split(":")[0]
    run_env = dict(env, MODULEPATH=str(Path(env["CLUSTERKIT_TEST_MODULE_ROOT"]) / site))
    cmd = [
        env["CLUSTERKIT_REFRAME"],
        "-C",
        str(config),
        "-c",
        str(CHECKS),
        "--system",
        system,
        "--prefix",
        str(workdir),
        "--report-file",
        str(workdir / "report.json"),
        "--exec-policy=serial",
        "--nocolor",
        "--dry-run",
        *extra,
    ]
    proc = subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=300)
    scripts = sorted((workdir / "stage").rglob("rfm_job.sh"))
    return proc, scripts


def judge(script: Path, site: Site) -> list:
    if site.scheduler == "lsf":
        return lsf.check_lsf_script(script, site).errors
    return check_slurm_script(script, site).errors


@pytest.mark.parametrize("site", [s.name for s in all_sites()])
def test_dry_runs_of_every_check_pass_the_scheduler_emulation(site, reframe_env, tmp_path):
    prof = next(s for s in all_sites() if s.name == site)
    config = rc.write_config(tmp_path / "config", [prof])
    proc, scripts = dry_run(reframe_env, config, site, tmp_path / "run")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "FAILURE INFO" not in proc.stdout, proc.stdout[-3000:]
    # every partition with GPUs got its ResNet-50 job scripts, and so did every CPU partition
    # on which an example job script runs the PyTorch trainer (Cirrus, ARCHER2 standard)
    staged = {p.relative_to(tmp_path / "run" / "stage" / site).parts[0] for p in scripts}
    gpu_parts = {n for n, p in prof.partitions.items() if p.node_type.gpus}
    cpu_parts = {
        r.partition
        for r in example_runs(site, "train_resnet.py")
        if not prof.partitions[r.partition].node_type.gpus
    }
    missing = (gpu_parts | cpu_parts) - staged
    assert not missing, f"no job script for {sorted(missing)}"
    if site == "cirrus":
        assert cpu_parts == {"standard"}
        (cpu,) = [s.read_text() for s in scripts if "ResNet50PyTorchCPU" in str(s)]
        # the example's shape and srun options, and the export srun needs to keep the CPUs
        assert "#SBATCH --ntasks-per-node=24" in cpu and "#SBATCH --exclusive" in cpu
        assert "export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK" in cpu
        assert "--hint=nomultithread --distribution=block:block" in cpu
        assert "--data-dir" not in cpu
    errors = {str(s.relative_to(tmp_path)): judge(s, prof) for s in scripts}
    assert not any(errors.values()), "\n".join(
        f"{k}:\n  " + "\n  ".join(map(str, v)) for k, v in errors.items() if v
    )
    if site == "archer2":
        names = {s.parent.name.split("_")[0] for s in scripts}
        assert {"DeepCam", "CosmoFlow"} <= names
    if site == "bede":
        # the 1-node case on the gpu partition is held to the recorded 4-GPU figure
        recorded = [
            r.value
            for r in results.load_all()
            if r.site == "bede"
            and r.data.get("partition") == "gpu"
            and r.data.get("gpus") == prof.partitions["gpu"].node_type.gpus
            and r.data.get("nodes") == 1
            and r.metric == "throughput"
        ]
        assert recorded, "results/ lost the Bede gpu-partition figure"
        assert f"(r:{min(recorded):g}, l:-0.1, u:None)" in proc.stdout


def test_a_renamed_partition_breaks_the_checks_that_target_it(reframe_env, tmp_path):
    sites_dir = copy_sites(tmp_path, ("bede", "gpu", "v100"))
    broken = load_profile(sites_dir / "bede.yaml")
    real = next(s for s in current_sites() if s.name == "bede")
    config = rc.write_config(tmp_path / "config", [broken])
    # a run aimed at the partition the recorded figures and the pages name no longer starts
    proc, _ = dry_run(reframe_env, config, "bede:gpu", tmp_path / "run1")
    assert proc.returncode != 0
    assert "bede:gpu" in proc.stdout + proc.stderr
    # the renamed partition still gets job scripts, but the real Slurm refuses them
    proc, scripts = dry_run(
        reframe_env, config, "bede:v100", tmp_path / "run2", "-n", "ResNet50PyTorch"
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert scripts and "(r:" not in proc.stdout  # no recorded figure for "v100"
    for script in scripts:
        assert not judge(script, broken)
        rules = {f.rule for f in judge(script, real)}
        assert "partition-exists" in rules, script


# --------------------------------------------------------------------------- (3) results
@pytest.fixture
def results_dir(tmp_path) -> Path:
    out = tmp_path / "results"
    out.mkdir()
    for f in ("schema.yaml", "reported.yaml"):
        shutil.copy(results.RESULTS_DIR / f, out / f)
    return out


def real_looking_report(tmp_path: Path, days_ago: int = 0) -> Path:
    """The example report as a real cluster run would give it: no example note, the Slurm
    scheduler, and a completion time ``days_ago`` days before now."""
    data = json.loads(EXAMPLE_REPORT.read_text())
    del data[rr.EXAMPLE_KEY]
    when = time.time() - days_ago * 86400
    for run in data["runs"]:
        for tc in run["testcases"]:
            tc["scheduler"] = "slurm"
            tc["job_completion_time_unix"] = when
    path = tmp_path / f"report-{days_ago}.json"
    path.write_text(json.dumps(data))
    return path


def test_the_example_report_imports_as_examples_only(results_dir, capsys):
    before = results.load_all(results_dir)
    out = results_dir / "examples.yaml"
    assert rr.main([str(EXAMPLE_REPORT), "--out", str(out)]) == 0
    loaded = results.load_all(results_dir)
    new = [r for r in loaded if r.path == out]
    assert new and all(r.kind == "example" for r in new)
    assert {r.benchmark for r in new} == {"resnet50-pytorch", "resnet50-tensorflow"}
    assert all(r.site == "bede" and r.data["partition"] == "gpu" for r in new)
    assert all(r.software and r.commit and r.source["file"] for r in new)
    assert results.last_verified(loaded, "bede") == results.last_verified(before, "bede")
    # importing again adds nothing; forcing it to count as a measurement is refused
    assert rr.main([str(EXAMPLE_REPORT), "--out", str(out)]) == 0
    assert len(results.load_all(results_dir)) == len(loaded)
    assert "0 added, 2 already there" in capsys.readouterr().out
    assert rr.main([str(EXAMPLE_REPORT), "--out", str(out), "--kind", "measured"]) == 1


def test_a_report_changes_last_verified(results_dir, tmp_path):
    loaded = results.load_all(results_dir)
    assert results.last_verified(loaded, "bede", "resnet50-pytorch") is None
    out = results_dir / "measured.yaml"
    imported, dups = rr.import_report(real_looking_report(tmp_path), out)
    assert not dups and {e["kind"] for e in imported.added} == {"measured"}
    newest = results.last_verified(results.load_all(results_dir), "bede", "resnet50-pytorch")
    assert newest is not None and newest.path == out
    assert newest.date == dt.date.today().isoformat()
    assert not newest.is_stale()
    rows = {(r["site"], r["benchmark"]): r for r in rr.staleness(results.load_all(results_dir))}
    assert rows["bede", "resnet50-pytorch"]["status"] == "current"
    assert rows["bede", "resnet50-wmlce"]["status"] == "never measured"
    later = dt.date.today() + dt.timedelta(days=results.STALE_AFTER_DAYS + 1)
    rows = rr.staleness(results.load_all(results_dir), today=later)
    assert {r["status"] for r in rows if r["benchmark"] == "resnet50-pytorch"} == {"stale"}


def test_a_rehearsal_report_is_never_a_measurement(results_dir, tmp_path):
    data = json.loads(real_looking_report(tmp_path).read_text())
    for run in data["runs"]:
        for tc in run["testcases"]:
            tc["scheduler"] = "local"
    report = tmp_path / "rehearsal.json"
    report.write_text(json.dumps(data))
    imported, _ = rr.import_report(report, results_dir / "examples.yaml")
    assert {e["kind"] for e in imported.added} == {"example"}
    assert all("rehearsal" in e["note"] for e in imported.added)
    with pytest.raises(CheckError, match="report-not-measured"):
        rr.import_report(report, results_dir / "measured.yaml", kind="measured")


def render(srcdir: Path, outdir: Path) -> tuple[str, list[list[str]], str]:
    """Build a one-page Sphinx project; (the "last verified" line, the results table's rows,
    the warnings)."""
    from docutils import nodes
    from sphinx.application import Sphinx

    warnings = io.StringIO()
    app = Sphinx(
        str(srcdir),
        str(srcdir),
        str(outdir),
        str(outdir / ".doctrees"),
        "text",
        status=None,
        warning=warnings,
        freshenv=True,
    )
    app.build(force_all=True)
    tree = app.env.get_doctree("index")
    line = " ".join(
        p.astext() for p in tree.findall(nodes.paragraph) if "last-verified" in p["classes"]
    )
    rows = [
        [" ".join(e.astext().split()) for e in row.findall(nodes.entry)]
        for body in tree.findall(nodes.tbody)
        for row in body.findall(nodes.row)
    ]
    return " ".join(line.split()), rows, warnings.getvalue()


def test_the_rendered_page_follows_the_imported_results(results_dir, tmp_path, monkeypatch):
    try:
        import sphinx  # noqa: F401
    except ImportError:
        _need(False, "Sphinx (pip install sphinx)")
    src = tmp_path / "site"
    src.mkdir()
    (src / "conf.py").write_text("extensions = ['clusterkit.pages.sphinxext']\n")
    (src / "index.rst").write_text(
        "ResNet-50\n=========\n\n"
        ".. last-verified:: bede resnet50-pytorch\n\n"
        ".. results-table:: resnet50-pytorch\n"
    )
    # the directives read results/ through clusterkit.sites.results: point it at the copy
    real_load_all = results.load_all
    monkeypatch.setattr(results, "load_all", lambda d=results_dir: real_load_all(d))
    monkeypatch.setattr(results, "RESULTS_DIR", results_dir)

    line, rows, warnings = render(src, tmp_path / "out0")
    assert line.startswith("Not yet verified on Bede")
    assert not rows and "no recorded results for 'resnet50-pytorch'" in warnings

    rr.import_report(EXAMPLE_REPORT, results_dir / "examples.yaml")
    line, rows, warnings = render(src, tmp_path / "out1")
    assert line.startswith("Not yet verified on Bede")  # examples never count
    assert [r[6] for r in rows] == ["example"] and "no recorded results" not in warnings

    imported, _ = rr.import_report(real_looking_report(tmp_path), results_dir / "measured.yaml")
    value = next(e for e in imported.added if e["benchmark"] == "resnet50-pytorch")["value"]
    line, rows, _ = render(src, tmp_path / "out2")
    today = dt.date.today().isoformat()
    assert line == f"Last verified on Bede (gpu) on {today}: resnet50-pytorch, {value:g} img/s."
    assert sorted(r[6] for r in rows) == ["example", "measured"]
    measured = next(r for r in rows if r[6] == "measured")
    assert measured[:5] == ["bede", "1", "1", "throughput", f"{value:g} img/s"]
    assert measured[5] == today

    # a result older than results.STALE_AFTER_DAYS is shown as stale
    old_dir = tmp_path / "old-results"
    shutil.copytree(results_dir, old_dir)
    for f in ("measured.yaml", "examples.yaml"):
        (old_dir / f).unlink()
    monkeypatch.setattr(results, "load_all", lambda d=old_dir: real_load_all(d))
    rr.import_report(
        real_looking_report(tmp_path, days_ago=results.STALE_AFTER_DAYS + 10),
        old_dir / "measured.yaml",
    )
    line, rows, _ = render(src, tmp_path / "out3")
    assert line.endswith("This result is over six months old.")
    assert [r[6] for r in rows] == ["measured (stale)"]
