#!/usr/bin/env bash
# Create .venv/ with the package, the workflow engine and the test tools.
# Needs only python3 (>= 3.11) and pip. On a machine without an NVIDIA GPU it installs the CPU
# build of torch 2.13.0 (a plain `pip install torch` would pull a multi-GB CUDA build).
#   TAPMACHINE_TORCH="torch==2.13.0"   what to install for torch (override for CUDA builds)
#   PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu   where CPU wheels are off PyPI
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
"$PYTHON" - <<'PY' || { echo "setup: Python >= 3.11 is required (Snakemake 9)" >&2; exit 1; }
import sys
sys.exit(0 if sys.version_info >= (3, 11) else 1)
PY

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }

if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    pip install "${TAPMACHINE_TORCH:-torch==2.13.0}"
fi
# slurm: the SLURM executor plugin; server: psycopg for an mlflow server on PostgreSQL.
pip install -e ".[test,slurm,server]"

# The data stage fetches Fashion-MNIST with `apt-get download`, which needs package lists.
if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ] \
    && [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e lock -e partial)" ]; then
    apt-get update -qq >/dev/null 2>&1 || echo "setup: apt-get update failed; Fashion-MNIST falls back to its other sources" >&2
fi
echo "setup: ready (.venv: $(.venv/bin/python -c 'import torch, snakemake, mlflow; print("torch", torch.__version__, "snakemake", snakemake.__version__, "mlflow", mlflow.__version__)'))"
