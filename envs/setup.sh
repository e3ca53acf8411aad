#!/usr/bin/env bash
# Create .venv/ with the package, the workflow engine and the test tools, at the versions of
# envs/constraints.txt (so that two fresh machines get the same environment).
# Needs only python3 (>= 3.11) and pip. Settings (environment variables):
#   PYTHON=python3                   the interpreter the venv is made from
#   TAPMACHINE_TORCH="torch==2.13.0" what to install for torch
#   TAPMACHINE_TORCH_INDEX=URL       where torch comes from; default: the PyTorch CPU index
#                                    (https://download.pytorch.org/whl/cpu) when no NVIDIA GPU is
#                                    present (no nvidia-smi), else the default index (CUDA builds).
#                                    If that index cannot be reached, the default index is used.
#   TAPMACHINE_CONSTRAINTS=FILE      pins (default envs/constraints.txt; "none": no pins)
#   TAPMACHINE_RECREATE_VENV=1       recreate a .venv made from another Python without asking
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
want=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])') \
    || { echo "setup: $PYTHON not found" >&2; exit 1; }
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || { echo "setup: Python >= 3.11 is required (Snakemake 9); $PYTHON is $want" >&2; exit 1; }

# An existing .venv is reused only if it runs and was made from the same Python version.
if [ -e .venv ]; then
    have=$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo broken)
    if [ "$have" != "$want" ]; then
        if [ "${TAPMACHINE_RECREATE_VENV:-0}" = 1 ] || [ "$have" = broken ]; then
            echo "setup: .venv has Python $have, $PYTHON is $want: recreating it" >&2
            rm -rf .venv
        else
            echo "setup: .venv has Python $have but $PYTHON is $want; rerun with" \
                "TAPMACHINE_RECREATE_VENV=1 (or PYTHON=python$have)" >&2
            exit 1
        fi
    fi
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }

constraints=()
case "${TAPMACHINE_CONSTRAINTS:-envs/constraints.txt}" in
    none) ;;
    *) constraints=(-c "${TAPMACHINE_CONSTRAINTS:-envs/constraints.txt}") ;;
esac

torch_spec=${TAPMACHINE_TORCH:-torch==2.13.0}
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    index=${TAPMACHINE_TORCH_INDEX-}
    if [ -z "$index" ] && ! command -v nvidia-smi >/dev/null; then
        index=https://download.pytorch.org/whl/cpu
    fi
    if [ -n "$index" ] && ! .venv/bin/python -c \
        'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)' "$index" \
        >/dev/null 2>&1; then
        echo "setup: $index cannot be reached; torch from the default index" >&2
        index=
    fi
    if [ -n "$index" ]; then
        echo "setup: installing $torch_spec from $index" >&2
        pip install --timeout 10 --retries 0 --index-url "$index" "$torch_spec"
    else
        echo "setup: installing $torch_spec from the default index (CUDA builds on Linux)" >&2
        pip install "${constraints[@]}" "$torch_spec"
    fi
fi
# Which build was chosen, and whether it sees a GPU (device: cuda needs one where jobs run).
.venv/bin/python -c 'import torch; print("setup: torch", torch.__version__, "(CUDA %s build)" % torch.version.cuda if torch.version.cuda else "(CPU-only build)", "- CUDA devices visible:", torch.cuda.device_count())' >&2
# slurm: the SLURM executor plugin; server: psycopg and Flask-WTF for an mlflow server on
# PostgreSQL with basic-auth.
pip install "${constraints[@]}" -e ".[test,slurm,server]"

# The data stage fetches Fashion-MNIST with `apt-get download`, which needs package lists.
if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ] \
    && [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e lock -e partial)" ]; then
    apt-get update -qq >/dev/null 2>&1 || echo "setup: apt-get update failed; Fashion-MNIST falls back to its other sources" >&2
fi
echo "setup: ready (.venv: $(.venv/bin/python -c 'import torch, snakemake, mlflow; print("torch", torch.__version__, "snakemake", snakemake.__version__, "mlflow", mlflow.__version__)'))"
