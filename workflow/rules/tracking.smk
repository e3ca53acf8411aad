# MLflow tracking, best effort (tapmachine.pipeline.tracking): the store and every experiment are made
# by `onstart` (the Snakefile: before the first job of a run that has jobs; never by a dry run or
# --lint), and by rule tracking_init where the DAG finds no manifest. Every rule takes the manifest
# as an ancient() input (common.smk), so a store made afresh reruns nothing once it exists.
import hashlib
import os

from tapmachine.pipeline.tracking import invocation as _invocation
from tapmachine.pipeline.tracking import environment as _environment
from tapmachine.pipeline.tracking import store as _tracking

# Every job (local or through SLURM, which passes the environment on) sees these.
_environment.update(
    run_name=RUN_NAME,
    config_digest=hashlib.sha256(
        json.dumps(config, sort_keys=True, default=str).encode()
    ).hexdigest()[:16],
)
for _key, _value in _tracking.HTTP_LIMITS.items():
    os.environ.setdefault(_key, _value)

# A manifest missing while results exist: as long as nothing else is to run, nothing runs; once a
# job is, the manifest's rule runs too, and with it every rule after it (an ancient() input that
# does not exist counts as updated). So a run with jobs to do then makes the store in `onstart`
# and stops before the first; the next run makes only what is missing. Read only here.
REMAKE_STORE = bool(RESULT_FILES) and not Path(TRACKING_FILE).exists()
if REMAKE_STORE:
    print(
        f"tapmachine: no tracking store ({TRACKING_FILE} is missing) though results exist: a run "
        "with jobs to do makes the store and stops before the first (else every rule would run "
        "again after rule tracking_init); then run again",
        file=sys.stderr,
    )


rule tracking_init:
    output:
        manifest=TRACKING_FILE,
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
