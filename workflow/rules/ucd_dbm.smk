# UCD-LMI (second paper), DBMs without pretraining: training (UCD-LMI, PCD, centered PCD, the
# ablation), the FID classifier per dataset, scores (classifier FID + TAP log-likelihood), Figs. 2-3
# and Tables 1-2. Settings: config `ucd.dbm` (src/tapmachine/io/config.schema.yaml); the paper's
# sizes (6,272-6,272-6,272, 100,000 steps) need --configfile workflow/config/paper.yaml. With
# device: cuda, training, scoring, sampling and completion run on the GPU and request one.

# Only with a user-given archive (no default path): the md5 is checked before opening.
if UCD_DBM["cifar10_archive"]:

    rule ucd_cifar10:
        input:
            archive=ancient(UCD_DBM["cifar10_archive"]),
            tracking=TRACKING,
        output:
            npz=dataset_file("binary_cifar10"),
        log:
            f"{DATA_LOGS}/ucd_cifar10.log",
        benchmark:
            f"{DATA_BENCHMARKS}/ucd_cifar10.tsv"
        conda:
            "../../envs/tapmachine.yaml"
        threads: 1
        resources:
            mem_mb=4000,
            runtime=20,
        shell:
            "tapmachine ucd cifar10 --archive {input.archive} --out {output.npz} "
            "--tracking {input.tracking} > {log} 2>&1"


rule ucd_train_dbm:
    input:
        data=lambda w: dataset_file(w.dataset),
        tracking=TRACKING,
    output:
        model=f"{RESULTS}/ucd/dbm/{{dataset}}/{{model}}/model.pt",
        steps=f"{RESULTS}/ucd/dbm/{{dataset}}/{{model}}/steps.csv",
    log:
        f"{LOGS}/ucd/dbm/train_{{dataset}}_{{model}}.log",
    benchmark:
        f"{BENCHMARKS}/ucd/dbm/train_{{dataset}}_{{model}}.tsv"
    wildcard_constraints:
        dataset="|".join(sorted(set(UCD_DATASETS) | {UCD_ABLATION_DATASET})),
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=ucd_dbm_mem_mb,
        runtime=ucd_dbm_runtime,
        gpu=GPUS,
    params:
        spec=ucd_dbm_spec,
        outdir=lambda w: ucd_dbm_dir(w.dataset, w.model),
        n_train=UCD_DBM["n_train"],
        seed=config["seed"],
        device=config["device"],
    shell:
        "tapmachine ucd train-dbm --model {wildcards.model} --spec {params.spec:q} "
        "--data {input.data} --out-dir {params.outdir} --n-train {params.n_train} "
        "--seed {params.seed} --device {params.device} --threads {threads} "
        "--tracking {input.tracking} > {log} 2>&1"


rule ucd_classifier:
    input:
        data=lambda w: dataset_file(w.dataset),
        tracking=TRACKING,
    output:
        classifier=f"{RESULTS}/ucd/classifier/{{dataset}}.pt",
    log:
        f"{LOGS}/ucd/classifier_{{dataset}}.log",
    benchmark:
        f"{BENCHMARKS}/ucd/classifier_{{dataset}}.tsv"
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=3000,
        runtime=30,
    params:
        spec=json.dumps(UCD_DBM["classifier"], sort_keys=True),
        seed=config["seed"],
    shell:
        "tapmachine ucd classifier --data {input.data} --out {output.classifier} "
        "--spec {params.spec:q} --seed {params.seed} --threads {threads} "
        "--tracking {input.tracking} > {log} 2>&1"


rule ucd_score:
    input:
        model=f"{RESULTS}/ucd/dbm/{{dataset}}/{{model}}/model.pt",
        classifier=f"{RESULTS}/ucd/classifier/{{dataset}}.pt",
        data=lambda w: dataset_file(w.dataset),
        tracking=TRACKING,
    output:
        score=f"{RESULTS}/ucd/dbm/{{dataset}}/{{model}}/score.json",
    log:
        f"{LOGS}/ucd/dbm/score_{{dataset}}_{{model}}.log",
    benchmark:
        f"{BENCHMARKS}/ucd/dbm/score_{{dataset}}_{{model}}.tsv"
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=3000,
        runtime=lambda w, attempt: 30 * attempt,
        gpu=GPUS,
    params:
        samples=UCD_DBM["fid_samples"],
        ll_images=UCD_DBM["ll_images"],
        ais=UCD_DBM["ais"],
        seed=config["seed"],
        device=config["device"],
    shell:
        "tapmachine ucd score --model {input.model} --classifier {input.classifier} "
        "--data {input.data} --out {output.score} --samples {params.samples} "
        "--ll-images {params.ll_images} --ais-runs {params.ais[n_runs]} "
        "--ais-betas {params.ais[n_betas]} "
        "--mean-field-steps {params.ais[mean_field_steps]} --seed {params.seed} "
        "--device {params.device} --threads {threads} --tracking {input.tracking} > {log} 2>&1"


