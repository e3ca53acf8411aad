"""What both estimators share: scikit-learn's validation with the support of the visible units,
seeding, the one training path (the registry's ``start``, greedy pretraining, ``train.loop``'s
``train`` on a ``Carried`` state) and the TAP log-likelihood (first paper, eq. 39).

A subclass gives the config entry of its parameters (``_spec``), the prior its rows must lie in
(``_visible_template``), its rows in the machine's units (``_units``) and its sampler
(``sample``). ``score_samples``' ln Z is exact (enumeration) for an RBM with a binary layer of at
most ``EXACT_UNITS`` units, else TAP's (``log_z``).
"""

from __future__ import annotations

import re
import secrets
import warnings

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data
from torch import Tensor

from tapmachine.core import tap
from tapmachine.core.estimators import exact_log_partition
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Prior, Spin
from tapmachine.io import data
from tapmachine.io.data import Dataset
from tapmachine.io.schema import check_entry, schema_property
from tapmachine.train.build import hidden_prior
from tapmachine.train.loop import Carried, train
from tapmachine.train.methods import method
from tapmachine.train.pretrain import pretrain
from tapmachine.train.settings import (
    PretrainSettings,
    TrainingError,
    TrainSettings,
    device_problem,
)

__all__ = [
    "BoltzmannEstimator",
    "EXACT_UNITS",
    "PRIORS",
    "enumerable",
    "support_template",
    "first_outside",
    "check_support",
    "binarized",
    "torch_device",
    "seed_of",
    "tap_log_partition",
]


#: The unit priors of the first paper (App. C), the config's ``prior`` values.
PRIORS = ("bernoulli", "spin", "truncated_gaussian", "truncated_gauss_bernoulli")

#: ``log_z="auto"`` enumerates (exact ln Z) an RBM with a binary layer of at most this many units.
EXACT_UNITS = 20


def enumerable(machine: BoltzmannMachine, max_units: int = EXACT_UNITS) -> bool:
    """Whether ``exact_log_partition`` enumerates ``machine`` within ``max_units`` units: an RBM
    with a Bernoulli or spin layer that small."""
    return machine.n_layers == 2 and any(
        isinstance(p, Bernoulli | Spin) and p.size <= max_units for p in machine.priors
    )


def support_template(kind: str, lower: float = 0.0, upper: float = 1.0) -> Prior:
    """A one-unit prior of ``kind`` (the config's ``prior``) at its neutral point: what knows the
    values its units take (``Prior.in_support``, ``Prior.support``) before any machine exists."""
    try:
        spec = {"prior": kind, "lower": lower, "upper": upper}
        return hidden_prior(spec, 1, torch.float64, "cpu")
    except TrainingError as exc:  # an unknown kind
        raise ValueError(f"{exc}: the priors are {PRIORS}") from None


def first_outside(prior: Prior, x: np.ndarray) -> tuple[int, int] | None:
    """(row, column) of the first value of ``x`` (row-major) outside ``prior``'s support
    (``io.data.first_outside``, as training checks its datasets)."""
    return data.first_outside(prior.in_support, x)


def check_support(prior: Prior, x: np.ndarray, owner: str) -> None:
    """Raise ValueError naming the first row and column of ``x`` outside ``prior``'s support."""
    found = first_outside(prior, x)
    if found is not None:
        row, column = found
        raise ValueError(
            f"X[{row}, {column}] = {x[row, column]:g} is outside {prior.support}, the values of "
            f"the {type(prior).__name__} visible units of {owner} (binarize= maps rows onto "
            "binary units)"
        )


def binarized(x: np.ndarray, threshold: float, prior: Prior) -> np.ndarray:
    """``x > threshold`` as the two values of a binary prior: {0, 1} (Bernoulli) or {-1, 1}
    (Spin), the rule of scikit-learn's ``Binarizer``."""
    if not isinstance(prior, Bernoulli | Spin):
        raise ValueError(f"binarize needs binary visible units, not {type(prior).__name__}")
    ones = (x > threshold).astype(x.dtype)
    return 2.0 * ones - 1.0 if isinstance(prior, Spin) else ones


def torch_device(device, owner: str) -> torch.device:
    """``device`` checked as the config's ``device`` is (its schema pattern: "cpu", "cuda",
    "cuda:N"; CUDA only where torch sees it, ``train.settings.device_problem``); ValueError
    naming ``owner`` else."""
    pattern = schema_property("device")["pattern"]
    if not isinstance(device, str) or re.fullmatch(pattern, device) is None:
        raise ValueError(f"{owner}: device must match {pattern} (the config's), not {device!r}")
    problem = device_problem(device)
    if problem is not None:
        raise ValueError(f"{owner}: device={problem}")
    return torch.device(device)


def seed_of(random_state: int | None) -> int:
    """The seed of the torch generators: ``random_state``, or fresh entropy for None (no global
    random state is read or moved)."""
    return secrets.randbits(63) if random_state is None else int(random_state)


