#!/bin/bash
# The Python environment of the Cirrus recipes: a venv on /work, made from HPE Cray Python as
# EPCC's Python guide describes (--system-site-packages: the venv sees cray-python's own
# packages, such as the mpi4py and numpy built for Cirrus), with PyTorch's CPU build,
# TensorFlow's CPU-only wheel and webdataset, which the PyTorch trainer reads shards with.
#
# Run it once on a login node:   bash setup-venv.sh
# (VENV=/some/other/dir bash setup-venv.sh puts the venv elsewhere; set the same VENV for jobs.)
set -euo pipefail

module load PrgEnv-gnu      # GCC, in case pip has to compile something
module load cray-python     # Python 3.11; no Python module is loaded at login

# /home/<project>/<project>/<user> -> /work/<project>/<project>/<user>: compute nodes see /work only
VENV=${VENV:-${HOME/home/work}/venvs/cirrus-ml}

python -m venv --system-site-packages "$VENV"
# shellcheck source=/dev/null
source "$VENV/bin/activate"
# PyTorch's CPU index: PyPI's Linux torch would also pull in NVIDIA's CUDA libraries.
python -m pip install torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cpu
python -m pip install tensorflow-cpu==2.21.0 webdataset==1.0.2

python -c "import torch, torchvision, tensorflow as tf, webdataset; print('torch', torch.__version__, 'tensorflow', tf.__version__)"
deactivate