rule draw_ucd_samples:
    input:
        models=[f"{ucd_dbm_dir(d, m)}/model.pt" for d, m in UCD_FIG_MODELS],
        data=[dataset_file(d) for d, _ in UCD_FIG_MODELS],
        tracking=TRACKING,
    output:
        **figure_outputs("ucd_samples"),
    log:
        f"{LOGS}/figures/ucd_samples.log",
    benchmark:
        f"{BENCHMARKS}/figures/ucd_samples.tsv"
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=lambda w, attempt: 10 * attempt,
        gpu=GPUS,
    params:
        seed=config["seed"],
        device=config["device"],
    shell:
        "tapmachine figure ucd_samples --models {input.models} --data {input.data} "
        "--seed {params.seed} --device {params.device} --png {output.png} --pdf {output.pdf} "
        "--csv {output.csv} --tracking {input.tracking} > {log} 2>&1"


rule draw_ucd_completion:
    input:
        models=[f"{ucd_dbm_dir(d, 'ucd_lmi')}/model.pt" for d in UCD_DATASETS],
        data=[dataset_file(d) for d in UCD_DATASETS],
        tracking=TRACKING,
    output:
        **figure_outputs("ucd_completion"),
    log:
        f"{LOGS}/figures/ucd_completion.log",
    benchmark:
        f"{BENCHMARKS}/figures/ucd_completion.tsv"
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=lambda w, attempt: 10 * attempt,
        gpu=GPUS,
    params:
        seed=config["seed"],
        device=config["device"],
    shell:
        "tapmachine figure ucd_completion --models {input.models} --data {input.data} "
        "--seed {params.seed} --device {params.device} --png {output.png} --pdf {output.pdf} "
        "--csv {output.csv} --tracking {input.tracking} > {log} 2>&1"


rule draw_ucd_table1:
    input:
        scores=[f"{ucd_dbm_dir(d, m)}/score.json" for d, m in UCD_TABLE1],
        tracking=TRACKING,
    output:
        **figure_outputs("ucd_table1"),
    log:
        f"{LOGS}/figures/ucd_table1.log",
    benchmark:
        f"{BENCHMARKS}/figures/ucd_table1.tsv"
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "tapmachine figure ucd_table1 --scores {input.scores} --png {output.png} "
        "--pdf {output.pdf} --csv {output.csv} --tracking {input.tracking} > {log} 2>&1"


rule draw_ucd_table2:
    input:
        scores=[f"{ucd_dbm_dir(d, m)}/score.json" for d, m in UCD_TABLE2],
        tracking=TRACKING,
    output:
        **figure_outputs("ucd_table2"),
    log:
        f"{LOGS}/figures/ucd_table2.log",
    benchmark:
        f"{BENCHMARKS}/figures/ucd_table2.tsv"
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "tapmachine figure ucd_table2 --scores {input.scores} --png {output.png} "
        "--pdf {output.pdf} --csv {output.csv} --tracking {input.tracking} > {log} 2>&1"


rule ucd_train:
    input:
        [f"{ucd_dbm_dir(d, m)}/model.pt" for d, m in UCD_ALL_MODELS],


rule ucd_samples:
    input:
        rules.draw_ucd_samples.output if SECTIONS["ucd.dbm"] else [],


rule ucd_completion:
    input:
        rules.draw_ucd_completion.output if SECTIONS["ucd.dbm"] else [],


rule ucd_table1:
    input:
        rules.draw_ucd_table1.output if SECTIONS["ucd.dbm"] else [],


rule ucd_table2:
    input:
        rules.draw_ucd_table2.output if SECTIONS["ucd.dbm"] else [],
