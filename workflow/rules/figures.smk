# Figures 3-7 of the first paper: one rule per figure, named as the figure, each writing
# results/figures/{fig}.png, .pdf and .csv and logging them to the MLflow experiment "figures".
# A figure missing from the config's `figures:` section has no rule. Helpers: common.smk.


if "fig3" in FIGURES:
    FIG3_EXACT = FIGURES["fig3"].get("exact") or {"models": [], "epochs": []}

    rule exact_curve:
        input:
            model=f"{RESULTS}/models/{{model}}/model.pt",
            data=lambda w: dataset_file(config["models"][w.model]["dataset"]),
            tracking=TRACKING,
        output:
            curve=f"{RESULTS}/likelihood/{{model}}/exact.csv",
        log:
            f"{LOGS}/likelihood/exact_curve_{{model}}.log",
        benchmark:
            f"{BENCHMARKS}/likelihood/exact_curve_{{model}}.tsv"
        wildcard_constraints:
            model="|".join(FIG3_EXACT["models"]) or "^$",
        conda:
            "../../envs/tapmachine.yaml"
        threads: model_threads
        resources:
            mem_mb=3000,
            runtime=240,
        params:
            model_dir=lambda w: f"{RESULTS}/models/{w.model}",
            epochs=option_value(
                "--epochs",
                (
                    FIG3_EXACT["epochs"]
                    if isinstance(FIG3_EXACT["epochs"], str)
                    else ",".join(map(str, FIG3_EXACT["epochs"]))
                ),
            ),
            ais=option_value(
                "--ais", f"'{json.dumps(FIG3_EXACT['ais'])}'" if FIG3_EXACT.get("ais") else None
            ),
            seed=config["seed"],
        shell:
            "tapmachine exact-curve --model-dir {params.model_dir} --data {input.data} "
            "{params.epochs} {params.ais} --seed {params.seed} --out {output.curve} "
            "--threads {threads} --tracking {input.tracking} > {log} 2>&1"

    rule fig3:
        input:
            metrics=model_files(FIGURES["fig3"]["models"], "metrics.csv"),
            models=model_files(FIGURES["fig3"]["models"]),
            exact=[f"{RESULTS}/likelihood/{m}/exact.csv" for m in FIG3_EXACT["models"]],
            tracking=TRACKING,
        output:
            **figure_outputs("fig3"),
        log:
            f"{LOGS}/figures/fig3.log",
        benchmark:
            f"{BENCHMARKS}/figures/fig3.tsv"
        conda:
            "../../envs/tapmachine.yaml"
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        params:
            palette=FIGURE_PALETTE,
        shell:
            "tapmachine figure fig3 --metrics {input.metrics} --model-files {input.models} "
            "--exact {input.exact} --palette {params.palette} --png {output.png} --pdf {output.pdf} --csv {output.csv} --threads {threads} "
            "--tracking {input.tracking} > {log} 2>&1"


if "fig4" in FIGURES:

    rule fig4:
        input:
            models=model_files(FIGURES["fig4"]["models"]),
            data=[dataset_file(config["models"][m]["dataset"]) for m in FIGURES["fig4"]["models"]],
            tracking=TRACKING,
        output:
            **figure_outputs("fig4"),
        log:
            f"{LOGS}/figures/fig4.log",
        benchmark:
            f"{BENCHMARKS}/figures/fig4.tsv"
        conda:
            "../../envs/tapmachine.yaml"
        threads: 1
        resources:
            mem_mb=4000,
            runtime=20,
        params:
            n_images=FIGURES["fig4"]["n_images"],
            per_group=FIGURES["fig4"]["per_group"],
            spread=FIGURES["fig4"]["spread"],
            palette=FIGURE_PALETTE,
        shell:
            "tapmachine figure fig4 --model-files {input.models} --data {input.data} "
            "--n-images {params.n_images} --per-group {params.per_group} "
            "--spread {params.spread} --palette {params.palette} "
            "--png {output.png} --pdf {output.pdf} --csv {output.csv} --threads {threads} "
            "--tracking {input.tracking} > {log} 2>&1"


if "fig5" in FIGURES:

    rule fig5:
        input:
            solutions=figure_solution_files("fig5"),
            tracking=TRACKING,
        output:
            **figure_outputs("fig5"),
        log:
            f"{LOGS}/figures/fig5.log",
        benchmark:
            f"{BENCHMARKS}/figures/fig5.tsv"
        conda:
            "../../envs/tapmachine.yaml"
        threads: 1
        resources:
            mem_mb=4000,
            runtime=20,
        params:
            slices=option_list("--slices", FIGURES["fig5"]["slices"]),
            per_model=figure_per_model("fig5", ["slices"]),
        shell:
            "tapmachine figure fig5 --solutions {input.solutions} {params.slices} {params.per_model} "
            "--png {output.png} --pdf {output.pdf} --csv {output.csv} --threads {threads} "
            "--tracking {input.tracking} > {log} 2>&1"


if "fig6" in FIGURES:

    rule fig6:
        input:
            solutions=figure_solution_files("fig6"),
            tracking=TRACKING,
        output:
            **figure_outputs("fig6"),
        log:
            f"{LOGS}/figures/fig6.log",
        benchmark:
            f"{BENCHMARKS}/figures/fig6.tsv"
        conda:
            "../../envs/tapmachine.yaml"
        threads: 1
        resources:
            mem_mb=6000,
            runtime=30,
        params:
            embedding=FIGURES["fig6"]["embedding"],
            n_neighbors=FIGURES["fig6"]["n_neighbors"],
            seed=config["seed"],
        shell:
            "tapmachine figure fig6 --solutions {input.solutions} --embedding {params.embedding} "
            "--n-neighbors {params.n_neighbors} --seed {params.seed} "
            "--png {output.png} --pdf {output.pdf} --csv {output.csv} --threads {threads} "
            "--tracking {input.tracking} > {log} 2>&1"


if "fig7" in FIGURES:

    rule fig7:
        input:
            solutions=figure_solution_files("fig7"),
            data=figure_datasets("fig7"),
            tracking=TRACKING,
        output:
            **figure_outputs("fig7"),
        log:
            f"{LOGS}/figures/fig7.log",
        benchmark:
            f"{BENCHMARKS}/figures/fig7.tsv"
        conda:
            "../../envs/tapmachine.yaml"
        threads: 1
        resources:
            mem_mb=6000,
            runtime=30,
        params:
            digits=option_list("--digits", FIGURES["fig7"]["digits"]),
            n_images=option_value("--n-images", FIGURES["fig7"]["n_images"]),
            per_model=figure_per_model("fig7", ["digits", "n_images"]),
            embedding=FIGURES["fig7"]["embedding"],
            n_neighbors=FIGURES["fig7"]["n_neighbors"],
            seed=config["seed"],
        shell:
            "tapmachine figure fig7 --solutions {input.solutions} --data {input.data} "
            "{params.digits} {params.n_images} {params.per_model} --embedding {params.embedding} "
            "--n-neighbors {params.n_neighbors} --seed {params.seed} "
            "--png {output.png} --pdf {output.pdf} --csv {output.csv} --threads {threads} "
            "--tracking {input.tracking} > {log} 2>&1"


rule figures:
    input:
        figure_targets(),
