"""What the real tools refuse, what they accept but do not do as written, and what they accept
that the emulator once refused: one test each, with the tool's own words where it has them.

The Slurm wordings are those of Slurm 22.05 (sbatch.c, libsrun/opt.c, srun_job.c; the version
CI's real Slurm runs); the Summit limits come from its profile.
"""

from __future__ import annotations

import pytest

from clusterkit.emulate.checkjob import check_job_file
from clusterkit.emulate.lsf import check_lsf_script
from clusterkit.emulate.report import with_ranks
from clusterkit.emulate.sbatch import check_slurm_script
from clusterkit.sites.profiles import load_site

BEDE, ARCHER2, SUMMIT = (load_site(s) for s in ("bede", "archer2", "summit"))
GPU = BEDE.partitions["gpu"]
STANDARD = ARCHER2.partitions["standard"]
BATCH = SUMMIT.partitions["batch"]


def _bede(*directives: str, body: str = "srun hostname\n") -> str:
    head = f"#!/bin/bash\n#SBATCH -A {BEDE.account['example']}\n#SBATCH -p {GPU.name}\n"
    return head + "".join(f"#SBATCH {d}\n" for d in directives) + body


def _summit(*directives: str, body: str = "jsrun -n1 hostname\n") -> str:
    head = f"#!/bin/bash\n#BSUB -P {SUMMIT.account['example']}\n"
    return head + "".join(f"#BSUB {d}\n" for d in directives) + body


def _findings(report, rule: str) -> list:
    return [f for f in report.findings if f.rule == rule]


def _file(tmp_path, text: str | bytes, name: str = "job.sh"):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


# --------------------------------------------------------------------------- the script itself
def test_dos_line_breaks(tmp_path):
    text = _bede("-N 1").replace("\n", "\r\n")
    slurm = check_job_file(_file(tmp_path, text), BEDE)
    [f] = _findings(slurm, "script-dos-line-breaks")
    assert f.level == "error" and f.line == 1
    assert "Batch script contains DOS line breaks (\\r\\n) instead of expected UNIX" in f.message
    # LSF takes the script; bash then trips on every \r: a warning
    lsf = check_job_file(
        _file(tmp_path, _summit("-W 10", "-nnodes 1").replace("\n", "\r\n")), SUMMIT
    )
    [g] = _findings(lsf, "script-dos-line-breaks")
    assert g.level == "warning" and "command not found" in g.message and lsf.errors == []


def test_first_line_must_be_a_shebang_for_sbatch_only(tmp_path):
    text = _bede("-N 1").removeprefix("#!/bin/bash\n")
    [f] = check_job_file(_file(tmp_path, text), BEDE).errors
    assert f.rule == "script-shebang" and f.line == 1
    assert "This does not look like a batch script.  The first line must start with #!" in str(f)
    lsf = check_job_file(_file(tmp_path, _summit("-W 10", "-nnodes 1").split("\n", 1)[1]), SUMMIT)
    assert lsf.errors == [] and not _findings(lsf, "script-shebang")


# --------------------------------------------------------------------------- srun steps
def test_srun_step_over_the_allocation_fails_to_start():
    # -N2 --ntasks-per-node=2: 2 tasks of 1 CPU per node, rounded up to one whole core
    tpc = GPU.node_type.threads_per_core
    held = 2 * tpc
    ok = check_slurm_script(
        "j", BEDE, text=_bede("-N 2", "--ntasks-per-node=2", body=f"srun -n {held} hostname\n")
    )
    assert ok.errors == []
    over = check_slurm_script(
        "j",
        BEDE,
        text=_bede("-N 2", "--ntasks-per-node=2", body=f"srun -n {2 * held + 1} hostname\n"),
    )
    [f] = over.errors
    assert f.rule == "step-cpus" and f.line == 6
    assert (
        "srun: error: Unable to create step for job 1000: More processors requested than permitted"
        in f.message
    )
    cpus = check_slurm_script(
        "j", BEDE, text=_bede("-n 1", body=f"srun -n 1 -c {tpc + 1} hostname\n")
    )
    assert [e.rule for e in cpus.errors] == ["step-cpus"]
    nodes = check_slurm_script("j", BEDE, text=_bede("-N 2", body="srun -N 3 hostname\n"))
    assert [str(e).split("] ", 1)[1] for e in nodes.errors] == [
        "srun: error: Only allocated 2 nodes asked for 3"
    ]
    # a job that holds its nodes exclusively may start a task on every CPU of them
    whole = check_slurm_script(
        "j",
        BEDE,
        text=_bede("-n 1", "--exclusive", body=f"srun -n {GPU.node_type.cpus} hostname\n"),
    )
    assert whole.errors == []


