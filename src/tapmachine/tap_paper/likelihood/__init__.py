"""Likelihood of a trained RBM: TAP, AIS, pseudo-likelihood and exact (App. F, Fig. 12).

One set of parameters (a ``model.pt`` or a per-epoch checkpoint) is scored on training and/or
test images by

- the TAP log-likelihood (eq. 39): ln P(x) ~ -F_vis(x) + <F_TAP>, the mean TAP free energy of the
  unique converged solutions reached from ``tap_inits`` training images (as in Fig. 3 and the
  training loop's own evaluation), so that -<F_TAP> is TAP's estimate of ln Z;
- AIS (``estimators.ais_log_partition``; base-rate model fitted to the model's training rows):
  ln P(x) = -F_vis(x) - ln Z_AIS, with ln Z_AIS +- 3 stderr (delta method over the runs) giving
  the band [mean(-F) - upper, mean(-F) - lower];
- the pseudo-likelihood (Besag 1975), stochastic as in App. F: ``pl_sites`` of the Nv sites,
  drawn anew for every image (``estimators.pseudo_log_likelihood``), scaled by Nv / pl_sites, so it
  estimates sum_{i=1}^{Nv} ln P(x_i | x_-i) in nats per image;
- the exact log-likelihood, when the machine's smaller binary layer can be enumerated
  (``exact_curve``: after chosen epochs, beside training's TAP value, for Fig. 3).

Every value is in nats per image (mean over the images scored); the TAP value is also given
divided by Nv + Nh (the normalisation of Fig. 3). Library functions take tensors; the file-level
functions (``score_checkpoints``, ``score_model``) read models and datasets, write one CSV row per
parameter set and mirror the numbers to MLflow.

Modules: ``settings``, ``tap_partition`` (TAP's ln Z), ``score`` (one parameter set), ``files``,
``exact_curve``, ``ais_check`` (how far an AIS estimate moves with the work put into it).
"""

from tapmachine.io.modelfile import checkpoint_path
from tapmachine.tap_paper.likelihood.exact_curve import exact_curve, partial_path
from tapmachine.tap_paper.likelihood.files import (
    ais_check_model,
    resolve_epochs,
    score_checkpoints,
    score_model,
    tracked_metrics,
)
from tapmachine.tap_paper.likelihood.score import score_machine
from tapmachine.tap_paper.likelihood.settings import (
    FULL_SALAKHUTDINOV,
    SPLITS,
    ScoreSettings,
    ais_schedule,
    schedule_label,
)
from tapmachine.tap_paper.likelihood.tap_partition import (
    TAP_INFO_KEYS,
    evaluation_differs,
    recorded_final_tap_partition,
    recorded_tap_partition,
    tap_log_partition,
)

__all__ = [
    "FULL_SALAKHUTDINOV",
    "ais_check_model",
    "SPLITS",
    "TAP_INFO_KEYS",
    "ScoreSettings",
    "ais_schedule",
    "checkpoint_path",
    "evaluation_differs",
    "exact_curve",
    "partial_path",
    "recorded_final_tap_partition",
    "recorded_tap_partition",
    "resolve_epochs",
    "score_checkpoints",
    "score_machine",
    "score_model",
    "schedule_label",
    "tap_log_partition",
    "tracked_metrics",
]
