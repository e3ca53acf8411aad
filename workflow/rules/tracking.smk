# MLflow tracking, best effort (tapmachine.tracking): the store and every experiment are created
# once, locally, before any parallel job (onstart and the local rule tracking_init); every rule
# takes the manifest as an ancient() input (common.smk), so re-creating the store reruns nothing.
import datetime
import hashlib
import os

from tapmachine import tracking as _tracking

# Every job (local or through SLURM, which passes the environment on) sees these.
os.environ[_tracking.ENV_RUN_NAME] = RUN_NAME
os.environ[_tracking.ENV_CONFIG_DIGEST] = hashlib.sha256(
    json.dumps(config, sort_keys=True, default=str).encode()
).hexdigest()[:16]
for _key, _value in _tracking.HTTP_LIMITS.items():
    os.environ.setdefault(_key, _value)


def tracking_onstart():
    """The store, its experiments and one parent run per experiment for this invocation."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    name = f"snakemake {RUN_NAME} {stamp}"
    parents = _tracking.open_invocation(config["tracking"]["store"], TRACKING_FILE, name)
    if parents:
        print(f"tapmachine: MLflow parent runs '{name}' opened in {sorted(parents)}")


def tracking_onend(ok):
    """Close the parent runs and print what was made, where, and how to browse it."""
    _tracking.close_invocation(TRACKING_FILE, "FINISHED" if ok else "FAILED")
    uri = os.environ.get("MLFLOW_TRACKING_URI") or (
        "sqlite:///" + str(Path(config["tracking"]["store"]).resolve() / "mlflow.db")
    )
    figures = sorted(Path(RESULTS, "figures").glob("*.png"))
    lines = [
        "",
        f"tapmachine summary ({'success' if ok else 'FAILED: see the job logs named above'}):",
        f"  run name {RUN_NAME}: results in {RESULTS}/ (datasets in {DATA}/), logs in logs/",
        f"  figures ({len(figures)}): {', '.join(p.name for p in figures) or 'none yet'}",
    ]
    if uri.startswith("sqlite:"):
        lines.append(f"  browse: mlflow ui --backend-store-uri {uri} --port 5000")
        base = "http://127.0.0.1:5000"
    else:
        base = uri
    try:
        exp = json.loads(Path(TRACKING_FILE).read_text())["experiments"].get("train")
    except (OSError, ValueError):
        exp = None
    if exp:
        lines.append(f"  training runs: {_tracking.ui_link(base, exp)}")
    lines.append(f"  tracking missing or partial? replay: tapmachine track --results {RESULTS}")
    print("\n".join(lines))


rule tracking_init:
    output:
        manifest=TRACKING_FILE,
    params:
        store=lambda w, output: Path(output.manifest).parent,
    conda:
        "../../envs/tapmachine.yaml"
    log:
        "logs/tracking_init.log",
    benchmark:
        "benchmarks/tracking_init.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "tapmachine tracking-init --store {params.store} --manifest {output.manifest} > {log} 2>&1"
