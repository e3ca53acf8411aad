# MLflow tracking, best effort (tapmachine.pipeline.tracking): the store and every experiment are created
# once, when the workflow is parsed, before any job; every rule takes the manifest as an ancient()
# input (common.smk), so re-creating the store reruns nothing. tracking_init remakes a manifest
# deleted while the workflow runs.
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

# The store exists before the DAG is built, so that no job ever makes the manifest: a manifest made
# by a job would count as an updated input and rerun every rule. Best effort: with a store that is
# down this takes one short try and records the error; jobs then try once each and carry on.
if not Path(TRACKING_FILE).exists() or "error" in json.loads(Path(TRACKING_FILE).read_text()):
    _tracking.init_store(config["tracking"]["store"], TRACKING_FILE, best_effort=True)


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
