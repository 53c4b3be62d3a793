#!/bin/bash
# The real-data figures of a GPU node in one command: ResNet-50 from a folder of 10,200
# ImageNet-sized JPEGs (500 x 375, 100 classes) and from WebDataset shards of it, each loader
# against synthetic batches, and the trainer against pytorch/examples' imagenet/main.py at its
# defaults on the same folder. Writes three JSON records into OUT (default results/bench).
#
#   REFERENCE=/path/to/pytorch-examples/imagenet/main.py bash benchmarks/gpu_real_data.sh OUT
#
# Settings by environment: DATA (where the folder is made; default /dev/shm/jpegs, in memory),
# DEVICE (cuda), BATCH (256), WORKERS ("4 8 15": loader processes to try; the largest is used
# for training), CLASSES and PER_CLASS (100 and 100, plus 2 validation images a class), STEPS
# (60 training steps a run), RACE_STEPS (30 timed steps a round, after 5: main.py trains one
# epoch, 39 steps of 256), ARCH (resnet50), ROUNDS (3). A quick check on a CPU:
#   DEVICE=cpu BATCH=4 WORKERS="1 2" CLASSES=4 PER_CLASS=8 STEPS=4 RACE_STEPS=3 ARCH=resnet18 \
#       LOADER_BATCHES=3 LOADER_WARMUP=1 ROUNDS=1 REFERENCE=... bash benchmarks/gpu_real_data.sh /tmp/out
# (LOADER_BATCHES and LOADER_WARMUP: batches of each loader alone, 20 and 5.)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/bench}
data=${DATA:-/dev/shm/jpegs}
device=${DEVICE:-cuda}
batch=${BATCH:-256}
read -r -a workers <<< "${WORKERS:-4 8 15}"
arch=${ARCH:-resnet50}
steps=${STEPS:-60}
fast=(--trainer-flag=--precision=bf16 --trainer-flag=--channels-last)
[ "$device" = cpu ] && fast=()
mkdir -p "$out"
python --version
nproc
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true; } 2>/dev/null

if [ ! -d "$data/train" ]; then
    python benchmarks/make_jpeg_folder.py "$data" --classes "${CLASSES:-100}" \
        --train-per-class "${PER_CLASS:-100}" --val-per-class 2 --jobs "$(nproc)"
fi

# each loader alone, and the trainer on synthetic batches, the folder and shards of it
python benchmarks/bench_data.py --data-dir "$data" --device "$device" --arch "$arch" \
    --forms folder shards --loaders cpu gpu-decode --workers "${workers[@]}" \
    --batch-size "$batch" --batches "${LOADER_BATCHES:-20}" --warmup "${LOADER_WARMUP:-5}" \
    --train-steps "$steps" --repeats 2 \
    "${fast[@]}" --output "$out/$device-$arch-real-data.json"

# the trainer against pytorch/examples on the same folder (its defaults: fp32, its transforms)
if [ -n "${REFERENCE:-}" ]; then
    python benchmarks/race_pytorch_examples.py --reference "$REFERENCE" --device "$device" \
        --data-dir "$data" --arch "$arch" --batch-size "$batch" --workers "${workers[-1]}" \
        --threads 1 --warmup 5 --steps "${RACE_STEPS:-30}" --rounds "${ROUNDS:-3}" "${fast[@]}" \
        --output "$out/$device-$arch-vs-pytorch-examples-folder.json"
else
    echo "REFERENCE is not set: no race against pytorch/examples" >&2
fi
