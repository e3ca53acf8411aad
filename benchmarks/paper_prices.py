"""Unit costs of the first paper's jobs, measured: CPU seconds of one torch thread
(``cpu_seconds``) per training step (its gradient, and the loop's work around it), per TAP
sweep of a row, per AIS temperature, per enumerated hidden state. Every price is taken on the
model's own layer sizes, unit priors, data and solver; the iteration counts that multiply them
come from ``paper_counts``.

A TAP price is linear in the sweeps: the step (or solve) is timed at two sweep counts with the
tolerance 0 (so every row runs all of them) and the cost of n sweeps is ``one + per_iter (n -
1)``. For binary units the values of the couplings do not change a sweep's cost, but for the
truncated priors they do: their moments are evaluated piecewise (``priors.truncnorm``), and a
trained machine puts more units in the costly pieces (real MNIST's sweep costs 1.4-1.8 times a
fresh machine's). A training job is therefore priced on a trained checkpoint of its sizes and
priors where the profile has one (``training_price``'s ``machine``), else on a freshly built
machine (W ~ N(0, 0.05^2)).

A converged training step solves K rows that stop at different sweeps, and the solve sweeps
fewer rows as they stop (``tap.working_set_sizes``). Its sweeps are priced as a fixed cost per
sweep plus a cost per row swept (``per_sweep``, ``per_row_sweep``: the solve timed at K and at
K / 10 rows), which the slowest row's sweeps and the rows swept multiply (``paper_counts``): on
a small layer the fixed cost dominates and the step follows its slowest row, not its mean.
"""

from __future__ import annotations

import dataclasses

import torch

from benchmarks.common import cpu_seconds, dataset_rows
from tapmachine.core import tap
from tapmachine.core.machine import RBM
from tapmachine.core.priors import Bernoulli
from tapmachine.core.seeding import seeded_generator
from tapmachine.train import TrainSettings, build_machine
from tapmachine.train.methods import gradients
from tapmachine.train.update import sampling_steps_at

__all__ = [
    "training_price",
    "solve_price",
    "ais_price",
    "score_price",
    "exact_price",
    "denoise_baselines_price",
    "timing_price",
    "pl_price",
    "pl_rows",
    "job_start_price",
]

#: Rows on which a per-row TAP price is timed (then scaled by the job's rows).
PRICE_ROWS = {"quick": 200, "full": 1000}
#: Images on which a pseudo-likelihood price is timed, at most (the job's own, else these): per
#: image it falls with the images scored at once, on a 784 x 500 RBM 0.61 ms at 100, 0.41 at
#: 1,000 and 0.30 at 5,000 (Fig. 10's curve), one thread.
PL_ROWS = {"quick": 1000, "full": 5000}


def _linear(run, low: int, high: int, reps: int) -> dict:
    """``{"one", "per_iter"}``: seconds of ``run(k)`` at k = ``low`` and ``high`` sweeps, as
    the line one + per_iter (k - 1)."""
    t_low = cpu_seconds(lambda: run(low), reps)
    t_high = cpu_seconds(lambda: run(high), reps)
    per_iter = max(0.0, (t_high - t_low) / (high - low))
    return {"one": max(0.0, t_low - per_iter * (low - 1)), "per_iter": per_iter}


def _machine(spec: dict, x: torch.Tensor, g: torch.Generator):
    return build_machine(spec, x[:1000], 0.05, g)


def _step_price(spec: dict, settings: TrainSettings, x, g, reps: int, machine=None) -> dict:
    """One training minibatch of ``spec`` (``gradients`` on its batch) on ``machine`` (a fresh
    one when None): ``{"batch"}`` for CD / PCD, else the TAP line ``{"one", "per_iter"}`` in
    the sweeps of its solver (adaTAP: its iterations, timed at 1 and 2), with a converged step's
    ``_sweep_price``."""
    machine = machine if machine is not None else _machine(spec, x, g)
    batch = x[: settings.batch_size]
    if settings.method in ("cd", "pcd"):
        chains = None
        if settings.method == "pcd":
            from tapmachine.core import contrastive

            chains = contrastive.PersistentChains.from_data(
                x[:1000], n_chains=settings.batch_size, generator=g
            )

        def timed(k: int) -> float:
            s = dataclasses.replace(settings, sampling_steps=k)
            return cpu_seconds(lambda: gradients(machine, batch, s, chains, g), reps)

        k = settings.sampling_steps
        loop = _loop_price(machine, x, settings, chains, g, reps)
        if not isinstance(k, dict):
            return {"batch": timed(k), "loop": loop}
        # a rising k (update.sampling_steps_at): a step's cost is linear in k, so the mean step
        # is the line through the first and last k at the epochs' mean k
        ks = [sampling_steps_at(k, e) for e in range(1, settings.epochs + 1)]
        first, last = timed(k["start"]), timed(k["end"])
        slope = (last - first) / max(1, k["end"] - k["start"])
        return {"batch": first + slope * (sum(ks) / len(ks) - k["start"]), "loop": loop}

    def run(k: int) -> None:
        if settings.train_iterations == "converge":
            s = dataclasses.replace(settings, train_tol=0.0, train_max_iter=k)
        else:
            s = dataclasses.replace(settings, train_iterations=k)
        gradients(machine, batch, s, None, g)

    adatap = settings.inference == "adatap"
    price = _linear(run, 1, 2 if adatap else 11, 1 if adatap else reps)
    if settings.train_iterations == "converge" and not adatap:
        price.update(_sweep_price(machine, x, settings, reps))
    price["loop"] = _loop_price(machine, x, settings, None, g, reps)
    return price


