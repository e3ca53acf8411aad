# Data stage: fetch and verify the raw datasets, read the user's own files, then write each derived
# form as its own target.


rule fetch_dataset:
    input:
        tracking=TRACKING,
    output:
        npz=f"{DATA}/{{dataset}}.npz",
    log:
        f"{DATA_LOGS}/fetch_{{dataset}}.log",
    benchmark:
        f"{DATA_BENCHMARKS}/fetch_{{dataset}}.tsv"
    wildcard_constraints:
        dataset="|".join(RAW_DATASETS),
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        cache=config["data"]["cache_dir"],
        source=fetch_source_args,
    shell:
        "tapmachine fetch --dataset {wildcards.dataset} --cache-dir {params.cache} {params.source} "
        "--out {output.npz} --tracking {input.tracking} > {log} 2>&1"


rule read_dataset:
    input:
        files=lambda w: own_data_files(w.name),
        tracking=TRACKING,
    output:
        npz=f"{DATA}/{{name}}.npz",
    log:
        f"{DATA_LOGS}/read_{{name}}.log",
    benchmark:
        f"{DATA_BENCHMARKS}/read_{{name}}.tsv"
    wildcard_constraints:
        name="|".join(config["data"]["files"]) or "^$",
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        spec=lambda w: json.dumps(config["data"]["files"][w.name], sort_keys=True),
    shell:
        "tapmachine read-file --name {wildcards.name} --spec {params.spec:q} --out {output.npz} "
        "--tracking {input.tracking} > {log} 2>&1"


rule derive_dataset:
    input:
        source=lambda w: dataset_file(config["data"]["derived"][w.derived]["source"]),
        tracking=TRACKING,
    output:
        npz=f"{DATA}/{{derived}}.npz",
    log:
        f"{DATA_LOGS}/derive_{{derived}}.log",
    benchmark:
        f"{DATA_BENCHMARKS}/derive_{{derived}}.tsv"
    wildcard_constraints:
        derived="|".join(config["data"]["derived"]) or "^$",
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=6000,
        runtime=30,
    params:
        transforms=lambda w: json.dumps(config["data"]["derived"][w.derived]["transforms"]),
        labels=lambda w: derived_labels_arg(w.derived),
    shell:
        "tapmachine derive --source {input.source} --name {wildcards.derived} "
        "--transforms {params.transforms:q} {params.labels} --out {output.npz} --tracking {input.tracking} "
        "> {log} 2>&1"


rule data:
    input:
        [dataset_file(name) for name in dataset_names(config)],
