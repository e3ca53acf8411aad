# Harvest stage: TAP solutions from data initialisations at chosen training epochs (Figs. 5-7).
# A job reads checkpoints/epoch_{e}.pt, which training writes but does not declare (see
# train.smk); model.pt is the declared input, so training has finished before any harvest runs.
# The config check (tapmachine.pipeline.configuration) rejects harvested epochs beyond a model's epochs.


rule harvest_solutions:
    input:
        model=f"{RESULTS}/models/{{model}}/model.pt",
        data=lambda w: dataset_file(config["models"][w.model]["dataset"]),
        tracking=TRACKING,
    output:
        npz=f"{RESULTS}/solutions/{{model}}/epoch_{{epoch}}.npz",
        csv=f"{RESULTS}/solutions/{{model}}/epoch_{{epoch}}.csv",
    log:
        f"{LOGS}/harvest/{{model}}/epoch_{{epoch}}.log",
    benchmark:
        f"{BENCHMARKS}/harvest/{{model}}/epoch_{{epoch}}.tsv"
    wildcard_constraints:
        model="|".join(config["harvest"]) or "^$",
        epoch=r"[0-9]+",
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=harvest_mem_mb,
        runtime=restarting_runtime(60),
        gpu=GPUS,
    params:
        checkpoint=lambda w: f"{RESULTS}/models/{w.model}/checkpoints/epoch_{w.epoch}.pt",
        spec=harvest_spec,
        device=f"--device {config['device']}",
    shell:
        "tapmachine harvest --model-file {input.model} --checkpoint {params.checkpoint} "
        "--epoch {wildcards.epoch} --data {input.data} --spec {params.spec:q} {params.device} "
        "--threads {threads} --out-npz {output.npz} --out-csv {output.csv} "
        "--tracking {input.tracking} > {log} 2>&1"


rule harvest:
    input:
        harvest_targets(),