def _loop_price(machine, x: torch.Tensor, settings: TrainSettings, chains, g, reps: int) -> float:
    """CPU seconds a minibatch costs ``train.loop.run_epoch`` besides its gradient, timed with
    the loop's own functions: gathering and drawing the batch (``present``, with
    ``settings.resample``), the update (``apply_update``: momentum, l2 and the priors' steps,
    here of a zero gradient at step size 0, which costs as much and changes nothing) and the
    divergence check (``check_finite``). Beside PCD-1's 7.2 ms gradient on the paper run's
    784 x 500 RBM they take 0.3 ms, one thread."""
    from tapmachine.train.loop import present
    from tapmachine.train.update import apply_update, check_finite, prior_velocity_start

    order = torch.randperm(x.shape[0], generator=g)[: settings.batch_size]
    one = dataclasses.replace(
        settings, sampling_steps=1, train_iterations=1, train_tol=0.0, train_max_iter=1
    )
    grads = gradients(machine, x[order], one, chains, g)
    zero = {
        "weights": [torch.zeros_like(w) for w in grads["weights"]],
        "priors": [{k: torch.zeros_like(v) for k, v in p.items()} for p in grads["priors"]],
    }
    velocity = [torch.zeros_like(W) for W in machine.weights]
    if settings.prior_momentum:
        velocity += prior_velocity_start(machine)

    def batch() -> None:
        present(x[order], settings.resample, g)
        check_finite(apply_update(machine, zero, velocity, 0.0, settings, 0.5), 1, 1)

    return cpu_seconds(batch, 10 * reps)


