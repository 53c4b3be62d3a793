"""Site profiles: every profile is valid, and a broken one is reported with file, line and rule."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from clusterkit.sites.errors import ProfileError
from clusterkit.sites.profiles import (
    all_sites,
    duration_seconds,
    load_profile,
    load_site,
    profile_paths,
)

ROOT = Path(__file__).resolve().parent.parent
SITES = [p.stem for p in profile_paths()]


def test_the_sites_have_profiles():
    assert {"bede", "summit", "archer2", "frontier", "isambard-ai"} <= set(SITES)


@pytest.mark.parametrize("name", SITES)
def test_profile_is_valid(name):
    site = load_site(name)
    assert site.partitions, "a site needs partitions"
    for part in site.partitions.values():
        # no limit of its own only where the site gives its limits per QoS; or none is known
        unknown = part.max_walltime_unknown is not None
        assert unknown or (part.max_walltime_s is None and site.qos) or part.max_walltime_s > 0


def test_lifecycles_match_the_sites_history():
    assert load_site("summit").data["lifecycle"]["retired"] == "2024-11-15"
    assert load_site("summit").status == "retired"
    assert load_site("archer2").status in {"end-of-service", "retired"}
    assert load_site("bede").is_current
    arches = {nt.arch for nt in load_site("bede").node_types.values()}
    assert {"ppc64le", "aarch64"} <= arches, "Bede has POWER9 and Grace-Hopper nodes"
    assert load_site("summit").data["lifecycle"]["successor"].startswith("Frontier")
    assert load_site("frontier").is_current and load_site("isambard-ai").is_current


def test_where_summit_and_archer2_users_went_has_the_nodes_their_docs_describe():
    """Frontier: one 64-core EPYC, 8 of whose cores the system keeps, and four MI250X seen as
    eight GPUs; Isambard-AI: four GH200 superchips of 72 Arm cores and one H100 each."""
    fr = load_site("frontier").partitions["batch"].node_type
    assert (fr.arch, fr.sockets, fr.cores, fr.usable_cores) == ("x86_64", 1, 64, 56)
    assert (fr.gpus, fr.gpu_vendor) == (8, "amd")
    ia = load_site("isambard-ai").partitions["workq"].node_type
    assert (ia.arch, ia.sockets, ia.cores_per_socket, ia.threads_per_core) == ("aarch64", 4, 72, 1)
    assert (ia.gpus, ia.gpu_vendor) == (4, "nvidia")
    assert {load_site(s).scheduler for s in ("frontier", "isambard-ai")} == {"slurm"}


def _copy(tmp_path: Path, name: str, edit) -> Path:
    src = ROOT / "sites" / f"{name}.yaml"
    dst = tmp_path / f"{name}.yaml"
    shutil.copy(src, dst)
    text = dst.read_text()
    dst.write_text(edit(text))
    return dst


def _line_of(path: Path, needle: str, after: str = "") -> int:
    """The first line holding ``needle`` (below the first line holding ``after``)."""
    lines = path.read_text().splitlines()
    start = next(i for i, raw in enumerate(lines) if after in raw) if after else 0
    return next(i for i, raw in enumerate(lines[start:], start + 1) if needle in raw)


def test_unknown_node_type_is_reported_with_its_line(tmp_path):
    site = load_site("bede")
    part = next(iter(site.partitions.values()))
    old = f"node_type: {part.raw['node_type']}"
    path = _copy(tmp_path, "bede", lambda t: t.replace(old, "node_type: nosuch", 1))
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    finding = exc.value.findings[0]
    assert finding.rule == "partition-node-type"
    assert finding.line == _line_of(path, "node_type: nosuch")
    assert f"{path.name}:{finding.line}: [partition-node-type]" in str(exc.value)


def test_schema_errors_name_the_line(tmp_path):
    path = _copy(
        tmp_path,
        "bede",
        lambda t: re.sub(
            r"max_walltime: ['\"]?[^\n'\"]+['\"]?", "max_walltime: two days", t, count=1
        ),
    )
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    f = exc.value.findings[0]
    assert f.rule == "schema:pattern"
    assert f.line == _line_of(path, "max_walltime: two days")


def test_unknown_keys_are_refused(tmp_path):
    path = _copy(tmp_path, "archer2", lambda t: t + "\nfavourite_colour: blue\n")
    with pytest.raises(ProfileError, match="additionalProperties"):
        load_profile(path)


def test_removed_module_needs_a_replacement(tmp_path):
    data = yaml.safe_load((ROOT / "sites" / "bede.yaml").read_text())
    data["modules"].append({"name": "oldthing", "version": "1.0", "status": "removed"})
    path = tmp_path / "bede.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    assert exc.value.findings[0].rule == "module-replacement"


def test_yaml_syntax_error_is_a_finding_not_a_traceback(tmp_path):
    path = tmp_path / "bede.yaml"
    path.write_text("name: bede\npartitions: [unclosed\n")
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    assert exc.value.findings[0].rule == "yaml-syntax"


def test_cli_validates_and_reports(tmp_path):
    ok = subprocess.run(
        ["python", "-m", "clusterkit", "profiles"], capture_output=True, text=True, cwd=ROOT
    )
    assert ok.returncode == 0, ok.stderr
    bad = tmp_path / "bede.yaml"
    bad.write_text("name: bede\n")
    r = subprocess.run(
        ["python", "-m", "clusterkit", "profiles", str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 1
    assert "[schema:required]" in r.stderr and "Traceback" not in r.stderr


def test_durations():
    assert duration_seconds("2-00:00:00") == 172800
    assert duration_seconds("00:20") == 1200
    with pytest.raises(ValueError):
        duration_seconds("forever")


def test_every_module_resolves_by_its_full_name():
    for site in all_sites():
        for mod in site.modules:
            found, _ = site.find_module(mod.full_name)
            assert found == mod


# --------------------------------------------------------------------------- software stacks
def _with_stack(tmp_path: Path, site: str, name: str, edit) -> Path:
    """A copy of a profile whose stack ``name`` has been changed by ``edit(stack)``."""
    data = yaml.safe_load((ROOT / "sites" / f"{site}.yaml").read_text())
    edit(data["stacks"][name])
    path = tmp_path / f"{site}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _rules(path: Path) -> list[str]:
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    return [f.rule for f in exc.value.findings]


@pytest.mark.parametrize("name", SITES)
def test_every_site_lists_stacks_with_sources(name):
    site = load_site(name)
    assert site.stacks, f"{name} lists no software stacks"
    for stack in site.stacks.values():
        assert stack.raw["sources"] and stack.frameworks
        arches = {site.node_types[nt].arch for nt in stack.raw["node_types"]}
        assert len(arches) == 1


def test_stacks_carry_the_versions_the_sources_give():
    bede = load_site("bede").stacks
    assert bede["opence-1.11-pytorch"].frameworks["torch"] == "2.1.2"
    assert bede["opence-1.11-tensorflow"].frameworks["keras"].startswith("2.14")
    assert bede["opence-1.11-tensorflow"].install["channels"] == [
        "https://ftp.osuosl.org/pub/open-ce/current/"
    ]
    assert bede["gh200-pip-cu124-pytorch"].python == "3.9"
    assert bede["gh200-pip-cu124-pytorch"].accelerator == "cuda 12.4"
    archer2 = load_site("archer2").stacks
    assert archer2["tensorflow-2.13.0-cpu"].frameworks["keras"].startswith("2.")
    assert archer2["pytorch-2.9.1-gpu"].accelerator == "rocm 6.3"
    assert all(s.status == "historical" for s in load_site("summit").stacks.values())


def test_a_stack_on_a_node_type_the_site_lacks_is_refused(tmp_path):
    path = _with_stack(
        tmp_path, "bede", "opence-1.11-pytorch", lambda s: s.update(node_types=["nosuch"])
    )
    assert "stack-node-type" in _rules(path)


def test_one_stack_cannot_span_two_architectures(tmp_path):
    path = _with_stack(
        tmp_path,
        "bede",
        "opence-1.11-pytorch",
        lambda s: s.update(node_types=["power9-v100", "grace-hopper"]),
    )
    assert _rules(path) == ["stack-arch"]


def test_a_gpu_build_gives_its_toolkit_version_or_says_why_not(tmp_path):
    def drop(stack):
        stack["accelerator"] = {"kind": "cuda"}

    assert _rules(_with_stack(tmp_path, "bede", "gh200-pip-cu124-pytorch", drop)) == [
        "stack-accelerator"
    ]

    def both(stack):
        stack["accelerator"] = {"kind": "cuda", "version": "12.4", "unknown": "not said anywhere"}

    assert _rules(_with_stack(tmp_path, "bede", "gh200-pip-cu124-pytorch", both)) == [
        "stack-accelerator"
    ]


def test_a_module_stack_names_a_module_of_the_profile_built_for_its_nodes(tmp_path):
    def rename(stack):
        stack["install"] = {"module": {"name": "tensorflow/9.9.9"}}

    assert _rules(_with_stack(tmp_path, "archer2", "tensorflow-2.13.0-cpu", rename)) == [
        "stack-module"
    ]

    def to_gpu(stack):
        stack["node_types"] = ["epyc7543p-4mi210"]

    assert _rules(_with_stack(tmp_path, "archer2", "tensorflow-2.13.0-cpu", to_gpu)) == [
        "stack-module"
    ]


def test_a_retired_site_has_no_current_stack(tmp_path):
    path = _with_stack(
        tmp_path, "summit", "open-ce-1.10.0-py39", lambda s: s.update(status="current")
    )
    assert _rules(path) == ["stack-status"]


def test_a_site_out_of_service_says_since_when():
    """One sentence for every place that leaves a closed site's scripts and stacks untested."""
    assert load_site("archer2").out_of_service == "ARCHER2 is end of service (since 2026-11-21)"
    assert load_site("summit").out_of_service == "Summit is retired (since 2024-11-15)"
    assert load_site("frontier").out_of_service is None


