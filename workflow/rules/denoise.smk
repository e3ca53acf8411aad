# Denoising with trained machines as priors (first paper, Sec. VII.4): the binary symmetric
# channel on binary-MNIST test digits (Figs. 8-9: OPE, 1-NN and one TAP denoiser per RBM, all p
# of one model in one batched solve) and, beyond the paper, a Gaussian channel on real-valued
# MNIST (fig_denoise_real). Results land in {RESULTS}/denoise/, figures in {RESULTS}/figures/; each
# denoised model is one run in the MLflow experiment "denoise". Settings: config `denoise`
# (cross-key checks in tapmachine.pipeline.configuration; settings and paths in common.smk).


rule denoise_bsc:
    input:
        model=f"{RESULTS}/models/{{model}}/model.pt",
        data=lambda w: dataset_file(config["models"][w.model]["dataset"]),
        tracking=TRACKING,
    output:
        csv=f"{RESULTS}/denoise/{{model}}/denoise_bsc.csv",
        npz=f"{RESULTS}/denoise/{{model}}/denoise_bsc.npz",
    log:
        f"{LOGS}/denoise/bsc_{{model}}.log",
    benchmark:
        f"{BENCHMARKS}/denoise/bsc_{{model}}.tsv"
    wildcard_constraints:
        model="|".join(DENOISE_TAP.values()) or "^$",
    conda:
        "../../envs/tapmachine.yaml"
    threads: model_threads
    resources:
        mem_mb=6000,
        runtime=restarting_runtime(60),
    params:
        spec=DENOISE_BSC_SETTINGS,
        device=DEVICE_ARGS,
    shell:
        "tapmachine denoise bsc --model-file {input.model} --data {input.data} "
        "--spec {params.spec:q} --out-csv {output.csv} --out-npz {output.npz} "
        "{params.device} --threads {threads} --tracking {input.tracking} > {log} 2>&1"


rule denoise_baselines:
    input:
        data=dataset_file(DENOISE_BSC_DATA) if DENOISE_BSC_DATA else [],
        tracking=TRACKING,
    output:
        csv=f"{RESULTS}/denoise/baselines/bsc.csv",
        npz=DENOISE_BASELINES,
    log:
        f"{LOGS}/denoise/baselines.log",
    benchmark:
        f"{BENCHMARKS}/denoise/baselines.tsv"
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=6000,
        runtime=restarting_runtime(30),
    params:
        spec=DENOISE_BSC_SETTINGS,
        device=DEVICE_ARGS,
    shell:
        "tapmachine denoise baselines --data {input.data} --spec {params.spec:q} "
        "--out-csv {output.csv} --out-npz {output.npz} {params.device} --threads {threads} "
        "--tracking {input.tracking} > {log} 2>&1"


rule denoise_real:
    input:
        model=f"{RESULTS}/models/{{model}}/model.pt",
        data=lambda w: dataset_file(config["models"][w.model]["dataset"]),
        tracking=TRACKING,
    output:
        csv=f"{RESULTS}/denoise/{{model}}/denoise_real.csv",
        npz=f"{RESULTS}/denoise/{{model}}/denoise_real.npz",
    log:
        f"{LOGS}/denoise/real_{{model}}.log",
    benchmark:
        f"{BENCHMARKS}/denoise/real_{{model}}.tsv"
    wildcard_constraints:
        model=DENOISE_REAL_MODEL or "^$",
    conda:
        "../../envs/tapmachine.yaml"
    threads: model_threads
    resources:
        mem_mb=6000,
        runtime=restarting_runtime(60),
    params:
        spec=DENOISE_REAL_SETTINGS,
        device=DEVICE_ARGS,
    shell:
        "tapmachine denoise real --model-file {input.model} --data {input.data} "
        "--spec {params.spec:q} --out-csv {output.csv} --out-npz {output.npz} "
        "{params.device} --threads {threads} --tracking {input.tracking} > {log} 2>&1"


rule draw_fig8:
    input:
        tap=[denoise_bsc_file(m) for m in DENOISE_TAP.values()],
        models=model_files(DENOISE_TAP.values()),
        baselines=DENOISE_BASELINES,
        tracking=TRACKING,
    output:
        **figure_outputs("fig8"),
    log:
        f"{LOGS}/figures/fig8.log",
    benchmark:
        f"{BENCHMARKS}/figures/fig8.tsv"
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        labels=" ".join(DENOISE_TAP),
    shell:
        "tapmachine figure fig8 --tap {input.tap} --labels {params.labels} "
        "--model-files {input.models} --baselines {input.baselines} "
        "--png {output.png} --pdf {output.pdf} --csv {output.csv} "
        "--tracking {input.tracking} > {log} 2>&1"


# Fig. 9's verdicts: the MNIST classifier of the second paper's FID (ucd_dbm.smk's
# ucd_classifier, already in the default DAG) labels every denoised digit.
rule draw_fig9:
    input:
        tap=[denoise_bsc_file(m) for m in DENOISE_TAP.values()],
        models=model_files(DENOISE_TAP.values()),
        baselines=DENOISE_BASELINES,
        classifier=f"{RESULTS}/ucd/classifier/{DENOISE_BSC_DATA}.pt",
        data=dataset_file(DENOISE_BSC_DATA) if DENOISE_BSC_DATA else [],
        tracking=TRACKING,
    output:
        **figure_outputs("fig9"),
    log:
        f"{LOGS}/figures/fig9.log",
    benchmark:
        f"{BENCHMARKS}/figures/fig9.tsv"
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        labels=" ".join(DENOISE_TAP),
        ps=option_list("--ps", DENOISE["fig9"]["ps"]),
    shell:
        "tapmachine figure fig9 --tap {input.tap} --labels {params.labels} "
        "--model-files {input.models} --baselines {input.baselines} {params.ps} "
        "--classifier {input.classifier} --data {input.data} "
        "--png {output.png} --pdf {output.pdf} --csv {output.csv} "
        "--tracking {input.tracking} > {log} 2>&1"


rule draw_fig_denoise_real:
    input:
        results=f"{RESULTS}/denoise/{DENOISE_REAL_MODEL}/denoise_real.npz",
        model=f"{RESULTS}/models/{DENOISE_REAL_MODEL}/model.pt",
        tracking=TRACKING,
    output:
        **figure_outputs("fig_denoise_real"),
    log:
        f"{LOGS}/figures/fig_denoise_real.log",
    benchmark:
        f"{BENCHMARKS}/figures/fig_denoise_real.tsv"
    conda:
        "../../envs/tapmachine.yaml"
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
