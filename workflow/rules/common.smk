# Configuration checks and input functions shared by every rule file.
import json
import sys
from pathlib import Path

from snakemake.settings.types import DeploymentMethod

from tapmachine.pipeline.configuration import (
    RAW_DATASETS,
    SCHEMA,
    check_device,
    dataset_names,
    load_schema,
    remove_nulled,
    solution_columns,
    validate,
)
from tapmachine.io.files import damaged
from tapmachine.pipeline.job_resources import job_memory_mb, runtime_minutes
from tapmachine.pipeline.stages.workflow import jobs_run_checkout, result_files

# Under --sdm conda the jobs' env (envs/tapmachine.yaml) holds the dependencies only: they run
# this checkout's package, through workflow/bin/tapmachine.
if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
    jobs_run_checkout(workflow.basedir)

# An overlay removes a section (`deep: null`) or a named entry (`models: {bmnist_h25: null}`) of
# the default config by setting it to null.
remove_nulled(config, load_schema(SCHEMA))
# The optional sections the config itself gives, before the schema's defaults fill the rest: the
# targets of an absent one (ucd.fig1, ucd.dbm, denoise, deep) are left out of `all`.
_GIVEN_UCD = config.get("ucd") or {}
SECTIONS = {
    "ucd.fig1": "fig1" in _GIVEN_UCD,
    "ucd.dbm": "dbm" in _GIVEN_UCD,
    "denoise": "denoise" in config,
    "deep": "deep" in config,
}
_SKIPPED = {
    "ucd.fig1": "ucd_fig1",
    "ucd.dbm": "ucd_train, ucd_samples, ucd_completion, ucd_table1, ucd_table2",
    "denoise": "fig8, fig9, fig_denoise_real",
    "deep": "fig10, fig11",
}
for _section, _given in SECTIONS.items():
    if not _given:
        print(
            f"{_section}: no such section in the config, targets skipped ({_SKIPPED[_section]})",
            file=sys.stderr,
        )

validate(config, SCHEMA)
# device: cuda where jobs run on this machine but torch sees no GPU: one line, before any job.
if workflow.local_exec:
    check_device(config["device"])

# Results per config (`run: {name: ...}`): every output under results/{name}/, datasets shared.
RUN_NAME = config["run"]["name"]
RESULTS = f"results/{RUN_NAME}"
DATA = "results/data"
# Job logs and Snakemake benchmark TSVs are split the same way (as PyPSA-Eur does with
# logs/{run}/ and benchmarks/{run}/): logs/{name}/<stage>/..., benchmarks/{name}/<stage>/...;
# those of the shared datasets in logs/data/ and benchmarks/data/, the store's in logs/.
LOGS = f"logs/{RUN_NAME}"
BENCHMARKS = f"benchmarks/{RUN_NAME}"
DATA_LOGS = "logs/data"
DATA_BENCHMARKS = "benchmarks/data"
# While the workflow is parsed nothing is written (a dry run or --lint changes no file). In the
# main process: a lock held by another invocation makes Snakemake report that run's outputs as
# "incomplete", so say plainly why this one stops; otherwise name the files damaged after they
# were written (a cheap read, tapmachine.io.files.damage): rule set_aside_damaged renames them to
# <name>.corrupt, after which a run makes them again (training resumes from its checkpoints, a
# dataset is derived again from its verified source); until then a run stops before its first
# job (the Snakefile's onstart), as its jobs would read them or keep them. RESULT_FILES: what that check reads (the
# datasets, and every model.pt, .npz and .csv of this run).
RESULT_FILES = result_files(DATA, RESULTS) if workflow.is_main_process else []
DAMAGED = []
if workflow.is_main_process:
    if any(Path(".snakemake/locks").glob("*.lock")):
        print(
            "tapmachine: another snakemake holds the lock of this directory (.snakemake/locks/): "
            "wait for it to finish (do not --rerun-incomplete or --cleanup-metadata meanwhile); "
            "if none runs (it was killed), `snakemake --unlock` first",
            file=sys.stderr,
        )
    else:
        DAMAGED = damaged(RESULT_FILES)
        for _path, _reason in DAMAGED:
            print(
                f"tapmachine: {_path} is corrupt ({_reason}): `snakemake --cores 1 "
                "set_aside_damaged` (with the same --configfile) sets it aside as "
                f"{_path.name}.corrupt, after which a run makes it again",
                file=sys.stderr,
            )
# The store manifest is an ancient() input: a store made afresh reruns nothing (tracking.smk).
TRACKING_FILE = f"{config['tracking']['store']}/experiments.json"
TRACKING = ancient(TRACKING_FILE)
# Rules that run on the device ask the cluster for a GPU when the config says cuda.
GPUS = 1 if config["device"].startswith("cuda") else 0
DEVICE_ARGS = f"--device {config['device']} --dtype {config['dtype']} --seed {config['seed']}"


def dataset_file(name):
    return f"{DATA}/{name}.npz"


def train_dataset(model):
    """The dataset model ``model`` trains on: its train_dataset, else its dataset."""
    entry = config["models"][model]
    return entry.get("train_dataset") or entry["dataset"]


