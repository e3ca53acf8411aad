"""A trained machine as an MLflow model (pyfunc): ``predict(images)`` returns the hidden means
given the visible units clamped at the images (the clamped TAP magnetisations, App. E of the
first paper; exact and closed-form for an RBM). Used by ``tapmachine.tracking.Run.log_machine``;
loading it needs ``tapmachine`` installed (``mlflow.pyfunc.load_model(uri).predict(x)``)."""

from __future__ import annotations

import mlflow.pyfunc
import numpy as np


class TapMachineModel(mlflow.pyfunc.PythonModel):
    """The machine in the ``model`` artifact (a ``model.pt``)."""

    def load_context(self, context) -> None:
        from tapmachine import training

        self.machine = training.load_model(context.artifacts["model"])

    def predict(self, context, model_input, params=None) -> np.ndarray:
        from tapmachine import tap

        x = np.asarray(model_input, dtype=np.float64)
        state = tap.clamped_state(self.machine, x)
        return state.a[-1].detach().cpu().numpy().astype(np.float32)
