"""Profiles say what they know: each lists the placeholders its site's docs print (accepted
wherever a value is expected) and whether its module inventory is complete or partial (an
unlisted module is an error, or a warning that names the refresh command)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from clusterkit.emulate.lsf import check_lsf_script
from clusterkit.emulate.modules import check_module
from clusterkit.emulate.sbatch import check_slurm_script
from clusterkit.sites.errors import ProfileError
from clusterkit.sites.profiles import SITES_DIR, Site, all_sites, load_profile, load_site

ARCHER2, BEDE, SUMMIT = (load_site(s) for s in ("archer2", "bede", "summit"))


def test_archer2_scripts_as_its_docs_print_them():
    """The user guide's own job script, with its budget placeholder and an unfilled bound."""
    text = (
        "#!/bin/bash\n#SBATCH --job-name=Example_MPI_Job\n#SBATCH --time=0:20:0\n"
        "#SBATCH --nodes=4\n#SBATCH --ntasks-per-node=128\n#SBATCH --cpus-per-task=1\n"
        "#SBATCH --account=[budget code]\n#SBATCH --partition=standard\n#SBATCH --qos=standard\n"
        "#SBATCH --time-min=<lower_bound>\n"
        "export OMP_NUM_THREADS=1\nsrun --distribution=block:block --hint=nomultithread ./app\n"
    )
    report = check_slurm_script("archer2.slurm", ARCHER2, text=text)
    assert report.errors == [], report.errors
    assert report.plan["account"] == "[budget code]"
    # a phrase in square brackets that the profile does not list is a placeholder too (one
    # word, to fill in), as <...> is: a placeholder is never an error
    other = check_slurm_script("j", ARCHER2, text=text.replace("[budget code]", "[my code]"))
    assert other.errors == [], other.errors
    assert [f.rule for f in other.warnings if f.line == 7] == ["placeholder"]


@pytest.mark.parametrize(
    ("site", "text"),
    [
        (BEDE, "#!/bin/bash\n#SBATCH --account=<project>  # Run job under project <project>\n"
               "#SBATCH --time=0:10:0\nsrun hostname\n"),
        (SUMMIT, "#!/bin/bash\n#BSUB -P <PROJECT>\n#BSUB -W 10\n#BSUB -nnodes 1\njsrun -n1 x\n"),
    ],
)  # fmt: skip
def test_each_site_accepts_its_own_placeholders(site, text):
    check = check_lsf_script if site.scheduler == "lsf" else check_slurm_script
    assert check("job", site, text=text).errors == []
    assert site.placeholders, "every profile lists the placeholders of its docs"


def test_every_profile_says_how_complete_its_module_inventory_is():
    for site in all_sites():
        assert site.data["module_inventory"]["coverage"] in {"complete", "partial"}
    broken = json.loads(json.dumps(BEDE.data))
    del broken["module_inventory"]
    path = SITES_DIR.parent / "_build" / "profile-claims" / "bede.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(broken, sort_keys=False))
    with pytest.raises(ProfileError, match="module_inventory"):
        load_profile(path)


def _with_coverage(site: Site, coverage: str) -> Site:
    data = copy.deepcopy(dict(site.data))
    data["module_inventory"] = {**data["module_inventory"], "coverage": coverage}
    return Site(site.name, site.path, data)


def test_an_unlisted_module_is_a_warning_in_a_partial_inventory():
    [f] = check_module("job.sbatch", 7, "cray-mpich/8.1.23", BEDE)
    assert f.level == "warning" and f.rule == "module-unlisted" and f.line == 7
    assert "python -m clusterkit.sites.refresh --site bede --module-avail FILE" in f.message
    # a version the inventory does not list, of a module it does list, is still an error
    [g] = check_module("job.sbatch", 7, "cuda/0.1", BEDE)
    assert g.level == "error" and g.rule == "module-known" and "cuda/12.4.1" in g.message
    # a retired site's inventory cannot be refreshed any more: the warning says so
    [h] = check_module("job.lsf", 3, "cray-mpich/8.1.23", SUMMIT)
    assert "Summit is retired" in h.message and "refresh --site" not in h.message


def test_an_unlisted_module_is_an_error_in_a_complete_inventory():
    complete = _with_coverage(BEDE, "complete")
    [f] = check_module("job.sbatch", 7, "cray-mpich/8.1.23", complete)
    assert f.level == "error" and f.rule == "module-known"


def _account_script(site: Site, account: str) -> str:
    """A small job of the site's default partition (else its first), with ``account``."""
    if site.scheduler == "lsf":
        return f"#!/bin/bash\n#BSUB -P {account}\n#BSUB -W 10\n#BSUB -nnodes 1\njsrun -n1 x\n"
    part = site.default_partition or next(iter(site.partitions.values()))
    qos = f"#SBATCH --qos={part.qos[0]}\n" if part.qos_required else ""
    return (
        f"#!/bin/bash\n#SBATCH --account={account}\n#SBATCH --partition={part.name}\n{qos}"
        "#SBATCH --time=10\nsrun hostname\n"
    )


ACCOUNT_RULES = {"account-form", "project-form", "account-required", "sbatch-option"}


@pytest.mark.parametrize("site", list(all_sites()), ids=lambda s: s.name)
def test_every_profile_lists_placeholders_and_accepts_them_as_the_account(site):
    check = check_lsf_script if site.scheduler == "lsf" else check_slurm_script
    assert site.placeholders, f"sites/{site.name}.yaml lists no placeholders of its docs"
    for placeholder in site.placeholders:
        report = check("job", site, text=_account_script(site, placeholder))
        assert not {f.rule for f in report.errors} & ACCOUNT_RULES, (placeholder, report.errors)
    # a bracketed value the docs never print is a placeholder too: filled in, not refused
    other = check("job", site, text=_account_script(site, "<not-in-the-docs>"))
    assert not {f.rule for f in other.errors} & ACCOUNT_RULES, other.errors
    assert "placeholder" in {f.rule for f in other.warnings}, other.findings
    # a value that is no placeholder is judged as an account, and refused when malformed
    bad = check("job", site, text=_account_script(site, "Not.An.Account!"))
    assert {f.rule for f in bad.errors} & ACCOUNT_RULES, bad.errors
