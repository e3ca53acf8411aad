# UCD-LMI (second paper). Fig. 1: coupling time tau and local-search steps T against the dimension
# of random RBMs, for four couplings (one job per method, each all dimensions as batches of
# chains), then the figure. Settings: config `ucd.fig1` (src/tapmachine/io/config.schema.yaml).

UCD_FIG1 = config["ucd"]["fig1"]


rule ucd_coupling_steps:
    input:
        tracking=TRACKING,
    output:
        steps=f"{RESULTS}/ucd/fig1/{{method}}.csv",
    log:
        f"{LOGS}/ucd/fig1_{{method}}.log",
    benchmark:
        f"{BENCHMARKS}/ucd/fig1_{{method}}.tsv"
    wildcard_constraints:
        method="|".join(UCD_FIG1["methods"]),
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        # minutes: the capped Gibbs points dominate (about 3e6 chain-steps a minute on one core)
        runtime=30 + UCD_FIG1["cap"] * UCD_FIG1["reps"] * len(UCD_FIG1["dims"]) // 3_000_000,
    params:
        dims=" ".join(str(d) for d in UCD_FIG1["dims"]),
        settings=(
            f"--reps {UCD_FIG1['reps']} --cap {UCD_FIG1['cap']} "
            f"--search-cap {UCD_FIG1['search_cap']} --units {UCD_FIG1['units']} "
            f"--bias {UCD_FIG1['bias']} --gain {UCD_FIG1['gain']}"
        ),
        device=DEVICE_ARGS,
    shell:
        "tapmachine ucd steps --method {wildcards.method} --dims {params.dims} "
        "{params.settings} {params.device} --threads {threads} --out {output.steps} "
        "--tracking {input.tracking} > {log} 2>&1"


rule draw_ucd_fig1:
    input:
        steps=expand(f"{RESULTS}/ucd/fig1/{{method}}.csv", method=UCD_FIG1["methods"]),
        tracking=TRACKING,
    output:
        **figure_outputs("ucd_fig1"),
    log:
        f"{LOGS}/figures/ucd_fig1.log",
    benchmark:
        f"{BENCHMARKS}/figures/ucd_fig1.tsv"
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "tapmachine figure ucd_fig1 --steps {input.steps} --png {output.png} --pdf {output.pdf} "
        "--csv {output.csv} --tracking {input.tracking} > {log} 2>&1"


rule ucd_fig1:
    input:
        rules.draw_ucd_fig1.output if SECTIONS["ucd.fig1"] else [],