def _sweep_price(machine, x: torch.Tensor, settings: TrainSettings, reps: int) -> dict:
    """A converged step's sweep as ``per_sweep + per_row_sweep n`` for n rows still swept: the
    step's solve (its solver, tolerance 0) timed per sweep at its K rows and at K / 10, with
    ``rows`` = K; and ``solve_one``, that solve's first sweep at K rows, the part of ``one`` (a
    step at one sweep) that a step's own timed solve replaces (``paper_counts``'
    ``train_solve_seconds``)."""
    K = settings.n_solutions or settings.batch_size
    rows = x[torch.arange(K) % x.shape[0]]

    def line(n: int) -> dict:
        def run(k: int) -> None:
            tap.solve(machine, rows[:n], damping=settings.damping, tol=0.0, max_iter=k,
                      solver=settings.solver, relaxation=settings.relaxation)  # fmt: skip

        return _linear(run, 1, 11, reps)

    few = max(1, K // 10)
    at_k, at_few = line(K), line(few)
    per_row = max(0.0, (at_k["per_iter"] - at_few["per_iter"]) / (K - few)) if K > few else 0.0
    return {
        "per_sweep": max(0.0, at_k["per_iter"] - per_row * K),
        "per_row_sweep": per_row,
        "rows": K,
        "solve_one": at_k["one"],
    }


def solve_price(machine, x: torch.Tensor, settings: TrainSettings, reps: int) -> dict:
    """A free TAP solve from the rows of ``x`` with ``settings``' solver: ``{"one",
    "per_iter"}`` per row, and ``fixed`` per row: the log-likelihood of the rows given the
    solutions (closed form for an RBM, clamped solves for deeper machines)."""

    def run(k: int) -> None:
        tap.solve(machine, x, damping=settings.damping, tol=0.0, max_iter=k, solver=settings.solver)

    line = _linear(run, 1, 11, reps)
    state = tap.solve(machine, x, damping=settings.damping, tol=0.0, max_iter=1)
    fixed = cpu_seconds(lambda: tap.log_likelihood(machine, x, state, per_unit=True), reps)
    n = x.shape[0]
    return {"one": line["one"] / n, "per_iter": line["per_iter"] / n, "fixed": fixed / n}


def training_price(spec: dict, quick: bool, seed: int = 0, machine=None) -> dict:
    """The unit costs of one model's training job: ``step`` (a minibatch, ``_step_price``),
    ``eval`` (the per-epoch TAP evaluation per row, ``solve_price``; None without one), both on
    ``machine`` (a trained machine of the spec's sizes and priors; a fresh one when None) and,
    for a deep machine with ``pretrain``, ``pretrain``: each greedy RBM's step (its layer sizes
    and priors; the upper RBMs on binary inputs of the lower layer's width). Also the data
    source and the training rows (``n_rows``, at most ``n_train``)."""
    settings = TrainSettings.from_spec(spec)
    g = seeded_generator(seed, "paper_prices", spec["dataset"])
    x_all, source = dataset_rows(spec["dataset"])
    n_rows = min(spec.get("n_train") or x_all.shape[0], x_all.shape[0])
    reps = 2 if quick else 4
    step = _step_price(spec, settings, x_all, g, reps, machine)
    price = {"data": source, "n_rows": n_rows, "step": step, "trained_machine": machine is not None}
    price["eval"] = None
    if settings.evaluate:
        rows = min(settings.eval_samples, n_rows, PRICE_ROWS["quick" if quick else "full"])
        machine = machine if machine is not None else _machine(spec, x_all, g)
        price["eval"] = solve_price(machine, x_all[:rows], settings, reps)
        price["eval_rows"] = min(settings.eval_samples, n_rows)
    if spec.get("pretrain") and len(spec["hidden"]) > 1:
        price["pretrain"] = []
        width = x_all.shape[1]
        for l, layer in enumerate(spec["hidden"]):
            visible = spec["visible"] if l == 0 else {"prior": "bernoulli"}
            rbm_spec = {**spec, "visible": visible, "hidden": [layer]}
            rbm_spec.pop("pretrain")
            inputs = x_all if l == 0 else torch.bernoulli(torch.full((1000, width), 0.5))
            rbm_settings = TrainSettings.from_spec(rbm_spec)
            price["pretrain"].append(_step_price(rbm_spec, rbm_settings, inputs, g, reps))
            width = layer["units"]
    return price


#: What a job does before its work, run in a fresh interpreter by ``job_start_price``: the
#: imports of every ``tapmachine`` command and a run logged to an existing MLflow store.
_JOB_START = """
import mlflow, torch
from tapmachine.pipeline import cli
mlflow.set_tracking_uri("sqlite:///store.db")
with mlflow.start_run():
    mlflow.log_metric("probe", 1.0)
"""


def job_start_price() -> float:
    """CPU seconds (user and system) a job pays before its work: a fresh Python process that
    imports torch, MLflow and the package's command line and logs a run to an SQLite MLflow
    store that exists (created by an untimed first start, as ``tracking_init`` creates the
    run's). On this machine about 4 s, which a job of seconds' work is mostly made of."""
    import resource
    import subprocess
    import sys
    import tempfile

    def start(folder: str) -> None:
        subprocess.run(
            [sys.executable, "-c", _JOB_START], cwd=folder, check=True, capture_output=True
        )

    def children() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    with tempfile.TemporaryDirectory() as folder:
        start(folder)
        before = children()
        start(folder)
        return children() - before


def _binary_rbm(nv: int, nh: int, g: torch.Generator, std: float = 0.01) -> RBM:
    W = std * torch.randn(nv, nh, generator=g)
    return RBM(W, Bernoulli(torch.zeros(nv) - 1.0), Bernoulli(torch.zeros(nh)))


def ais_price(ais: dict, nh: int, quick: bool) -> float:
    """Seconds of one AIS ln Z of a 784 x ``nh`` RBM with the settings ``ais`` (``n_runs``,
    ``n_betas``; None: Salakhutdinov's full schedule), timed on 50 or 200 linear temperatures
    and scaled to the schedule's."""
    from tapmachine.core import estimators
    from tapmachine.tap_paper import likelihood

    g = seeded_generator(0, "paper_prices", "ais")
    rbm = _binary_rbm(784, nh, g)
    n_betas = ais.get("n_betas") or len(estimators.salakhutdinov_schedule())
    probe = likelihood.ais_schedule("linear", 50 if quick else 200)
    t = cpu_seconds(
        lambda: estimators.ais_log_partition(rbm, n_runs=ais["n_runs"], betas=probe, generator=g),
        1,
    )
    return t * n_betas / len(probe)


def score_price(section: dict, nh: int, quick: bool) -> dict:
    """One checkpoint's scoring (``tapmachine score``) but its TAP ln Z (priced as the model's
    evaluation solve): AIS (``ais``, ``ais_price``) and the pseudo-likelihood of its train and
    test images (``pl``)."""
    g = seeded_generator(0, "paper_prices", "score")
    n_train = section["n_train"] if section["n_train"] is not None else 60000
    n_test = section["n_test"] if section["n_test"] is not None else 10000
    x, _ = dataset_rows("binary_mnist", min(max(n_train, n_test), pl_rows(quick)))
    rbm = _binary_rbm(784, nh, g)
    per_image = pl_price(rbm, x, section["pl_sites"], g, quick, drawn_once=False)
    return {"ais": ais_price(section["ais"], nh, quick), "pl": per_image * (n_train + n_test)}


def pl_rows(quick: bool) -> int:
    """Images a pseudo-likelihood price is timed on, at most (``PL_ROWS``)."""
    return PL_ROWS["quick" if quick else "full"]


def pl_price(
    machine, x: torch.Tensor, sites: int | None, g, quick: bool, drawn_once: bool = True
) -> float:
    """Seconds of the stochastic pseudo-likelihood (``sites`` sites) of one image, all rows of
    ``x`` scored in one call, as the jobs score theirs: its cost per image falls with the rows
    scored at once (``PL_ROWS``). ``drawn_once``: every image's sites drawn beforehand and not
    timed, as Fig. 10's curves draw them once for every epoch (``curves.pseudo_likelihood_curve``);
    else drawn in the call, as Fig. 12's scores draw them (``likelihood.score``)."""
    from tapmachine.core.estimators import pseudo_log_likelihood, site_subsets

    rows = x.to(machine.dtype)
    n, nv = rows.shape
    if drawn_once:
        subsets = None if sites is None or sites >= nv else site_subsets(n, nv, sites, g)

        def score() -> None:
            pseudo_log_likelihood(machine, rows, sites=subsets)
    else:

        def score() -> None:
            pseudo_log_likelihood(machine, rows, sites, g)

    return cpu_seconds(score, 1 if quick else 3) / n


def exact_price(nh: int, quick: bool) -> float:
    """Seconds of one exact ln Z of a 784 x ``nh`` RBM (``exact_log_partition`` in float32
    chunks, as the exact curve runs it): timed at 2^16 or 2^20 hidden states, scaled by the
    states (the cost is linear in them)."""
    from tapmachine.core.estimators import exact_log_partition

    k = 16 if quick else 20
    rbm = _binary_rbm(784, k, seeded_generator(0, "paper_prices", "exact"))
    t = cpu_seconds(lambda: exact_log_partition(rbm, max_units=k, chunk_dtype=torch.float32), 1)
    return t * 2.0 ** (nh - k)


def denoise_baselines_price(fig8: dict, quick: bool) -> float:
    """Seconds of the denoising baselines of Figs. 8-9: the OPE and the 1-NN of every noisy
    image (``n_images`` x the ps) against the reference rows (``n_reference``, None: all),
    timed on 100 noisy images and scaled."""
    from tapmachine.tap_paper import denoise

    ref, _ = dataset_rows("binary_mnist", fig8["n_reference"])
    y = ref[:100]
    m = denoise.magnetisations(ref)
    t = cpu_seconds(
        lambda: (
            denoise.ope(y, 0.1, m),
            denoise.nearest_neighbours(y, ref, k=fig8.get("k", 1)),
        ),
        1 if quick else 2,
    )
    return t / 100 * fig8["n_images"] * len(fig8["ps"])


def timing_price(timing: dict, quick: bool) -> float:
    """Seconds of Fig. 10's timing job (``curves.inference_timing``): per batch size, its
    ``repeats`` of ``tap_iterations`` TAP and ``adatap_iterations`` adaTAP iterations
    (``adatap_method``); both are priced per row-iteration at a batch of 2 (quick) or 10 and
    scaled by the rows (an adaTAP iteration is one inverse per row)."""
    from tapmachine.core import adatap

    k = 2 if quick else 10
    g = seeded_generator(0, "paper_prices", "timing")
    rbm = _binary_rbm(timing["visible_units"], timing["hidden_units"], g)
    x = (torch.rand(k, timing["visible_units"], generator=g) < 0.2).float()
    method = timing.get("adatap_method", "bipartite")
    ada = cpu_seconds(lambda: adatap.solve(rbm, x, tol=0.0, max_iter=1, method=method), 1) / k
    t = cpu_seconds(lambda: tap.solve(rbm, x, tol=0.0, max_iter=20), 2) / 20 / k
    per_row = ada * timing["adatap_iterations"] + t * timing["tap_iterations"]
    return timing["repeats"] * sum(timing["batch_sizes"]) * per_row
