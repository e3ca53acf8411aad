"""``UCDDBM``: the second paper's deep Boltzmann machines (Taniguchi et al.) as a scikit-learn
estimator, trained by UCD-LMI or its PCD baselines.

Its hyper-parameters are the keys of a config ``ucd.dbm.models.<name>`` entry (schema
``$defs/dbm_model``, the switches under ``ucd``), their defaults the schema's, read when this
module is imported; ``fit`` trains the entry by the DBM methods' own start (``ucd.training``)
and the one training loop.
"""

from __future__ import annotations

from sklearn.utils.validation import check_is_fitted
from torch import Tensor

import tapmachine.ucd  # noqa: F401  (registers the DBM methods in train's registry)
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Prior
from tapmachine.io.schema import defaults, schema_default
from tapmachine.learn.base import BoltzmannEstimator, support_template
from tapmachine.ucd import dbm, generate

__all__ = ["UCDDBM"]

_DBM = defaults("dbm_model")
_UCD = _DBM["ucd"]
_DTYPE, _DEVICE = schema_default("dtype"), schema_default("device")


class UCDDBM(BoltzmannEstimator):
    """A deep Boltzmann machine on binary {0, 1} rows, trained by UCD-LMI (the unbiased
    estimator by couplings, Alg. 2 of the second paper) or by PCD, plain or centered.

    Every default is the config schema's (``$defs/dbm_model``), except where the schema has
    none: ``n_components`` and ``method`` (required there; two layers of 256 units, ucd_lmi) and
    the estimator's own switches (``log_z``, ``binarize``, ``random_state``, ``verbose``);
    ``dtype`` and ``device`` are the schema's top-level keys.

    Rows are {0, 1} whatever the units: with ``centering`` (simplified centering, Sec. 4.1) the
    machine's units are {-1, +1} and the rows are mapped by 2x - 1 (``ucd.dbm.data_for``);
    ``transform`` gives the means in the machine's units.

    Parameters
    ----------
    n_components : int or tuple of int, default=(256, 256)
        Hidden units per layer, from the visible side up.
    method : {"ucd_lmi", "dbm_pcd", "centered_pcd"}, default="ucd_lmi"
        UCD-LMI; PCD without pretraining (mean-field positive phase); the centered DBM of
        Montavon & Mueller (2012) by PCD.
    epochs : int, default=2
        Passes over the rows.
    batch_size : int, default=100
        Rows per step.
    learning_rate : float, default=0.01
        SGD step, without decay (App. C).
    momentum : float, default=0.0
        Heavy-ball momentum; 0 is the paper's plain SGD.
    l2 : float, default=0.0
        Weight decay (the paper uses none).
    sampling_steps : int, default=1
        Gibbs sweeps per PCD step.
    weight_init_std : float, default=0.01
        Standard deviation of N(0, s^2) couplings when ``orthogonal`` is False.
    marginalise : bool, default=True
        The marginalised estimator (eq. 27).
    centering : bool, default=True
        Simplified centering: {-1, +1} units (Sec. 4.1); False: {0, 1} units.
    orthogonal : bool, default=True
        Orthogonal initial couplings (Sec. 4.3); False: Gaussian.
    logistic_bias : bool, default=True
        Logistic(0, 0.5) initial biases (App. B); False: zero. The four switches are Table 2's
        ablation.
    cap : int, default=1000
        Coupling steps at most (the unbiased estimator's chains, Alg. 2).
    search_cap : int, default=10000
        Local-search steps at most (Alg. 1), in training and in ``sample``.
    n_chains : int or None, default=None
        Negative-phase chains of PCD; None: ``batch_size``.
    mean_field_steps : int, default=10
        Mean-field sweeps of the PCD positive phase.
    offset_rate : float, default=0.01
        Moving-average rate of the centering offsets (``centered_pcd``).
    log_z : {"auto", "exact", "tap"}, default="auto"
        ln Z of ``score_samples``: enumeration for one hidden layer of at most 20 units, else
        TAP (eq. 39 and App. E's clamped solutions, by the schema's ``model.tap`` solver).
    binarize : float or None, default=None
        Rows mapped to {0, 1} by ``x > binarize``; None: every value must be 0 or 1.
    dtype : {"float32", "float64"}, default="float32"
        Precision of the machine (the schema's top-level ``dtype``).
    device : str, default="cpu"
        Torch device of the machine and of training: "cpu", "cuda" or "cuda:N" (the schema's
        top-level ``device``). The machine is built on the CPU and moved; on CUDA, training draws
        from a CUDA generator seeded from the CPU stream (``ucd.training.start``), so its
        numbers differ from the CPU's. Outputs are NumPy arrays whatever the device.
    random_state : int or None, default=None
        Seeds the torch generators: training's stream (seed, "ucd_dbm", "estimator/UCDDBM",
        "train") and ``sample``'s; None draws a fresh seed.
    verbose : bool, default=False
        Progress bars.

    Attributes
    ----------
    machine_ : BoltzmannMachine
        The trained machine (``tapmachine.core.machine``), in its own units.
    components_ : ndarray of shape (n_components[0], n_features)
        The first coupling matrix, transposed.
    log_partition_ : float
        ln Z used by ``score_samples``.
    score_method_ : {"exact", "tap"}
        How ``log_partition_`` was found.
    history_ : list of dict
        The training loop's metrics per epoch.
    n_iter_ : int
        Epochs trained.
    seed_ : int
        The seed the generators were drawn from.
    n_features_in_ : int
        Columns of the rows seen by ``fit``.

    Examples
    --------
    >>> import numpy as np
    >>> from tapmachine import UCDDBM
    >>> X = (np.random.default_rng(0).random((200, 6)) < 0.3).astype(float)
    >>> dbm = UCDDBM(4, epochs=2, batch_size=50, random_state=0).fit(X)
    >>> dbm.transform(X).shape, dbm.score_method_, dbm.sample(3).shape
    ((200, 4), 'exact', (3, 6))
    """

    _definition = "dbm_model"

    def __init__(
        self,
        n_components=(256, 256),
        *,
        method="ucd_lmi",
        epochs=_DBM["epochs"],
        batch_size=_DBM["batch_size"],
        learning_rate=_DBM["learning_rate"],
        momentum=_DBM["momentum"],
        l2=_DBM["l2"],
        sampling_steps=_DBM["sampling_steps"],
        weight_init_std=_DBM["weight_init_std"],
        marginalise=_UCD["marginalise"],
        centering=_UCD["centering"],
        orthogonal=_UCD["orthogonal"],
        logistic_bias=_UCD["logistic_bias"],
        cap=_UCD["cap"],
        search_cap=_UCD["search_cap"],
        n_chains=_UCD["n_chains"],
        mean_field_steps=_UCD["mean_field_steps"],
        offset_rate=_UCD["offset_rate"],
        log_z="auto",
        binarize=None,
        dtype=_DTYPE,
        device=_DEVICE,
        random_state=None,
        verbose=False,
    ):
        self.n_components = n_components
        self.method = method
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.momentum = momentum
        self.l2 = l2
        self.sampling_steps = sampling_steps
        self.weight_init_std = weight_init_std
        self.marginalise = marginalise
        self.centering = centering
        self.orthogonal = orthogonal
        self.logistic_bias = logistic_bias
        self.cap = cap
        self.search_cap = search_cap
        self.n_chains = n_chains
        self.mean_field_steps = mean_field_steps
        self.offset_rate = offset_rate
        self.log_z = log_z
        self.binarize = binarize
        self.dtype = dtype
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    def _spec(self) -> dict:
        """The config entry (schema ``dbm_model``) of these parameters."""
        sizes = self.n_components
        hidden = [int(n) for n in (sizes if isinstance(sizes, tuple | list) else [sizes])]
        return {
            "method": self.method,
            "hidden": hidden,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "learning_rate": self.learning_rate,
            "momentum": self.momentum,
            "l2": self.l2,
            "sampling_steps": self.sampling_steps,
            "weight_init_std": self.weight_init_std,
            "ucd": {
                "marginalise": self.marginalise,
                "centering": self.centering,
                "orthogonal": self.orthogonal,
                "logistic_bias": self.logistic_bias,
                "cap": self.cap,
                "search_cap": self.search_cap,
                "n_chains": self.n_chains,
                "mean_field_steps": self.mean_field_steps,
                "offset_rate": self.offset_rate,
            },
        }

    def _visible_template(self) -> Prior:
        return support_template("bernoulli")

    def _units(self, machine: BoltzmannMachine, rows: Tensor) -> Tensor:
        return dbm.data_for(machine, rows)

    def sample(self, n_samples: int = 1):
        """Visible rows by the second paper's sampler (Sec. 4.4): local modes of the energy found
        by local search (Alg. 1) from uniform states, as {0, 1} rows; the generator is seeded
        from (``seed_``, "UCDDBM", "sample").

        Parameters
        ----------
        n_samples : int, default=1
            Rows to draw.

        Returns
        -------
        X : ndarray of shape (n_samples, n_features)
            The drawn rows, {0, 1}.
        """
        check_is_fitted(self)
        machine = self.machine_
        found, _ = generate.sample(machine, n_samples, self._sample_generator(), self.search_cap)
        return dbm.to_unit_interval(machine, found).cpu().numpy()
