"""A trained machine as an MLflow model (pyfunc), served with ``mlflow models serve``.

``predict(images, params={"output": ...})`` answers, for rows of visible units x (M, Nv):

- ``hidden`` (default): the hidden means with x clamped, the clamped TAP magnetisations of the
  last layer (App. E of the first paper; exact and closed-form for an RBM), (M, N_last);
- ``free_energy``: F(x) = -ln sum_h P*(x, h), (M,); exact for an RBM
  (``BoltzmannMachine.free_energy_visible``), the clamped TAP free energy for deeper machines
  (``tap.data_log_term``);
- ``tap_log_likelihood``: TAP's ln P(x) per unit, (-F(x) - ln Z_TAP) / sum_l N_l (eq. 39, the
  normalisation of Fig. 3), with ln Z_TAP the one training's evaluation recorded after its last
  epoch (``log_z_tap``); the mean over training's evaluation rows is its ``tap_ll``;
- ``reconstruct``: the mean-field reconstruction E[x | h = a_1], a_1 the clamped magnetisations
  of the first hidden layer, (M, Nv);
- ``sample``: ``n_samples`` visible configurations (default: one per row), block Gibbs chains
  started at the rows (cycled) after ``gibbs_steps`` sweeps of every layer, seeded by ``seed``,
  (n_samples, Nv).

``tracking.Run.log_machine`` logs it with the package's source as ``code_paths`` and pinned
requirements, so loading it needs neither this checkout nor an install of ``tapmachine``.
This module imports MLflow; the numerics it calls do not.
"""

from __future__ import annotations

import math

import mlflow.pyfunc
import numpy as np

__all__ = ["OUTPUTS", "PARAMS", "TapMachineModel", "predict", "gibbs_samples"]

OUTPUTS = ("hidden", "free_energy", "tap_log_likelihood", "reconstruct", "sample")
#: The ``params`` of ``predict`` and their defaults (the model signature's params schema).
PARAMS = {"output": "hidden", "n_samples": 0, "seed": 0, "gibbs_steps": 1000}


def gibbs_samples(machine, x0, n_samples: int, sweeps: int, generator):
    """Visible units of ``n_samples`` block Gibbs chains (``BoltzmannMachine.gibbs_step``, every
    layer) started at the rows of ``x0`` (cycled; hidden layers at zero before the first sweep,
    which draws them first) after ``sweeps`` sweeps."""
    import torch

    v = x0[torch.arange(n_samples, device=x0.device) % x0.shape[0]]
    xs = [v] + [v.new_zeros(n_samples, n) for n in machine.sizes[1:]]
    for _ in range(sweeps):
        xs = machine.gibbs_step(xs, generator)
    return xs[0]


def predict(machine, x, params: dict | None = None, log_z_tap: float | None = None) -> np.ndarray:
    """The answer of ``TapMachineModel.predict`` for ``machine`` (module docstring)."""
    import torch

    from tapmachine.core import tap

    p = {**PARAMS, **(params or {})}
    output = p["output"]
    if output not in OUTPUTS:
        raise ValueError(f"output {output!r} is not one of {', '.join(OUTPUTS)}")
    x = torch.as_tensor(np.asarray(x, dtype=np.float64), dtype=machine.dtype)
    with torch.no_grad():
        if output == "hidden":
            out = tap.clamped_state(machine, x).a[-1]
        elif output == "free_energy":
            out = -tap.data_log_term(machine, x)
        elif output == "tap_log_likelihood":
            if log_z_tap is None or not math.isfinite(log_z_tap):
                raise ValueError("this model has no recorded TAP ln Z (log_z_tap) to score with")
            out = (tap.data_log_term(machine, x) - log_z_tap) / sum(machine.sizes)
        elif output == "reconstruct":
            a1 = tap.clamped_state(machine, x).a[1]
            out = machine.visible.mean(a1 @ machine.weights[0].T)
        else:
            n = int(p["n_samples"]) or x.shape[0]
            generator = torch.Generator().manual_seed(int(p["seed"]))
            out = gibbs_samples(machine, x, n, int(p["gibbs_steps"]), generator)
    return out.detach().cpu().numpy().astype(np.float32)


class TapMachineModel(mlflow.pyfunc.PythonModel):
    """The machine in the ``model`` artifact (a ``model.pt``)."""

    def load_context(self, context) -> None:
        from tapmachine.io.modelfile import ModelFile

        record = ModelFile.load(context.artifacts["model"])
        self.machine = record.machine()
        last = record.history[-1] if record.history else {}
        self.log_z_tap = last.get("log_z_tap")

    def predict(self, context, model_input, params=None) -> np.ndarray:
        return predict(self.machine, model_input, params, self.log_z_tap)


def requirements() -> list[str]:
    """The pip requirements of a logged machine: what this module imports, pinned
    to the installed versions (a local build tag such as ``+cpu`` dropped: pip's index has the
    plain version). The package itself travels as code, so it is not among them."""
    from importlib.metadata import version

    return [f"{dist}=={version(dist).split('+')[0]}" for dist in ("mlflow", "numpy", "torch")]
