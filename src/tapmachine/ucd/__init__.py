"""UCD-LMI (Taniguchi et al. 2023): unbiased gradients of Boltzmann machines by couplings.

- ``target``: what is sampled (joint, posterior, marginalised forms of eqs. 20-26), energy and
  the statistic f = -grad E;
- ``search``: local search for a local mode (Algs. 1, 5) and the Gibbs sweep of Alg. 2;
- ``couplings``: the MH maximal coupling with uniform proposals (Algs. 3, 4) and the Gibbs
  maximal coupling of Qiu et al. (2020);
- ``estimator``: the unbiased estimator (eqs. 10, 11, 27, 28), its settings, and the coupling-time
  study of Fig. 1;
- ``init``: simplified centering, orthogonal weights, logistic biases (Secs. 4.1, 4.3, App. B);
- ``dbm``: DBM gradients of UCD-LMI and the PCD baselines; ``training`` registers them as
  gradient methods of the one training loop (``tapmachine.train``) when this package is
  imported.

A training loop calls ``log_likelihood_gradient(machine, v, UCDSettings(), generator)`` per
minibatch and logs ``positive.summary()`` and ``negative.summary()``.
"""

from tapmachine.ucd.couplings import GibbsCoupling, MHCoupling, maximal_coupling
from tapmachine.ucd.init import logistic, orthogonal, random_machine, to_spin
from tapmachine.ucd.search import SearchResult, block_update, gibbs_sweep, local_search
from tapmachine.ucd.target import Target, binary_mode, binary_mode_
from tapmachine.ucd.unbiased import (
    COUPLINGS,
    INITS,
    METHODS,
    Estimate,
    UCDSettings,
    couple,
    coupling_steps,
    initial_state,
    log_likelihood_gradient,
    model_expectation,
    posterior_expectation,
)

# Registers the DBM methods (ucd_lmi, dbm_pcd, centered_pcd) in tapmachine.train's registry.
from tapmachine.ucd import training  # noqa: E402, F401  (isort: skip)

__all__ = [
    "COUPLINGS",
    "INITS",
    "METHODS",
    "Estimate",
    "GibbsCoupling",
    "MHCoupling",
    "SearchResult",
    "Target",
    "UCDSettings",
    "binary_mode",
    "binary_mode_",
    "block_update",
    "couple",
    "coupling_steps",
    "gibbs_sweep",
    "initial_state",
    "local_search",
    "log_likelihood_gradient",
    "logistic",
    "maximal_coupling",
    "model_expectation",
    "orthogonal",
    "posterior_expectation",
    "random_machine",
    "to_spin",
]
