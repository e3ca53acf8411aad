# Configuration checks and input functions shared by every rule file.
import json
from pathlib import Path

from snakemake.settings.types import DeploymentMethod

from tapmachine.configuration import RAW_DATASETS, validate
from tapmachine.stages.workflow import jobs_run_checkout

# Under --sdm conda the jobs' env (envs/tapmachine.yaml) holds the dependencies only: they run
# this checkout's package, through workflow/bin/tapmachine.
if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
    jobs_run_checkout(workflow.basedir)

validate(config, Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml")

# Results per config (`run: {name: ...}`): every output under results/{name}/, datasets shared.
RUN_NAME = config["run"]["name"]
RESULTS = f"results/{RUN_NAME}"
DATA = "results/data"
# The store manifest is an ancient() input: re-creating the store reruns nothing.
TRACKING_FILE = f"{config['tracking']['store']}/experiments.json"
TRACKING = ancient(TRACKING_FILE)
# Rules that run on the device ask the cluster for a GPU when the config says cuda.
GPUS = 1 if config["device"].startswith("cuda") else 0
DEVICE_ARGS = f"--device {config['device']} --dtype {config['dtype']} --seed {config['seed']}"


def dataset_file(name):
    return f"{DATA}/{name}.npz"


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


# Harvest stage and figures 3-7 (harvest.smk, figures.smk).
FIGURES = config["figures"]


def solution_file(model, epoch):
    return f"{RESULTS}/solutions/{model}/epoch_{epoch}.npz"


def harvest_targets():
    return [solution_file(m, e) for m, entry in config["harvest"].items() for e in entry["epochs"]]


def harvest_settings_args(wildcards):
    entry = config["harvest"][wildcards.model]
    if int(wildcards.epoch) not in entry["epochs"]:
        raise ValueError(
            f"epoch {wildcards.epoch} of {wildcards.model} is not in "
            f"harvest.{wildcards.model}.epochs {entry['epochs']}"
        )
    n_init = f"--n-init {entry['n_init']}" if entry["n_init"] is not None else ""
    return (
        f"{n_init} --dedup-tol {entry['dedup_tol']} --tol {entry['tol']} "
        f"--max-iter {entry['max_iter']} --damping {entry['damping']} --dtype {entry['dtype']}"
    )


def figure_outputs(fig):
    """PNG (in the `snakemake --report` HTML, captioned by workflow/report/{fig}.rst), PDF, CSV."""
    paths = {ext: f"{RESULTS}/figures/{fig}.{ext}" for ext in ("png", "pdf", "csv")}
    paths["png"] = report(paths["png"], caption=f"../report/{fig}.rst", category="Figures")
    return paths


def figure_targets():
    figs = [f for f in ("fig3", "fig4", "fig5", "fig6", "fig7") if f in FIGURES]
    return [path for f in figs for path in figure_outputs(f).values()]


def figure_solution_files(fig):
    """Harvest files a figure reads: its listed epochs, or every harvested one."""
    spec = FIGURES[fig]
    epochs = spec.get("epochs") or config["harvest"][spec["model"]]["epochs"]
    return [solution_file(spec["model"], e) for e in sorted(epochs)]


def model_files(models, name="model.pt"):
    return [f"{RESULTS}/models/{m}/{name}" for m in models]


def option_list(option, values):
    """'--option v1 v2 ...', or nothing for an empty or null list."""
    return f"{option} {' '.join(str(v) for v in values)}" if values else ""


def option_value(option, value):
    return f"{option} {value}" if value is not None else ""
