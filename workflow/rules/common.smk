# Configuration checks and input functions shared by every rule file.
import json
from pathlib import Path

from tapmachine.configuration import RAW_DATASETS, validate

validate(config, Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml")

RESULTS = "results"
TRACKING = f"{config['tracking']['store']}/experiments.json"
DEVICE_ARGS = f"--device {config['device']} --dtype {config['dtype']} --seed {config['seed']}"


def dataset_file(name):
    return f"{RESULTS}/data/{name}.npz"


def fetch_source_args(wildcards):
    """Where a raw dataset may come from first: the user's files, if the config names them."""
    data = config["data"]
    if wildcards.dataset == "faces":
        archive = data["faces"]["cbcl_archive"]
        return f"--cbcl-archive {archive}" if archive else ""
    path = data[wildcards.dataset]["path"]
    return f"--local-path {path}" if path else ""


def model_spec(wildcards):
    return json.dumps(config["models"][wildcards.model], sort_keys=True)


def train_mem_mb(wildcards):
    model = config["models"][wildcards.model]
    units = max(layer["units"] for layer in model["hidden"])
    return 2000 + units * 8


def derived_labels_arg(name):
    labels = config["data"]["derived"][name].get("labels")
    return f"--labels '{json.dumps(labels)}'" if labels else ""