def test_a_version_pypi_lacks_needs_a_ci_route(tmp_path):
    path = _with_stack(tmp_path, "bede", "ngc-pytorch-24.09", lambda s: s.pop("ci"))
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    (finding,) = exc.value.findings
    assert finding.rule == "stack-ci" and "2.5.0a0+b465a5843b" in finding.message
    assert finding.line == _line_of(path, "frameworks:", after="ngc-pytorch-24.09:")


def test_stack_schema_errors_name_the_line(tmp_path):
    path = _with_stack(
        tmp_path,
        "bede",
        "opence-1.11-pytorch",
        lambda s: s["install"].update(pip={"packages": ["torch"]}),
    )
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    f = exc.value.findings[0]
    assert f.rule == "schema:maxProperties" and "stacks.opence-1.11-pytorch.install" in f.message
    assert f.line == _line_of(path, "install:", after="opence-1.11-pytorch:")


def test_a_profile_without_stacks_is_refused(tmp_path):
    data = yaml.safe_load((ROOT / "sites" / "bede.yaml").read_text())
    del data["stacks"]
    path = tmp_path / "bede.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ProfileError, match="'stacks' is a required property"):
        load_profile(path)


def test_a_current_stack_cannot_rest_on_a_removed_module(tmp_path):
    data = yaml.safe_load((ROOT / "sites" / "archer2.yaml").read_text())
    mod = next(m for m in data["modules"] if m["name"] == "tensorflow" and m["version"] == "2.13.0")
    mod.update(status="removed", replacement="tensorflow/2.12.0")
    path = tmp_path / "archer2.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert _rules(path) == ["stack-module"]
    data["stacks"]["tensorflow-2.13.0-cpu"]["status"] = "historical"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert load_profile(path).stacks["tensorflow-2.13.0-cpu"].status == "historical"


