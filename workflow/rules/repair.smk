# Damaged files (named while the workflow is parsed, common.smk) set aside as <name>.corrupt, so
# that the next run makes them again: `snakemake --cores 1 set_aside_damaged`. Neither an output
# nor a benchmark: a rule that makes no file runs whenever it is asked for.


rule set_aside_damaged:
    log:
        f"{LOGS}/set_aside_damaged.log",
    conda:
        "../../envs/tapmachine.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        data=DATA,
        results=RESULTS,
    shell:
        "tapmachine set-aside-damaged --data {params.data} --results {params.results} 2>&1 "
        "| tee {log}"
