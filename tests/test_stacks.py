"""Software stacks: what CI installs for them, which programs they run, and the pages that name
them (front matter ``stacks:``, the ``{page-stacks}`` directive and its checks)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from clusterkit.grammars.myst import scan_page, scan_pages
from clusterkit.runs import stack_pages as SP
from clusterkit.sites import stacks as S
from clusterkit.sites.errors import CheckError
from clusterkit.sites.profiles import ROOT, Stack

TORCH_TRAINER = ROOT / "examples" / "pytorch" / "train_resnet.py"
KERAS_TRAINER = ROOT / "examples" / "tensorflow" / "train_resnet_keras.py"


def make_stack(name: str, frameworks: dict, site: str = "bede", **extra) -> Stack:
    raw = {
        "title": f"test stack {name}",
        "status": "current",
        "node_types": ["grace-hopper"],
        "python": "3.11",
        "frameworks": frameworks,
        "accelerator": {"kind": "cuda", "version": "12.4"},
        "install": {"pip": {"packages": ["torch", "torchvision"]}},
        "sources": [{"title": "t", "url": "https://example.org", "retrieved": "2026-11-23"}],
        **extra,
    }
    return Stack(site, name, raw)


@pytest.fixture
def known(monkeypatch):
    """A fixed set of stacks in place of the profiles' (the pages' checks look them up)."""
    stacks = {
        s.key: s
        for s in (
            make_stack("old-torch", {"torch": "1.7.1", "torchvision": "0.8.2"}),
            make_stack("torch", {"torch": "2.1.2", "torchvision": "0.16.2", "numpy": "1.26.4"}),
            make_stack("keras2", {"tensorflow": "2.14.1", "keras": "2.14.0"}),
        )
    }
    monkeypatch.setattr(S, "all_stacks", lambda: stacks)
    return stacks


# --------------------------------------------------------------------------- what CI installs
def test_ci_installs_the_stack_versions_from_pypi_by_default():
    torch = make_stack("a", {"torch": "2.1.2", "torchvision": "0.16.2", "numpy": "1.26.4"})
    assert S.ci_route(torch).packages == ("numpy==1.26.4", "torch==2.1.2", "torchvision==0.16.2")
    keras2 = make_stack("b", {"tensorflow": "2.14.1", "keras": "2.14.0", "horovod": "0.28.1"})
    # TensorFlow's CPU package stands in for it; Horovod has no wheel on PyPI and is left out
    assert S.ci_route(keras2).packages == ("keras==2.14.0", "tensorflow-cpu==2.14.1")


def test_ci_pip_and_ci_skip_override_the_default():
    pinned = make_stack("a", {"torch": "2.5.0a0"}, ci={"pip": ["torch==2.5.0"]})
    assert S.ci_route(pinned).packages == ("torch==2.5.0",) and S.ci_route(pinned).runs
    skipped = make_stack("b", {"torch": "1.7.1"}, ci={"skip": "no wheel for Python 3.11"})
    route = S.ci_route(skipped)
    assert not route.runs and route.skip == "no wheel for Python 3.11"
    assert not S.ci_route(make_stack("c", {"horovod": "0.28.1"})).runs


def test_environments_are_named_by_their_package_list():
    a = S.environment_packages(S.ci_route(make_stack("a", {"torch": "2.1.2"})))
    same = S.environment_packages(S.ci_route(make_stack("other", {"torch": "2.1.2"})))
    newer = S.environment_packages(S.ci_route(make_stack("a", {"torch": "2.2.0"})))
    assert "torch==2.1.2" in a and any(p.startswith("pytest") for p in a)
    assert S.environment_name(a) == S.environment_name(same)  # shared by equal lists
    assert S.environment_name(a) != S.environment_name(newer)  # rebuilt when the list changes
    assert S.environment_name(a).startswith("_stack-") and len(S.environment_name(a)) == 17


# --------------------------------------------------------------------------- programs
def test_programs_state_their_oldest_versions_with_their_framework_first():
    torch_min = S.minimum_versions(TORCH_TRAINER)
    keras_min = S.minimum_versions(KERAS_TRAINER)
    assert next(iter(torch_min)) == "torch" and "torchvision" in torch_min
    assert next(iter(keras_min)) == "tensorflow"
    for program in SP.training_programs().values():
        assert S.minimum_versions(program), program


def test_a_program_that_states_no_minimum_is_known_by_its_imports(known, tmp_path):
    program = tmp_path / "train.py"
    program.write_text("import os\nimport tensorflow as tf\nfrom horovod import tensorflow\n")
    assert S.frameworks_of(program) == ("tensorflow", "horovod")
    assert S.uses(program, known["bede/keras2"]) and not S.uses(program, known["bede/torch"])


def test_a_program_runs_on_the_stacks_of_its_framework(known):
    assert S.uses(TORCH_TRAINER, known["bede/torch"])
    assert not S.uses(TORCH_TRAINER, known["bede/keras2"])
    assert S.uses(KERAS_TRAINER, known["bede/keras2"])


def test_a_stack_older_than_the_minimum_is_named(known):
    oldest = S.minimum_versions(TORCH_TRAINER)["torch"]
    why = S.unsupported(TORCH_TRAINER, known["bede/old-torch"])
    assert f"torch 1.7.1 is older than {oldest}" in why
    assert S.unsupported(TORCH_TRAINER, known["bede/torch"]) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [("2.1.2", (2, 1, 2)), ("2.1.2+cu121", (2, 1, 2)), ("2.5.0a0+b465a58", (2, 5, 0)), ("x", ())],
)
def test_version_tuple(text, expected):
    assert S.version_tuple(text) == expected


# --------------------------------------------------------------------------- pages
def page(tmp_path: Path, front: str, body: str = "") -> Path:
    path = tmp_path / "docs" / "recipe.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\n{front}\n---\n\n# A recipe\n\n{body}")
    return path


def test_a_page_naming_an_unknown_stack_is_reported_at_its_line(known, tmp_path):
    path = page(
        tmp_path, "site: bede\nstacks:\n  - bede/torch\n  - bede/nope", "```{page-stacks}\n```\n"
    )
    findings = SP.check_page(scan_page(path))
    assert [(f.line, f.rule) for f in findings] == [(5, "stack-exists")]
    text = str(findings[0])
    assert ":5: [stack-exists] no stack 'bede/nope'" in text
    assert "bede has bede/keras2, bede/old-torch, bede/torch" in text


def test_a_page_naming_stacks_must_show_them(known, tmp_path):
    path = page(tmp_path, "stacks: [bede/torch]", "No directive here.\n")
    (finding,) = SP.check_page(scan_page(path))
    assert finding.rule == "stack-words" and finding.line == 2


def test_a_page_that_runs_a_program_must_name_a_stack(known, tmp_path):
    body = f"```{{literalinclude}} {TORCH_TRAINER}\n:language: python\n```\n"
    path = page(tmp_path, "site: bede", body)
    (finding,) = SP.check_page(scan_page(path))
    assert finding.rule == "stack-missing" and "train_resnet.py" in finding.message
    framework_page = page(tmp_path, "frameworks: [pytorch]")
    (finding,) = SP.check_page(scan_page(framework_page))
    assert finding.rule == "stack-missing"


def test_a_recipe_whose_stack_is_older_than_its_trainer_needs_is_refused(known, tmp_path):
    """A job script of the page starts the PyTorch trainer; the page names a stack in service
    with an older torch than the trainer's MINIMUM_VERSIONS: an error at the stack's line,
    naming the page, the stack, its version and the minimum. A historical stack: a warning."""
    oldest = S.minimum_versions(TORCH_TRAINER)["torch"]
    script = ROOT / "examples" / "bede" / "pytorch-ddp-1node.sbatch"
    body = f"```{{page-stacks}}\n```\n\n```{{literalinclude}} {script}\n```\n"
    path = page(tmp_path, "site: bede\nstacks:\n  - bede/torch\n  - bede/old-torch", body)
    findings = SP.check_page(scan_page(path))
    assert {(f.path, f.line, f.rule, f.level) for f in findings} == {
        (path, 5, "stack-minimum", "error")
    }
    finding = next(f for f in findings if "has torch " in f.message)
    assert finding.message.startswith(
        f"stack bede/old-torch has torch 1.7.1, older than the torch {oldest} train_resnet.py "
        "needs (its MINIMUM_VERSIONS)"
    )
    known["bede/old-torch"].raw["status"] = "historical"
    findings = SP.check_page(scan_page(path))
    assert findings and {(f.rule, f.level) for f in findings} == {("stack-minimum", "warning")}


def test_job_scripts_lead_to_the_programs_they_start(tmp_path):
    body = (
        "```{literalinclude} " + str(ROOT / "examples/bede/pytorch-ddp-1node.sbatch") + "\n```\n"
        "```{literalinclude} " + str(ROOT / "examples/archer2/tensorflow-cpu.slurm") + "\n```\n"
        "```{literalinclude} "
        + str(ROOT / "examples/summit/resnet50-horovod-2node.lsf")
        + "\n```\n"
    )
    programs = SP.page_programs(scan_page(page(tmp_path, "site: bede", body)))
    assert programs == [TORCH_TRAINER, KERAS_TRAINER]  # Summit's runs a program not ours


def test_shell_blocks_of_the_page_lead_to_the_programs_they_start(known, tmp_path):
    """A command shown in a block (Summit's jsrun lines) runs a program as an included job
    script does; a program named only in a comment does not."""
    body = (
        "```bash\n# train_resnet_keras.py is the TensorFlow twin\n"
        "jsrun -r1 -g6 -a6 python train_resnet.py --batch-size 256\n```\n"
    )
    assert SP.page_programs(scan_page(page(tmp_path, "site: summit", body))) == [TORCH_TRAINER]
    recipe = page(tmp_path, "stacks: [bede/old-torch]", "```{page-stacks}\n```\n" + body)
    # it runs the trainer, which needs a newer torch than the stack's
    assert {f.rule for f in SP.check_page(scan_page(recipe))} == {"stack-minimum"}
    assert SP.programs_by_stack([scan_page(recipe)]) == {"bede/old-torch": [TORCH_TRAINER]}
    (finding,) = SP.check_page(scan_page(page(tmp_path, "site: summit", body)))
    assert finding.rule == "stack-missing" and "train_resnet.py" in finding.message


def test_programs_by_stack_follow_the_framework(known, tmp_path):
    body = (
        "```{page-stacks}\n```\n"
        "```{literalinclude} " + str(ROOT / "examples/bede/pytorch-ddp-1node.sbatch") + "\n```\n"
    )
    recipe = scan_page(page(tmp_path, "stacks: [bede/torch, bede/keras2]", body))
    assert SP.programs_by_stack([recipe]) == {"bede/torch": [TORCH_TRAINER], "bede/keras2": []}


def test_the_pages_name_stacks_that_exist():
    """Every recipe page names its stacks, each one in a site profile, and shows them; no
    stack in service is too old for a program the page runs."""
    findings = [f for f in SP.check_all() if f.level == "error"]
    assert not findings, "\n".join(map(str, findings))


# --------------------------------------------------------------------------- the directive
def build(tmp_path: Path, front: str) -> tuple[str, str]:
    """A one-page MyST project with the {page-stacks} directive: (its text, the warnings)."""
    from docutils import nodes
    from sphinx.application import Sphinx

    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text("extensions = ['myst_parser', 'clusterkit.pages.sphinxext']\n")
    script = os.path.relpath(ROOT / "examples/bede/pytorch-ddp-1node.sbatch", src)
    body = f"```{{literalinclude}} {script}\n```\n"
    (src / "index.md").write_text(
        f"---\n{front}\n---\n\n# Recipe\n\n```{{page-stacks}}\n```\n\n{body}"
    )
    warnings = io.StringIO()
    app = Sphinx(
        str(src),
        str(src),
        str(tmp_path / "out"),
        str(tmp_path / "dt"),
        "text",
        status=None,
        warning=warnings,
        freshenv=True,
    )
    app.build(force_all=True)
    tree = app.env.get_doctree("index")
    boxes = [n for n in tree.findall(nodes.admonition) if "page-stacks" in n["classes"]]
    return " ".join(" ".join(b.astext().split()) for b in boxes), warnings.getvalue()


def test_the_directive_says_which_stacks_the_page_uses(known, tmp_path):
    flat, warnings = build(tmp_path, "stacks: [bede/torch, bede/old-torch]")
    assert "index.md" not in warnings  # (Sphinx may warn about itself when run twice)
    assert flat.startswith("Software stacks")
    assert "test stack torch (bede/torch): pip install torch torchvision; Python 3.11;" in flat
    assert "torch 2.1.2, torchvision 0.16.2, numpy 1.26.4; CUDA 12.4 build" in flat
    assert "CI runs the programs with numpy==1.26.4 torch==2.1.2 torchvision==0.16.2" in flat
    assert "train_resnet.py does not run on this stack (torch 1.7.1 is older than" in flat


def test_the_pages_say_which_of_their_stacks_a_program_cannot_run_on():
    """Summit's page runs train_resnet.py in its jsrun lines under Open-CE 1.1.3 (PyTorch 1.7.1):
    its stacks box says the trainer stops there, naming the version."""
    from clusterkit.pages.sphinxext import PageStacks

    said = {}
    for recipe in scan_pages():
        programs = SP.page_programs(recipe)
        for key, _ in SP.named_stacks(recipe):
            words = " ".join(n.astext() for n in PageStacks.describe(S.find(key), programs))
            if "does not run on this stack" in words:
                said[(recipe.path.relative_to(ROOT).as_posix(), key)] = words
    summit = ("docs/howto/summit/distributed-training.md", "summit/open-ce-1.1.3-py38")
    assert summit in said, sorted(said)
    assert "train_resnet.py does not run on this stack (torch 1.7.1 is older than" in said[summit]


def test_an_unknown_stack_fails_the_build_at_its_front_matter_line(known, tmp_path):
    _, warnings = build(tmp_path, "site: bede\nstacks: [bede/nope]")
    assert "index.md:3: WARNING: [stack-exists] no stack 'bede/nope'" in warnings


def test_the_stack_ids_of_the_pages_can_be_looked_up():
    with pytest.raises(CheckError, match="name it site/stack"):
        S.find("nope")


@pytest.mark.parametrize("name", sorted(SP.training_programs()))
def test_the_programs_are_python_3_9_syntax(name):
    """Sites' stacks still come with Python 3.9 (Rocky 9's python3, Open-CE builds): the
    programs use no syntax newer than that (nor zip(strict=...), which ruff's B905 asks for)."""
    import ast

    path = SP.training_programs()[name]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path), feature_version=(3, 9))
    zips = [
        n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "zip"
    ]
    assert not [n.lineno for n in zips if any(k.arg == "strict" for k in n.keywords)]
