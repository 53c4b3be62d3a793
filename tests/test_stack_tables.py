"""The software-stack table of each site's reference page is read from the profile."""

from __future__ import annotations

import yaml

from clusterkit.pages.sphinxext import STACK_HEADERS, facts_rows, stack_route
from clusterkit.sites.profiles import ROOT, load_profile, load_site


def test_one_row_per_stack_in_header_order():
    site = load_site("bede")
    headers, rows = facts_rows(site, "stacks")
    assert headers == STACK_HEADERS
    assert [r[0] for r in rows] == list(site.stacks)
    row = dict(zip(headers, rows[0], strict=True))
    assert row["Python"] == "3.11" and "torch 2.1.2" in row["Frameworks"]
    assert row["Accelerator"] == "cuda (version not known)"


def test_each_route_reads_as_the_command_users_run():
    stacks = load_site("bede").stacks
    assert stack_route(stacks["gh200-pip-cu124-pytorch"]) == (
        "pip: torch from https://download.pytorch.org/whl/cu124"
    )
    assert stack_route(stacks["ngc-pytorch-24.09"]) == "apptainer: nvcr.io/nvidia/pytorch:24.09-py3"
    assert stack_route(load_site("archer2").stacks["tensorflow-2.13.0-cpu"]) == (
        "module load tensorflow/2.13.0"
    )
    assert stack_route(stacks["opence-1.11-tensorflow"]).startswith("conda: tensorflow from ")


def test_a_changed_fact_in_the_profile_changes_the_table(tmp_path):
    data = yaml.safe_load((ROOT / "sites" / "archer2.yaml").read_text())
    data["stacks"]["tensorflow-2.13.0-cpu"]["frameworks"]["keras"] = "2.13.2"
    path = tmp_path / "archer2.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    _, rows = facts_rows(load_profile(path), "stacks")
    row = next(r for r in rows if r[0] == "tensorflow-2.13.0-cpu")
    assert "keras 2.13.2" in row[3]
