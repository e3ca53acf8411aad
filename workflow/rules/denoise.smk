# Denoising with trained machines as priors (first paper, Sec. VII.4): the binary symmetric
# channel on binary-MNIST test digits (Figs. 8-9: OPE, 1-NN and one TAP denoiser per RBM, all p
# of one model in one batched solve) and, beyond the paper, a Gaussian channel on real-valued
# MNIST (fig_denoise_real). Results land in results/eval/, figures in results/figures/; each
# denoised model is one run in the MLflow experiment "denoise". Settings: config `denoise`.

DENOISE = config["denoise"]
DENOISE_TAP = DENOISE["fig8"]["models"]  # method label -> model
DENOISE_REAL_MODEL = DENOISE["real"]["model"]
for _label, _model in DENOISE_TAP.items():
    if _model not in config["models"]:
        raise ValueError(f"config error at denoise.fig8.models.{_label}: no model {_model!r}")
    if config["models"][_model]["visible"]["prior"] != "bernoulli":
        raise ValueError(
            f"config error at denoise.fig8.models.{_label}: {_model!r} needs bernoulli visible "
            f"units for the binary symmetric channel"
        )
if DENOISE_REAL_MODEL is not None and DENOISE_REAL_MODEL not in config["models"]:
    raise ValueError(f"config error at denoise.real.model: no model {DENOISE_REAL_MODEL!r}")
for _p in DENOISE["fig9"]["ps"] or []:
    if _p not in DENOISE["fig8"]["ps"]:
        raise ValueError(f"config error at denoise.fig9.ps: {_p} is not in denoise.fig8.ps")
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
    return f"{RESULTS}/eval/{model}/denoise_bsc.{ext}"


DENOISE_BASELINES = f"{RESULTS}/eval/denoise_baselines/bsc.npz"


rule denoise_bsc:
    input:
        model=f"{RESULTS}/models/{{model}}/model.pt",
        data=lambda w: dataset_file(config["models"][w.model]["dataset"]),
        tracking=TRACKING,
    output:
        csv=f"{RESULTS}/eval/{{model}}/denoise_bsc.csv",
        npz=f"{RESULTS}/eval/{{model}}/denoise_bsc.npz",
    wildcard_constraints:
        model="|".join(DENOISE_TAP.values()) or "^$",
    params:
        settings=DENOISE_BSC_SETTINGS,
        device=DEVICE_ARGS,
    conda:
        "../../envs/tapmachine.yaml"
    log:
        "logs/denoise/bsc_{model}.log",
    benchmark:
        "benchmarks/denoise/bsc_{model}.tsv"
    threads: 2
    resources:
        mem_mb=6000,
        runtime=60,
    shell:
        "tapmachine denoise bsc --model-file {input.model} --data {input.data} "
        "--settings {params.settings:q} --out-csv {output.csv} --out-npz {output.npz} "
        "{params.device} --threads {threads} --tracking {input.tracking} > {log} 2>&1"


rule denoise_baselines:
    input:
        data=dataset_file(DENOISE_BSC_DATA) if DENOISE_BSC_DATA else [],
        tracking=TRACKING,
    output:
        csv=f"{RESULTS}/eval/denoise_baselines/bsc.csv",
        npz=DENOISE_BASELINES,
    params:
        settings=DENOISE_BSC_SETTINGS,
        device=DEVICE_ARGS,
    conda:
        "../../envs/tapmachine.yaml"
    log:
        "logs/denoise/baselines.log",
    benchmark:
        "benchmarks/denoise/baselines.tsv"
    threads: 2
    resources:
        mem_mb=6000,
        runtime=30,
    shell:
        "tapmachine denoise baselines --data {input.data} --settings {params.settings:q} "
        "--out-csv {output.csv} --out-npz {output.npz} {params.device} --threads {threads} "
        "--tracking {input.tracking} > {log} 2>&1"