def test_ci_requirements_follow_the_stack_or_its_ci_route():
    bede, archer2 = load_site("bede").stacks, load_site("archer2").stacks
    assert bede["opence-1.11-tensorflow"].ci_pip == [
        "tensorflow-cpu==2.14.1",
        "keras==2.14.0",
        "numpy==1.26.*",
    ]
    assert archer2["tensorflow-2.13.0-cpu"].ci_pip == ["tensorflow-cpu==2.13.0", "keras==2.13.1"]
    assert archer2["pytorch-2.9.1a0-cpu"].ci_pip == ["torch==2.9.1", "torchvision==0.24.1"]
    skipped = load_site("summit").stacks["open-ce-1.1.3-py38"]
    assert skipped.ci_pip is None and "torch 1.7.1" in skipped.ci_skip


# --------------------------------------------------------------------------- unknown facts
WHY_WALL = "not in the site's docs (queue policy page read 2026-11-28)"
WHY_PYTHON = "the module page names no interpreter (read 2026-11-28)"


def _unknowns(tmp_path: Path) -> Path:
    """Isambard-AI's profile with its partition's max_walltime, a node type's memory and a
    stack's Python written as unknown."""

    def edit(text: str) -> str:
        text = text.replace(
            'max_walltime: "24:00:00"\n    default: true',
            f'max_walltime: {{unknown: "{WHY_WALL}"}}\n    default: true',
            1,
        )
        text = re.sub(
            r"(\n    memory_gb:) [\d.]+", r'\1 {unknown: "no figure in the docs"}', text, count=1
        )
        return text.replace('python: "3.12"', f'python: {{unknown: "{WHY_PYTHON}"}}', 1)

    path = _copy(tmp_path, "isambard-ai", edit)
    before = (ROOT / "sites" / "isambard-ai.yaml").read_text().count("unknown:")
    assert path.read_text().count("unknown:") == before + 3
    return path


