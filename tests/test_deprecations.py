"""The deprecation lint: every registry entry fails where it is not marked historical."""

from __future__ import annotations

import pytest

from clusterkit import deprecations

SAMPLES = {
    "ddlrun": "ddlrun -H host1,host2 python main.py",
    "wmlce-module": "module load ibm-wml-ce/1.7.0-3",
    "powerai-conda": "conda install powerai ipython",
    "powerai-activate": ". /opt/DL/tensorflow/bin/tensorflow-activate",
    "pip-install-option": 'pip install --install-option="--prefix=/x" horovod',
    "torch-distributed-launch": "python -m torch.distributed.launch --nproc_per_node=4 t.py",
    "singularity-build-writable": "sudo singularity build --writable img.simg docker://x/y",
    "nvprof": "$CUDA_DIR/bin/nvprof python file-to-profile.py",
    "anaconda2": "export PATH=/opt/anaconda2/bin:$PATH",
    "tf-contrib": "import tensorflow as tf; tf.contrib.layers",
    "tf1-session": "sess = tf.Session()",
}


def test_every_entry_has_a_sample():
    assert {e.id for e in deprecations.registry()} == set(SAMPLES)


@pytest.mark.parametrize("entry", deprecations.registry(), ids=lambda e: e.id)
def test_seeded_into_a_page_it_fails_with_line_and_replacement(entry, tmp_path):
    page = tmp_path / "page.md"
    text = f"# Page\n\nSome text.\n\n```bash\necho start\n{SAMPLES[entry.id]}\n```\n"
    found = deprecations.lint_page(page, text)
    hits = [f for f in found if f.rule == f"deprecated:{entry.id}"]
    assert hits and hits[0].line == 7
    assert entry.replacement in str(hits[0]) and "page.md:7:" in str(hits[0])


@pytest.mark.parametrize("entry", deprecations.registry(), ids=lambda e: e.id)
def test_seeded_into_an_example_it_fails(entry, tmp_path):
    script = tmp_path / "job.sbatch"
    text = f"#!/bin/bash\nset -euo pipefail\n{SAMPLES[entry.id]}\n"
    found = deprecations.lint_file(script, text)
    assert [f.line for f in found if f.rule == f"deprecated:{entry.id}"] == [3]


def test_a_visible_historical_marker_allows_it(tmp_path):
    body = "```bash\nddlrun python main.py\n```\n"
    marked = (
        ":::{admonition} Historical: ddlrun\n:class: historical\nRetired. Replaced by: "
        "jsrun with Horovod.\n:::\n\n" + body
    )
    assert deprecations.lint_page(tmp_path / "p.md", marked) == []
    unmarked = ":::{note}\nold\n:::\n\n" + body
    assert deprecations.lint_page(tmp_path / "p.md", unmarked)
    header = "#!/bin/bash\n# HISTORICAL: kept as a record.\n# Replaced by: jsrun.\nddlrun x\n"
    assert deprecations.lint_file(tmp_path / "j.lsf", header) == []
    assert deprecations.lint_file(tmp_path / "j.lsf", header.replace("Replaced by", "See"))


def test_the_pages_and_examples_have_no_stale_commands():
    found = deprecations.lint_all()
    assert found == [], "\n".join(map(str, found))