def own_data_files(name):
    """The user's files of dataset ``name`` of config data.files: its rows, its test rows."""
    entry = config["data"]["files"][name]
    return [entry["path"], *([entry["test"]["path"]] if "path" in entry["test"] else [])]


def fetch_source_args(wildcards):
    """Where a raw dataset may come from first: the user's files, if the config names them."""
    data = config["data"]
    if wildcards.dataset == "faces":
        archive = data["faces"]["cbcl_archive"]
        return f"--cbcl-archive {archive}" if archive else ""
    path = data[wildcards.dataset]["path"]
    return f"--local-path {path}" if path else ""


def model_spec(wildcards):
    """The model's entry for `tapmachine train --spec`, less `threads` (the job's cores, not a
    setting of the model)."""
    entry = config["models"][wildcards.model]
    return json.dumps({k: v for k, v in entry.items() if k != "threads"}, sort_keys=True)


def model_threads(wildcards):
    return config["models"][wildcards.model]["threads"]


def train_mem_mb(wildcards):
    model = config["models"][wildcards.model]
    units = max(layer["units"] for layer in model["hidden"])
    return 2000 + units * 8


def harvest_mem_mb(wildcards, input, attempt):
    """A harvest's memory from its starts and units (read from the dataset once it exists), more
    on each attempt: a job killed for memory is not killed again at the same point."""
    hidden = [layer["units"] for layer in config["models"][wildcards.model]["hidden"]]
    n_init = config["harvest"][wildcards.model]["n_init"]
    return job_memory_mb(input.data, n_init, hidden) * attempt


def restarting_runtime(base):
    """Minutes for a job that starts over when rerun: ``base``, doubled on each attempt."""
    return lambda wildcards, attempt: runtime_minutes(base, attempt)


def derived_labels_arg(name):
    labels = config["data"]["derived"][name].get("labels")
    return f"--labels '{json.dumps(labels)}'" if labels else ""


# Harvest stage and figures 3-7 (harvest.smk, figures.smk).
FIGURES = config["figures"]
# Figs. 3 and 4 colour their models in this order, so that a model has one colour in both.
FIGURE_PALETTE = " ".join(
    dict.fromkeys(
        [
            *(FIGURES.get("fig3") or {}).get("models", []),
            *(FIGURES.get("fig4") or {}).get("models", []),
        ]
    )
)


def solution_file(model, epoch):
    return f"{RESULTS}/solutions/{model}/epoch_{epoch}.npz"


def harvest_targets():
    return [solution_file(m, e) for m, entry in config["harvest"].items() for e in entry["epochs"]]


def harvest_spec(wildcards):
    """The model's harvest entry as JSON for `tapmachine harvest --spec`, once the epoch is
    checked to be one it lists."""
    entry = config["harvest"][wildcards.model]
    if int(wildcards.epoch) not in entry["epochs"]:
        raise ValueError(
            f"epoch {wildcards.epoch} of {wildcards.model} is not in "
            f"harvest.{wildcards.model}.epochs {entry['epochs']}"
        )
    return json.dumps({k: v for k, v in entry.items() if k != "epochs"}, sort_keys=True)


def figure_outputs(fig):
    """PNG (in the `snakemake --report` HTML, captioned by workflow/report/{fig}.rst), PDF, CSV."""
    paths = {ext: f"{RESULTS}/figures/{fig}.{ext}" for ext in ("png", "pdf", "csv")}
    paths["png"] = report(paths["png"], caption=f"../report/{fig}.rst", category="Figures")
    return paths


def figure_targets():
    figs = [f for f in ("fig3", "fig4", "fig5", "fig6", "fig7") if f in FIGURES]
    return [path for f in figs for path in figure_outputs(f).values()]


def figure_solution_files(fig):
    """Harvest files a figure reads, column by column (its models in order): each column's
    epochs (figures.{fig}.per_model, else the figure's), or every harvested one."""
    files = []
    for model, column in solution_columns(FIGURES[fig]).items():
        epochs = column.get("epochs") or config["harvest"][model]["epochs"]
        files += [solution_file(model, e) for e in sorted(epochs)]
    return files


def figure_per_model(fig, keys):
    """'--per-model JSON' with the drawn columns' own `keys` (figures.{fig}.per_model), or
    nothing."""
    per_model = FIGURES[fig].get("per_model") or {}
    own = {
        model: {k: v for k, v in per_model[model].items() if k in keys}
        for model in FIGURES[fig]["models"]
        if model in per_model
    }
    own = {model: entry for model, entry in own.items() if entry}
    return f"--per-model '{json.dumps(own, sort_keys=True)}'" if own else ""


def figure_datasets(fig):
    """The dataset files of a figure's models, each once."""
    names = [config["models"][m]["dataset"] for m in FIGURES[fig]["models"]]
    return [dataset_file(name) for name in dict.fromkeys(names)]


def model_files(models, name="model.pt"):
    return [f"{RESULTS}/models/{m}/{name}" for m in models]


