#!/usr/bin/env bash
# The GPU check, one script of under 10 minutes: the CUDA tests of the DBM stages, then
# `ucd_train_step` on CUDA at 784-784-784 and at the paper's 6,272-6,272-6,272 (batch 1,000, with
# its projection of 100,000 steps), then the TAP benchmarks on CUDA (`tap_iteration`, `tap_epoch`
# and, where checkpoints are given, `tap_solve`), then how far the FID feature network's family gets
# on binary Fashion-MNIST when trained for up to 60 epochs (`classifier_ceiling.py`).
#
#   benchmarks/gpu_check.sh OUTDIR [CHECKPOINTS]
#
# Needs python3 with torch (CUDA build), numpy, pandas, pyyaml and pytest; not mlflow or snakemake
# (the benchmarks run with --no-tracking). Binary MNIST is read from results/data/ when present.
# About 8 minutes on one H100. Each part has its own time limit, so that a slow part cannot take
# the rest with it, and writes its own file under OUTDIR.
set -uo pipefail
out=${1:?usage: benchmarks/gpu_check.sh OUTDIR [CHECKPOINTS]}
checkpoints=${2:-}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/src:$PWD PYTHONUNBUFFERED=1
py=${PYTHON:-python3}

{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    $py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
        torch.cuda.get_device_name() if torch.cuda.is_available() else "NO CUDA DEVICE")'
} 2>&1 | tee "$out/environment.txt"

timeout 180 $py -m pytest -q -p no:cacheprovider -rs tests/ucd/test_ucd_device.py 2>&1 |
    tee "$out/cuda_tests.txt"

bench=($py benchmarks/run.py --device cuda --no-tracking)
for sizes in 784,784,784 6272,6272,6272; do
    timeout 150 "${bench[@]}" ucd_train_step --ucd-sizes "$sizes" --ucd-batch 1000 2>&1
done | tee "$out/ucd_train_step.jsonl"

timeout 120 "${bench[@]}" tap_iteration tap_epoch 2>&1 | tee "$out/tap.jsonl"
if [[ -n $checkpoints ]]; then
    timeout 150 "${bench[@]}" tap_solve --checkpoints "$checkpoints" 2>&1 | tee "$out/tap_solve.jsonl"
fi
if [[ -f results/data/binary_fashion_mnist.npz ]]; then
    timeout 330 $py benchmarks/classifier_ceiling.py --device cuda 2>&1 |
        tee "$out/classifier_ceiling.jsonl"
fi
