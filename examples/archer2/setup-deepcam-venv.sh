#!/bin/bash
# A Python virtual environment on top of an ARCHER2 PyTorch module, with the two extra
# packages DeepCam needs: MLCommons' mlperf-logging and a gradual-warm-up LR scheduler.
#
#   bash setup-deepcam-venv.sh gpu     # venv mlperf-pt-gpu on pytorch/2.9.1-gpu (GPU nodes)
#   bash setup-deepcam-venv.sh cpu     # venv mlperf-pt     on pytorch/2.9.1a0  (CPU nodes)
#
# Run it from a login node of the same kind as the nodes the jobs use; the venv lives on
# /work, the only file system the compute nodes see.
set -euo pipefail

target=${1:-gpu}
if [ "$target" = gpu ]; then
    module -q load pytorch/2.9.1-gpu
    name=mlperf-pt-gpu
elif [ "$target" = cpu ]; then
    module -q load pytorch/2.9.1a0
    name=mlperf-pt
else
    echo "usage: $0 gpu|cpu" >&2
    exit 2
fi

# /home/<project>/<project>/<user> -> /work/<project>/<project>/<user>
venv_root=${HOME/home/work}/pyenvs/$name

# --system-site-packages: the venv sees the module's PyTorch instead of installing its own.
python -m venv --system-site-packages "$venv_root"
# ARCHER2's helper: activating the venv then also loads the module environment it was made on.
extend-venv-activate "$venv_root"
# shellcheck source=/dev/null
source "$venv_root/bin/activate"

# Pinned to the branch the MLPerf HPC 1.0 rules were written against; a plain (non-editable)
# install, so nothing in the venv points back at a source checkout.
python -m pip install "mlperf-logging @ git+https://github.com/mlcommons/logging.git@hpc-1.0-branch"
python -m pip install "warmup-scheduler @ git+https://github.com/ildoonet/pytorch-gradual-warmup-lr.git"

python -c "import torch, mlperf_logging, warmup_scheduler; print('torch', torch.__version__)"
deactivate
