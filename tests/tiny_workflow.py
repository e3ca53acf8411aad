"""The tiny config that runs every rule of the workflow in minutes (data -> training -> harvest,
likelihoods -> every figure), and a helper that runs the real Snakemake engine on a work
directory; shared by the workflow tests and the device check."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: tiny_real's own epochs in Figs. 6-7: it trains one.
TINY_REAL_EPOCHS = {"tiny_real": {"epochs": [1]}}

TINY = {
    "seed": 7,
    "data": {
        "derived": {
            "binary_mnist": {
                "source": "mnist",
                "transforms": [{"name": "threshold", "level": 0.5}],
            },
            "real_faces": {"source": "faces", "labels": [1], "transforms": ["scale"]},
            "fashion_mnist_8bit_spin": {"source": "fashion_mnist", "transforms": ["bits8", "spin"]},
        }
    },
    "models": {
        "tiny": {
            "dataset": "binary_mnist",
            "visible": {"prior": "bernoulli"},
            "hidden": [{"prior": "bernoulli", "units": 8}],
            "n_train": 400,
            "epochs": 2,
            "batch_size": 50,
            "eval": {"n_samples": 100},
        },
        "tiny_real": {
            "dataset": "real_faces",
            "visible": {"prior": "truncated_gauss_bernoulli", "lower": 0.0, "upper": 1.0},
            "hidden": [{"prior": "bernoulli", "units": 8}],
            "epochs": 1,
            "batch_size": 20,
            "eval": {"n_samples": 20},
        },
    },
    "harvest": {
        "tiny": {"epochs": [1, 2], "n_init": 60},
        "tiny_real": {"epochs": [1], "n_init": 20},
    },
    # Figs. 5-7 with a column per model, as the paper's binary MNIST beside the faces.
    "figures": {
        "fig3": {"models": ["tiny"], "exact": {"models": ["tiny"], "epochs": "all"}},
        "fig4": {"models": ["tiny"], "n_images": 100},
        "fig5": {"models": ["tiny", "tiny_real"]},
        "fig6": {"models": ["tiny", "tiny_real"], "epochs": [1, 2], "per_model": TINY_REAL_EPOCHS},
        "fig7": {
            "models": ["tiny", "tiny_real"],
            "epochs": [1, 2],
            "digits": [3, 6, 7],
            "n_images": 60,
            "per_model": {"tiny_real": {"epochs": [1], "digits": None, "n_images": None}},
        },
    },
    "likelihood": {
        "fig12": {
            "model": "tiny",
            "epochs": "all",
            "ais": {"n_runs": 8, "schedule": "linear", "n_betas": 30},
            "pl_sites": 10,
            "n_train": 40,
            "n_test": 40,
            "tap_inits": 20,
        },
        "table": {
            "models": ["tiny"],
            "ais": {"n_runs": 8, "schedule": "linear", "n_betas": 30},
            "pl_sites": 10,
            "n_train": 0,
            "n_test": 40,
            "tap_inits": 20,
        },
    },
    "ucd": {
        "fig1": {"dims": [1, 4, 12], "reps": 20, "cap": 50},
        "dbm": {
            "datasets": ["binary_mnist"],
            "n_train": 400,
            "fid_samples": 200,
            "ll_images": 20,
            "ais": {"n_runs": 8, "n_betas": 50, "mean_field_steps": 5},
            "classifier": {"n_train": 5000, "channels": [8, 16], "features": 16, "epochs": 2},
            "models": {
                "ucd_lmi": {"method": "ucd_lmi", "hidden": [16, 16], "epochs": 1, "batch_size": 50},
                "pcd": {"method": "dbm_pcd", "hidden": [16, 16], "epochs": 1, "batch_size": 50},
            },
            "ablation": {
                "no_centering": {
                    "method": "ucd_lmi",
                    "hidden": [16, 16],
                    "epochs": 1,
                    "batch_size": 50,
                    "ucd": {"centering": False},
                }
            },
        },
    },
    "denoise": {
        "fig8": {
            "models": {"tap_tiny": "tiny"},
            "ps": [0.0, 0.1, 0.3, 0.5],
            "n_images": 40,
            "n_reference": 500,
            "max_iter": 200,
        },
        "fig9": {"image": 1, "ps": [0.1, 0.3]},
        "real": {
            "model": "tiny_real",
            "sigmas": [0.2, 0.5],
            "n_images": 10,
            "max_iter": 100,
        },
    },
}


def snakemake(workdir, *args, config="config.yaml", timeout=900):
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    env.pop("MLFLOW_TRACKING_URI", None)
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(ROOT / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(workdir / config),
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
