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

A DBM of the second paper (a model file of a ``ucd.dbm.DBM_METHODS`` method) answers, for rows
of {0, 1} pixels (``DBM_PARAMS``):

- ``sample`` (default): ``n_samples`` images (default: one per row), the visible layers of local
  modes found from uniform states (``ucd.generate.sample``, as Fig. 2), seeded by ``seed``,
  (n_samples, Nv);
- ``complete``: the rows with their NaN pixels (the mask) filled in by local search on the
  clamped model (``ucd.generate.complete``, as Fig. 3), seeded by ``seed``, (M, Nv);
- ``free_energy``: the clamped TAP free energy F(x) (``tap.data_log_term``), (M,).

Rows a model cannot score are refused before anything is computed: a value outside the visible
units' support (``Prior.in_support``; {0, 1} pixels for a DBM, NaN only where ``complete``
reads a mask) or an unknown ``output`` raise ``RefusedInput``, which ``mlflow models serve``
answers with HTTP 400 and the one-line message, without a stack trace.

``model_registry.log_machine`` logs it from code (``served_model.py``) with the package's source
as ``code_paths`` and pinned requirements, so loading it needs neither this checkout nor an
install of ``tapmachine``. This module imports MLflow; the numerics it calls do not.
"""

from __future__ import annotations

import math

import mlflow.pyfunc
import numpy as np
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

__all__ = [
    "DBM_OUTPUTS",
    "DBM_PARAMS",
    "OUTPUTS",
    "PARAMS",
    "RefusedInput",
    "TapMachineModel",
    "check_rows",
    "gibbs_samples",
    "is_dbm",
    "predict",
    "predict_dbm",
]

OUTPUTS = ("hidden", "free_energy", "tap_log_likelihood", "reconstruct", "sample")
#: The ``params`` of ``predict`` and their defaults (the model signature's params schema).
PARAMS = {"output": "hidden", "n_samples": 0, "seed": 0, "gibbs_steps": 1000}
DBM_OUTPUTS = ("sample", "complete", "free_energy")
#: The ``params`` of ``predict_dbm`` and their defaults.
DBM_PARAMS = {"output": "sample", "n_samples": 0, "seed": 0}


class RefusedInput(MlflowException, ValueError):
    """Input a model cannot score: HTTP 400 from ``mlflow models serve``, a one-line message.

    The scoring server rewrites the message of an exception raised in ``predict`` to one that
    quotes the whole input on a first line; this exception keeps the message it was made with.
    """

    def __init__(self, message: str):
        super().__init__(message, error_code=INVALID_PARAMETER_VALUE)

    @property
    def message(self) -> str:
        return self._message

    @message.setter
    def message(self, value: str) -> None:
        if not hasattr(self, "_message"):
            self._message = value


def is_dbm(spec: dict | None) -> bool:
    """Whether a model file's spec is that of a DBM of the second paper."""
    from tapmachine.ucd.dbm import DBM_METHODS

    return (spec or {}).get("method") in DBM_METHODS


def _params(params: dict | None, defaults: dict, outputs: tuple) -> dict:
    p = {**defaults, **(params or {})}
    if p["output"] not in outputs:
        raise RefusedInput(f"output {p['output']!r} is not one of {', '.join(outputs)}")
    return p


def check_rows(x: np.ndarray, in_support, support: str, allow_nan: bool = False) -> None:
    """Refuse rows (M, N) with a value outside ``support`` (``in_support``, elementwise), NaN
    allowed where ``allow_nan``: RefusedInput naming the first such row and column."""
    import torch

    values = torch.as_tensor(x)
    bad = ~in_support(values)
    if allow_nan:
        bad &= ~torch.isnan(values)
    if bad.any():
        flat = int(bad.reshape(-1).nonzero()[0])
        row, column = divmod(flat, x.shape[1])
        raise RefusedInput(
            f"row {row}, column {column}: {float(x[row, column]):g} is outside {support}, "
            "the values of the model's visible units"
        )


def _rows(x, n_visible: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != n_visible:
        raise RefusedInput(f"rows of shape {x.shape}; the model reads rows of {n_visible} units")
    return x


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

    p = _params(params, PARAMS, OUTPUTS)
    output = p["output"]
    x = _rows(x, machine.sizes[0])
    check_rows(x, machine.visible.in_support, machine.visible.support)
    x = torch.as_tensor(x, dtype=machine.dtype)
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


def _binary(x):
    return (x == 0) | (x == 1)


def predict_dbm(machine, x, params: dict | None = None) -> np.ndarray:
    """The answer of ``TapMachineModel.predict`` for a DBM (module docstring)."""
    import torch

    from tapmachine.core import tap
    from tapmachine.core.seeding import seeded_generator
    from tapmachine.ucd import dbm, generate

    p = _params(params, DBM_PARAMS, DBM_OUTPUTS)
    output = p["output"]
    x = _rows(x, machine.sizes[0])
    check_rows(x, _binary, "{0, 1}", allow_nan=output == "complete")
    generator = seeded_generator(int(p["seed"]), "served_dbm", output)
    with torch.no_grad():
        if output == "sample":
            samples, _ = generate.sample(machine, int(p["n_samples"]) or x.shape[0], generator)
            out = dbm.to_unit_interval(machine, samples)
        elif output == "complete":
            mask = torch.as_tensor(np.isnan(x))
            v = dbm.data_for(machine, torch.as_tensor(np.nan_to_num(x)))
            state, _ = generate.complete(machine, v, mask, generator)
            out = dbm.to_unit_interval(machine, state[0])
        else:
            out = -tap.data_log_term(machine, dbm.data_for(machine, torch.as_tensor(x)))
    return out.detach().cpu().numpy().astype(np.float32)


class TapMachineModel(mlflow.pyfunc.PythonModel):
    """The machine in the ``model`` artifact (a ``model.pt``): an RBM or deep TAP machine
    (``predict``), or a DBM of the second paper (``predict_dbm``)."""

    def load_context(self, context) -> None:
        from tapmachine.io.modelfile import ModelFile

        record = ModelFile.load(context.artifacts["model"])
        self.machine = record.machine()
        self.dbm = is_dbm(record.spec)
        last = record.history[-1] if record.history else {}
        self.log_z_tap = last.get("log_z_tap")

    def predict(self, context, model_input, params=None) -> np.ndarray:
        if self.dbm:
            return predict_dbm(self.machine, model_input, params)
        return predict(self.machine, model_input, params, self.log_z_tap)


def requirements() -> list[str]:
    """The pip requirements of a logged machine: what this module imports, pinned
    to the installed versions (a local build tag such as ``+cpu`` dropped: pip's index has the
    plain version). The package itself travels as code, so it is not among them."""
    from importlib.metadata import version

    return [f"{dist}=={version(dist).split('+')[0]}" for dist in ("mlflow", "numpy", "torch")]
