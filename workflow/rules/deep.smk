# adaTAP vs TAP (Fig. 10, App. D) and deep TAP machines (Fig. 11, App. E). The models are ordinary
# `models` entries (trained by train.smk; `inference: adatap`, `pretrain:` and several `hidden`
# layers are settings of a model). A job reads checkpoints/epoch_{e}.pt, which training writes but
# does not declare (see train.smk); model.pt is the declared input. Settings: config `deep`.
from tapmachine.pipeline.stages.deep import curve_args

DEEP = config["deep"]
FIG10 = DEEP.get("fig10")
FIG11 = DEEP.get("fig11")
FIG10_MODELS = FIG10["models"] if FIG10 else []
FIG11_MODELS = FIG11["models"] if FIG11 else []


rule deep_curve:
    input:
        model=f"{RESULTS}/models/{{model}}/model.pt",
        data=lambda w: dataset_file(config["models"][w.model]["dataset"]),
        tracking=TRACKING,
    output:
        csv=f"{RESULTS}/deep/{{model}}/curve.csv",
        last_rows=f"{RESULTS}/deep/{{model}}/last_epoch.npz",
    log:
        f"{LOGS}/deep/curve_{{model}}.log",
    benchmark:
        f"{BENCHMARKS}/deep/curve_{{model}}.tsv"
    wildcard_constraints:
        model="|".join(FIG10_MODELS + FIG11_MODELS) or "^$",
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=3000,
        runtime=restarting_runtime(60),
    params:
        settings=lambda w: curve_args(DEEP, w.model),
        seed=config["seed"],
    shell:
        "tapmachine deep-curve --model-file {input.model} --data {input.data} {params.settings} "
        "--seed {params.seed} --threads {threads} --out {output.csv} "
        "--last-rows {output.last_rows} --tracking {input.tracking} > {log} 2>&1"


rule deep_timing:
    input:
        tracking=TRACKING,
    output:
        csv=f"{RESULTS}/deep/fig10_timing.csv",
    log:
        f"{LOGS}/deep/timing.log",
    benchmark:
        f"{BENCHMARKS}/deep/timing.tsv"
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=restarting_runtime(60),
    params:
        timing=lambda w: (
            f"--visible {FIG10['timing']['visible_units']} "
            f"--hidden {FIG10['timing']['hidden_units']} "
            f"--batch-sizes {' '.join(str(b) for b in FIG10['timing']['batch_sizes'])} "
            f"--repeats {FIG10['timing']['repeats']} "
            f"--tap-iterations {FIG10['timing']['tap_iterations']} "
            f"--adatap-iterations {FIG10['timing']['adatap_iterations']} "
            f"--adatap-method {FIG10['timing']['adatap_method']}"
        ),
        seed=config["seed"],
    shell:
        "tapmachine deep-timing {params.timing} --seed {params.seed} --threads {threads} "
        "--out {output.csv} --tracking {input.tracking} > {log} 2>&1"


rule draw_fig10:
    input:
        curves=expand(f"{RESULTS}/deep/{{model}}/curve.csv", model=FIG10_MODELS),
        last_rows=expand(f"{RESULTS}/deep/{{model}}/last_epoch.npz", model=FIG10_MODELS),
        models=model_files(FIG10_MODELS),
        timing=rules.deep_timing.output.csv,
        tracking=TRACKING,
    output:
        **figure_outputs("fig10"),
    log:
        f"{LOGS}/figures/fig10.log",
    benchmark:
        f"{BENCHMARKS}/figures/fig10.tsv"
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        epoch=f"--epoch {FIG10['epoch']}" if FIG10 and FIG10.get("epoch") else "",
    shell:
        "tapmachine figure fig10 --curves {input.curves} --last-rows {input.last_rows} {params.epoch} "
        "--model-files {input.models} --timing {input.timing} --png {output.png} --pdf {output.pdf} --csv {output.csv} "
        "--tracking {input.tracking} > {log} 2>&1"


rule draw_fig11:
    input:
        curves=expand(f"{RESULTS}/deep/{{model}}/curve.csv", model=FIG11_MODELS),
        models=model_files(FIG11_MODELS),
        tracking=TRACKING,
    output:
        **figure_outputs("fig11"),
    log:
        f"{LOGS}/figures/fig11.log",
    benchmark:
        f"{BENCHMARKS}/figures/fig11.tsv"
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "tapmachine figure fig11 --curves {input.curves} --model-files {input.models} "
        "--png {output.png} --pdf {output.pdf} --csv {output.csv} "
        "--tracking {input.tracking} > {log} 2>&1"


rule fig10:
    input:
        rules.draw_fig10.output if FIG10 else [],


rule fig11:
    input:
        rules.draw_fig11.output if FIG11 else [],
