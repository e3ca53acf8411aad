"""How a trained DBM is scored (second paper, Tables 1-2): the classifier FID of its samples
against test images beside the floor two halves of the test set give, the TAP log-likelihood
(first paper, App. E) and the AIS test log-likelihood of Salakhutdinov & Hinton (2009) of test
images.
"""

from __future__ import annotations

import time

import torch
from torch import Tensor

from tapmachine.core import tap
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.seeding import seeded_generator
from tapmachine.train import evaluate_tap_log_likelihood
from tapmachine.ucd import ais, dbm, fid, generate

__all__ = ["TAP_SCORING", "DEDUP_TOL", "fid_scores", "score_dbm", "test_order"]

#: How TAP is solved for a DBM's TAP log-likelihood: Alg. 1 at damping 0.5 to 1e-8 within 200
#: iterations, a second pass at 0.95 for the rows it leaves.
TAP_SCORING = tap.SolverSettings(tol=1e-8, max_iter=200, retry_damping=0.95)
#: Max-abs distance of magnetisations under which two TAP solutions are one.
DEDUP_TOL = 0.01


def test_order(n: int, seed: int) -> Tensor:
    """One random order of the ``n`` test images, the same for every model of a run.

    The MNIST test file holds two writer populations one after the other (its first 5,000 digits
    from NIST's SD-3, written by Census Bureau employees, its last 5,000 from SD-1, written by
    high-school students, the harder half; LeCun, Cortes and Burges' MNIST page; Yadav and
    Bottou 2019), so the first rows are not a sample of the set, and the FID floor's two halves
    in file order would compare the two populations (5,000 images a half, the features of
    ``ucd_cpu.yaml``'s MNIST classifier: 54.3 in file order, 3.2 in a random order;
    Fashion-MNIST 1.2 in both).
    """
    return torch.randperm(n, generator=seeded_generator(seed, "ucd_score", "order"))


def fid_scores(net, x_test: Tensor, images: Tensor) -> dict:
    """The classifier FID of ``images`` against the first test images (as many, at most all), and
    its floor: the FID between two disjoint halves of the test set at that size (at most half
    of it)."""
    n_real = min(images.shape[0], x_test.shape[0])
    distance = fid.frechet_distance(net, x_test[:n_real].cpu(), images)
    n_floor = min(n_real, x_test.shape[0] // 2)
    floor = fid.frechet_distance(net, x_test[:n_floor].cpu(), x_test[n_floor : 2 * n_floor].cpu())
    return {
        "classifier_fid": distance,
        "fid_real": int(n_real),
        "fid_floor": floor,
        "fid_floor_images": int(n_floor),
    }


def score_dbm(
    machine: BoltzmannMachine,
    x_train: Tensor,
    x_test: Tensor,
    net,
    n_samples: int,
    n_ll: int,
    label: str,
    seed: int = 0,
    ais_runs: int = 100,
    ais_betas: int = 1000,
    mean_field_steps: int = 30,
) -> dict:
    """The scores of one DBM (``label``: its dataset/model, naming its random streams) from
    binary {0, 1} rows on its device, ``x_test`` in ``test_order``: the classifier FID of
    ``n_samples`` samples (local modes from uniform states, ``generate.sample``) and its floor
    (``fid_scores``), the TAP log-likelihood of the first ``n_ll`` test images (``TAP_SCORING``;
    NaN when TAP converges from none of them) and their AIS log-likelihood: the mean-field lower
    bound (``mean_field_steps`` sweeps) minus ln Z by ``ais_runs`` AIS runs along
    ``ais.segmented_schedule(ais_betas)``, base rates fitted to the training rows, an estimated
    lower bound on ln P(v) in nats per image. Also the mean coupling time of the samples."""
    device = x_test.device
    g = seeded_generator(seed, "ucd_score", label, device=device)
    samples, T = generate.sample(machine, n_samples, g)
    images = dbm.to_unit_interval(machine, samples).cpu()
    row = fid_scores(net, x_test, images)
    scored = dbm.data_for(machine, x_test[:n_ll])
    ll = evaluate_tap_log_likelihood(machine, scored, TAP_SCORING, DEDUP_TOL)
    t_ais = time.perf_counter()
    ais_gen = seeded_generator(seed, "ucd_score", label, "ais", device=device)
    log_z = ais.dbm_ais_log_partition(
        machine,
        dbm.data_for(machine, x_train),
        n_runs=ais_runs,
        betas=ais.segmented_schedule(ais_betas),
        generator=ais_gen,
    )
    ais_row = ais.dbm_test_log_likelihood(machine, scored, log_z, mean_field_steps)
    ais_row["ais_seconds"] = time.perf_counter() - t_ais
    return {
        **row,
        "tap_ll": ll["tap_ll"],
        "tap_ll_stderr": ll["tap_ll_stderr"],
        **ais_row,
        "sample_T_mean": float(T.double().mean()),
    }
