"""Estimators of the partition function and of likelihood surrogates (first paper, App. F).

- ``exact_log_partition``: ln Z by enumerating the smaller binary layer (small RBMs, tests).
- ``ais_log_partition``: ln Z by annealed importance sampling (Neal 2001) with Salakhutdinov &
  Murray's (2008) base-rate model and 14,501-temperature schedule, forward or reverse.
- ``pseudo_log_likelihood``: Besag's pseudo-likelihood, exact or over a random subset of sites
  per row (``site_subsets``).
- ``test_log_likelihood``: ln P(x) = -F(x) - ln Z given an estimate of ln Z.
- ``mean_and_stderr``: the mean of per-row estimates and its standard error.

ln Z is relative to the (normalised) unit priors throughout: W = 0 gives ln Z = 0.

Modules: ``exact``, ``ais`` (the annealing loop and estimate), ``ais_layers`` (one layer's
operations in that loop), ``base_rate`` (the base model AIS starts from), ``likelihood``
(pseudo-likelihood, test log-likelihood).
"""

from tapmachine.core.estimators.ais import (
    AISResult,
    ais_log_partition,
    linear_schedule,
    refined_schedule,
    salakhutdinov_schedule,
)
from tapmachine.core.estimators.base_rate import BASE_CLIP, base_rate_field
from tapmachine.core.estimators.exact import MAX_ENUMERATED_UNITS, exact_log_partition
from tapmachine.core.estimators.likelihood import (
    PL_CHUNK_ELEMENTS,
    mean_and_stderr,
    pseudo_log_likelihood,
    site_subsets,
    test_log_likelihood,
)

__all__ = [
    "AISResult",
    "BASE_CLIP",
    "MAX_ENUMERATED_UNITS",
    "PL_CHUNK_ELEMENTS",
    "ais_log_partition",
    "base_rate_field",
    "exact_log_partition",
    "linear_schedule",
    "mean_and_stderr",
    "refined_schedule",
    "pseudo_log_likelihood",
    "salakhutdinov_schedule",
    "site_subsets",
    "test_log_likelihood",
]