def test_a_fact_no_source_gives_is_written_unknown_and_validates(tmp_path):
    site = load_profile(_unknowns(tmp_path))
    part = site.partitions["workq"]
    assert part.max_walltime_s is None and part.max_walltime_unknown == WHY_WALL
    assert part.max_walltime == "not documented"
    assert part.walltime_for(1) == (None, f"the workq partition's limit is unknown ({WHY_WALL})")
    assert part.node_type.memory_gb is None and part.node_type.memory_text == "not documented"
    stack = site.stacks["pytorch-pip"]
    assert stack.python is None and stack.python_unknown == WHY_PYTHON
    assert stack.python_text == "not documented"


def test_an_unknown_needs_its_reason(tmp_path):
    path = _copy(
        tmp_path,
        "isambard-ai",
        lambda t: t.replace(
            'max_walltime: "24:00:00"\n    default', 'max_walltime: {unknown: ""}\n    default', 1
        ),
    )
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    (f,) = exc.value.findings
    assert f.rule == "schema:minLength" and "partitions.workq.max_walltime.unknown" in f.message
    assert f.line == _line_of(path, "max_walltime: {unknown")


def test_a_job_against_an_unknown_fact_is_not_checked_and_says_so(tmp_path):
    from clusterkit.emulate.checkjob import check_job_file

    site = load_profile(_unknowns(tmp_path))
    script = tmp_path / "job.sbatch"
    script.write_text(
        "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --gpus-per-node=4\n#SBATCH --time=99:00:00\n"
        "#SBATCH --mem=100000G\nset -euo pipefail\nsrun hostname\n"
    )
    report = check_job_file(script, site)
    assert not report.errors, [str(f) for f in report.errors]
    notes = {(f.line, f.message) for f in report.findings if f.rule == "fact-unknown"}
    assert notes == {
        (4, f"not checked: Isambard-AI partition workq's max_walltime is unknown ({WHY_WALL})"),
        (
            5,
            "not checked: Isambard-AI node type gh200x4's memory_gb is unknown "
            "(no figure in the docs)",
        ),
    }
    assert all(f.level == "warning" for f in report.findings if f.rule == "fact-unknown")


def test_pages_and_the_test_cluster_read_an_unknown_as_not_documented(tmp_path):
    from clusterkit.pages.sphinxext import facts_rows
    from clusterkit.runs.slurmconf import generate

    site = load_profile(_unknowns(tmp_path))
    _, parts = facts_rows(site, "partitions")
    assert parts[0][:3] == ["workq", "gh200x4", "not documented"]
    headers, stacks = facts_rows(site, "stacks")
    assert stacks[0][headers.index("Python")] == "not documented"
    _, nodes = facts_rows(site, "nodes")
    assert "not documented" in nodes[0]
    conf = generate(site, state=tmp_path / "state", port_base=17000)["slurm.conf"]
    assert re.search(r"^PartitionName=workq .*MaxTime=UNLIMITED", conf, re.M), conf
    assert f"# workq's max_walltime is unknown ({WHY_WALL})" in conf


