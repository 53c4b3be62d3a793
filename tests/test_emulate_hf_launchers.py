"""``accelerate launch`` and ``deepspeed`` in job scripts and on pages: options by the launchers'
own tables (a misspelt one named with the option meant), the processes each node starts against
the GPUs the job holds there, the machines against the nodes, and the training script's options
against its own parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.commands.shell import check_shell_text
from clusterkit.emulate.checkjob import check_job_file
from clusterkit.sites.profiles import load_site

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = "finetune_hf.py --model m --data d.jsonl"
HEADS = {
    "isambard-ai": "#SBATCH --nodes={nodes}\n#SBATCH --gpus-per-node=4\n"
    "#SBATCH --ntasks-per-node=1\n#SBATCH --cpus-per-task=288\n",
    "bede": "#SBATCH --account=bdXXXYY\n#SBATCH --partition=gh\n#SBATCH --nodes={nodes}\n"
    "#SBATCH --gres=gpu:1\n#SBATCH --ntasks-per-node=1\n#SBATCH --cpus-per-task=72\n",
    "frontier": "#SBATCH -A ABC123\n#SBATCH -p batch\n#SBATCH -N {nodes}\n",
}
SITES = ("isambard-ai", "bede", "frontier")
MAIN = 'MAIN=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
# the c10d rendezvous: the nodes agree on their ranks, so every node's line may say 0
MULTI = '--rdzv_backend c10d --machine_rank 0 --main_process_ip "$MAIN" --main_process_port 29500'


def judge(tmp_path: Path, head: str, body: str, nodes: int = 1):
    """(rule, level, message) of each finding for a job of ``nodes`` nodes running ``body``,
    with the directives of HEADS[head] (a site's name, judged on that site)."""
    text = "#!/bin/bash\n" + HEADS[head].format(nodes=nodes) + "#SBATCH --time=01:00:00\n"
    path = tmp_path / "job.sbatch"
    path.write_text(text + "set -euo pipefail\n" + MAIN + body + "\n")
    report = check_job_file(path, load_site(head if head in SITES else "isambard-ai"))
    return [(f.rule, f.level, f.message) for f in report.findings]


def errors(found) -> list[tuple[str, str]]:
    return [(rule, msg) for rule, level, msg in found if level == "error"]


# --------------------------------------------------------------------------- accelerate
def test_more_processes_per_node_than_gpus_is_an_error(tmp_path):
    found = errors(
        judge(tmp_path, "isambard-ai", f"srun accelerate launch --num_processes 8 {SCRIPT}")
    )
    assert [rule for rule, _ in found] == ["accelerate-gpus"]
    assert "8 processes per node" in found[0][1] and "4 GPU(s)" in found[0][1]


def test_num_processes_counts_all_machines(tmp_path):
    """8 over 2 machines is 4 a node: as many as a node's GPUs; 16 over 2 is 8, too many."""
    line = "srun accelerate launch --num_processes {} --num_machines 2 {} {}"
    ok = judge(tmp_path, "isambard-ai", line.format(8, MULTI, SCRIPT), nodes=2)
    assert errors(ok) == []
    bad = errors(judge(tmp_path, "isambard-ai", line.format(16, MULTI, SCRIPT), nodes=2))
    assert [rule for rule, _ in bad] == ["accelerate-gpus"]
    assert "--num_processes 16 over 2 machine(s)" in bad[0][1]


def test_bede_gh_nodes_hold_one_gpu(tmp_path):
    line = f"srun accelerate launch --multi_gpu --num_processes 4 --num_machines 2 {MULTI} {SCRIPT}"
    found = errors(judge(tmp_path, "bede", line, nodes=2))
    assert [rule for rule, _ in found] == ["accelerate-gpus"]
    assert "2 processes per node" in found[0][1] and "1 GPU(s)" in found[0][1]


def test_misspelt_option_names_the_one_meant(tmp_path):
    found = errors(
        judge(tmp_path, "isambard-ai", f"srun accelerate launch --num_proceses 4 {SCRIPT}")
    )
    assert found == [
        (
            "accelerate-option",
            "accelerate launch: error: unrecognized arguments: --num_proceses "
            "(did you mean --num_processes?)",
        )
    ]


def test_hyphenated_spellings_are_accelerates_too(tmp_path):
    line = f"srun accelerate launch --num-processes=4 --mixed-precision bf16 {SCRIPT}"
    assert errors(judge(tmp_path, "isambard-ai", line)) == []


def test_a_value_outside_the_choices_is_refused(tmp_path):
    line = f"srun accelerate launch --num_processes 4 --mixed_precision bf17 {SCRIPT}"
    ((rule, msg),) = errors(judge(tmp_path, "isambard-ai", line))
    assert rule == "accelerate-option" and "invalid choice: 'bf17'" in msg


def test_the_config_file_gives_what_the_line_does_not(tmp_path):
    (tmp_path / "eight.yaml").write_text("distributed_type: MULTI_GPU\nnum_processes: 8\n")
    line = f"srun accelerate launch --config_file eight.yaml {SCRIPT}"
    assert [r for r, _ in errors(judge(tmp_path, "isambard-ai", line))] == ["accelerate-gpus"]
    line = f"srun accelerate launch --config_file eight.yaml --num_processes 4 {SCRIPT}"
    assert errors(judge(tmp_path, "isambard-ai", line)) == []  # the line wins


def test_a_config_file_not_here_is_said(tmp_path):
    line = f"srun accelerate launch --config_file mine.yaml --num_processes 4 {SCRIPT}"
    found = judge(tmp_path, "isambard-ai", line)
    assert [(r, lvl) for r, lvl, _ in found] == [("accelerate-config", "warning")]


def test_several_launchers_per_node_is_an_error(tmp_path):
    """A job of four tasks a node (as for srun-started ranks) whose srun starts accelerate."""
    HEADS["tasks"] = HEADS["isambard-ai"].replace("-node=1", "-node=4").replace("=288", "=72")
    try:
        found = judge(tmp_path, "tasks", f"srun accelerate launch --num_processes 4 {SCRIPT}")
    finally:
        del HEADS["tasks"]
    assert [r for r, _ in errors(found)] == ["accelerate-per-node"]


def test_machines_against_the_nodes_that_start_them(tmp_path):
    alone = f"srun accelerate launch --multi_gpu --num_processes 4 {SCRIPT}"
    ((rule, msg),) = errors(judge(tmp_path, "isambard-ai", alone, nodes=2))
    assert rule == "accelerate-machines" and "each node would train on its own" in msg
    batch = f"accelerate launch --multi_gpu --num_processes 8 --num_machines 2 {MULTI} {SCRIPT}"
    ((rule, msg),) = errors(judge(tmp_path, "isambard-ai", batch, nodes=2))
    assert rule == "accelerate-machines" and "the batch script's node only" in msg


def test_static_rendezvous_under_srun_is_an_error(tmp_path):
    line = "srun accelerate launch --multi_gpu --num_processes 8 --num_machines 2 "
    line += f'--machine_rank "$SLURM_NODEID" --main_process_ip "$MAIN" {SCRIPT}'
    ((rule, msg),) = errors(judge(tmp_path, "isambard-ai", line, nodes=2))
    assert rule == "accelerate-machine-rank" and "--rdzv_backend c10d" in msg


def test_several_machines_need_an_address(tmp_path):
    line = "srun accelerate launch --multi_gpu --num_processes 8 --num_machines 2 "
    line += f"--rdzv_backend c10d --machine_rank 0 {SCRIPT}"
    ((rule, _),) = errors(judge(tmp_path, "isambard-ai", line, nodes=2))
    assert rule == "accelerate-main-process"


def test_one_gpu_nodes_need_a_distributed_mode(tmp_path):
    line = f"srun accelerate launch --num_processes 2 --num_machines 2 {MULTI} {SCRIPT}"
    rules = [r for r, _ in errors(judge(tmp_path, "bede", line, nodes=2))]
    assert rules == ["accelerate-distributed"]


def test_the_training_scripts_options_are_judged_by_its_parser(tmp_path):
    line = f"srun accelerate launch --num_processes 4 {SCRIPT} --batch-sise 8"
    ((rule, msg),) = errors(judge(tmp_path, "isambard-ai", line))
    assert rule == "script-flag-unknown" and "--batch-sise" in msg


def test_python_m_accelerate_is_judged_as_accelerate_launch(tmp_path):
    line = f"srun python -m accelerate.commands.launch --num_processes 8 {SCRIPT}"
    assert [r for r, _ in errors(judge(tmp_path, "isambard-ai", line))] == ["accelerate-gpus"]


def test_an_unknown_subcommand(tmp_path):
    ((rule, msg),) = errors(judge(tmp_path, "isambard-ai", f"srun accelerate lauch {SCRIPT}"))
    assert rule == "accelerate-option" and "'lauch'" in msg


@pytest.mark.parametrize(
    ("site", "script"),
    [
        ("isambard-ai", "isambard-ai/hf-finetune-1node.sbatch"),
        ("isambard-ai", "isambard-ai/hf-finetune-multinode.sbatch"),
        ("frontier", "frontier/hf-finetune-1node.sbatch"),
        ("frontier", "frontier/hf-finetune-multinode.sbatch"),
        ("bede", "bede/hf-finetune-gh200.sbatch"),
        ("bede", "bede/hf-finetune-gh200-multinode.sbatch"),
    ],
)
def test_the_examples_pass_and_their_launch_lines_were_judged(site, script):
    report = check_job_file(ROOT / "examples" / script, load_site(site))
    assert report.findings == []
    checked = report.plan["scripts_checked"]
    assert [c["script"] for c in checked] == ["finetune_hf.py"]


def test_frontier_steps_get_the_gpus_they_ask_for(tmp_path):
    body = "srun --ntasks-per-node=1 --cpus-per-task=56 --gpus-per-node=8 "
    body += f"accelerate launch --num_processes 16 {SCRIPT}"
    found = errors(judge(tmp_path, "frontier", body))
    assert [r for r, _ in found] == ["accelerate-gpus"] and "8 GPU(s)" in found[0][1]


# --------------------------------------------------------------------------- deepspeed
def test_deepspeed_more_gpus_than_the_node_holds(tmp_path):
    line = f"srun deepspeed --num_gpus 8 {SCRIPT}"
    ((rule, msg),) = errors(judge(tmp_path, "isambard-ai", line))
    assert rule == "deepspeed-gpus" and "--num_gpus 8" in msg


def test_deepspeed_misspelt_option_names_the_one_meant(tmp_path):
    line = f"srun deepspeed --num_gpsu 4 {SCRIPT}"
    assert errors(judge(tmp_path, "isambard-ai", line)) == [
        (
            "deepspeed-option",
            "deepspeed: error: unrecognized arguments: --num_gpsu (did you mean --num_gpus?)",
        )
    ]


def test_deepspeed_takes_abbreviations_as_its_parser_does(tmp_path):
    assert errors(judge(tmp_path, "isambard-ai", f"srun deepspeed --num_gpu 4 {SCRIPT}")) == []


def test_deepspeed_include_and_hostfile_slots(tmp_path):
    line = f'srun deepspeed --include "localhost:0,1,2,3,4" {SCRIPT}'
    assert [r for r, _ in errors(judge(tmp_path, "isambard-ai", line))] == ["deepspeed-gpus"]
    (tmp_path / "hostfile").write_text("# the job's nodes\nnode1 slots=8\nnode2 slots=8\n")
    line = f"deepspeed --hostfile hostfile {SCRIPT}"
    found = errors(judge(tmp_path, "isambard-ai", line, nodes=2))
    assert [r for r, _ in found] == ["deepspeed-gpus"] and "8 processes per node" in found[0][1]


def test_deepspeed_nodes_under_srun(tmp_path):
    line = f"srun deepspeed --num_gpus 4 --num_nodes 4 --no_ssh --node_rank 0 {SCRIPT}"
    ((rule, _),) = errors(judge(tmp_path, "isambard-ai", line, nodes=2))
    assert rule == "deepspeed-machines"


def test_deepspeed_clean_line_passes_and_follows_the_script(tmp_path):
    line = f"srun deepspeed --num_gpus 4 --num_nodes 2 --no_ssh {SCRIPT} --batch-size 2"
    assert errors(judge(tmp_path, "isambard-ai", line, nodes=2)) == []
    line = f"srun deepspeed --num_gpus 4 {SCRIPT} --batch-sise 2"
    assert [r for r, _ in errors(judge(tmp_path, "isambard-ai", line))] == ["script-flag-unknown"]


# --------------------------------------------------------------------------- on a page
@pytest.mark.parametrize(
    ("command", "rule"),
    [
        (f"accelerate launch --num_proceses 4 {SCRIPT}", "accelerate-option"),
        (f"accelerate launch --num_processes 8 {SCRIPT}", "accelerate-gpus"),
        (f"deepspeed --num_gpsu 4 {SCRIPT}", "deepspeed-option"),
        (f"accelerate launch --num_processes 4 {SCRIPT}", None),
    ],
)
def test_commands_on_a_page(command, rule):
    _how, findings, _ = check_shell_text(command + "\n", "page.md", 10, load_site("isambard-ai"))
    got = [f.rule for f in findings if f.level == "error"]
    assert got == ([rule] if rule else []), findings
    if rule == "accelerate-option":
        assert "did you mean --num_processes?" in findings[0].message


def test_a_step_without_gpus_is_told_without_a_device_option(tmp_path):
    """finetune_hf.py has no --device: the finding asks for the GPUs and names no such option."""
    body = (
        f"srun --ntasks-per-node=1 --cpus-per-task=56 accelerate launch --num_processes 8 {SCRIPT}"
    )
    ((rule, msg),) = errors(judge(tmp_path, "frontier", body))
    assert rule == "gpu-not-requested" and "trains on the CPU" in msg and "--device" not in msg
