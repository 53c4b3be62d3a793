"""What check-job says of the scripts sites publish, where a first reading was wrong or silent:
partition lists on a site without a profile, other schedulers' directives, lines that only
look like directives (a usage note, a nested job's here-document), --mail-type given twice,
placeholders Slurm takes as written, $0 in a batch job, variables never set, stale commands
from the registry, a misspelt option with a profile, the Slurm release a site runs, and how
Cirrus's Slurm counts CPUs."""

from __future__ import annotations

import copy
import textwrap
from dataclasses import replace

import pytest

from clusterkit.cli import main
from clusterkit.emulate.checkjob import check_job_file
from clusterkit.sites.profiles import load_site

GENERIC = load_site("generic")
FRONTIER = load_site("frontier")
BEDE = load_site("bede")
CIRRUS = load_site("cirrus")
ARCHER2 = load_site("archer2")
SUMMIT = load_site("summit")


def judge(tmp_path, text: str, site=GENERIC, name: str = "job.sbatch"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return check_job_file(path, site)


def found(report, level: str | None = None) -> list[tuple[int, str]]:
    return [(f.line, f.rule) for f in report.findings if level in (None, f.level)]


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(["check-job", *argv])
    return exit_info.value.code, capsys.readouterr().err


# --------------------------------------------------------------------------- partitions
def test_a_partition_list_is_any_partitions_on_the_generic_site(tmp_path):
    report = judge(tmp_path, "#!/bin/bash\n#SBATCH -p gpu,gpu-long\n#SBATCH -N 1\nsrun hostname\n")
    assert report.errors == [], report.errors
    # a profile still judges every name of the list against its partitions
    text = "#!/bin/bash\n#SBATCH -A ABC123 -p batch,nosuch -N 1 -t 10\nsrun hostname\n"
    assert (2, "partition-exists") in found(judge(tmp_path, text, FRONTIER), "error")


# --------------------------------------------------------------------------- other schedulers
PBS = """
#!/bin/bash
#PBS -N test
#PBS -l select=1:ncpus=128
#PBS -l walltime=01:00:00
cd $PBS_O_WORKDIR
mpiexec -n 128 ./a.out
"""


def test_a_pbs_script_is_not_a_slurm_script(tmp_path, capsys):
    report = judge(tmp_path, PBS)
    [error] = report.errors
    assert (error.line, error.rule) == (2, "foreign-directives")
    assert "3 #PBS line(s) (lines 2-4)" in error.message and "no #SBATCH line" in error.message
    assert "sbatch translates a few #PBS options" in error.message
    path = str(tmp_path / "job.sbatch")
    assert run_cli(capsys, "--site", "generic", path)[0] == 1
    status, err = run_cli(capsys, "--site", "generic", "--allow-foreign", path)
    assert status == 0 and "warning: [foreign-directives]" in err


def test_an_lsf_script_under_slurm_and_a_slurm_script_under_lsf(tmp_path):
    lsf = "#!/bin/bash\n#BSUB -P ABC123\n#BSUB -W 10\n#BSUB -nnodes 1\njsrun -n1 hostname\n"
    assert (2, "foreign-directives") in found(judge(tmp_path, lsf, FRONTIER), "error")
    slurm = "#!/bin/bash\n#SBATCH -N 1\n#SBATCH -t 10\nsrun hostname\n"
    report = judge(tmp_path, slurm, SUMMIT, name="job.lsf")
    [foreign] = [f for f in report.errors if f.rule == "foreign-directives"]
    assert foreign.line == 2 and "bsub reads #BSUB lines only" in foreign.message


# --------------------------------------------------------------------------- not directives
def test_a_usage_note_and_a_nested_jobs_here_document_are_not_directives(tmp_path):
    report = judge(
        tmp_path,
        """
        #!/bin/bash
        # Submit with:
        #   sbatch --nodes=N --time=HH:MM:SS this.sh
        #SBATCH -N 1
        sbatch <<EOF
        #!/bin/bash
        #SBATCH --nodes=2
        #SBATCH --time=00:10:00
        srun hostname
        EOF
        # SBATCH --time=1
        """,
    )
    assert found(report) == [(11, "directive-ignored")], report.findings


# --------------------------------------------------------------------------- mail
@pytest.mark.parametrize(
    ("site", "told"),
    [(GENERIC, True), (FRONTIER, True), (BEDE, False)],
    ids=["25.11", "25.11-frontier", "22.05"],
)
def test_a_second_mail_type_replaces_the_first_from_slurm_25_05(tmp_path, site, told):
    text = """
    #!/bin/bash
    #SBATCH -A ABC123 -N 1 -t 10
    #SBATCH --mail-type=BEGIN
    #SBATCH --mail-type=END,FAIL
    srun hostname
    """
    notes = [f for f in judge(tmp_path, text, site).findings if f.rule == "mail-type-replaced"]
    assert bool(notes) == told, notes
    if told:
        [note] = notes
        assert note.line == 4 and note.level == "warning"
        assert (
            "(BEGIN) are dropped" in note.message and "--mail-type=BEGIN,END,FAIL" in note.message
        )
    same = text.replace("END,FAIL", "BEGIN")
    assert not [f for f in judge(tmp_path, same, site).findings if f.rule == "mail-type-replaced"]


def test_a_mail_user_placeholder_is_not_said_to_be_refused(tmp_path):
    text = "#!/bin/bash\n#SBATCH -N 1 --mail-user=username@example.org\nsrun hostname\n"
    [note] = [f for f in judge(tmp_path, text).findings if f.rule == "placeholder"]
    assert "would refuse" not in note.message and "1024 characters" in note.message


# --------------------------------------------------------------------------- the shell
@pytest.mark.parametrize(
    "line",
    [
        'cd "$(dirname "$0")"',
        "HERE=$(dirname $(realpath $0))",
        'source "${BASH_SOURCE[0]%/*}/env.sh"',
        'HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)',
    ],
)
def test_the_script_folder_from_0_is_slurmds_spool(tmp_path, line):
    report = judge(tmp_path, f"#!/bin/bash\n#SBATCH -N 1\n{line}\nsrun hostname\n")
    [note] = [f for f in report.findings if f.rule == "script-dir"]
    assert note.line == 3 and note.level == "warning"
    assert "/var/spool/slurmd/job123/slurm_script" in note.message
    assert "$SLURM_SUBMIT_DIR" in note.message


@pytest.mark.parametrize(
    "line", ['echo "running $0"', 'HERE=${SLURM_SUBMIT_DIR:-$(dirname "$0")}', "# cd $(dirname $0)"]
)
def test_0_alone_or_after_slurm_submit_dir_is_not_reported(tmp_path, line):
    report = judge(tmp_path, f"#!/bin/bash\n#SBATCH -N 1\n{line}\nsrun hostname\n")
    assert not [f for f in report.findings if f.rule == "script-dir"]


def test_a_variable_never_set_is_named(tmp_path):
    report = judge(
        tmp_path,
        """
        #!/bin/bash
        #SBATCH -N 1
        ORCA_EXEC=/opt/orca/orca
        data_dir=/scratch/data
        srun singularity exec -B /scratch $IMAGE python train.py --data $data_dirr
        $orca_exec input.inp
        """,
    )
    notes = {
        f.message.split()[0]: f.line for f in report.findings if f.rule == "variable-never-set"
    }
    assert notes == {"$IMAGE": 5, "$data_dirr": 5, "$orca_exec": 6}, report.findings
    assert all(f.level == "warning" for f in report.findings if f.rule == "variable-never-set")


@pytest.mark.parametrize(
    "body",
    [
        "srun python train.py --out ${out_dir:-/tmp} --in ${in_dir:?give it}",
        "srun python train.py --n $SLURM_NTASKS --home $HOME --cache $http_proxy",
        "module load pytorch\nsrun singularity exec $SIF python train.py",  # a module may set it
        "source ./settings.sh\nsrun python train.py --data $data_dir",  # a sourced file may
        "for f in a b; do echo $f; done\nread -r line < x; echo $line",
        "export -f x 2>/dev/null; declare -a files; echo ${files[0]}",
    ],
)
def test_what_may_be_set_elsewhere_is_not_reported(tmp_path, body):
    report = judge(tmp_path, f"#!/bin/bash\n#SBATCH -N 1\n{body}\n")
    assert not [f for f in report.findings if f.rule == "variable-never-set"], report.findings


# --------------------------------------------------------------------------- stale commands
@pytest.mark.parametrize("site", [GENERIC, FRONTIER], ids=["generic", "frontier"])
def test_the_deprecated_launcher_is_a_warning_in_a_job_script(tmp_path, site):
    report = judge(
        tmp_path,
        """
        #!/bin/bash
        #SBATCH -A ABC123 -N 1 -t 10
        srun python -m torch.distributed.launch --nproc_per_node=8 train.py
        """,
        site,
    )
    [note] = [f for f in report.findings if f.rule == "deprecated:torch-distributed-launch"]
    assert note.line == 3 and note.level == "warning" and "torchrun" in note.message
    assert not [f for f in report.errors if f.rule.startswith("deprecated")]


def test_a_historical_script_is_not_told_again(tmp_path):
    report = judge(
        tmp_path,
        """
        #!/bin/bash
        # HISTORICAL: torch.distributed.launch, as PyTorch 1.8 had it. Replaced by: torchrun.
        #SBATCH -N 1
        srun python -m torch.distributed.launch train.py
        """,
    )
    assert not [f for f in report.findings if f.rule.startswith("deprecated")]


# --------------------------------------------------------------------------- options
@pytest.mark.parametrize("site", [GENERIC, FRONTIER], ids=["generic", "frontier"])
def test_a_misspelt_option_gets_one_did_you_mean_everywhere(tmp_path, site):
    report = judge(
        tmp_path,
        "#!/bin/bash\n#SBATCH -A ABC123 -N 1 -t 10\n#SBATCH --partion=batch\nsrun x\n",
        site,
    )
    [error] = [f for f in report.errors if f.line == 3]
    assert error.rule == "sbatch-option" and "(did you mean --partition?)" in error.message


def _at_release(site, release: str):
    data = copy.deepcopy(site.data)
    data["scheduler"]["release"] = release
    return replace(site, data=data)


def test_frontier_judges_the_options_of_its_slurm_release(tmp_path):
    text = "#!/bin/bash\n#SBATCH -A ABC123 -N 1 -t 10\n#SBATCH --consolidate-segments\nsrun x\n"
    assert FRONTIER.slurm_release == "25.11"
    assert judge(tmp_path, text, FRONTIER).errors == []  # an option Slurm 25.11 added
    [error] = judge(tmp_path, text, _at_release(FRONTIER, "24.11")).errors
    assert error.line == 3 and "Slurm 24.11's sbatch has no --consolidate-segments" in error.message
    assert "did you mean" not in error.message
    assert judge(tmp_path, text, GENERIC).errors == []  # any release's options
    step = "#!/bin/bash\n#SBATCH -A ABC123 -N 1 -t 10\nsrun --consolidate-segments hostname\n"
    assert judge(tmp_path, step, FRONTIER).errors == []
    [error] = judge(tmp_path, step, _at_release(FRONTIER, "24.11")).errors
    assert error.rule == "srun-option" and "Slurm 24.11's srun" in error.message


# --------------------------------------------------------------------------- Cirrus
# The OpenMP example of Cirrus's batch guide (EPCCed/cirrus-docs 7b569d0,
# docs/user-guide/batch.md lines 669-708): one task of 12 CPUs, threads placed by srun with
# --hint=nomultithread; EPCC says the job gets one 12-core CCD and one thread per core.
OPENMP = """
#!/bin/bash
#SBATCH --job-name=omp --time=0:20:0 --nodes=1 --tasks-per-node=1 --cpus-per-task={cpus}
#SBATCH --account=t01 --partition=standard --qos=standard
export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK
srun --hint=nomultithread --distribution=block:block ./my_openmp_executable.x
"""


@pytest.mark.parametrize("site", [CIRRUS, ARCHER2, GENERIC], ids=["cirrus", "archer2", "generic"])
def test_cirrus_openmp_example_runs(tmp_path, site):
    report = judge(tmp_path, OPENMP.format(cpus=12), site)
    assert report.errors == [], report.errors
    if site is CIRRUS:
        assert report.plan["cpus_per_node"] == 12  # 12 cores: Cirrus's Slurm counts cores
        assert report.plan["steps"][0]["cpus_per_task"] == 12


def test_a_step_larger_than_its_cirrus_job_is_still_refused(tmp_path):
    text = OPENMP.format(cpus=12).replace("block:block", "block:block --cpus-per-task=24")
    assert (6, "step-cpus") in found(judge(tmp_path, text, CIRRUS), "error")


def test_a_site_counting_threads_needs_twice_the_cpus_under_nomultithread(tmp_path):
    # the same job where Slurm counts hardware threads as CPUs (the schema's default): the job
    # holds 6 cores (12 threads) and srun --hint=nomultithread asks for 12 cores
    data = copy.deepcopy(CIRRUS.data)
    for node in data["node_types"].values():
        node.pop("slurm_cpu")
    threads = replace(CIRRUS, data=data)
    assert (6, "step-cpus") in found(judge(tmp_path, OPENMP.format(cpus=12), threads), "error")
