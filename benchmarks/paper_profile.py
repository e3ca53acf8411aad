"""``paper_profile``: projected wall time of the binary-MNIST paper targets, from measured
per-epoch costs and the TAP iterations counted on trained checkpoints."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import torch

from benchmarks import ROOT
from benchmarks.checkpoints import CHECKPOINTS, SOLVE_EPOCHS, SOLVE_MODELS, solve_checkpoints
from benchmarks.common import binary_mnist, cpu_seconds
from tapmachine.core import tap
from tapmachine.core.machine import RBM
from tapmachine.core.priors import Bernoulli
from tapmachine.core.seeding import seeded_generator
from tapmachine.train import TrainSettings, build_machine, load_model
from tapmachine.train.methods import gradients

__all__ = ["PAPER_TARGETS", "bench_paper_profile", "measured_iterations"]


#: Datasets whose models ``paper_profile`` counts on the binary-MNIST checkpoints.
MNIST_DATASETS = ("binary_mnist", "stochastic_binary_mnist")

#: Rows from which ``paper_profile`` counts TAP iterations on each checkpoint.
PROFILE_ROWS = 100


def measured_iterations(
    cfg: dict, checkpoints: Path, quick: bool, solver: str | None = None, harvest: bool = True
) -> dict:
    """Mean TAP iterations per row that the paper targets' jobs pay, counted on the
    ``tap_solve`` checkpoints (trained if missing, ``solve_checkpoints``) at each of their epochs
    (early, middle, late) and averaged over them, ``PROFILE_ROWS`` training images each:

    - ``train_converge`` per model: one converged training step (Alg. 1 or ``tap.solver`` from
      a batch, tol ``train_tol``, cap ``train_max_iter``);
    - ``eval`` per model: the per-epoch evaluation (tol, cap ``max_iter``, second pass at
      ``retry_damping``; second-pass iterations included);
    - ``harvest``: bmnist_h100's harvest (float64, its tol, max_iter, second pass, plus the
      polishing iterations of converged rows).

    Models are matched to the checkpoints by hidden units; the CD/PCD models (784 x 500) are
    counted on the TAP-trained bmnist_h500 checkpoints (no CD checkpoints are trained here), and
    the models of stochastically binarised MNIST on the binary-MNIST checkpoints of their size.
    ``solver`` (``tap.SOLVERS``) replaces the models' ``tap.solver`` in both counts. Also
    returns ``row_sweep_seconds`` per hidden-layer size: the evaluation solves' CPU seconds
    over their rows' summed iterations (the price of one row's sweep, to compare solvers);
    ``harvest=False`` skips the harvest count (None)."""
    from tapmachine.tap_paper import harvest as harvest_module

    ckpts = solve_checkpoints(checkpoints, quick)
    x, _ = binary_mnist(PROFILE_ROWS)
    models = cfg["models"]
    by_units = {
        nh: [path for n, _, path in ckpts if SOLVE_MODELS[n] == nh] for nh in (25, 50, 100, 500)
    }
    train, evals, solved = {}, {}, {}
    sweep_time = {nh: [0.0, 0] for nh in by_units}  # CPU seconds, row-sweeps
    for name, spec in models.items():
        nh = spec["hidden"][0]["units"] if len(spec.get("hidden", [])) == 1 else None
        if spec.get("dataset") not in MNIST_DATASETS or nh not in by_units:
            continue
        settings = TrainSettings.from_spec(spec)
        if solver is not None:
            settings = dataclasses.replace(settings, solver=solver)
        t_counts, e_counts = [], []
        for path in by_units[nh]:
            machine = load_model(path, dtype=torch.float32)
            xs = x.to(torch.float32)
            if settings.method == "tap" and settings.train_iterations == "converge":
                st = tap.solve(
                    machine,
                    xs[: settings.batch_size],
                    damping=settings.damping,
                    tol=settings.train_tol,
                    max_iter=settings.train_max_iter,
                    solver=settings.solver,
                )
                t_counts.append(float(st.iterations.double().mean()))
            key = (path, settings.damping, settings.tol, settings.max_iter)
            key += (settings.retry_damping, settings.solver)
            if key not in solved:  # the CD/PCD models share bmnist_h500's checkpoints
                t0 = time.process_time()
                st = tap.solve_with_retry(machine, xs, settings.solver_settings)
                sweep_time[nh][0] += time.process_time() - t0
                sweep_time[nh][1] += int(st.iterations.sum())
                solved[key] = float(st.iterations.double().mean())
            e_counts.append(solved[key])
        if t_counts:
            train[name] = sum(t_counts) / len(t_counts)
        evals[name] = sum(e_counts) / len(e_counts)
    row_sweep = {nh: t / n for nh, (t, n) in sweep_time.items() if n}
    counts = {"train_converge": train, "eval": evals, "row_sweep_seconds": row_sweep}
    if not harvest:
        return {**counts, "harvest": None}
    h = cfg["harvest"]["bmnist_h100"]
    settings = harvest_module.HarvestSettings(
        **{k: v for k, v in h.items() if k not in ("epochs", "dtype")}
    )
    h_counts = []
    for path in by_units[100]:
        machine = load_model(path, dtype=torch.float64)
        arrays = harvest_module.harvest(machine, x.double(), settings)
        h_counts.append(float((arrays["iterations"] + arrays["polish_iterations"]).mean()))
    return {**counts, "harvest": sum(h_counts) / len(h_counts)}


#: Targets of the profile (workflow/config/paper.yaml).
PAPER_TARGETS = ("fig3 (binary panel)", "fig4", "fig5", "fig6", "fig7", "fig12", "likelihood_table")


def _paper_config() -> dict:
    from tapmachine.pipeline.configuration import SCHEMA, load_config, validate

    cfg = load_config([ROOT / "workflow" / "config" / "paper.yaml"], default=ROOT / "config.yaml")
    return validate(cfg, SCHEMA)


def bench_paper_profile(device, quick: bool, checkpoints: Path | None = None) -> dict:
    """Projected wall time of the binary-MNIST paper targets from measured per-epoch costs.

    Targets: fig3 (binary panel: bmnist_h25/50/100/500), fig4 (its binary models), fig5-7
    (bmnist_h100 harvest), fig12 (per-epoch scores of bmnist_h500) and the likelihood table
    (TAP, CD-1, CD-25 and PCD-1 on 784 x 500), all with workflow/config/paper.yaml. Measured
    here: one training minibatch of each model (TAP at 1 and 11 iterations, so cost = a + b
    iterations; CD/PCD directly), one TAP iteration over 10,000 rows (per-epoch evaluation and
    harvest), one AIS temperature with 100 runs, and the pseudo-likelihood of 100 images. The
    projection multiplies them by the counts in the config (epochs, 600 minibatches of 60,000
    images, schedule length, initialisations) and by the TAP iterations per row counted on
    trained checkpoints (``measured_iterations``) where that number depends on the model.
    ``serial_hours`` is the sum of all jobs;
    ``wall_hours_2_cores`` spreads the single-threaded jobs over 2 cores (the longest chain,
    bmnist_h500 training then its per-epoch scoring, is a lower bound and is reported too).
    Fig. 12's scoring takes TAP's ln Z from training's per-epoch evaluation when that is the same
    solve (``likelihood.evaluation_differs``; paper.yaml: 10,000 rows at tol 1e-8 both), so its
    TAP part is not counted again; ``fig12_tap_reuse_saved_hours`` is what that saves.
    Costs are CPU seconds of one thread (``cpu_seconds``), so the projection is for an idle machine.

    Each of ``PROFILE_SOLVERS`` gets its own projection (``by_solver``; the top level is
    Alg. 1's): its iterations counted on the checkpoints, and its sweeps priced by a cost model
    measured in the same run on the same checkpoints: one of its sweeps costs
    ``sweep_cost_in_damped_sweeps[nh]`` damped sweeps (CPU seconds per row-sweep of the
    evaluation solves, over Alg. 1's), which scales the damped per-iteration prices of the
    converged training steps, the evaluation and the table's TAP ln Z.
    ``wall_hours_2_cores_by_solver`` compares them.
    """

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # CPU time of one thread = idle-core wall time (see cpu_seconds)
    try:
        return _paper_profile(quick, Path(checkpoints or CHECKPOINTS))
    finally:
        torch.set_num_threads(threads)


#: The solvers the profile prices, each with its own counted iterations: Alg. 1 and the
#: accelerated solvers (converged training steps and per-epoch evaluation; the harvest keeps
#: Alg. 1 with Anderson polishing in all, as paper.yaml does).
PROFILE_SOLVERS = ("damped", "anderson", "newton_damped", "newton_sor")


def _paper_profile(quick: bool, checkpoints: Path) -> dict:
    """Measure the prices once, count the iterations of each of ``PROFILE_SOLVERS``, and
    project the targets for each (``_project``); the first solver's projection is the top
    level of the result, every solver's is under ``by_solver``."""
    cfg = _paper_config()
    counts = {
        solver: measured_iterations(cfg, checkpoints, quick, solver, harvest=(k == 0))
        for k, solver in enumerate(PROFILE_SOLVERS)
    }
    harvest_count = counts[PROFILE_SOLVERS[0]]["harvest"]
    base = counts[PROFILE_SOLVERS[0]]["row_sweep_seconds"]
    prices, source = _prices(cfg, quick)
    by_solver = {}
    for solver, c in counts.items():
        # cost model: a sweep of ``solver`` costs ``sweep_cost[nh]`` damped sweeps (measured
        # on the checkpoints in this run)
        sweep_cost = {nh: c["row_sweep_seconds"][nh] / base[nh] for nh in base}
        by_solver[solver] = _project(cfg, prices, {**c, "harvest": harvest_count}, sweep_cost)
        by_solver[solver]["sweep_cost_in_damped_sweeps"] = sweep_cost
    first = by_solver[PROFILE_SOLVERS[0]]
    return {
        "name": "paper_profile",
        "seconds": first["serial_hours"] * 3600,
        "gflops": None,
        "ratio_to_matmul": None,
        "targets": list(PAPER_TARGETS),
        "iterations_from": f"checkpoints {checkpoints} (epochs {list(SOLVE_EPOCHS)})",
        **first,
        "wall_hours_2_cores_by_solver": {k: v["wall_hours_2_cores"] for k, v in by_solver.items()},
        "by_solver": by_solver,
        "goal_hours": 2.0,
        "basis": "CPU seconds of one torch thread (idle-machine projection)",
        "data": source,
    }


def _prices(cfg: dict, quick: bool) -> tuple[dict, str]:
    """The measured unit costs (CPU seconds, one thread): per model a training minibatch
    (TAP: at 1 and 11 damped iterations, so a + b iterations; CD/PCD directly) and one damped
    evaluation iteration over its ``eval_samples`` rows; one harvest iteration over ``n_init``
    float64 rows; the scoring parts of Fig. 12 and of the likelihood table."""
    from tapmachine.core import estimators
    from tapmachine.tap_paper import likelihood

    models, lik = cfg["models"], cfg["likelihood"]
    x, source = binary_mnist(None if not quick else 12000)
    g = seeded_generator(0, "paper_profile")
    reps = 2 if quick else 5
    prices: dict = {"models": {}}

    def machine_for(spec):
        return build_machine(spec, x[:1000], 0.05, g)

    fig3 = [m for m in cfg["figures"]["fig3"]["models"] if models[m]["dataset"] == "binary_mnist"]
    table_models = list(lik["table"]["models"])
    for name in dict.fromkeys(fig3 + table_models + [lik["fig12"]["model"]]):
        spec = models[name]
        settings = TrainSettings.from_spec(spec)
        machine = machine_for(spec)
        batch = x[: settings.batch_size]
        chains = None
        if settings.method == "pcd":
            from tapmachine.core import contrastive

            chains = contrastive.PersistentChains.from_data(
                x[:1000], n_chains=settings.batch_size, generator=g
            )
        price = {}
        if settings.method == "tap":

            def step(it, settings=settings, machine=machine, batch=batch):
                s = dataclasses.replace(settings, train_iterations=it)
                gradients(machine, batch, s, None, g)

            price["one"] = cpu_seconds(lambda step=step: step(1), reps)
            eleven = cpu_seconds(lambda step=step: step(11), reps)
            price["per_iter"] = max(0.0, (eleven - price["one"]) / 10)
        else:

            def step_cd(settings=settings, machine=machine, batch=batch, chains=chains):
                gradients(machine, batch, settings, chains, g)

            price["batch"] = cpu_seconds(step_cd, reps)
        # Per-epoch evaluation: TAP from eval_samples images (eq. 39, Fig. 3).
        nh = spec["hidden"][0]["units"]
        rows = min(settings.eval_samples, x.shape[0])
        probe = x[:rows]
        W = 0.05 * torch.randn(784, nh, generator=g)
        rbm = RBM(W, Bernoulli(torch.zeros(784) - 1.0), Bernoulli(torch.zeros(nh)))
        per_eval_iter = cpu_seconds(
            lambda rbm=rbm, probe=probe: tap.solve(rbm, probe, tol=0.0, max_iter=1), reps
        )
        price["eval_iter"] = per_eval_iter * settings.eval_samples / rows
        prices["models"][name] = price

    # Harvest (Figs. 5-7): float64 TAP from n_init images at each listed epoch.
    h = cfg["harvest"]["bmnist_h100"]
    rows = min(h["n_init"], x.shape[0])
    W = 0.05 * torch.randn(784, 100, generator=g, dtype=torch.float64)
    rbm = RBM(
        W,
        Bernoulli(torch.zeros(784, dtype=torch.float64) - 1.0),
        Bernoulli(torch.zeros(100, dtype=torch.float64)),
    )
    xd = x[:rows].double()
    per_iter = cpu_seconds(lambda: tap.solve(rbm, xd, tol=0.0, max_iter=1), reps)
    prices["harvest_iter"] = per_iter * h["n_init"] / rows

    # Scoring (Fig. 12 per epoch; the table once per model): AIS + TAP ln Z + PL + data terms.
    def score_seconds(section: dict, nh: int) -> dict:
        """Seconds of one checkpoint's AIS and pseudo-likelihood, and of one TAP iteration over
        the section's ``tap_inits`` rows (its ln Z)."""
        W = 0.01 * torch.randn(784, nh, generator=g)
        rbm = RBM(W, Bernoulli(torch.zeros(784) - 1.0), Bernoulli(torch.zeros(nh)))
        ais = section["ais"]
        n_betas = ais["n_betas"] or len(estimators.salakhutdinov_schedule())
        probe_betas = likelihood.ais_schedule("linear", 50 if quick else 200)
        t = cpu_seconds(
            lambda: estimators.ais_log_partition(
                rbm, n_runs=ais["n_runs"], betas=probe_betas, generator=g
            ),
            1,
        )
        rows = min(section["tap_inits"], x.shape[0])
        it = cpu_seconds(lambda: tap.solve(rbm, x[:rows], tol=0.0, max_iter=1), reps)
        n_images = (section["n_train"] or N_TRAIN) + (section["n_test"] or 10000)
        pl_s = (
            cpu_seconds(
                lambda: likelihood.pseudo_log_likelihood_blocks(
                    rbm, x[:100], section["pl_sites"], g
                ),
                reps,
            )
            * n_images
            / 100
        )
        return {
            "ais": t * n_betas / len(probe_betas),
            "pl": pl_s,
            "betas": n_betas,
            "tap_per_iteration": it * section["tap_inits"] / rows,
        }

    prices["fig12"] = score_seconds(
        lik["fig12"], models[lik["fig12"]["model"]]["hidden"][0]["units"]
    )
    prices["table"] = score_seconds(lik["table"], 500)
    return prices, source


#: Training images of binary MNIST (600 minibatches of 100).
N_TRAIN = 60000


def _project(cfg: dict, prices: dict, counts: dict, sweep_cost: dict) -> dict:
    """Hours of each job from the ``prices``, the counted iterations ``counts`` and the cost
    of one of the solver's sweeps in damped sweeps (``sweep_cost`` per hidden-layer size):
    training epochs (minibatches, plus the per-epoch evaluation), the harvest, the scoring.
    ``serial_hours`` is the sum of all jobs; ``wall_hours_2_cores`` spreads the single-threaded
    jobs over 2 cores (the longest chain, bmnist_h500 training then its per-epoch scoring, is a
    lower bound and is reported too). Fig. 12's scoring takes TAP's ln Z from training's
    per-epoch evaluation when that is the same solve (``likelihood.evaluation_differs``), so its
    TAP part is not counted again."""
    from tapmachine.tap_paper import likelihood

    models, harvest_cfg, lik = cfg["models"], cfg["harvest"], cfg["likelihood"]
    eval_iterations = counts["eval"]
    jobs: dict[str, float] = {}
    detail: dict[str, dict] = {}
    fixed3: dict[str, float] = {}  # training seconds of the TAP models at 3 iterations per step
    for name, price in prices["models"].items():
        spec = models[name]
        settings = TrainSettings.from_spec(spec)
        nh = spec["hidden"][0]["units"]
        n_batches = N_TRAIN // settings.batch_size
        iters = None
        if "one" in price:
            iters = settings.train_iterations
            per_iter = price["per_iter"]
            if iters == "converge":
                iters = counts["train_converge"][name]
                per_iter *= sweep_cost[nh]
            per_batch = price["one"] + per_iter * (iters - 1)
            three = price["one"] + 2 * price["per_iter"]
            fixed3[name] = settings.epochs * three * n_batches
        else:
            per_batch = price["batch"]
        eval_epoch = price["eval_iter"] * sweep_cost[nh] * eval_iterations[name]
        train_epoch = per_batch * n_batches
        jobs[f"train {name}"] = settings.epochs * (train_epoch + eval_epoch)
        detail[name] = {
            "epochs": settings.epochs,
            "train_iterations": iters,
            "seconds_per_batch": per_batch,
            "train_seconds_per_epoch": train_epoch,
            "eval_seconds_per_epoch": eval_epoch,
            "eval_samples": settings.eval_samples,
        }
    h = harvest_cfg["bmnist_h100"]
    jobs["harvest bmnist_h100"] = len(h["epochs"]) * prices["harvest_iter"] * counts["harvest"]
    detail["harvest"] = {
        "epochs": len(h["epochs"]),
        "n_init": h["n_init"],
        "seconds_per_iteration": prices["harvest_iter"],
    }

    fig12_model = lik["fig12"]["model"]
    fig12_settings = likelihood.ScoreSettings.from_config(lik["fig12"], models[fig12_model])
    trained = dataclasses.asdict(TrainSettings.from_spec(models[fig12_model]))
    reused = not likelihood.evaluation_differs(trained, fig12_settings)
    parts = prices["fig12"]
    nh12 = models[fig12_model]["hidden"][0]["units"]
    tap_solved = parts["tap_per_iteration"] * sweep_cost[nh12] * eval_iterations[fig12_model]
    per_epoch = parts["ais"] + parts["pl"] + (0.0 if reused else tap_solved)
    n_scored = (
        models[fig12_model]["epochs"]
        if lik["fig12"]["epochs"] == "all"
        else len(lik["fig12"]["epochs"])
    )
    jobs[f"score_epochs {fig12_model}"] = n_scored * per_epoch
    detail["fig12_scoring"] = {
        "epochs": n_scored,
        "seconds_per_epoch": per_epoch,
        **parts,
        "tap_reused": reused,
        "tap_if_solved": tap_solved,
    }
    parts = prices["table"]
    table_reused = []
    for name in lik["table"]["models"]:
        spec = models[name]
        table_settings = likelihood.ScoreSettings.from_config(lik["table"], spec)
        trained = dataclasses.asdict(TrainSettings.from_spec(spec))
        same = not likelihood.evaluation_differs(trained, table_settings)
        tap_s = parts["tap_per_iteration"] * sweep_cost[500] * eval_iterations[name]
        jobs[f"score_final {name}"] = parts["ais"] + parts["pl"] + (0.0 if same else tap_s)
        table_reused += [name] if same else []
    detail["table_scoring"] = {**parts, "tap_reused_for": table_reused}

    serial = sum(jobs.values())
    chain = jobs[f"train {fig12_model}"] + jobs[f"score_epochs {fig12_model}"]
    # The same targets with the default's 3 TAP iterations per training step.
    saved = sum(
        models[n]["epochs"] * detail[n]["train_seconds_per_epoch"] - fixed3[n] for n in fixed3
    )
    serial3 = serial - saved
    chain3 = chain - (
        models[fig12_model]["epochs"] * detail[fig12_model]["train_seconds_per_epoch"]
        - fixed3.get(fig12_model, 0.0)
    )
    return {
        "measured_iterations": counts,
        "jobs_hours": {k: v / 3600 for k, v in sorted(jobs.items(), key=lambda kv: -kv[1])},
        "detail": detail,
        "serial_hours": serial / 3600,
        "fig12_tap_reuse_saved_hours": (n_scored * tap_solved / 3600 if reused else 0.0),
        "longest_chain_hours": chain / 3600,
        "wall_hours_2_cores": max(serial / 2.0, chain) / 3600,
        "with_3_iterations": {
            "serial_hours": serial3 / 3600,
            "wall_hours_2_cores": max(serial3 / 2.0, chain3) / 3600,
        },
    }