rule denoise_real:
    input:
        model=f"{RESULTS}/models/{{model}}/model.pt",
        data=lambda w: dataset_file(config["models"][w.model]["dataset"]),
        tracking=TRACKING,
    output:
        csv=f"{RESULTS}/eval/{{model}}/denoise_real.csv",
        npz=f"{RESULTS}/eval/{{model}}/denoise_real.npz",
    wildcard_constraints:
        model=DENOISE_REAL_MODEL or "^$",
    params:
        settings=DENOISE_REAL_SETTINGS,
        device=DEVICE_ARGS,
    conda:
        "../../envs/tapmachine.yaml"
    log:
        "logs/denoise/real_{model}.log",
    benchmark:
        "benchmarks/denoise/real_{model}.tsv"
    threads: 2
    resources:
        mem_mb=6000,
        runtime=60,
    shell:
        "tapmachine denoise real --model-file {input.model} --data {input.data} "
        "--settings {params.settings:q} --out-csv {output.csv} --out-npz {output.npz} "
        "{params.device} --threads {threads} --tracking {input.tracking} > {log} 2>&1"


rule draw_fig8:
    input:
        tap=[denoise_bsc_file(m) for m in DENOISE_TAP.values()],
        models=model_files(DENOISE_TAP.values()),
        baselines=DENOISE_BASELINES,
        tracking=TRACKING,
    output:
        **figure_outputs("fig8"),
    params:
        labels=" ".join(DENOISE_TAP),
    conda:
        "../../envs/tapmachine.yaml"
    log:
        "logs/figures/fig8.log",
    benchmark:
        "benchmarks/figures/fig8.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "tapmachine figure fig8 --tap {input.tap} --labels {params.labels} "
        "--model-files {input.models} --baselines {input.baselines} "
        "--png {output.png} --pdf {output.pdf} --csv {output.csv} "
        "--tracking {input.tracking} > {log} 2>&1"


rule draw_fig9:
    input:
        tap=[denoise_bsc_file(m) for m in DENOISE_TAP.values()],
        models=model_files(DENOISE_TAP.values()),
        baselines=DENOISE_BASELINES,
        tracking=TRACKING,
    output:
        **figure_outputs("fig9"),
    params:
        labels=" ".join(DENOISE_TAP),
        ps=option_list("--ps", DENOISE["fig9"]["ps"]),
    conda:
        "../../envs/tapmachine.yaml"
    log:
        "logs/figures/fig9.log",
    benchmark:
        "benchmarks/figures/fig9.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "tapmachine figure fig9 --tap {input.tap} --labels {params.labels} "
        "--model-files {input.models} --baselines {input.baselines} {params.ps} "
        "--png {output.png} --pdf {output.pdf} --csv {output.csv} "
        "--tracking {input.tracking} > {log} 2>&1"


rule draw_fig_denoise_real:
    input:
        results=f"{RESULTS}/eval/{DENOISE_REAL_MODEL}/denoise_real.npz",
        model=f"{RESULTS}/models/{DENOISE_REAL_MODEL}/model.pt",
        tracking=TRACKING,
    output:
        **figure_outputs("fig_denoise_real"),
    conda:
        "../../envs/tapmachine.yaml"
    log:
        "logs/figures/fig_denoise_real.log",
    benchmark:
        "benchmarks/figures/fig_denoise_real.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "tapmachine figure fig_denoise_real --results {input.results} --model-file {input.model} "
        "--png {output.png} --pdf {output.pdf} --csv {output.csv} "
        "--tracking {input.tracking} > {log} 2>&1"


rule fig8:
    input:
        rules.draw_fig8.output if DENOISE_TAP else [],


rule fig9:
    input:
        rules.draw_fig9.output if DENOISE_TAP else [],


rule fig_denoise_real:
    input:
        rules.draw_fig_denoise_real.output if DENOISE_REAL_MODEL else [],


rule denoise:
    input:
        rules.fig8.input,
        rules.fig9.input,
        rules.fig_denoise_real.input,
