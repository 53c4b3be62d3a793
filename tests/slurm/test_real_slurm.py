"""A real Slurm, configured from the site profiles, judges the same scripts as the emulator.

Run by ``nox -s slurm`` (root; Debian's Slurm 22.05). Each Slurm site gets a throw-away cluster
(ci/slurm/start.sh, configured by clusterkit/runs/slurmconf.py) on which

1. every job script in ``examples/<site>/`` passes ``sbatch --test-only``;
2. on the corpus ``tests/corpus/slurm/<site>/{good,bad}/``, the emulator's verdict
   (``check_slurm_script`` has errors or not) equals Slurm's (refused or accepted), and both
   equal the directory's;
3. a small two-node job really runs (Bede-shaped cluster), and, where PyTorch is installed, the
   PyTorch examples run for real with tiny payloads.

A disagreement between the emulator and Slurm is a bug in the emulator or in the profile; one
already reported and not yet fixed is listed in KNOWN_DISAGREEMENTS (strict xfail: once fixed,
the entry must go).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterkit.emulate import slurm as emu_slurm
from clusterkit.emulate.sbatch import check_slurm_script
from clusterkit.emulate.script import read_script
from clusterkit.emulate.slurm_request import job_request
from clusterkit.sites.profiles import all_sites, load_site
from clusterkit.sites.published_manifest import strip_plugin_options

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus" / "slurm"
SITES = tuple(s.name for s in all_sites() if s.scheduler == "slurm")
SCRIPT_SUFFIXES = {".sbatch", ".slurm", ".sh"}

# (site, "good|bad/<name>") -> what is wrong, for a disagreement found and not yet fixed
# (strict xfail: a fixed one must leave the list). The 14 found when the corpus was written --
# partition sizes, node ranges, spreading tasks and GPUs over nodes without --nodes, partition
# lists, --time=0, --mem-per-cpu, gres names and GPU types, --gpus-per-task against
# --ntasks-per-node, --ntasks-per-gpu -- are fixed; tests/test_emulate_slurm.py keeps the
# emulator's side of each.
KNOWN_DISAGREEMENTS: dict[tuple[str, str], str] = {}


# --------------------------------------------------------------------------- helpers
class Disagreement(AssertionError):
    """The emulator's verdict on a script differs from the real Slurm's."""


def real_verdict(script: Path, env: dict[str, str], *extra: str) -> tuple[bool, str]:
    """(accepted, Slurm's own words) for ``sbatch --test-only [extra] script``."""
    r = subprocess.run(
        ["sbatch", "--test-only", *extra, str(script)],
        env=env,
        capture_output=True,
        text=True,
        cwd=script.parent,
        timeout=60,
    )
    return r.returncode == 0, (r.stdout + r.stderr).strip()


def shim_verdict(script: Path, site: str) -> tuple[bool, str]:
    """(accepted, messages) from the emulator's whole-script check."""
    report = check_slurm_script(script, load_site(site))
    return not report.errors, "; ".join(str(f) for f in report.errors) or "no errors"


def shim_submission_verdict(script: Path, site: str) -> tuple[bool, str]:
    """(accepted, messages) from the emulator's checks of the #SBATCH lines alone -- what
    ``sbatch`` itself judges (the body's modules and launchers are not Slurm's business)."""
    req = job_request(read_script(script))
    findings, _ = emu_slurm.check_job(req, load_site(site))
    errors = [f for f in findings if f.level == "error"]
    return not errors, "; ".join(str(f) for f in errors) or "no errors"


def example_scripts(site: str) -> list[Path]:
    folder = ROOT / "examples" / site
    if not folder.is_dir():
        return []
    return [
        p
        for p in sorted(folder.iterdir())
        if p.suffix in SCRIPT_SUFFIXES
        and re.search(r"^#SBATCH\s", p.read_text(encoding="utf-8", errors="replace"), re.M)
    ]


def corpus_sites() -> list[str]:
    """Sites with a hand-written corpus under tests/corpus/slurm/ (not every site needs one:
    the corpus tests the emulator's rules, which are the same for every profile)."""
    return [site for site in SITES if (CORPUS / site).is_dir()]


def corpus_cases() -> list:
    cases = []
    for site in corpus_sites():
        for kind in ("good", "bad"):
            for path in sorted((CORPUS / site / kind).glob("*.sbatch")):
                case = f"{kind}/{path.stem}"
                marks = []
                if (site, case) in KNOWN_DISAGREEMENTS:
                    reason = KNOWN_DISAGREEMENTS[(site, case)]
                    marks.append(pytest.mark.xfail(reason=reason, raises=Disagreement, strict=True))
                cases.append(pytest.param(site, path, id=f"{site}/{case}", marks=marks))
    return cases


def wait_for(job: str, env: dict[str, str], seconds: float) -> str:
    """``scontrol show job`` once the job has ended (or the time is up)."""
    deadline = time.monotonic() + seconds
    state = ""
    while time.monotonic() < deadline:
        state = subprocess.run(
            ["scontrol", "show", "job", job], env=env, capture_output=True, text=True
        ).stdout
        m = re.search(r"JobState=(\S+)", state)
        if m and m[1] in {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OOM"}:
            return state
        time.sleep(0.3)
    return state


def submit(script: Path, env: dict[str, str], *extra: str) -> str:
    r = subprocess.run(
        ["sbatch", "--parsable", *extra, str(script)],
        env=env,
        capture_output=True,
        text=True,
        cwd=script.parent,
        timeout=60,
    )
    assert r.returncode == 0, f"sbatch {script.name}: {r.stdout}{r.stderr}"
    return r.stdout.strip().split(";")[0]


# --------------------------------------------------------------------------- 1. examples
@pytest.mark.parametrize("site", SITES)
def test_site_has_slurm_examples(site):
    assert example_scripts(site), f"no Slurm job scripts (#SBATCH lines) in examples/{site}/"


@pytest.mark.parametrize(
    ("site", "path"),
    [pytest.param(site, p, id=f"{site}/{p.name}") for site in SITES for p in example_scripts(site)],
)
def test_example_passes_sbatch_test_only(site, path, slurm_env, tmp_path):
    # this cluster runs none of the site's SPANK plugins (Perlmutter's Shifter): their #SBATCH
    # options are commented out for sbatch, and the emulator judges them by the plugin's table
    text, plugin_options = strip_plugin_options(path.read_text(encoding="utf-8"), load_site(site))
    submitted = path
    if plugin_options:
        submitted = tmp_path / path.name
        submitted.write_text(text, encoding="utf-8")
        for other in path.parent.iterdir():  # what the script reads from its folder
            if other.is_file() and not (tmp_path / other.name).exists():
                (tmp_path / other.name).symlink_to(other)
    ok, out = real_verdict(submitted, slurm_env(site))
    shim_ok, shim_out = shim_submission_verdict(submitted, site)  # what sbatch was given
    assert ok, f"{path.relative_to(ROOT)} refused by Slurm: {out}\nemulator: {shim_out}"
    assert shim_ok, f"{path.relative_to(ROOT)}: Slurm accepts ({out}) but the emulator: {shim_out}"


# --------------------------------------------------------------------------- 2. corpus
@pytest.mark.parametrize(("site", "path"), corpus_cases())
def test_emulator_agrees_with_slurm(site, path, slurm_env):
    expected_ok = path.parent.name == "good"
    real_ok, real_out = real_verdict(path, slurm_env(site))
    shim_ok, shim_out = shim_verdict(path, site)
    word = {True: "accepts", False: "refuses"}
    summary = (
        f"{path.relative_to(ROOT)} (expected: {word[expected_ok]})\n"
        f"  Slurm {word[real_ok]}: {real_out}\n"
        f"  emulator {word[shim_ok]}: {shim_out}"
    )
    assert real_ok == expected_ok, (
        f"the corpus is wrong: Slurm disagrees with its folder:\n{summary}"
    )
    if real_ok != shim_ok:
        raise Disagreement(f"emulator and Slurm disagree:\n{summary}")


def test_corpus_covers_sites():
    assert len(corpus_sites()) >= 2, f"corpora for {corpus_sites()} only"
    for site in corpus_sites():
        for kind in ("good", "bad"):
            assert len(list((CORPUS / site / kind).glob("*.sbatch"))) >= 5, f"{site}/{kind}"


# Accounts judged by the generated job_submit.lua (the profile's regex, translated to Lua
# patterns) must be exactly those the profile accepts: hand-picked near misses for some sites,
# and for every site variations of its example account.
ACCOUNT_PROBES = {
    "bede": ["bdabc12", "bd12345", "bdabc1", "bdabc123", "BDabc12", "xbdabc12", "bd-abc1", "bd"],
    "archer2": ["t01", "t012", "t0123", "e123-abc", "e12-x9", "e12-", "E12", "ab1", "t1", "t01_x"],
}


def account_probe_job(profile) -> list[str]:
    """sbatch options for a job the site accepts apart from its account."""
    part = profile.default_partition or next(
        p for p in profile.partitions.values() if p.status == "current"
    )
    out = ["-p", part.name, "-t", "10"]
    if part.qos_required:
        out += ["-q", part.qos[0]]
    return out


def account_variations(example: str) -> list[str]:
    return [example + "x", "x" + example, example[:-1], example.swapcase(), example + "_1"]


@pytest.mark.parametrize("site", SITES)
def test_account_policy_matches_profile(site, slurm_env):
    profile = load_site(site)
    base = account_probe_job(profile)
    example = profile.account["example"]
    samples = [
        example,
        *profile.placeholders,
        *ACCOUNT_PROBES.get(site, []),
        *account_variations(example),
    ]
    wrong = []
    for account in samples:
        r = subprocess.run(
            ["sbatch", "--test-only", *base, "-A", account, "--wrap", "hostname"],
            env=slurm_env(site),
            capture_output=True,
            text=True,
            timeout=60,
        )
        if (r.returncode == 0) != profile.account_ok(account):
            wrong.append(
                f"{account!r}: profile ok={profile.account_ok(account)}, Slurm: {r.stderr}"
            )
    assert not wrong, "\n".join(wrong)


def binned_partitions() -> list:
    return [
        pytest.param(site, name, id=f"{site}:{name}")
        for site in SITES
        for name, part in load_site(site).partitions.items()
        if part.raw.get("walltime_by_nodes")
    ]


@pytest.mark.parametrize(("site", "partition"), binned_partitions())
def test_walltime_bins_hold_on_the_real_cluster(site, partition, slurm_env):
    """Walltime by job size (the generated job_submit.lua): the emulator and Slurm agree."""
    profile = load_site(site)
    part = profile.partitions[partition]
    base = ["-p", partition, "-A", profile.account["example"], "--wrap", "hostname"]
    if part.qos_required:
        base += ["-q", part.qos[0]]
    for b in part.raw["walltime_by_nodes"]:
        limit, _ = part.walltime_for(b["min_nodes"])
        for minutes, expected in ((limit // 60, True), (limit // 60 + 1, False)):
            if not expected and limit >= part.max_walltime_s:
                continue  # over the partition's own limit: another rule, tested elsewhere
            r = subprocess.run(
                ["sbatch", "--test-only", "-N", str(b["min_nodes"]), "-t", str(minutes), *base],
                env=slurm_env(site),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert (r.returncode == 0) == expected, (b, minutes, r.stdout + r.stderr)


# --------------------------------------------------------------------------- 3. real runs
@pytest.mark.parametrize("site", ["bede"])
def test_two_node_job_runs(site, slurm_env, tmp_path):
    """-N2 --ntasks-per-node=1 on the Bede-shaped cluster: one rank on each logical node."""
    env = slurm_env(site)
    script = tmp_path / "two-nodes.sbatch"
    script.write_text(
        "#!/bin/bash\n"
        "#SBATCH --account=bdXXXYY\n#SBATCH --partition=gpu\n"
        "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --gres=gpu:1\n"
        "#SBATCH --time=00:02:00\n#SBATCH --output=out-%j.txt\n"
        f"srun {sys.executable} -c 'import os; print("
        '"rank", os.environ["SLURM_PROCID"], "node", os.environ["SLURM_NODEID"], '
        '"gpus", os.environ.get("CUDA_VISIBLE_DEVICES"))'
        "'\n"
    )
    shim_ok, shim_out = shim_verdict(script, site)
    assert shim_ok, shim_out
    job = submit(script, env)
    state = wait_for(job, env, 60)
    out = tmp_path / f"out-{job}.txt"
    text = out.read_text() if out.is_file() else "(no output file)"
    assert "JobState=COMPLETED" in state, f"{state}\n{text}"
    lines = sorted(line.split() for line in text.splitlines() if line.startswith("rank"))
    assert lines == [
        ["rank", "0", "node", "0", "gpus", "0"],
        ["rank", "1", "node", "1", "gpus", "0"],
    ], text


# Examples that run for real, scaled down: (site, script, trainer, extra sbatch options, ranks).
# Each costs 20-30 s on two cores: the Bede multi-node one (srun ranks on two logical nodes that
# meet at MASTER_ADDR, a node name) and the ARCHER2 single-node one (torchrun, 4 workers). The
# Bede single-node torchrun example runs through the emulator (tests/test_examples_bede.py).
REAL_RUNS = [
    (
        "bede",
        "pytorch-ddp-multinode.sbatch",
        "pytorch/train_resnet.py",
        ["--time=00:10:00", "--ntasks-per-node=1", "--cpus-per-task=4"],
        2,
    ),
    ("archer2", "pytorch-ddp-gpu.slurm", "pytorch/train_resnet.py", ["--time=00:10:00"], 4),
    # Perlmutter's: -C gpu picks the GPU nodes by feature (the job names no partition) and
    # --qos=regular takes it out of the default debug QoS
    (
        "perlmutter",
        "pytorch-ddp-1node.sbatch",
        "pytorch/train_resnet.py",
        ["--time=00:10:00", "--ntasks-per-node=2", "--cpus-per-task=1"],
        2,
    ),
]


@pytest.mark.parametrize(
    ("site", "script", "trainer", "extra", "ranks"),
    [pytest.param(*r, id=f"{r[0]}/{r[1]}") for r in REAL_RUNS],
)
def test_example_runs_for_real(site, script, trainer, extra, ranks, slurm_env, tmp_path):
    """The job scripts users copy run under the real Slurm, with TRAIN_TINY=1 payloads."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("PyTorch is not installed in this environment (nox -s slurm provides it)")
    from clusterkit.runs import shimdir, trainlog
    from clusterkit.runs.programs import copy_program
    from clusterkit.sites.lmod import ensure_modulefiles

    env = slurm_env(site)
    shutil.copy(ROOT / "examples" / site / script, tmp_path)
    copy_program(ROOT / "examples" / trainer, tmp_path)
    run_env = dict(
        env,
        TRAIN_TINY="1",
        OMP_NUM_THREADS="1",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
        CONDA_ROOT=str(shimdir.conda_root(shimdir.ensure())),
        BASH_ENV="/usr/share/lmod/lmod/init/bash",
        MODULEPATH=str(ensure_modulefiles(load_site(site))),
    )
    job = submit(tmp_path / script, run_env, *extra)
    state = wait_for(job, env, 240)
    outs = sorted(tmp_path.glob("*.out"))
    out = outs[-1].read_text() if outs else "(no output file)"
    assert "JobState=COMPLETED" in state, f"{script}: {state}\n{out}"
    seen = {rec.fields["rank"] for rec in trainlog.parse(out) if rec.kind == "train"}
    assert seen == set(range(ranks)), f"{script}:\n{out}"


@pytest.mark.parametrize("site", SITES)
def test_profile_refresh_reads_the_live_cluster_back(site, slurm_env, tmp_path):
    """What site staff run on a login node (clusterkit.sites.refresh), here against the running
    cluster made from the profile: it must read back the partitions, limits and node shapes the
    profile holds -- only what a one-machine test cluster leaves out may differ."""
    from clusterkit.sites import refresh

    env = slurm_env(site)

    def scontrol(*words: str) -> str:
        r = subprocess.run(["scontrol", *words], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r.stdout

    live = refresh.read_live(scontrol("show", "partition", "-o"), scontrol("show", "node", "-o"))
    assert set(live.partitions) == {
        name for name, p in load_site(site).partitions.items() if p.status != "removed"
    }
    changes, diff, _ = refresh.refresh(site, live, tmp_path)
    allowed = {
        ("partitions", "nodes"),
        ("partitions", "default_walltime"),
        ("node_types", "count"),
        ("node_types", "arch"),  # every slurmd here reports this machine's architecture
    }
    if any(nt.usable_cores < nt.cores for nt in load_site(site).node_types.values()):
        # the test cluster leaves the cores a site keeps for itself out of its nodes
        allowed |= {("node_types", "sockets"), ("node_types", "cores_per_socket")}
    assert {(c.section, c.field) for c in changes} <= allowed, diff.read_text()


@pytest.mark.parametrize("site", SITES)
def test_reframe_job_scripts_pass_sbatch_test_only(site, slurm_env, tmp_path):
    """The job scripts ReFrame writes for every check on the site (reframe --dry-run with a
    configuration generated from the profile) are accepted by the real Slurm, as the examples
    are. tests/test_reframe.py holds the same scripts to the emulator."""
    if shutil.which("reframe", path=os.path.dirname(sys.executable)) is None:
        pytest.fail("reframe is not installed beside this interpreter (requirements/ml.txt)")
    from clusterkit.reframe import config as reframe_config
    from clusterkit.sites.lmod import write_modulefiles
    from tests.test_reframe import LMOD_CMD, dry_run

    profile = load_site(site)
    modules = tmp_path / "modulefiles"
    write_modulefiles(profile, modules)
    env = dict(
        os.environ,
        CLUSTERKIT_REFRAME=os.path.join(os.path.dirname(sys.executable), "reframe"),
        LMOD_CMD=str(LMOD_CMD),
        PYTHONPATH=str(ROOT),
        CLUSTERKIT_TEST_MODULE_ROOT=str(modules),
    )
    config = reframe_config.write_config(tmp_path / "config", [profile])
    proc, scripts = dry_run(env, config, site, tmp_path / "run")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert scripts, "reframe --dry-run wrote no job script"
    refused = {}
    for script in scripts:
        ok, words = real_verdict(script, slurm_env(site))
        if not ok:
            refused[str(script.relative_to(tmp_path))] = words
    assert not refused, refused
