"""A trained machine in MLflow: logged from code and registered under its config model's name.

``log_machine`` logs a ``model.pt`` as an MLflow model named after its config model
(``registered_name``: ``bmnist_h500``; a DBM of ``ucd.dbm``, trained on several datasets,
``{dataset}_{model}``), from code (``served_model.py``, MLflow's models-from-code: nothing is
pickled, so loading it runs this package's code and no deserialised object), and registers it
under that name: each training run adds a version, tagged with the run, its git commit, config
run and config digest, so that ``models:/bmnist_h500/latest`` loads the newest. The training
rows go with it as the run's dataset input.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["MODEL_CODE", "log_machine", "registered_name", "version_tags"]

#: The file MLflow loads a logged machine from.
MODEL_CODE = Path(__file__).with_name("served_model.py")
#: Run tags a registered version repeats: the version's tag -> the run's tag.
RUN_TAGS = {
    "git_commit": "mlflow.source.git.commit",
    "config_digest": "config_digest",
    "tapmachine.run_name": "tapmachine.run_name",
}


def registered_name(record) -> str:
    """The name a model file (``io.modelfile.ModelFile``) is logged and registered under."""
    from tapmachine.pipeline.tracking.mlflow_model import is_dbm

    return f"{record.dataset}_{record.name}" if is_dbm(record.spec) else record.name


def version_tags(run_tags: Mapping[str, str], run_id: str) -> dict[str, str]:
    """The tags of a registered version: its run, and the run's git commit, config run and
    config digest where the run has them."""
    tags = {"run_id": run_id}
    tags.update({key: run_tags[tag] for key, tag in RUN_TAGS.items() if tag in run_tags})
    return tags


def _description(name: str, tags: Mapping[str, str]) -> str:
    commit = tags.get("git_commit", "unknown")
    digest = tags.get("config_digest", "none")
    return (
        f"{name} trained by run {tags['run_id']} (config run "
        f"{tags.get('tapmachine.run_name', 'none')}) at git commit {commit}, config digest {digest}"
    )


def log_machine(
    uri: str,
    run_id: str,
    model_file: str | os.PathLike,
    rows,
    dataset_file: str | os.PathLike | None = None,
    dataset_name: str | None = None,
    input_tags: Mapping[str, str] | None = None,
) -> str:
    """Log ``model_file`` to run ``run_id`` of the store ``uri`` and register it (module
    docstring): its signature with the params schema of its kind, two of ``rows`` as input
    example, the package source as ``code_paths`` and pinned requirements, so that a fresh
    environment loads it; ``rows`` (the training rows) as the run's dataset input, tagged
    ``input_tags``. Returns the model's URI. Raises what MLflow raises (the caller, the best
    effort ``tracking.Run``, turns it into a warning)."""
    import mlflow
    import numpy as np
    from mlflow.models import infer_signature

    from tapmachine.io.modelfile import ModelFile
    from tapmachine.pipeline.tracking import mlflow_model

    record = ModelFile.load(model_file)
    name = registered_name(record)
    params = mlflow_model.DBM_PARAMS if mlflow_model.is_dbm(record.spec) else mlflow_model.PARAMS
    rows = np.asarray(rows, dtype=np.float32)
    example = rows[:2]
    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient(uri)
    with mlflow.start_run(run_id=run_id, nested=True, log_system_metrics=False):
        info = mlflow.pyfunc.log_model(
            name=name,
            python_model=str(MODEL_CODE),
            artifacts={"model": str(model_file)},
            signature=infer_signature(example, params=dict(params)),
            input_example=example,
            code_paths=[str(Path(mlflow_model.__file__).parents[2])],  # the package
            pip_requirements=mlflow_model.requirements(),
            registered_model_name=name,
        )
        if dataset_file is not None:
            data = mlflow.data.from_numpy(
                rows, source=str(Path(dataset_file).resolve()), name=dataset_name
            )
            mlflow.log_input(data, context="training", tags=dict(input_tags or {}))
    version = info.registered_model_version
    tags = version_tags(client.get_run(run_id).data.tags, run_id)
    for key, value in tags.items():
        client.set_model_version_tag(name, version, key, value)
    client.update_model_version(name, version, description=_description(name, tags))
    return info.model_uri