def test_an_install_for_a_stack_of_unknown_python_is_not_resolved(tmp_path):
    from clusterkit.commands.install_target import _target

    site = load_profile(_unknowns(tmp_path))
    stack = site.stacks["pytorch-pip"]
    node = site.node_types["gh200x4"]
    target = _target(site, node, stack.python or "", f"stack {stack.key}")
    assert target.python == "" and "Python unknown" in target.what


# --------------------------------------------------------------------------- broken profiles
def _sites_with_a_half_written_one(tmp_path: Path) -> Path:
    """The project's profiles, the scaffold's skeleton beside them (every fact a marker) and a
    profile with a schema error."""
    from clusterkit.pages import scaffold

    sites = tmp_path / "sites"
    shutil.copytree(ROOT / "sites", sites)
    (sites / "halfway.yaml").write_text(scaffold.PROFILE.format(name="halfway", title="Halfway"))
    broken = (sites / "cirrus.yaml").read_text().replace("name: cirrus", "name: wrongname", 1)
    (sites / "renamed.yaml").write_text(broken.replace("sockets: 2", "sockets: two", 1))
    return sites


def _run(sites: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLUSTERKIT_")}
    env["CLUSTERKIT_SITES_DIR"] = str(sites)
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600
    )


@pytest.mark.slow
def test_a_half_written_profile_stops_only_its_own_site(tmp_path):
    sites = _sites_with_a_half_written_one(tmp_path)
    for site, script in (
        ("frontier", "frontier/pytorch-ddp-1node.sbatch"),
        ("generic", "bede/pytorch-ddp-1node.sbatch"),
    ):
        r = _run(sites, "-m", "clusterkit", "check-job", "--site", site, f"examples/{script}")
        assert r.returncode == 0 and "halfway" not in r.stderr + r.stdout, r.stderr
    own = _run(
        sites,
        "-m",
        "clusterkit",
        "check-job",
        "--site",
        "halfway",
        "examples/frontier/pytorch-ddp-1node.sbatch",
    )
    assert own.returncode == 1 and "Traceback" not in own.stderr
    (line,) = own.stderr.splitlines()
    assert re.match(r"^\S*halfway\.yaml:\d+: \[fill-in\] \d+ fill-in marker\(s\) left", line)

    checks = ["profiles", "jobs", "inventories", "stacks", "site-pages"]
    only = [f"--only={c}" for c in checks]
    fast = _run(sites, "-m", "clusterkit.pages.fast", *only)
    assert fast.returncode == 1 and "Traceback" not in fast.stderr
    assert "skipped" not in fast.stdout
    # every other check ran, and found what it finds without the two profiles
    before = _run(ROOT / "sites", "-m", "clusterkit.pages.fast", *only)
    for check in checks[1:]:
        line = re.compile(rf"^{check} +(ok|\d+ error\(s\)) ", re.M)
        assert line.search(fast.stdout)[1] == line.search(before.stdout)[1], fast.stdout
    errors = {ln for ln in fast.stderr.splitlines() if "warning:" not in ln}
    assert {e for e in errors if "halfway" not in e and "renamed" not in e} == {
        ln for ln in before.stderr.splitlines() if "warning:" not in ln
    }
    assert re.search(r"^profiles .*halfway, renamed not loaded", fast.stdout, re.M), fast.stdout
    assert "halfway.yaml: [fill-in] not validated while it holds fill-in markers" in fast.stderr
    assert "renamed.yaml:" in fast.stderr and "[schema:type]" in fast.stderr
    assert fast.stdout.splitlines()[-1].endswith("the profile of halfway, renamed does not load"), (
        fast.stdout
    )

    plan = _run(sites, "-m", "clusterkit.pages.affected", "HEAD", "--json")
    assert plan.returncode == 0 and "Traceback" not in plan.stderr, plan.stderr