def tap_log_partition(
    machine: BoltzmannMachine, x: Tensor, solver: tap.SolverSettings, dedup_tol: float
) -> float:
    """TAP's ln Z (eq. 39): minus the mean TAP free energy (eq. 36) of the unique solutions
    Alg. 1 converges to from the rows of ``x`` (eqs. 37-38), with the evaluation's second pass
    (``tap.solve_with_retry``); NaN, with a warning, when no row converges."""
    states = tap.solve_with_retry(machine, x, solver)
    reps, _, _ = tap.unique(states, dedup_tol)
    if reps.numel() == 0:
        warnings.warn(
            f"no TAP solution converged from any of {x.shape[0]} rows: ln Z is NaN",
            RuntimeWarning,
            stacklevel=3,
        )
        return float("nan")
    return float(-tap.free_energy(machine, states.select(reps)).double().mean())


class BoltzmannEstimator(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """The scikit-learn interface of a Boltzmann machine trained by the project's training loop.

    Subclasses set their hyper-parameters in ``__init__`` and give ``_spec`` (the config entry,
    schema ``_definition``: ``model`` or ``dbm_model``), ``_visible_template``, ``_units`` and
    ``sample``, and have the parameters ``log_z``, ``binarize``, ``dtype``, ``device``,
    ``random_state`` and ``verbose``.
    """

    # -- what the subclasses give -------------------------------------------------------------

    #: The schema definition of the config entry ``_spec`` gives.
    _definition = "model"

    def _spec(self) -> dict:
        raise NotImplementedError

    def _visible_template(self) -> Prior:
        raise NotImplementedError

    def _units(self, machine: BoltzmannMachine, rows: Tensor) -> Tensor:
        return rows

    def sample(self, n_samples: int = 1):
        raise NotImplementedError

    # -- validation ---------------------------------------------------------------------------

    def _rows(self, X, reset: bool) -> np.ndarray:
        """X validated (finite, 2-d, ``n_features_in_``), binarized where asked, every value in
        the visible prior's support."""
        X = validate_data(self, X, reset=reset, dtype=(np.float64, np.float32))
        template = self._visible_template()
        if self.binarize is not None:
            X = binarized(X, float(self.binarize), template)
        check_support(template, X, type(self).__name__)
        return X

    def _tensor(self, x: np.ndarray, device="cpu") -> Tensor:
        return torch.tensor(x, dtype=getattr(torch, self.dtype), device=device)

    # -- training -----------------------------------------------------------------------------

    def _settings(self) -> TrainSettings:
        """The training settings of ``_spec``, checked first by the schema its config entry is
        checked by (``_definition``)."""
        spec = self._spec()
        try:
            check_entry(spec, self._definition)
        except ValueError as exc:
            raise ValueError(f"{type(self).__name__}: config key {exc}") from None
        try:
            return TrainSettings.from_spec(spec)
        except (TrainingError, TypeError) as exc:
            raise ValueError(f"{type(self).__name__}: {exc}") from None

    def _start(self, x: np.ndarray) -> Tensor:
        """The workflow's start of a job (``GradientMethod.start``: the machine, its training
        rows and the stream (seed, name, ...)), greedy pretraining where the spec asks for it
        (Alg. 4), and epoch 0 of the loop (``Carried.start``); returns the rows in the
        machine's units."""
        spec, settings = self._spec(), self._settings()
        device = torch_device(self.device, type(self).__name__)
        n, d = x.shape
        labels = np.zeros(n, dtype=np.int64)
        dataset = Dataset(x, labels, x[:0], labels[:0], (1, d), {}, "estimator")
        self.seed_ = seed_of(self.random_state)
        self.__dict__.pop("pretrain_history_", None)  # of an earlier fit
        try:
            machine, xs, generator = method(settings.method).start(
                type(self).__name__, spec, dataset, self._tensor(x), settings, self.seed_, device
            )
            if spec.get("pretrain"):
                pre = PretrainSettings.from_spec(spec["pretrain"])
                machine, self.pretrain_history_ = pretrain(
                    machine, xs, settings, pre, generator, progress=bool(self.verbose)
                )
            self._carried = Carried.start(machine, xs, settings, generator)
        except (TrainingError, TypeError) as exc:
            raise ValueError(f"{type(self).__name__}: {exc}") from None
        self._train_settings, self._generator = settings, generator
        return xs

    def _run(self, xs: Tensor, until: int | None) -> None:
        """``train.loop.train`` on the carried state up to epoch ``until`` (default: the
        settings' ``epochs``), then the fitted attributes."""
        carried = self._carried
        try:
            train(
                carried.machine,
                xs,
                self._train_settings,
                self._generator,
                progress=bool(self.verbose),
                carried=carried,
                until=until,
            )
        except TrainingError as exc:
            raise ValueError(f"{type(self).__name__}: {exc}") from None
        machine = carried.machine
        self.machine_ = machine
        self.components_ = machine.W.T.detach().cpu().numpy()
        self.n_iter_ = carried.epoch
        self.history_ = [dict(row) for row in carried.history]
        x_eval = xs[: self._train_settings.eval_samples]
        self.log_partition_, self.score_method_ = self._log_partition(machine, x_eval)

    def fit(self, X, y=None):
        """Train a new machine on the rows of ``X`` for ``epochs`` epochs.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training rows, each value in the visible units' support (or binarized first).
        y : None
            Ignored.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        x = self._rows(X, reset=True)
        self._run(self._start(x), until=None)
        return self

    def partial_fit(self, X, y=None):
        """One epoch on the rows of ``X``, continuing from the state of the epochs before
        (machine, momentum, the method's chains or offsets, random stream); the first call
        builds the machine from ``X`` (and pretrains a deep TAP machine).

        Two ``partial_fit`` calls on the same ``X`` give the machine ``fit`` gives with
        ``epochs=2`` (the step-size schedule's horizon stays ``epochs``). The settings are
        those of the first call; ``set_params`` takes effect at the next ``fit``. ``ln Z`` of
        ``score_samples`` is found again after every call (by TAP: from the call's first
        ``eval_samples`` rows).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training rows, as for ``fit``.
        y : None
            Ignored.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        first = not hasattr(self, "_carried")
        x = self._rows(X, reset=first)
        if first:
            xs = self._start(x)
        else:
            machine = self._carried.machine
            xs = self._units(machine, self._tensor(x, machine.device))
        self._run(xs, until=self._carried.epoch + 1)
        return self

    # -- what a fitted machine gives ----------------------------------------------------------

    def _solve_kwargs(self) -> dict:
        """The TAP solver of clamped solutions (deep machines) as ``tap.solve`` takes it."""
        s = self._train_settings.solver_settings
        return {"damping": s.damping, "tol": s.tol, "max_iter": s.max_iter, "solver": s.solver}

    def _log_partition(self, machine: BoltzmannMachine, x: Tensor) -> tuple[float, str]:
        """ln Z by enumeration or by TAP from the rows ``x`` (``log_z``), and which."""
        if self.log_z not in ("auto", "exact", "tap"):
            raise ValueError(f"log_z must be 'auto', 'exact' or 'tap', not {self.log_z!r}")
        exact = enumerable(machine) if self.log_z == "auto" else self.log_z == "exact"
        if exact:
            try:
                return float(exact_log_partition(machine)), "exact"
            except ValueError as exc:
                raise ValueError(f"log_z='exact': {exc}") from None
        s = self._train_settings
        return tap_log_partition(machine, x, s.solver_settings, s.dedup_tol), "tap"

    def _fitted_rows(self, X) -> Tensor:
        check_is_fitted(self)
        machine = self.machine_
        return self._units(machine, self._tensor(self._rows(X, reset=False), machine.device))

    def transform(self, X):
        """The means of the top hidden layer given each row (the clamped TAP solution, App. E:
        closed form f_a(W^T x, 0) for an RBM).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows, each value in the visible units' support (or binarized first).

        Returns
        -------
        H : ndarray of shape (n_samples, n_components)
            The means of the last hidden layer (its size for a tuple ``n_components``).
        """
        xs = self._fitted_rows(X)
        clamped = tap.clamped_state(self.machine_, xs, **self._solve_kwargs())
        return clamped.a[-1].detach().cpu().numpy()

    def score_samples(self, X):
        """ln P(x) of each row: the data term of eq. 39 minus ``log_partition_`` (exact or TAP,
        ``score_method_``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows, each value in the visible units' support (or binarized first).

        Returns
        -------
        scores : ndarray of shape (n_samples,)
            ln P(x) of each row, float64.
        """
        xs = self._fitted_rows(X)
        data = tap.data_log_term(self.machine_, xs, **self._solve_kwargs())
        return data.double().cpu().numpy() - self.log_partition_

    def score(self, X, y=None):
        """The mean of ``score_samples(X)``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows, as for ``score_samples``.
        y : None
            Ignored.

        Returns
        -------
        score : float
            The mean log-likelihood of the rows.
        """
        return float(np.mean(self.score_samples(X)))

    def _sample_generator(self) -> torch.Generator:
        from tapmachine.core.seeding import seeded_generator

        device = self.machine_.device  # torch draws on a device only from its own generators
        return seeded_generator(self.seed_, type(self).__name__, "sample", device=device)

    @property
    def _n_features_out(self) -> int:
        return int(self.machine_.sizes[-1])

    # -- scikit-learn plumbing ----------------------------------------------------------------

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = [str(self.dtype)]
        return tags

    def __getstate__(self):
        state = super().__getstate__()
        if "_generator" in state:  # a torch.Generator does not pickle; its device and state do
            g = state["_generator"]
            state = {**state, "_generator": (str(g.device), g.get_state())}
        return state

    def __setstate__(self, state):
        if "_generator" in state:
            device, generator_state = state["_generator"]
            generator = torch.Generator(device=device)
            generator.set_state(generator_state)
            state = {**state, "_generator": generator}
        super().__setstate__(state)