def test_srun_ntasks_that_disagree_with_nodes_and_tasks_per_node():
    report = check_slurm_script(
        "j", BEDE, text=_bede("-N 2", "--ntasks-per-node=2", body="srun -n 3 hostname\n")
    )
    [f] = _findings(report, "step-ntasks-per-node")
    assert f.level == "warning" and f.line == 6
    assert f.message == (
        "srun: Warning: can't honor --ntasks-per-node set to 2 which doesn't match the requested "
        "tasks 3 with the number of requested nodes 2. Ignoring --ntasks-per-node."
    )
    assert report.plan["steps"][0]["ntasks"] == 3 and report.errors == []
    # as many tasks as nodes x tasks per node: nothing to say
    same = check_slurm_script(
        "j", BEDE, text=_bede("-N 2", "--ntasks-per-node=2", body="srun -n 4 hostname\n")
    )
    assert not _findings(same, "step-ntasks-per-node")
    fewer = check_slurm_script("j", BEDE, text=_bede("-N 2", body="srun -n 1 hostname\n"))
    [g] = _findings(fewer, "step-nodes")
    assert g.message == "srun: Warning: can't run 1 processes on 2 nodes, setting nnodes to 1"


# --------------------------------------------------------------------------- jsrun and bsub
def test_jsrun_packed_binding_over_the_cores_of_a_resource_set():
    cores = BATCH.node_type.usable_cores // BATCH.node_type.gpus
    body = f"jsrun -n 6 -a 2 -c {cores} -g 1 -b packed:{cores} hostname\n"
    [f] = check_lsf_script("j", SUMMIT, text=_summit("-W 10", "-nnodes 1", body=body)).errors
    assert f.rule == "bind-cores" and f"= {2 * cores} cores" in f.message
    # and jsrun's own warning when a task is told to run more threads than it has
    threads = (cores // 2) * 4 * 2
    body = (
        f"jsrun -n 6 -a 2 -c {cores} -g 1 -b packed:{cores // 2} -E OMP_NUM_THREADS={threads} x\n"
    )
    report = check_lsf_script("j", SUMMIT, text=_summit("-W 10", "-nnodes 1", body=body))
    [g] = _findings(report, "jsrun-omp-threads")
    assert g.message.startswith(
        f"jsrun: Warning: OMP_NUM_THREADS={threads} is greater than available PU's"
    )


def _bins():
    low = 1
    for b in BATCH.raw["walltime_by_nodes"]:
        yield low, b["max_nodes"], b["max_walltime"]
        low = b["max_nodes"] + 1


@pytest.mark.parametrize(("low", "high", "limit"), list(_bins()))
def test_summit_walltime_depends_on_the_node_count(low, high, limit):
    hours, minutes = limit.split(":")[:2]
    over = f"{int(hours)}:{int(minutes) + 1:02d}"
    for nodes in (low, high):
        ok = check_lsf_script(
            "j", SUMMIT, text=_summit(f"-W {hours}:{minutes}", f"-nnodes {nodes}")
        )
        assert ok.errors == [], ok.errors
        if BATCH.walltime_limit(nodes)[0] < BATCH.max_walltime_s:
            bad = check_lsf_script("j", SUMMIT, text=_summit(f"-W {over}", f"-nnodes {nodes}"))
            [f] = bad.errors
            assert f.rule == "walltime-bin" and f.line == 3
            assert f"for {low}-{high} nodes" in f.message


# --------------------------------------------------------------------------- lost requests
def test_a_directive_after_the_first_command_is_lost():
    text = _bede("-N 1", body="echo start\n#SBATCH --gres=gpu:4\nsrun hostname\n")
    report = check_slurm_script("j", BEDE, text=text)
    [f] = _findings(report, "directive-ignored")
    assert f.level == "warning" and f.line == 6 and "after the first command (line 5)" in f.message
    assert report.plan["gpus_per_node"] == 0  # the GPUs the writer asked for are not there


@pytest.mark.parametrize(
    ("line", "read"),
    [
        ("# SBATCH --gres=gpu:4", False),
        ("  #SBATCH --gres=gpu:4", False),
        ("#sbatch --gres=gpu:4", False),
        ("#SBATCH--gres=gpu:4", True),
        ("#SLURM --gres=gpu:4", True),
    ],
)
def test_lines_that_look_like_directives(line, read):
    report = check_slurm_script("j", BEDE, text=_bede("-N 1", body=f"{line}\nsrun hostname\n"))
    assert report.plan["gpus_per_node"] == (4 if read else 0)
    rules = {f.rule for f in report.findings}
    assert ("directive-ignored" in rules) == (not read)
    assert ("directive-prefix" in rules) == line.startswith("#SLURM")


def test_bsub_comment_that_looks_like_a_directive_is_lost():
    report = check_lsf_script(
        "j", SUMMIT, text=_summit("-W 10", body="# BSUB -nnodes 2\njsrun -n1 x\n")
    )
    assert [f.rule for f in report.findings if f.level == "warning"] == ["directive-ignored"]
    assert [f.rule for f in report.errors] == ["nnodes-required"]


# --------------------------------------------------------------------------- accepted
ARCHER2_HETJOB = f"""#!/bin/bash
#SBATCH --time=00:20:00
#SBATCH --exclusive
#SBATCH --export=none
#SBATCH --account={ARCHER2.account["example"]}
#SBATCH --partition=standard
#SBATCH --qos=standard
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8

#SBATCH hetjob

#SBATCH --partition=standard
#SBATCH --qos=standard
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4

srun --distribution=block:block --hint=nomultithread --het-group=0 ./xthi-a &
srun --distribution=block:block --hint=nomultithread --het-group=1 ./xthi-b &
wait
"""


def test_heterogeneous_jobs_are_accepted():
    report = check_slurm_script("het.slurm", ARCHER2, text=ARCHER2_HETJOB)
    assert report.errors == [], report.errors
    assert [(c["nodes"], c["ntasks"]) for c in report.plan["het_components"]] == [(1, 8), (2, 8)]
    steps = report.plan["steps"]
    assert [(s["het_group"], s["nodes"], s["ntasks"]) for s in steps] == [(0, 1, 8), (1, 2, 8)]
    assert steps[0]["nodelist"] != steps[1]["nodelist"]  # components hold nodes of their own
    bad = check_slurm_script(
        "het.slurm", ARCHER2, text=ARCHER2_HETJOB.replace("--het-group=1", "--het-group=2")
    )
    [f] = bad.errors
    assert f.rule == "het-group" and f.line == 19
    assert (
        f.message == "srun: error: Requested het-group offset exceeds highest hetjob index (2 > 1)"
    )


def test_mpmd_steps_take_nodes_in_turn():
    # ARCHER2's shared-MPI_COMM_WORLD example: one allocation of 3 nodes, a step of two parts
    text = (
        f"#!/bin/bash\n#SBATCH --time=00:20:00\n#SBATCH --account={ARCHER2.account['example']}\n"
        "#SBATCH --partition=standard\n#SBATCH --qos=standard\n#SBATCH --nodes=3\n"
        'SHARED_ARGS="--distribution=block:block --hint=nomultithread"\n'
        "srun --het-group=0 --nodes=1 --ntasks-per-node=8 ${SHARED_ARGS} ./xthi-a : \\\n"
        " --het-group=1 --nodes=2 --ntasks-per-node=4 ${SHARED_ARGS} ./xthi-b\n"
    )
    report = check_slurm_script("mpmd.slurm", ARCHER2, text=text)
    assert report.errors == [], report.errors
    assert [s["nodelist"] for s in report.plan["steps"]] == ["standard001", "standard[002-003]"]
    over = check_slurm_script("mpmd.slurm", ARCHER2, text=text.replace("--nodes=3", "--nodes=2"))
    assert [f.message for f in over.errors] == [
        "srun: error: Allocation failure of 2 nodes: job size of 2, already allocated 1 nodes "
        "to previous components."
    ]


def test_shell_arithmetic_over_outside_variables_is_not_evaluable_here():
    srun = check_slurm_script(
        "j", BEDE, text=_bede("-N 1", body="srun -n 4 -c $(($NCORES/$NRS)) hostname\n")
    )
    assert srun.errors == []
    [f] = _findings(srun, "value-not-evaluable")
    assert f.level == "warning" and "NCORES, NRS are set outside the script" in f.message
    jsrun = check_lsf_script(
        "j",
        SUMMIT,
        text=_summit(
            "-W 10",
            "-nnodes 1",
            body="jsrun -n 6 -a 1 -c $(($NCORES/$NRS)) -g 1 -b packed:7 hostname\n",
        ),
    )
    assert jsrun.errors == [] and _findings(jsrun, "value-not-evaluable")
    # arithmetic over what the job itself sets is evaluated, and judged
    known = check_slurm_script(
        "j",
        BEDE,
        text=_bede("-N 2", "--ntasks-per-node=4", body="srun -n $((SLURM_NNODES*4)) hostname\n"),
    )
    assert known.errors == [] and known.plan["steps"][0]["ntasks"] == 8
    too_many = known.text.replace("*4))", "*400))")
    assert [e.rule for e in check_slurm_script("j", BEDE, text=too_many).errors] == ["step-cpus"]
    # sbatch does not expand its directives: there the same text is a refusal
    literal = check_slurm_script("j", BEDE, text=_bede("-N $((2*2))"))
    assert [e.rule for e in literal.errors] == ["option-value"]
    assert "no variable, $((...)) or command in them is expanded" in literal.errors[0].message


def test_plans_of_heterogeneous_jobs_expand_ranks_per_component():
    report = check_slurm_script("het.slurm", ARCHER2, text=ARCHER2_HETJOB)
    steps = with_ranks(report, 2)["steps"]
    assert steps[1]["ranks"][0]["node"] == steps[1]["nodelist"].replace("[", "").split("-")[0]
