#!/usr/bin/env bash
# Fig. 10's adaTAP trainings on one GPU, within one device call (10 minutes), for a CPU run to
# take in: the paper's adaTAP-10 and adaTAP-100 RBMs (5,000 binary MNIST images, Nh = 500,
# lr 1e-3, batch 100) cost about 20 and 100 CPU-hours, beyond a 2-core machine
# (docs/runbook.md#what-it-costs). In order:
#   1. the device, and `benchmarks/run.py adatap` on it (one adaTAP iteration at K = 100;
#      GPU_FIG10_BENCH=0 leaves it out);
#   2. adaTAP on CUDA against the CPU, float64, from one machine and one batch
#      (benchmarks/adatap_device.py; GPU_FIG10_COMPARE=0 leaves it out);
#   3. each model of SPECDIR, one after another in the order given, trained by
#      `tapmachine train --device cuda` until its deadline (seconds since the start); a training
#      stopped there keeps its whole epochs and is closed at the last one (`epochs` is left out
#      of the resume fingerprint at a constant step size, so the run ends there and can be
#      extended later);
#   4. `tapmachine deep-curve` (Fig. 10's pseudo-likelihood curve) of each model, side by side
#      on the host's cores;
#   5. OUTDIR/fig10_gpu.tar.gz in a run's layout, to unpack into results/{run}/ (modification
#      times kept: each curve is newer than its model): models/NAME/{model.pt, model.run.json,
#      metrics.csv}, deep/NAME/{curve.csv, last_epoch.npz} and logs/ (not the checkpoints: 3 MB
#      an epoch). GPU_FIG10_ROWS_EPOCH=E writes the per-image rows of epoch E (Fig. 10's
#      deep.fig10.epoch) instead of the last.
#
#   benchmarks/gpu_fig10.sh OUTDIR SPECDIR NAME:DEADLINE ...
#
# SPECDIR holds binary_mnist.npz and NAME.json, the model's spec as the workflow's train rule
# passes it (`snakemake -n -p .../NAME/model.pt` prints it). Needs python3 with a CUDA torch,
# numpy and pyyaml; not mlflow, snakemake or jsonschema (nothing is tracked there). The last
# deadline should leave about 90 s for the curves and the archive.
set -uo pipefail
out=${1:?usage: benchmarks/gpu_fig10.sh OUTDIR SPECDIR NAME:DEADLINE ...}
specs=${2:?usage: benchmarks/gpu_fig10.sh OUTDIR SPECDIR NAME:DEADLINE ...}
shift 2
start=$SECONDS
mkdir -p "$out"
out=$(cd "$out" && pwd)
specs=$(cd "$specs" && pwd)
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
device=${GPU_FIG10_DEVICE:-cuda}
work=$(mktemp -d)
seed=2026

left() { # seconds to DEADLINE (since the start), at least 1
    local n=$(($1 - (SECONDS - start)))
    echo $((n > 0 ? n : 1))
}

{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    $py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} >"$out/environment.txt" 2>&1
if [[ ${GPU_FIG10_BENCH:-1} == 1 ]]; then
    timeout -k 5 60 $py benchmarks/run.py --device "$device" --no-tracking adatap >"$out/adatap.txt" 2>&1
fi
if [[ ${GPU_FIG10_COMPARE:-1} == 1 ]]; then
    timeout -k 5 60 $py benchmarks/adatap_device.py --device "$device" >>"$out/adatap.txt" 2>&1
fi

train() { # LIMIT NAME SPEC: one `tapmachine train` of NAME under SPEC, stopped (SIGTERM: it
    # keeps its state at the next batch) after LIMIT seconds; timeout signals python itself
    timeout -s TERM -k 30 "$1" $py -m tapmachine train --model "$2" --spec "$3" \
        --data "$specs/binary_mnist.npz" --outdir "$work/$2" --device "$device" \
        --dtype float32 --seed $seed --threads 4 >>"$work/$2.train.log" 2>&1
}

names=()
for job in "$@"; do
    name=${job%%:*}
    deadline=${job##*:}
    names+=("$name")
    spec=$(cat "$specs/$name.json")
    train "$(left "$deadline")" "$name" "$spec"
    echo -e "$name\ttrain_exit $?\tat_second $((SECONDS - start))" >>"$out/jobs.tsv"
    if [[ ! -f $work/$name/model.pt ]]; then
        last=$(ls "$work/$name/checkpoints" | sed -n 's/^epoch_\([0-9]*\)\.pt$/\1/p' | sort -n | tail -1)
        if [[ -n $last ]]; then
            rm -f "$work/$name/checkpoints/in_progress.pt"
            train 600 "$name" "$(echo "$spec" | sed "s/\"epochs\": [0-9]*/\"epochs\": $last/")"
            echo -e "$name\tclosed_at_epoch $last\texit $?" >>"$out/jobs.tsv"
        fi
    fi
done

rows_epoch=()
if [[ -n ${GPU_FIG10_ROWS_EPOCH:-} ]]; then
    rows_epoch=(--rows-epoch "$GPU_FIG10_ROWS_EPOCH")
fi
pack=$work/pack
mkdir -p "$pack/logs"
for name in "${names[@]}"; do
    if [[ -f $work/$name/model.pt ]]; then
        mkdir -p "$pack/models/$name" "$pack/deep/$name"
        cp -p "$work/$name"/{model.pt,model.run.json,metrics.csv} "$pack/models/$name/"
        ln -s "$work/$name/checkpoints" "$pack/models/$name/checkpoints"  # read by deep-curve
        timeout -k 5 "$(left "${GPU_FIG10_END:-585}")" $py -m tapmachine deep-curve \
            --model-file "$pack/models/$name/model.pt" --data "$specs/binary_mnist.npz" \
            --measure pl --n-train 5000 --pl-sites 100 ${rows_epoch[@]+"${rows_epoch[@]}"} \
            --seed $seed --threads 6 --out "$pack/deep/$name/curve.csv" \
            --last-rows "$pack/deep/$name/last_epoch.npz" >"$work/$name.curve.log" 2>&1 &
    fi
done
wait
cp "$work"/*.log "$pack/logs/" 2>/dev/null
tar czf "$out/fig10_gpu.tar.gz" --exclude=checkpoints -C "$pack" .
cat "$out/jobs.tsv"
