# The MLflow store and every experiment are created once, locally, before any parallel job.


rule tracking_init:
    output:
        manifest=TRACKING,
    log:
        "logs/tracking_init.log",
    benchmark:
        "benchmarks/tracking_init.tsv"
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        store=lambda w, output: Path(output.manifest).parent,
    shell:
        "tapmachine tracking-init --store {params.store} --manifest {output.manifest} > {log} 2>&1"
