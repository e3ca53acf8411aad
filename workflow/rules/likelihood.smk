# Likelihood stage (first paper, App. F): TAP vs AIS vs pseudo-likelihood after every epoch of
# one RBM (Fig. 12), and the AIS test log-likelihood of TAP-, CD- and PCD-trained RBMs beside the
# published CD-25 value (the likelihood table). Scores land in results/likelihood/{model}/, figures in
# results/figures/. Settings: config `likelihood` (src/tapmachine/io/config.schema.yaml).

LIKELIHOOD = config["likelihood"]
FIG12_MODEL = LIKELIHOOD["fig12"]["model"]
TABLE_MODELS = LIKELIHOOD["table"]["models"]
SCORING_KEYS = ("ais", "pl_sites", "n_train", "n_test", "tap_inits")
SCORE_SETTINGS = {
    part: json.dumps({k: LIKELIHOOD[part][k] for k in SCORING_KEYS}, sort_keys=True)
    for part in ("fig12", "table")
}
FIG12_EPOCHS = (
    LIKELIHOOD["fig12"]["epochs"]
    if LIKELIHOOD["fig12"]["epochs"] == "all"
    else ",".join(str(e) for e in LIKELIHOOD["fig12"]["epochs"])
)


rule score_epochs:
    input:
        model=f"{RESULTS}/models/{{model}}/model.pt",
        data=lambda w: dataset_file(config["models"][w.model]["dataset"]),
        tracking=TRACKING,
    output:
        scores=f"{RESULTS}/likelihood/{{model}}/scores.csv",
    log:
        f"{LOGS}/likelihood/score_epochs_{{model}}.log",
    benchmark:
        f"{BENCHMARKS}/likelihood/score_epochs_{{model}}.tsv"
    wildcard_constraints:
        model=FIG12_MODEL or "^$",
    conda:
        "../../envs/tapmachine.yaml"
    threads: model_threads
    resources:
        mem_mb=4000,
        runtime=240,
        gpu=GPUS,
    params:
        model_dir=lambda w: f"{RESULTS}/models/{w.model}",
        epochs=FIG12_EPOCHS,
        spec=SCORE_SETTINGS["fig12"],
        device=DEVICE_ARGS,
    shell:
        "tapmachine score --model-dir {params.model_dir} --data {input.data} "
        "--epochs {params.epochs} --spec {params.spec:q} --out {output.scores} "
        "{params.device} --threads {threads} --tracking {input.tracking} > {log} 2>&1"


rule score_final:
    input:
        model=f"{RESULTS}/models/{{model}}/model.pt",
        data=lambda w: dataset_file(config["models"][w.model]["dataset"]),
        tracking=TRACKING,
    output:
        scores=f"{RESULTS}/likelihood/{{model}}/final.csv",
    log:
        f"{LOGS}/likelihood/score_final_{{model}}.log",
    benchmark:
        f"{BENCHMARKS}/likelihood/score_final_{{model}}.tsv"
    wildcard_constraints:
        model="|".join(TABLE_MODELS) or "^$",
    conda:
        "../../envs/tapmachine.yaml"
    threads: model_threads
    resources:
        mem_mb=4000,
        runtime=120,
        gpu=GPUS,
    params:
        model_dir=lambda w: f"{RESULTS}/models/{w.model}",
        spec=SCORE_SETTINGS["table"],
        device=DEVICE_ARGS,
    shell:
        "tapmachine score --model-dir {params.model_dir} --data {input.data} "
        "--spec {params.spec:q} --out {output.scores} "
        "{params.device} --threads {threads} --tracking {input.tracking} > {log} 2>&1"


rule draw_fig12:
    input:
        scores=f"{RESULTS}/likelihood/{FIG12_MODEL}/scores.csv",
        model=f"{RESULTS}/models/{FIG12_MODEL}/model.pt",
        tracking=TRACKING,
    output:
        **figure_outputs("fig12"),
    log:
        f"{LOGS}/figures/fig12.log",
    benchmark:
        f"{BENCHMARKS}/figures/fig12.tsv"
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "tapmachine figure fig12 --scores {input.scores} --model-file {input.model} "
        "--png {output.png} --pdf {output.pdf} --csv {output.csv} "
        "--tracking {input.tracking} > {log} 2>&1"


rule draw_likelihood_table:
    input:
        scores=expand(f"{RESULTS}/likelihood/{{model}}/final.csv", model=TABLE_MODELS),
        models=expand(f"{RESULTS}/models/{{model}}/model.pt", model=TABLE_MODELS),
        data=[dataset_file(config["models"][m]["dataset"]) for m in TABLE_MODELS],
        tracking=TRACKING,
    output:
        **figure_outputs("likelihood_table"),
    log:
        f"{LOGS}/figures/likelihood_table.log",
    benchmark:
        f"{BENCHMARKS}/figures/likelihood_table.tsv"
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        reference="" if LIKELIHOOD["table"]["reference"] else "--no-reference",
    shell:
        "tapmachine figure likelihood_table --scores {input.scores} --model-files {input.models} "
        "--data {input.data} {params.reference} --png {output.png} --pdf {output.pdf} --csv {output.csv} "
        "--tracking {input.tracking} > {log} 2>&1"


rule fig12:
    input:
        rules.draw_fig12.output if FIG12_MODEL else [],


rule likelihood_table:
    input:
        rules.draw_likelihood_table.output if TABLE_MODELS else [],
