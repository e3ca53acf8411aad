"""The model file of a logged machine (MLflow's models-from-code): ``model_registry`` logs this
file, not a pickled object, and MLflow runs it to load the model, which ``set_model`` names.
The package it imports travels with the model (``code_paths``)."""

from mlflow.models import set_model

from tapmachine.pipeline.tracking.mlflow_model import TapMachineModel

set_model(TapMachineModel())
