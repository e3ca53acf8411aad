"""``TAPMachine``: RBMs and deep TAP machines of the first paper (Tramel et al.) as a
scikit-learn estimator.

Its hyper-parameters are the keys of a config ``models.<name>`` entry (schema ``$defs/model``)
and their defaults are the schema's, read when this module is imported; ``fit`` trains the
entry the workflow would train from the same keys, by the same job start and loop.
"""

from __future__ import annotations

import dataclasses

import torch
from sklearn.utils.validation import check_is_fitted

from tapmachine.core.priors import Prior
from tapmachine.io.schema import defaults, schema_default
from tapmachine.learn.base import BoltzmannEstimator, support_template
from tapmachine.train.settings import TrainSettings

__all__ = ["TAPMachine"]

_MODEL = defaults("model")
_TAP, _PRE, _EVAL = _MODEL["tap"], _MODEL["pretrain"], _MODEL["eval"]
_BOUNDS = defaults("prior")
_DTYPE, _DEVICE = schema_default("dtype"), schema_default("device")


class TAPMachine(BoltzmannEstimator):
    """A Boltzmann machine with the unit priors of the first paper, trained by TAP (Alg. 2), CD-k
    or PCD-k, with several hidden layers a deep TAP machine pretrained greedily (Alg. 4).

    Every default is the config schema's (``models.<name>`` entries, ``$defs/model``), except
    where the schema has none: ``n_components`` (required there; 256 as scikit-learn's
    ``BernoulliRBM``), the priors (required; bernoulli) and the estimator's own switches
    (``log_z``, ``binarize``, ``evaluate``, ``random_state``, ``verbose``); ``dtype`` and
    ``device`` are the schema's top-level keys.

    Parameters
    ----------
    n_components : int or tuple of int, default=256
        Hidden units; a tuple gives one hidden layer per entry from the visible side up (a deep
        TAP machine, App. E).
    visible, hidden : {"bernoulli", "spin", "truncated_gaussian", \
"truncated_gauss_bernoulli"}, default="bernoulli"
        Unit priors of the visible and of every hidden layer (App. C).
    visible_bounds, hidden_bounds : tuple of float, default=(0.0, 1.0)
        Support [lower, upper] of truncated priors (schema ``prior.lower``, ``prior.upper``).
    method : {"tap", "cd", "pcd"}, default="tap"
        Gradient: TAP (Alg. 2), CD-k or PCD-k (``sampling_steps`` = k).
    sampling_steps : int or dict, default=1
        k of CD-k and PCD-k, or ``{"start": ..., "end": ..., "every": ...}``: k rising by one every
        ``every`` epochs (``train.update.sampling_steps_at``).
    epochs : int, default=100
        Passes over the rows (joint training of a deep machine, after pretraining).
    batch_size : int, default=100
        Rows per gradient step (M).
    learning_rate : float or dict, default=0.005
        Step size, ``{"start": ..., "end": ...}``: geometric decay from the first epoch to the
        last, or ``{"over_sampling_steps": e}``: e / k for an epoch of CD-k steps.
    momentum : float, default=0.5
        eta of Alg. 2, as heavy-ball momentum on the whole previous step.
    l2 : float, default=0.001
        epsilon of the l2 penalty on the couplings.
    weight_init_std : float, default=0.001
        Standard deviation of the N(0, s^2) initial couplings (Table 1); biases start at 0.
    n_solutions : int or None, default=None
        K TAP solutions per step; None: one per row of the mini-batch, started from it.
    rho_step : {"plain", "logit"}, default="logit"
        Step of the Gauss-Bernoulli mixture weight rho: on rho, clipped into (0, 1) (Alg. 2), or
        on logit(rho) rescaled by rho (1 - rho) (a departure: never leaves (0, 1)).
    inference : {"tap", "adatap"}, default="tap"
        Solver of the model term of the TAP gradient: TAP (Alg. 1) or adaTAP (App. D, Alg. 3;
        binary RBMs only).
    train_iterations : int or "converge", default=3
        TAP iterations per training step, or Alg. 1 until convergence (``train_tol``,
        ``train_max_iter``, ``train_unique``).
    train_tol : float, default=1e-08
        Converged steps: mean squared change of the magnetisations at which a row has converged.
    train_max_iter : int, default=100
        Converged steps: iterations at most; rows not converged by then are left out.
    train_unique : bool, default=True
        Converged steps: average the model term of eq. 40 over the unique solutions.
    damping : float, default=0.5
        Damping of Alg. 1's iteration.
    solver : {"damped", "anderson", "newton_damped", "newton_sor"}, default="damped"
        TAP solver of converged steps, of the TAP ln Z and of the clamped solutions of deep
        machines (``tap.SolverSettings``).
    tol : float, default=1e-12
        Convergence tolerance of that solver.
    max_iter : int, default=500
        Its iterations at most.
    retry_damping : float or None, default=0.95
        Damping of the second pass over rows not converged within ``max_iter``; None: none.
    dedup_tol : float, default=0.01
        Max-abs distance of magnetisations under which two solutions are the same (eq. 39).
    eval_samples : int, default=1000
        Rows (the first of each ``fit``) TAP's ln Z and the per-epoch evaluation start from.
    pretrain : bool, default=True
        Greedy pretraining (Alg. 4) before joint training, for several hidden layers only.
    pretrain_epochs : int, default=50
        Epochs of each greedy RBM.
    pretrain_learning_rate : float, default=0.001
        Step size of each greedy RBM.
    pretrain_inputs : {"magnetisations", "samples"}, default="magnetisations"
        What the RBM of layer l + 1 trains on: the clamped TAP magnetisations of layer l, or one
        draw of binary states from them (Alg. 4).
    log_z : {"auto", "exact", "tap"}, default="auto"
        ln Z of ``score_samples``: enumeration (``core.estimators.exact_log_partition``) or TAP
        (eq. 39); "auto" enumerates RBMs with a binary layer of at most ``EXACT_UNITS`` (20)
        units.
    binarize : float or None, default=None
        Map rows onto binary visible units by ``x > binarize`` (as ``BernoulliNB``); None: every
        value must already lie in the visible prior's support, else ValueError.
    evaluate : bool, default=False
        The workflow's per-epoch TAP log-likelihood into ``history_``.
    dtype : {"float32", "float64"}, default="float32"
        Precision of the machine (the schema's top-level ``dtype``).
    device : str, default="cpu"
        Torch device of the machine and of training: "cpu", "cuda" or "cuda:N" (the schema's
        top-level ``device``). The training stream stays on the CPU (weights, batches, CD's and
        PCD's Gibbs draws), so a machine trains the same on every device up to round-off;
        ``transform``, ``score_samples`` and ``sample`` return NumPy arrays whatever the device.
    random_state : int or None, default=None
        Seeds the torch generators of training (stream (seed, "TAPMachine", "train")) and of
        ``sample``; None draws a fresh seed.
    verbose : bool, default=False
        Progress bars.

    Attributes
    ----------
    machine_ : BoltzmannMachine
        The trained machine (``tapmachine.core.machine``).
    components_ : ndarray of shape (n_components, n_features)
        The first coupling matrix, transposed (as ``BernoulliRBM.components_``).
    log_partition_ : float
        ln Z used by ``score_samples``.
    score_method_ : {"exact", "tap"}
        How ``log_partition_`` was found.
    history_ : list of dict
        The training loop's metrics per epoch.
    pretrain_history_ : list of list of dict
        Each greedy RBM's metrics (deep machines with ``pretrain``).
    n_iter_ : int
        Epochs trained.
    seed_ : int
        The seed the generators were drawn from.
    n_features_in_ : int
        Columns of the rows seen by ``fit``.

    Examples
    --------
    >>> import numpy as np
    >>> from tapmachine import TAPMachine
    >>> X = (np.random.default_rng(0).random((200, 6)) < 0.3).astype(float)
    >>> rbm = TAPMachine(4, epochs=2, batch_size=50, random_state=0).fit(X)
    >>> rbm.transform(X).shape, rbm.score_method_
    ((200, 4), 'exact')
    """

    def __init__(
        self,
        n_components=256,
        *,
        visible="bernoulli",
        hidden="bernoulli",
        visible_bounds=(_BOUNDS["lower"], _BOUNDS["upper"]),
        hidden_bounds=(_BOUNDS["lower"], _BOUNDS["upper"]),
        method=_MODEL["method"],
        sampling_steps=_MODEL["sampling_steps"],
        epochs=_MODEL["epochs"],
        batch_size=_MODEL["batch_size"],
        learning_rate=_MODEL["learning_rate"],
        momentum=_MODEL["momentum"],
        l2=_MODEL["l2"],
        weight_init_std=_MODEL["weight_init_std"],
        n_solutions=_MODEL["n_solutions"],
        rho_step=_MODEL["rho_step"],
        inference=_MODEL["inference"],
        train_iterations=_TAP["train_iterations"],
        train_tol=_TAP["train_tol"],
        train_max_iter=_TAP["train_max_iter"],
        train_unique=_TAP["train_unique"],
        damping=_TAP["damping"],
        solver=_TAP["solver"],
        tol=_TAP["tol"],
        max_iter=_TAP["max_iter"],
        retry_damping=_TAP["retry_damping"],
        dedup_tol=_TAP["dedup_tol"],
        eval_samples=_EVAL["n_samples"],
        pretrain=True,
        pretrain_epochs=_PRE["epochs"],
        pretrain_learning_rate=_PRE["learning_rate"],
        pretrain_inputs=_PRE["inputs"],
        log_z="auto",
        binarize=None,
        evaluate=False,
        dtype=_DTYPE,
        device=_DEVICE,
        random_state=None,
        verbose=False,
    ):
        self.n_components = n_components
        self.visible = visible
        self.hidden = hidden
        self.visible_bounds = visible_bounds
        self.hidden_bounds = hidden_bounds
        self.method = method
        self.sampling_steps = sampling_steps
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.momentum = momentum
        self.l2 = l2
        self.weight_init_std = weight_init_std
        self.n_solutions = n_solutions
        self.rho_step = rho_step
        self.inference = inference
        self.train_iterations = train_iterations
        self.train_tol = train_tol
        self.train_max_iter = train_max_iter
        self.train_unique = train_unique
        self.damping = damping
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter
        self.retry_damping = retry_damping
        self.dedup_tol = dedup_tol
        self.eval_samples = eval_samples
        self.pretrain = pretrain
        self.pretrain_epochs = pretrain_epochs
        self.pretrain_learning_rate = pretrain_learning_rate
        self.pretrain_inputs = pretrain_inputs
        self.log_z = log_z
        self.binarize = binarize
        self.evaluate = evaluate
        self.dtype = dtype
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    def _hidden_sizes(self) -> list[int]:
        sizes = self.n_components
        return [int(n) for n in (sizes if isinstance(sizes, tuple | list) else [sizes])]

    def _spec(self) -> dict:
        """The config entry (schema ``model``) of these parameters."""

        def layer(kind, bounds):
            return {"prior": kind, "lower": float(bounds[0]), "upper": float(bounds[1])}

        sizes = self._hidden_sizes()
        spec = {
            "dataset": "estimator",
            "visible": layer(self.visible, self.visible_bounds),
            "hidden": [{**layer(self.hidden, self.hidden_bounds), "units": n} for n in sizes],
            "method": self.method,
            "sampling_steps": self.sampling_steps,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "learning_rate": self.learning_rate,
            "momentum": self.momentum,
            "l2": self.l2,
            "weight_init_std": self.weight_init_std,
            "n_solutions": self.n_solutions,
            "rho_step": self.rho_step,
            "inference": self.inference,
            "tap": {
                "train_iterations": self.train_iterations,
                "train_tol": self.train_tol,
                "train_max_iter": self.train_max_iter,
                "train_unique": self.train_unique,
                "damping": self.damping,
                "solver": self.solver,
                "tol": self.tol,
                "max_iter": self.max_iter,
                "retry_damping": self.retry_damping,
                "dedup_tol": self.dedup_tol,
            },
            "eval": {"n_samples": self.eval_samples},
        }
        if len(sizes) > 1 and self.pretrain:
            spec["pretrain"] = {
                "epochs": self.pretrain_epochs,
                "learning_rate": self.pretrain_learning_rate,
                "inputs": self.pretrain_inputs,
            }
        return spec

    def _settings(self) -> TrainSettings:
        return dataclasses.replace(super()._settings(), evaluate=bool(self.evaluate))

    def _visible_template(self) -> Prior:
        lower, upper = (float(b) for b in self.visible_bounds)
        return support_template(self.visible, lower, upper)

    def sample(self, n_samples: int = 1, n_steps: int = 1000):
        """Visible rows drawn by block Gibbs sampling (``BoltzmannMachine.gibbs_step``).

        ``n_samples`` independent chains start from the priors' samples at zero field and run
        ``n_steps`` sweeps; the generator is seeded from (``seed_``, "TAPMachine", "sample"),
        so equal calls give equal samples.

        Parameters
        ----------
        n_samples : int, default=1
            Rows to draw.
        n_steps : int, default=1000
            Gibbs sweeps per chain.

        Returns
        -------
        X : ndarray of shape (n_samples, n_features)
            The drawn rows, in the values of the visible units.
        """
        check_is_fitted(self)
        machine, g = self.machine_, self._sample_generator()
        zeros = [
            torch.zeros(n_samples, n, dtype=machine.dtype, device=machine.device)
            for n in machine.sizes
        ]
        xs = [p.sample(z, z, generator=g) for p, z in zip(machine.priors, zeros, strict=True)]
        for _ in range(int(n_steps)):
            xs = machine.gibbs_step(xs, generator=g)
        return xs[0].cpu().numpy()
