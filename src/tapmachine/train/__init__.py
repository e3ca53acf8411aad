"""Training Boltzmann machines, for both papers.

One concept per module, from the bottom: ``settings`` (a run's settings, defaults from the config
schema), ``update`` (Alg. 2's parameter update), ``tap_gradient`` (TAP machines' gradient),
``methods`` (the registry of gradient methods: tap, cd, pcd here, and those other packages
register, as ``tapmachine.ucd`` its DBM methods), ``graphs`` (TAP steps as captured CUDA
graphs), ``evaluation`` (the per-epoch TAP log-likelihood), ``resume`` (fingerprint and
checkpoints), ``stopping`` (SIGTERM and Ctrl-C noted until the state is kept), ``loop`` (the
one training loop, built from one epoch, ``run_epoch``, on a ``Carried`` state), ``build``
(config entry -> initial machine), ``pretrain`` (Alg. 4's greedy pretraining) and ``job``
(config entry -> ``model.pt``).
"""

from tapmachine.train.build import build_machine, load_model
from tapmachine.train.evaluation import (
    evaluate_tap_log_likelihood,
    evaluated,
    evaluation_signature,
    expected_signature,
    latest_evaluation,
)
from tapmachine.train.job import Prepared, initial_machine, prepare, train_from_spec
from tapmachine.train.loop import Carried, run_epoch, train
from tapmachine.train.methods import METHODS, GradientMethod, register
from tapmachine.train.settings import PretrainSettings, TrainingError, TrainSettings

__all__ = [
    "TrainingError",
    "TrainSettings",
    "PretrainSettings",
    "GradientMethod",
    "METHODS",
    "register",
    "build_machine",
    "initial_machine",
    "load_model",
    "evaluate_tap_log_likelihood",
    "evaluation_signature",
    "expected_signature",
    "evaluated",
    "latest_evaluation",
    "train",
    "Carried",
    "run_epoch",
    "Prepared",
    "prepare",
    "train_from_spec",
]
