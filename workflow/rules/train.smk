# Training stage: every model declared in the config, on any dataset of the data stage.
# Per-epoch checkpoints live in results/models/{model}/checkpoints/ and are not outputs: Snakemake
# removes the outputs of an interrupted job, and the checkpoints it leaves let the rerun resume.


rule train_model:
    input:
        data=lambda w: dataset_file(train_dataset(w.model)),
        tracking=TRACKING,
    output:
        model=f"{RESULTS}/models/{{model}}/model.pt",
        metrics=f"{RESULTS}/models/{{model}}/metrics.csv",
    log:
        f"{LOGS}/train/{{model}}.log",
    benchmark:
        f"{BENCHMARKS}/train/{{model}}.tsv"
    wildcard_constraints:
        model="|".join(config["models"]) or "^$",
    conda:
        "../../envs/tapmachine.yaml"
    threads: model_threads
    resources:
        mem_mb=train_mem_mb,
        runtime=lambda w, attempt: 240 * attempt,  # resumed attempts get more time
        gpu=GPUS,
    params:
        spec=model_spec,
        outdir=lambda w: f"{RESULTS}/models/{w.model}",
        device=DEVICE_ARGS,
    shell:
        "tapmachine train --model {wildcards.model} --spec {params.spec:q} --data {input.data} "
        "--outdir {params.outdir} {params.device} --threads {threads} "
        "--tracking {input.tracking} > {log} 2>&1"


rule train:
    input:
        expand(f"{RESULTS}/models/{{model}}/model.pt", model=config["models"]),