def option_list(option, values):
    """'--option v1 v2 ...', or nothing for an empty or null list."""
    return f"{option} {' '.join(str(v) for v in values)}" if values else ""


def option_value(option, value):
    return f"{option} {value}" if value is not None else ""


# UCD-LMI DBMs (ucd_dbm.smk): config ucd.dbm, the datasets and models of Tables 1-2 (none when
# the config has no ucd.dbm section).
UCD_DBM = config["ucd"]["dbm"]
UCD_DATASETS = list(UCD_DBM["datasets"]) if SECTIONS["ucd.dbm"] else []
UCD_ABLATION_DATASET = UCD_DBM["ablation_dataset"]
if SECTIONS["ucd.dbm"] and UCD_DBM["cifar10_archive"]:
    UCD_DATASETS.append("binary_cifar10")
elif SECTIONS["ucd.dbm"]:
    print(
        "ucd: CIFAR-10 targets skipped (set ucd.dbm.cifar10_archive to cifar-10-python.tar.gz)",
        file=sys.stderr,
    )
if SECTIONS["ucd.dbm"]:
    for _name in (*UCD_DATASETS, UCD_ABLATION_DATASET):
        if _name == "binary_cifar10":
            continue
        if _name not in dataset_names(config):
            raise ValueError(
                f"ucd.dbm: dataset {_name!r} is not one of the data stage's "
                f"({', '.join(dataset_names(config))})"
            )
    if "ucd_lmi" not in UCD_DBM["models"]:
        raise ValueError("ucd.dbm.models needs an entry ucd_lmi (the reference of Table 2)")


def ucd_dbm_spec(wildcards):
    models = dict(UCD_DBM["models"])
    if wildcards.dataset == UCD_ABLATION_DATASET:
        models.update(UCD_DBM["ablation"])
    if wildcards.model not in models:
        raise ValueError(f"ucd.dbm: no model {wildcards.model!r} for {wildcards.dataset}")
    return json.dumps(models[wildcards.model], sort_keys=True)


def ucd_dbm_dir(dataset, model):
    return f"{RESULTS}/ucd/dbm/{dataset}/{model}"


def ucd_dbm_mem_mb(wildcards):
    spec = json.loads(ucd_dbm_spec(wildcards))
    return 2000 + 8 * max(spec["hidden"])


def ucd_dbm_runtime(wildcards, attempt):
    """Minutes for one DBM's training: 3 times the cost at one CPU thread measured at
    784-784-784 (about 1.2e-9 s per row and coupling a step; docs/ucd.md), a hundredth of it on a
    GPU (unmeasured here), at least 30, times the attempt (a job killed at its limit comes back
    with more)."""
    spec = json.loads(ucd_dbm_spec(wildcards))
    sizes = [max(784, *spec["hidden"]), *spec["hidden"]]  # visible: MNIST's, or as wide as h
    couplings = sum(a * b for a, b in zip(sizes, sizes[1:]))
    steps = spec["epochs"] * (UCD_DBM["n_train"] // spec["batch_size"])
    seconds = 1.2e-9 * spec["batch_size"] * couplings * steps / (100 if GPUS else 1)
    return attempt * max(30, int(3 * seconds / 60))


UCD_TABLE1 = [(d, m) for d in UCD_DATASETS for m in UCD_DBM["models"]]
# Table 2's reference: the ablation's own `full` entry (the ablation at another size than the
# main models), else ucd_lmi.
UCD_TABLE2 = (
    [
        (UCD_ABLATION_DATASET, m)
        for m in (
            (() if "full" in UCD_DBM["ablation"] else ("ucd_lmi",)) + tuple(UCD_DBM["ablation"])
        )
    ]
    if SECTIONS["ucd.dbm"]
    else []
)
UCD_ALL_MODELS = sorted(set(UCD_TABLE1) | set(UCD_TABLE2))
UCD_FIG_MODELS = [
    (d, m) for d in UCD_DATASETS for m in ("ucd_lmi", "pcd") if m in UCD_DBM["models"]
]
# Denoising (denoise.smk).
DENOISE = config["denoise"]
DENOISE_TAP = DENOISE["fig8"]["models"]  # method label -> model
DENOISE_REAL_MODEL = DENOISE["real"]["model"]
_BSC_KEYS = ("ps", "n_images", "n_reference", "k", "tol", "max_iter", "damping")
DENOISE_BSC_SETTINGS = json.dumps(
    {**{k: DENOISE["fig8"][k] for k in _BSC_KEYS}, "fig9_image": DENOISE["fig9"]["image"]},
    sort_keys=True,
)
DENOISE_REAL_SETTINGS = json.dumps(
    {k: v for k, v in DENOISE["real"].items() if k != "model"}, sort_keys=True
)
DENOISE_BSC_DATA = (
    config["models"][next(iter(DENOISE_TAP.values()))]["dataset"] if DENOISE_TAP else None
)


def denoise_bsc_file(model, ext="npz"):
    return f"{RESULTS}/denoise/{model}/denoise_bsc.{ext}"


DENOISE_BASELINES = f"{RESULTS}/denoise/baselines/bsc.npz"
