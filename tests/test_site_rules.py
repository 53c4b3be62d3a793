"""Profile features a site may use and every tool must honour: walltime limits by job size,
core specialization, the CPU/GPU affinity map, environment set by modules, whole-machine plans,
the network a node type reaches other nodes by.

Each is checked where it acts: the profile's consistency checks (file, line and rule), the
emulator's verdict, the generated Slurm policy and modulefiles, the rendered tables.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from clusterkit.emulate.sbatch import check_slurm_script
from clusterkit.pages.sphinxext import facts_rows
from clusterkit.runs import slurmconf
from clusterkit.sites import lmod
from clusterkit.sites.errors import ProfileError
from clusterkit.sites.profiles import all_sites, load_profile, load_site

ROOT = Path(__file__).resolve().parent.parent


def binned() -> list:
    """(site, partition) pairs whose partition has walltime size bins."""
    out = []
    for site in all_sites():
        for part in site.partitions.values():
            if part.raw.get("walltime_by_nodes") and site.scheduler == "slurm":
                out.append(pytest.param(site.name, part.name, id=f"{site.name}:{part.name}"))
    return out


def mapped() -> list:
    return [
        pytest.param(s.name, id=s.name)
        for s in all_sites()
        if any(nt.raw.get("cpu_gpu_map") for nt in s.node_types.values())
    ]


def _job(tmp_path: Path, site, part: str, nodes: int, time_s: int, extra: str = "") -> Path:
    script = tmp_path / "job.sbatch"
    acct = site.account.get("option", "-A")
    sep = "=" if acct.startswith("--") else " "
    qos = ""
    if site.partitions[part].qos_required:
        qos = f"#SBATCH --qos={site.partitions[part].qos[0]}\n"
    script.write_text(
        "#!/bin/bash\n"
        f"#SBATCH {acct}{sep}{site.account['example']}\n"
        f"#SBATCH --partition={part}\n#SBATCH --nodes={nodes}\n"
        f"#SBATCH --time={time_s // 60}\n{qos}{extra}"
        "hostname\n"
    )
    return script


def test_some_profile_uses_each_feature():
    assert binned(), "no partition with walltime_by_nodes: the tests below would test nothing"
    assert mapped(), "no node type with a cpu_gpu_map"


# --------------------------------------------------------------------------- size bins
@pytest.mark.parametrize(("site_name", "part"), binned())
def test_each_bin_limit_is_enforced_by_the_emulator(site_name, part, tmp_path):
    site = load_site(site_name)
    for b in site.partitions[part].raw["walltime_by_nodes"]:
        limit, _ = site.partitions[part].walltime_for(b["min_nodes"])
        ok = check_slurm_script(_job(tmp_path, site, part, b["min_nodes"], limit), site)
        assert not ok.errors, ok.errors
        if limit < site.partitions[part].max_walltime_s:
            over = check_slurm_script(_job(tmp_path, site, part, b["max_nodes"], limit + 60), site)
            assert [f.rule for f in over.errors] == ["time-limit"], over.errors
            assert f"{b['min_nodes']}-{b['max_nodes']} nodes" in over.errors[0].message


@pytest.mark.parametrize(("site_name", "part"), binned())
def test_bins_reach_the_generated_slurm_policy(site_name, part):
    site = load_site(site_name)
    lua = slurmconf.job_submit_lua(site)
    for b in site.partitions[part].raw["walltime_by_nodes"]:
        minutes = slurmconf._minutes(b["max_walltime"])
        assert f"{{{b['min_nodes']}, {b['max_nodes']}, {minutes}}}" in lua


@pytest.mark.parametrize(("site_name", "part"), binned())
def test_partition_table_shows_the_bins(site_name, part):
    site = load_site(site_name)
    _, rows = facts_rows(site, "partitions")
    notes = next(r[-1] for r in rows if r[0] == part)
    first = site.partitions[part].raw["walltime_by_nodes"][0]
    assert f"{first['min_nodes']}-{first['max_nodes']} nodes {first['max_walltime']}" in notes


def _edited(tmp_path: Path, name: str, edit) -> Path:
    data = yaml.safe_load((ROOT / "sites" / f"{name}.yaml").read_text())
    edit(data)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(("site_name", "part"), binned())
def test_overlapping_or_too_long_bins_are_findings(site_name, part, tmp_path):
    def overlap(d):
        bins = d["partitions"][part]["walltime_by_nodes"]
        bins.append(dict(bins[0]))

    def too_long(d):
        d["partitions"][part]["walltime_by_nodes"][0]["max_walltime"] = "99-00:00:00"

    for edit in (overlap, too_long):
        path = _edited(tmp_path, site_name, edit)
        with pytest.raises(ProfileError) as exc:
            load_profile(path)
        finding = exc.value.findings[0]
        assert finding.rule == "walltime-bins" and finding.line > 1, exc.value


# --------------------------------------------------------------------------- affinity map
@pytest.mark.parametrize("site_name", mapped())
def test_affinity_table_lists_every_group(site_name):
    site = load_site(site_name)
    _, rows = facts_rows(site, "affinity")
    groups = [g for nt in site.node_types.values() for g in nt.raw.get("cpu_gpu_map", ())]
    assert len(rows) == len(groups)
    for nt in site.node_types.values():
        if nt.raw.get("cpu_gpu_map"):
            gpus = {i for g in nt.raw["cpu_gpu_map"] for i in g["gpus"]}
            assert gpus == set(range(nt.gpus)), "every GPU of the node appears in its map"


@pytest.mark.parametrize("site_name", mapped())
def test_a_map_naming_a_missing_gpu_is_a_finding(site_name, tmp_path):
    def bad(d):
        nt = next(n for n in d["node_types"].values() if n.get("cpu_gpu_map"))
        nt["cpu_gpu_map"][0]["gpus"] = [nt["gpus"]["count"]]

    path = _edited(tmp_path, site_name, bad)
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    assert exc.value.findings[0].rule == "cpu-gpu-map"


# --------------------------------------------------------------------------- core specialization
def test_core_spec_zero_gives_the_reserved_cores_back(tmp_path):
    """-S N leaves N cores per node to the system: with -S 0 a job may use every core."""
    sites = list(all_sites())
    site = next(
        s
        for s in sites
        if s.scheduler == "slurm"
        and any(p.node_type.usable_cores < p.node_type.cores for p in s.partitions.values())
    )
    part = next(p for p in site.partitions.values() if p.node_type.usable_cores < p.node_type.cores)
    nt = part.node_type
    tasks = f"#SBATCH --ntasks-per-node={nt.cores}\n#SBATCH --cpus-per-task={nt.threads_per_core}\n"
    default = check_slurm_script(_job(tmp_path, site, part.name, 1, 600, tasks), site)
    assert [f.rule for f in default.errors] == ["cpus-per-node"], default.errors
    spec0 = _job(tmp_path, site, part.name, 1, 600, tasks + "#SBATCH -S 0\n")
    spec0 = check_slurm_script(spec0, site)
    assert not spec0.errors, spec0.errors


# --------------------------------------------------------------------------- modules' environment
def test_modulefiles_set_what_the_profile_says():
    seen = 0
    for site in all_sites():
        for mod in site.modules:
            text = lmod.modulefile(site, mod)
            for item in mod.raw.get("sets", ()):
                name, eq, value = item.partition("=")
                # a value in quotes, or (a node-local path such as LOCALDIR) one worked out
                # when the module loads
                assert f'setenv("{name}", ' in text
                if eq:
                    assert f'setenv("{name}", "{value}")' in text
                seen += 1
    assert seen, "no profile declares what a module sets"


# --------------------------------------------------------------------------- large jobs
def test_a_whole_machine_plan_is_counts_not_lists(tmp_path):
    """The largest job a profile allows is planned in counts (benchmarks/bench_jobcheck.py shows
    how long it takes); no rank is listed unless asked for."""
    site, part = max(
        (
            (s, part)
            for s in all_sites()
            for part in s.partitions.values()
            if s.scheduler == "slurm" and part.node_type.gpus
        ),
        key=lambda sp: sp[1].max_nodes or sp[1].size or 0,
    )
    nodes = part.max_nodes or part.size
    script = _job(tmp_path, site, part.name, nodes, 600)
    gpus = part.node_type.gpus
    text = script.read_text().replace("hostname\n", f"srun --ntasks-per-node={gpus} hostname\n")
    script.write_text(text)
    report = check_slurm_script(script, site)
    step = report.plan["steps"][0]
    assert step["ntasks"] == nodes * gpus
    assert not step.get("ranks")


# --------------------------------------------------------------------------- site names
def test_every_site_gets_substitutions_pages_can_use():
    """conf.py turns each profile into {{ site_... }} names: valid Jinja names for every site,
    hyphenated site names included."""
    import importlib.util
    import re

    spec = importlib.util.spec_from_file_location("sphinx_conf", ROOT / "conf.py")
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    keys = conf.myst_substitutions
    assert all(re.fullmatch(r"[A-Za-z_]\w*", k) for k in keys), [k for k in keys if "-" in k]
    for site in all_sites():
        assert keys[f"{site.name.replace('-', '_')}_title"] == site.title


def test_a_node_types_network_reaches_pages_and_the_nodes_table():
    """A node type's ``network`` becomes ``{{ site_partition_network }}`` and a column of the
    nodes table; a site that records none gets no column."""
    from clusterkit.sites.substitutions import site_substitutions

    bede = load_site("bede")
    gh = bede.partitions["gh"].node_type.raw["network"]
    assert "ConnectX-7" in gh and site_substitutions()["bede_gh_network"] == gh
    headers, rows = facts_rows(bede, "nodes")
    assert headers[-1] == "Network"
    assert {row[0]: row[-1] for row in rows}["grace-hopper"] == gh
    archer2 = load_site("archer2")
    assert not any(nt.raw.get("network") for nt in archer2.node_types.values())
    assert "Network" not in facts_rows(archer2, "nodes")[0]
    keys = site_substitutions()
    assert not any(k.startswith("archer2_") and k.endswith("_network") for k in keys)


def test_a_closed_site_s_banner_says_it_ended_and_links_where_to_go(monkeypatch):
    """The status banner of a site whose service has ended says so in the past tense once the
    date has passed, and links the page on moving on; a site in service gets no such link."""
    import datetime

    from clusterkit.pages import sphinxext

    archer2 = load_site("archer2")
    assert archer2.status in sphinxext.MOVED_ON
    when = archer2.data["lifecycle"]["retired"]

    class Day(datetime.date):
        today_is = "2026-11-27"

        @classmethod
        def today(cls):
            return datetime.date.fromisoformat(cls.today_is)

    monkeypatch.setattr(sphinxext, "date", Day)
    assert f"service ended on {when}." in sphinxext.status_text(archer2)[1]
    Day.today_is = "2026-01-01"
    assert f"service is scheduled to end on {when}." in sphinxext.status_text(archer2)[1]
    assert load_site("frontier").status not in sphinxext.MOVED_ON
    docs = Path(__file__).resolve().parents[1] / "docs"
    assert (docs / (sphinxext.MOVE_ON_PAGE.lstrip("/") + ".md")).is_file()
