"""Third-party CLI contracts: kept data, the tool that makes them, and the check of every
invocation in pages and examples."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from clusterkit.commands import contracts_tool as T
from clusterkit.grammars import myst as P
from clusterkit.sites import contracts as C
from clusterkit.sites.profiles import ROOT

KEPT = T.kept_contracts()
BY_NAME = {k.name: k for k in KEPT}


def _lines(text: str) -> list[tuple[int, str]]:
    return list(enumerate(text.splitlines(), 1))


def _check_script(tmp_path, body: str, name: str = "job.slurm") -> list:
    path = tmp_path / name
    path.write_text(body)
    return T.check_file(path, KEPT)


# --------------------------------------------------------------------------- kept data
def test_every_kept_contract_is_pinned_and_well_formed():
    assert {
        "mlcommons-deepcam-train",
        "mlcommons-cosmoflow-train",
        "tf-cnn-benchmarks",
        "nvidia-rn50v15-tf-main",
        "horovod-tensorflow2-synthetic-benchmark",
        "horovod-pytorch-synthetic-benchmark",
    } <= set(BY_NAME)
    for path in sorted((ROOT / "contracts").glob("*.json")):
        assert T.validate_contract(path) == [], path
        data = json.loads(path.read_text())
        assert data["source"]["repo"].startswith("https://github.com/")
        assert data["method"].split(":")[0] in {"introspect", "introspect-stubbed", "ast-absl"}


def test_the_cosmoflow_overrides_the_seed_uses_are_keys_of_cosmo_yaml():
    config = BY_NAME["mlcommons-cosmoflow-train"].data["config"]
    assert config["path"] == "cosmoflow/configs/cosmo.yaml"
    for flag, key in {
        "--n-epochs": "data.n_epochs",
        "--n-train": "data.n_train",
        "--n-valid": "data.n_valid",
        "--data-dir": "data.data_dir",
    }.items():
        assert config["overrides"][flag]["key"] == key
        assert config["overrides"][flag]["in_config"] and key in config["keys"]


# --------------------------------------------------------------------------- the check
DEEPCAM = textwrap.dedent("""\
    #!/bin/bash
    # MLCommons HPC DeepCam on two GPU nodes
    srun --ntasks=8 \\
        python train.py \\
            --run_tag test \\
            --wireup_method {wireup} \\
            {extra}--max_epochs 64
    """)


def test_a_nonexistent_flag_fails_with_file_line_and_rule(tmp_path):
    found = _check_script(tmp_path, DEEPCAM.format(wireup="nccl-slurm", extra="--max-epoch 3 "))
    assert [(f.line, f.rule) for f in found] == [(7, "script-flag-unknown")]
    assert "job.slurm:7:" in str(found[0]) and "--max-epoch" in found[0].message
    assert "mlcommons-deepcam-train" in found[0].message


def test_an_invalid_choice_fails_with_file_line_and_rule(tmp_path):
    found = _check_script(tmp_path, DEEPCAM.format(wireup="rccl-slurm", extra=""))
    assert [(f.line, f.rule) for f in found] == [(6, "script-flag-value")]
    assert "invalid choice: 'rccl-slurm'" in found[0].message


def test_the_same_in_a_page_block_and_in_inline_code(tmp_path):
    page = tmp_path / "p.md"
    text = (
        "# CosmoFlow\n\n```bash\npython train.py --n-epochs 4 --n-trian 8\n```\n\n"
        "Or `python tf_cnn_benchmarks.py --variable_update=ddl --model=resnet50`.\n"
    )
    found = T.check_page(page, KEPT, text)
    assert [(f.line, f.rule) for f in found] == [
        (4, "script-flag-unknown"),
        (7, "script-flag-value"),
    ]
    assert "p.md:4:" in str(found[0])


def test_absl_semantics_no_abbreviations_no_positionals(tmp_path):
    good = "#!/bin/bash\npython tf_cnn_benchmarks.py --use_fp16 --allow_growth=True --nouse_fp16\n"
    assert _check_script(tmp_path, good) == []
    abbrev = "#!/bin/bash\npython tf_cnn_benchmarks.py --use_fp\n"
    assert {f.rule for f in _check_script(tmp_path, abbrev)} == {"script-flag-unknown"}
    positional = "#!/bin/bash\npython tf_cnn_benchmarks.py --distortions False\n"
    found = _check_script(tmp_path, positional)
    assert [f.rule for f in found] == ["script-flag-unknown"] and "positional" in found[0].message
    bound = "#!/bin/bash\npython tf_cnn_benchmarks.py --num_batches=100 --batch_size=-1\n"
    assert _check_script(tmp_path, bound) == [] or all(
        f.rule == "script-flag-value" for f in _check_script(tmp_path, bound)
    )


def test_a_cosmoflow_flag_that_overrides_no_config_key_fails(tmp_path):
    body = "#!/bin/bash\n# CosmoFlow\npython train.py --n-epochs 4 --stage-dir /tmp/x\n"
    found = _check_script(tmp_path, body)
    assert [(f.line, f.rule) for f in found] == [(3, "script-config-key")]
    assert "data.stage_dir" in found[0].message and "cosmo.yaml" in found[0].message


def test_a_bare_train_py_needs_context_to_pick_a_contract(tmp_path):
    found = _check_script(tmp_path, "#!/bin/bash\npython train.py --max_epochs 2\n")
    assert [f.rule for f in found] == ["script-contract"]
    assert "deepcam" in found[0].message and "cosmoflow" in found[0].message
    qualified = "#!/bin/bash\npython mlperf-hpc/cosmoflow/train.py --n-epochs 2\n"
    assert _check_script(tmp_path, qualified) == []


def test_wrappers_redirections_and_help_are_understood(tmp_path):
    body = textwrap.dedent("""\
        #!/bin/bash
        jsrun -r1 -g6 -a6 -c42 python \\
            "$CONDA_PREFIX/horovod/examples/tensorflow2_synthetic_benchmark.py" \\
            --batch-size 64 --fp16-allreduce > out.log 2>&1
        python tensorflow2_synthetic_benchmark.py --help
        pytest tests/test_x.py -k nothing
        python -m pytest tests/test_x.py
        """)
    assert _check_script(tmp_path, body) == []
    bad = "#!/bin/bash\nhorovodrun -np 2 python pytorch_synthetic_benchmark.py --num-iter 3\n"
    # argparse accepts the unique abbreviation --num-iter of --num-iters, as the script would
    assert _check_script(tmp_path, bad) == []
    bad = "#!/bin/bash\nhorovodrun -np 2 python pytorch_synthetic_benchmark.py --num 3\n"
    found = _check_script(tmp_path, bad)
    assert [f.rule for f in found] == ["script-flags"] and "ambiguous option" in found[0].message
    bad = "#!/bin/bash\nhorovodrun -np 2 python pytorch_synthetic_benchmark.py --fp32\n"
    assert [f.rule for f in _check_script(tmp_path, bad)] == ["script-flag-unknown"]


def test_the_project_examples_are_checked_against_their_own_parser(tmp_path):
    job = tmp_path / "pytorch-job.sbatch"
    job.write_text("#!/bin/bash\ntorchrun train_resnet.py --batch-size 8 --precision fp8\n")
    found = T.check_file(job, KEPT)
    assert [(f.line, f.rule) for f in found] == [(2, "script-flag-value")]


def test_the_pages_and_examples_use_only_known_flags():
    errors = [f for f in T.check_tree() if f.level == "error"]
    assert errors == [], "\n".join(map(str, errors))


# --------------------------------------------------------------------------- the tool
def test_absl_flags_are_read_from_the_script_and_its_local_imports(tmp_path):
    (tmp_path / "flags_lib.py").write_text(
        "from absl import flags\n"
        "flags.DEFINE_integer('num_gpus', 1, 'gpus', lower_bound=1)\n"
        "flags.DEFINE_enum('mode', 'a', ('a', 'b'), 'mode')\n"
    )
    (tmp_path / "main.py").write_text(
        "from absl import app, flags\nimport flags_lib\n"
        "flags.DEFINE_boolean('use_fp16', False, 'half')\n"
        "def DEFINE_string(name, default, help):\n    pass\n"
    )
    data = T.absl_contract(tmp_path / "main.py", tmp_path)
    by = {f: o for o in data["options"] for f in o["flags"]}
    assert by["--num_gpus"]["type"] == "int" and by["--num_gpus"]["lower_bound"] == 1
    assert by["--mode"]["choices"] == ["a", "b"]
    assert by["--use_fp16"]["nargs"] == "?" and not by["--nouse_fp16"]["takes_value"]
    assert "--flagfile" in by and "--helpfull" in by
    contract = C.Contract("main.py", data["options"])
    assert C.check_invocation("x", 1, contract, ["--num_gpus=2", "--use_fp16"]) == []
    assert C.check_invocation("x", 1, contract, ["--mode=c"])[0].rule == "script-flag-value"


def test_stubbed_introspection_reads_a_parser_whose_imports_are_missing(tmp_path):
    (tmp_path / "helpers.py").write_text(
        "import argparse\n"
        "def add_bool(p, name):\n"
        "    g = p.add_mutually_exclusive_group()\n"
        "    g.add_argument('--' + name, action='store_true')\n"
        "    g.add_argument('--no' + name, dest=name, action='store_false')\n"
    )
    (tmp_path / "train.py").write_text(
        "import argparse\nimport no_such_framework as nsf\n"
        "from no_such_framework.nn import Module\n"
        "from helpers import add_bool\n"
        "class Net(Module):\n    pass\n"
        "@nsf.jit\ndef f():\n    pass\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('--mode', choices=['a', 'b'])\nadd_bool(p, 'xla')\n"
        "try:\n    args = p.parse_args()\nexcept nsf.OutOfMemoryError:\n    pass\n"
    )
    data = T.introspect_stubbed(tmp_path / "train.py")
    assert [o["flags"] for o in data["options"]] == [["--mode"], ["--xla"], ["--noxla"]]
    assert data["stubbed"] == ["no_such_framework"]


def test_regenerate_pins_the_commit_and_reads_config_overrides(tmp_path):
    repo = tmp_path / "up"
    (repo / "configs").mkdir(parents=True)
    (repo / "configs" / "c.yaml").write_text("data:\n  n_train: 10\n  name: x\n")
    (repo / "train.py").write_text(
        "import argparse\nimport yaml\n"
        "p = argparse.ArgumentParser()\np.add_argument('config', nargs='?')\n"
        "p.add_argument('--n-train', type=int)\np.add_argument('--stage-dir')\n"
        "args = p.parse_args()\nconfig = {}\n"
        "config['data']['n_train'] = args.n_train\nconfig['data']['stage_dir'] = args.stage_dir\n"
    )
    run = {"cwd": repo, "check": True, "capture_output": True}
    subprocess.run(["git", "init", "-q"], **run)
    subprocess.run(["git", "add", "."], **run)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"], **run
    )
    sha = subprocess.run(["git", "rev-parse", "HEAD"], text=True, **run).stdout.strip()
    out = tmp_path / "c.json"
    rc = T.main(
        [
            "regenerate",
            "--checkout",
            str(repo),
            "--script",
            "train.py",
            "--name",
            "demo",
            "--commit",
            sha,
            "--repo",
            "https://github.com/example/demo",
            "--config",
            "configs/c.yaml",
            "--context",
            "(?i)demo",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["source"] == {
        "repo": "https://github.com/example/demo",
        "commit": sha,
        "path": "train.py",
    }
    assert data["config"]["overrides"]["--n-train"] == {
        "key": "data.n_train",
        "in_config": True,
        "default": 10,
    }
    assert data["config"]["overrides"]["--stage-dir"]["in_config"] is False
    assert T.validate_contract(out) == []
    with pytest.raises(T.ToolError, match="not at"):
        T.regenerate(repo, "train.py", "demo", "0" * 40)


def test_fast_contracts_agree_with_real_introspection_when_it_is_cached():
    for script in sorted((ROOT / "examples").rglob("train_*.py")):
        if "argparse" not in script.read_text():
            continue
        fast = T.introspect_stubbed(script)
        cached = list(C.CACHE_DIR.glob(f"{script.stem}-*.json"))
        key = __import__("hashlib").sha256(script.read_bytes()).hexdigest()[:16]
        real = C.CACHE_DIR / f"{script.stem}-{key}.json"
        if not real.is_file():
            continue  # the real one needs torch/TensorFlow; compared where they are installed
        real_options = json.loads(real.read_text())["options"]
        assert len(fast["options"]) == len(real_options), cached
        for a, b in zip(fast["options"], real_options, strict=True):
            if a["choices"] is None:  # computed by the framework: unknown without it
                b = {**b, "choices": None}
            assert a == b


def test_logical_commands_keep_the_line_of_each_word():
    cmds = P.logical_commands(_lines("srun -n 2 \\\n  python x.py \\\n  --a 1  # note\n"))
    assert [(w.text, w.line) for w in cmds[0].words] == [
        ("srun", 1),
        ("-n", 1),
        ("2", 1),
        ("python", 2),
        ("x.py", 2),
        ("--a", 3),
        ("1", 3),
    ]
