#!/usr/bin/env bash
# The GPU check, one script within 10 minutes on one GPU (an H100 or H200): the sum of its
# parts' time limits is 20 + 60 + 50 + 40 + 50 + 130 + 50 + 25 + 40 + 130 s = 595 s (a part past
# its limit is killed 5 s later). In order:
#   1. the CUDA tests: the TAP training steps on captured CUDA graphs against eager ones, to
#      float32 rounding, fixed and converged (tests/train/test_graphs.py), then the DBM stages
#      and the estimators on the device (tests/ucd/test_ucd_device.py,
#      tests/learn/test_learn_device.py);
#   2. `tap_iteration` and `tap_epoch` on CUDA: eager, fused and as captured graphs, with their
#      ratios to the matmul rate on the same shapes;
#   3. `tap_converged_epoch`: bmnist_h500's converged steps (paper.yaml's) eager, as captured
#      chunks and on two CPU threads of this host, projected to an epoch; the chunk sizes and
#      the fused update side by side, the solve's share of a step, the captured couplings'
#      distance from the eager ones step by step, the operations with the most device time;
#   4. `tap_epoch_compiled`: the same fixed-iteration steps as `torch.compile`'s reduce-overhead
#      mode gives them, against the captured ones (which of the two is faster);
#   5. `ucd_train_step` at 784-784-784 and at the paper's 6,272-6,272-6,272 (batch 1,000, with
#      its projection of 100,000 steps);
#   6. `tap_side_by_side`: Fig. 3's four RBMs' converged steps in four processes, one at a time
#      and together on the one GPU (whether independent jobs pay for sharing it);
#   7. with CHECKPOINTS, `tap_solve` on them (120 s more); `tap_converged_epoch` and
#      `tap_side_by_side` then start from CHECKPOINTS/bmnist_h{25,50,100,500}/epoch_10.pt, or
#      the latest epoch there;
#   8. with GPU_CHECK_CEILING=1, how far the FID feature network's family gets on binary
#      Fashion-MNIST in up to 60 epochs (`classifier_ceiling.py`, 330 s more: beyond the budget).
#
#   benchmarks/gpu_check.sh OUTDIR [CHECKPOINTS]
#   GPU_CHECK_PARTS="tap_converged_epoch tap_side_by_side" benchmarks/gpu_check.sh OUTDIR
#
# GPU_CHECK_PARTS names the parts to run (default: all of them; `environment` always runs).
# GPU_CHECK_DEVICE (default cuda) and GPU_CHECK_QUICK=1 (the benchmarks' --quick) run the same
# parts elsewhere: on the CPU, a smoke test of the script itself
# (tests/test_gpu_check_script.py), so that device time is not spent on a script that breaks.
# Needs python3 with torch (CUDA build), numpy, pandas, pyyaml, jsonschema, scikit-learn and
# pytest; not mlflow or snakemake (the benchmarks run with --no-tracking). Binary MNIST is read
# from results/data/ when present. Each part runs under its own `timeout` and cannot stop the
# parts after it; its output goes to its file under OUTDIR (environment.txt, cuda_tests.txt,
# tap.jsonl, tap_converged_epoch.jsonl, tap_epoch_compiled.jsonl, ucd_train_step.jsonl,
# tap_side_by_side.jsonl, tap_solve.jsonl, classifier_ceiling.jsonl), and OUTDIR/parts.tsv lists
# each part's exit status (124: its time limit) and seconds.
set -uo pipefail
out=${1:?usage: benchmarks/gpu_check.sh OUTDIR [CHECKPOINTS]}
checkpoints=${2:-}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
printf 'part\texit\tseconds\n' >"$out/parts.tsv"

# part NAME LIMIT FILE COMMAND...: COMMAND under `timeout LIMIT` (killed 5 s after), its
# output appended to OUTDIR/FILE (emptied by its first part) and shown, its exit status and
# seconds into parts.tsv; nothing where GPU_CHECK_PARTS is given and does not name NAME, so
# OUTDIR holds the files of the parts that ran alone.
declare -A written
part() {
    local name=$1 limit=$2 file=$3 start status
    shift 3
    if [[ -n ${GPU_CHECK_PARTS:-} && $name != environment && " $GPU_CHECK_PARTS " != *" $name "* ]]; then
        return
    fi
    if [[ -z ${written[$file]:-} ]]; then
        : >"$out/$file"
        written[$file]=1
    fi
    start=$SECONDS
    timeout -k 5 "$limit" "$@" </dev/null 2>&1 | tee -a "$out/$file"
    status=${PIPESTATUS[0]}
    printf '%s\t%s\t%s\n' "$name" "$status" "$((SECONDS - start))" >>"$out/parts.tsv"
}

environment() {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    $py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
        torch.cuda.get_device_name() if torch.cuda.is_available() else "NO CUDA DEVICE")'
}

part environment 20 environment.txt bash -c "$(declare -f environment); py=$py; environment"
tests=($py -m pytest -q -p no:cacheprovider -rfs --durations=5)
part cuda_tests_tap 60 cuda_tests.txt "${tests[@]}" tests/train/test_graphs.py
part cuda_tests_devices 50 cuda_tests.txt \
    "${tests[@]}" tests/ucd/test_ucd_device.py tests/learn/test_learn_device.py

bench=($py benchmarks/run.py --device "${GPU_CHECK_DEVICE:-cuda}" --no-tracking)
if [[ ${GPU_CHECK_QUICK:-0} == 1 ]]; then
    bench+=(--quick)
fi
ckpt=()
if [[ -n $checkpoints ]]; then
    ckpt=(--checkpoints "$checkpoints")
fi
part tap_iteration 40 tap.jsonl "${bench[@]}" tap_iteration
part tap_epoch 50 tap.jsonl "${bench[@]}" tap_epoch
part tap_converged_epoch 130 tap_converged_epoch.jsonl \
    "${bench[@]}" tap_converged_epoch ${ckpt[@]+"${ckpt[@]}"}
part tap_epoch_compiled 50 tap_epoch_compiled.jsonl "${bench[@]}" tap_epoch_compiled
part ucd_train_step_784 25 ucd_train_step.jsonl \
    "${bench[@]}" ucd_train_step --ucd-sizes 784,784,784 --ucd-batch 1000
part ucd_train_step_6272 40 ucd_train_step.jsonl \
    "${bench[@]}" ucd_train_step --ucd-sizes 6272,6272,6272 --ucd-batch 1000
part tap_side_by_side 130 tap_side_by_side.jsonl \
    "${bench[@]}" tap_side_by_side ${ckpt[@]+"${ckpt[@]}"}
if [[ -n $checkpoints ]]; then
    part tap_solve 120 tap_solve.jsonl "${bench[@]}" tap_solve "${ckpt[@]}"
fi
if [[ ${GPU_CHECK_CEILING:-0} == 1 && -f results/data/binary_fashion_mnist.npz ]]; then
    part classifier_ceiling 330 classifier_ceiling.jsonl \
        $py benchmarks/classifier_ceiling.py --device cuda
fi
cat "$out/parts.tsv"
