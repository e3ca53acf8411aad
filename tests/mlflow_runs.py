"""The stage runs of an MLflow store as plain data, to compare two stores (not a test module)."""

from __future__ import annotations

import json

from tapmachine.pipeline.tracking.store import STAGE_RUNS


def dump(uri: str) -> dict:
    """(experiment, run name) -> (params, tags, metric histories, artifacts, status) of every
    stage run in the store at ``uri``. Tags leave out ``mlflow.*`` and ``tapmachine.replayed``
    and name each run id, also inside a JSON group, as (experiment, run name); histories are
    sorted (step, value) with values rounded to 9 digits and leave out ``system/*`` samples;
    artifacts are the top-level paths and those under ``epochs/``."""
    import mlflow

    client = mlflow.MlflowClient(uri)
    exps = {e.experiment_id: e.name for e in client.search_experiments()}
    runs = [r for e in exps for r in client.search_runs([e], STAGE_RUNS)]
    by_id = {r.info.run_id: (exps[r.info.experiment_id], r.info.run_name) for r in runs}

    def named(value: str):
        group = json.loads(value) if value.startswith("{") else None
        if isinstance(group, dict):
            return {k: by_id.get(v, v) for k, v in group.items()}
        return by_id.get(value, value)

    out = {}
    for r in runs:
        run_id = r.info.run_id
        tags = {
            k: named(v)
            for k, v in r.data.tags.items()
            if not k.startswith("mlflow.") and k != "tapmachine.replayed"
        }
        history = {
            m: sorted((h.step, round(h.value, 9)) for h in client.get_metric_history(run_id, m))
            for m in r.data.metrics
            if not m.startswith("system/")
        }
        arts = sorted(a.path for a in client.list_artifacts(run_id))
        arts += sorted(a.path for a in client.list_artifacts(run_id, "epochs"))
        out[by_id[run_id]] = (r.data.params, tags, history, arts, r.info.status)
    return out
