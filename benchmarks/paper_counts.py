"""TAP iterations per row that the first paper's jobs pay, counted on trained checkpoints; and
the denoising and harvest jobs' seconds, measured on them.

A model's counts are taken on the checkpoints of the model itself where ``benchmarks.checkpoints``
trains some (binary MNIST's four sizes; real MNIST's and the faces' RBMs), else borrowed from the
checkpoints of the binary-MNIST RBM of the nearest hidden-layer size (``count_source``): the
CD/PCD baselines and ``bmnist_h500_noiseaug`` (same 784 x 500 RBM), the stochastically binarised
models (same sizes, data of the same density), Fig. 10's RBMs (784 x 500) and Fig. 11's deep
machines (the free solve of their first 784 x 500 coupling stands in for the deep solve: no deep
checkpoints are trained here; a run's own greedy RBMs count their pretraining steps,
``pretrain_source``). Each count runs the model's own settings (solver, tolerances,
caps, second pass) on those checkpoints, at each of their epochs (early, middle, late), and is
the mean over them.

A run of ``paper.yaml`` already under way or done counts better than these: its models train
to convergence, so their fixed points take more iterations than those of checkpoints trained at
3 iterations a step (``run_checkpoint_sets``, ``paper_profile --counts-from``).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import torch

from benchmarks.checkpoints import (
    OTHER_MODELS,
    SOLVE_MODELS,
    other_checkpoints,
    solve_checkpoints,
)
from benchmarks.common import dataset_rows
from tapmachine.core import tap
from tapmachine.core.seeding import seeded_generator
from tapmachine.train import TrainSettings, load_model
from tapmachine.train.loop import eval_rows

__all__ = [
    "EVAL_ROWS", "HARVEST_ROWS", "PROFILE_ROWS", "RUN_CHECKPOINTS", "SCORE_ROWS", "STEP_BATCHES",
    "count_source", "checkpoint_sets", "harvest_costs", "harvest_rows", "measured_iterations",
    "pretrain_source", "run_checkpoint_sets",
]  # fmt: skip

#: Rows from which iterations are counted on each checkpoint.
PROFILE_ROWS = 100
#: Batches of K rows on which a converged training step's solve is counted and timed, per
#: checkpoint. One batch's solve varies by a third from batch to batch: on bmnist_h25's epoch-51
#: checkpoint of the paper run, 20 batches took 89-146 CPU ms (slowest rows 264-391 sweeps).
STEP_BATCHES = 5
#: A run's own checkpoints counted per model (``run_checkpoint_sets``), evenly spaced over its
#: epochs. A converged model's iterations do not grow smoothly: bmnist_h25's mean iterations per
#: training row, over all 100 epochs of the paper run, are 95.8 and its epochs 71.1 CPU s; at 3
#: evenly spaced epochs (first, middle, last) 71.4 and 58.2, at 5 85.1 and 65.6, at 9 92.3 and
#: 69.8.
RUN_CHECKPOINTS = 9
#: Initialisations a harvest is timed on, per checkpoint. Its CPU time per initialisation falls
#: with the rows solved at once until their matrix products dominate: real MNIST's Nh = 100 at
#: epoch 20 of the paper run, 44.6 ms at 100 rows, 28.6 at 300, 25.8 at 1,000 and 24.6 at
#: 2,000 (the harvest's chunk), against 24.2 for the whole job's 10,000; one thread.
HARVEST_ROWS = {"quick": 300, "full": 1000}

#: Evaluation rows timed on each checkpoint (at most the model's ``eval_samples``). Per row, a
#: solve of few rows pays its slowest rows' sweeps and its fixed costs: bmnist_h500_pcd's 100
#: evaluation rows took 0.61 CPU s, where 100 x the per-row price at the counted iterations
#: gave 0.35.
EVAL_ROWS = 1000

#: Initialisations a score's TAP ln Z is timed on (at most its ``tap_inits``), as the score
#: solves them: all at once, with the model's own TAP settings. The CD-25 anchor's
#: ``score_final`` spent 393 of its 443 s solving TAP from 10,000 images; on its epoch-86
#: checkpoint (one thread) a row took 33.3 CPU ms of a solve from 1,000 and 36.2 from 10,000
#: (806 iterations a row against 784, 585 unique solutions to merge against 128), so the price
#: is about 8% low there.
SCORE_ROWS = 1000

#: The settings a count depends on (two models alike in these share their solves).
COUNT_KEYS = (
    "damping", "solver", "relaxation", "inference", "train_iterations", "train_tol",
    "train_max_iter", "n_solutions", "batch_size", "tol", "max_iter", "retry_damping", "evaluate",
    "eval_samples", "dedup_tol", "resample",
)  # fmt: skip


def checkpoint_sets(
    cfg: dict,
    directory: Path,
    quick: bool,
    run_models: Path | None = None,
    models=None,
) -> dict[str, list[Path]]:
    """Checkpoints by model: the binary-MNIST ones (``solve_checkpoints``) and those of the
    other datasets' models (``other_checkpoints``), trained where missing; with ``run_models``
    (a run's ``results/{run}/models``), each model that run has checkpoints of counts on its
    own instead (``run_checkpoint_sets``). Benchmark checkpoints are trained only where one of
    ``models`` (default: every model of ``cfg``) is counted on them: a model the run does not
    cover, or one borrowing the counts of a binary-MNIST size the run does not cover
    (``count_source``)."""
    run = run_checkpoint_sets(run_models, cfg["models"]) if run_models is not None else {}
    wanted = list(cfg["models"] if models is None else models)
    sets: dict[str, list[Path]] = {}
    if any(_counted_on_binary_benchmark(name, cfg["models"][name], run) for name in wanted):
        for name, _, path in solve_checkpoints(directory, quick):
            sets.setdefault(name, []).append(path)
    missing = {n: cfg["models"][n] for n in wanted if n in OTHER_MODELS and n not in run}
    if missing:
        sets.update(other_checkpoints(directory, missing, quick))
    sets.update(run)
    return sets


def _counted_on_binary_benchmark(name: str, spec: dict, run: dict) -> bool:
    """Whether ``name`` is counted on a benchmark checkpoint of binary MNIST: the run does not
    cover it, it is none of ``OTHER_MODELS``, and the binary-MNIST size it is counted on (its
    own, or the nearest one's) is not covered by the run either."""
    if name in run or name in OTHER_MODELS:
        return False
    return (name if name in SOLVE_MODELS else count_source(name, spec, {})) not in run


def run_checkpoint_sets(
    models_dir: Path, names, n_checkpoints: int | None = None
) -> dict[str, list[Path]]:
    """Checkpoints of a run's own models (``models_dir/{model}/checkpoints/epoch_{e}.pt``, as
    ``train`` writes them), for each of ``names`` that has any: ``n_checkpoints`` (default
    ``RUN_CHECKPOINTS``) of the epochs written so far, evenly spaced from the first to the last
    (all of them where fewer exist). A run still training counts only the epochs it reached, so
    a model's later, costlier epochs are missing from its count. A deep model's greedy RBMs
    (``{model}/pretrain/layer_{k}/epoch_{e}.pt``) are sets of their own, ``pretrain_source``."""
    k = n_checkpoints or RUN_CHECKPOINTS
    sets = {}
    for name in names:
        found = _spaced(Path(models_dir, name, "checkpoints"), k)
        if found:
            sets[name] = found
        for layer_dir in Path(models_dir, name, "pretrain").glob("layer_*"):
            found = _spaced(layer_dir, k)
            if found:
                sets[pretrain_source(name, int(layer_dir.name.removeprefix("layer_")))] = found
    return sets


def _spaced(directory: Path, k: int) -> list[Path]:
    """``k`` of the ``epoch_{e}.pt`` files in ``directory``, evenly spaced over their epochs'
    order from the first to the last (all of them where fewer exist)."""
    found = sorted(directory.glob("epoch_*.pt"), key=lambda p: int(p.stem.removeprefix("epoch_")))
    picks = {round(i * (len(found) - 1) / max(1, k - 1)) for i in range(k)} if found else set()
    return [found[i] for i in sorted(picks)]


def pretrain_source(name: str, layer: int) -> str:
    """The key, among the checkpoint sets, of deep model ``name``'s greedy RBM ``layer`` (1 for
    the RBM on the data)."""
    return f"{name}/pretrain/layer_{layer}"


def count_source(name: str, spec: dict, sets: dict) -> str:
    """The checkpointed model whose checkpoints count ``name``'s iterations: itself if it has
    checkpoints, else the binary-MNIST RBM nearest in (first) hidden-layer size."""
    if name in sets:
        return name
    units = spec["hidden"][0]["units"]
    return min(SOLVE_MODELS, key=lambda m: abs(SOLVE_MODELS[m] - units))


def _rows(spec: dict, source_spec: dict | None, n: int) -> torch.Tensor:
    """Count rows: the model's own data if the checkpoint is of its visible width, else the
    checkpoint model's (binary MNIST)."""
    x, _ = dataset_rows(spec["dataset"], n)
    if source_spec is not None and source_spec["dataset"] != spec["dataset"]:
        x_src, _ = dataset_rows(source_spec["dataset"], n)
        if x_src.shape[1] != x.shape[1]:
            return x_src
    return x


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _solve_counts(
    machine, x, settings: TrainSettings, curve_solver: bool, x_eval=None, scores=(), x_steps=None
) -> dict:
    """Mean iterations per row of one checkpoint: a converged training step (``train``, K rows
    from each batch of ``x_steps``, default ``x``, with its sweeps, ``train_sweeps``: the
    slowest row's iterations, and the rows those sweeps swept, ``train_row_sweeps``:
    ``tap.working_set_sizes`` summed; ``train_solve_seconds``, the CPU seconds of the step's
    solve itself, ``tap_gradient.solve_for_gradient`` with training's settings; each the mean
    over the batches) and the per-epoch
    evaluation (``eval``, second pass included); with ``curve_solver`` also the deep curve's
    solve (``curve``: Alg. 1, ``tap_likelihood_curve``). With ``x_eval``, the per-epoch
    evaluation itself (``train.evaluation.evaluate_tap_log_likelihood``) timed on those rows:
    ``eval_seconds_per_row``, CPU seconds. ``scores``: ``(part, ScoreSettings, rows)`` of the
    score jobs that solve TAP themselves, each score's TAP ln Z (``tap_log_partition``) timed on
    its rows: ``score_tap_seconds_per_row_{part}``."""
    from tapmachine.tap_paper.likelihood import tap_log_partition

    out = {}
    for part, score_settings, rows in scores:
        start = time.process_time()
        tap_log_partition(machine, rows, score_settings)
        out[f"score_tap_seconds_per_row_{part}"] = (time.process_time() - start) / rows.shape[0]
    if x_eval is not None and settings.evaluate:
        from tapmachine.train.evaluation import evaluate_tap_log_likelihood

        start = time.process_time()
        evaluate_tap_log_likelihood(machine, x_eval, settings.solver_settings, settings.dedup_tol)
        out["eval_seconds_per_row"] = (time.process_time() - start) / x_eval.shape[0]
    if settings.train_iterations == "converge":
        out.update(_step_counts(machine, x if x_steps is None else x_steps, settings))
    solvers = {"eval": settings.solver, **({"curve": "damped"} if curve_solver else {})}
    for key, solver in solvers.items():
        t0 = time.process_time()
        solving = dataclasses.replace(settings, solver=solver).solver_settings
        st = tap.solve_with_retry(machine, x, solving)
        out[key] = float(st.iterations.double().mean())
        out[f"{key}_cpu_per_row_iteration"] = (time.process_time() - t0) / float(
            st.iterations.double().sum()
        )
    return out


def _step_counts(machine, x, settings: TrainSettings) -> dict:
    """A converged training step's solve from each batch of K rows of ``x`` (K =
    ``n_solutions`` or the batch size; at least one batch), counted and CPU-timed: the means
    over the batches of ``_solve_counts``' ``train`` keys."""
    from tapmachine.train.tap_gradient import solve_for_gradient

    K = settings.n_solutions or settings.batch_size
    solving = settings.solver_settings.replace(
        tol=settings.train_tol, max_iter=settings.train_max_iter
    )
    rows = []
    for start in range(0, max(K, x.shape[0] - x.shape[0] % K), K):
        init = x[torch.arange(start, start + K) % x.shape[0]]
        t0 = time.process_time()
        st = solve_for_gradient(machine, init, solving, settings.inference)
        seconds = time.process_time() - t0
        rows.append(
            {
                "train": float(st.iterations.double().mean()),
                "train_sweeps": float(st.iterations.max()),
                "train_row_sweeps": float(sum(tap.working_set_sizes(st.iterations.tolist()))),
                "train_solve_seconds": seconds,
            }
        )
    return {key: _mean([r[key] for r in rows]) for key in rows[0]}


def measured_iterations(
    cfg: dict, models, sets: dict, deep_curve_models=(), scored: dict | None = None
) -> dict:
    """Per model in ``models`` (names of ``cfg["models"]``): ``train`` (converged step; None for
    fixed-iteration and CD/PCD training), ``eval`` and, for ``deep_curve_models``, ``curve``
    (mean TAP iterations per row), each the mean over its count source's checkpoints
    (``count_source``), with ``source``. ``scored``: per model, ``{part: ScoreSettings}`` of its
    score jobs that solve TAP's ln Z themselves (``likelihood.evaluation_differs``), each timed
    on the first ``SCORE_ROWS`` of its ``tap_inits`` (``score_tap_seconds_per_row_{part}``).
    Identical solves are counted once."""
    specs = cfg["models"]
    done: dict = {}
    out = {}
    for name in models:
        spec = specs[name]
        settings = TrainSettings.from_spec(spec)
        if settings.method in ("cd", "pcd"):
            settings = dataclasses.replace(settings, train_iterations=3)  # no converged step
        source = count_source(name, spec, sets)
        steps = (settings.n_solutions or settings.batch_size) * STEP_BATCHES
        rows = _rows(spec, specs.get(source), max(PROFILE_ROWS, steps, EVAL_ROWS, SCORE_ROWS))
        x, x_steps = rows[:PROFILE_ROWS], rows[:steps]
        x_eval = eval_rows(rows[:EVAL_ROWS], settings)
        scores = [
            (part, s, rows[: min(SCORE_ROWS, s.tap_inits)])
            for part, s in sorted((scored or {}).get(name, {}).items())
        ]
        scored_alike = repr([(part, s) for part, s, _ in scores])
        per_ckpt = []
        for path in sets[source]:
            alike = tuple(getattr(settings, k) for k in COUNT_KEYS)
            key = (path, spec["dataset"], alike, name in deep_curve_models, scored_alike)
            if key not in done:
                machine = load_model(path, dtype=torch.float32)
                curve = name in deep_curve_models
                done[key] = _solve_counts(
                    machine, x, settings, curve, x_eval, scores, x_steps=x_steps
                )
            per_ckpt.append(done[key])
        out[name] = {
            "source": source,
            **{k: _mean([c[k] for c in per_ckpt]) for k in per_ckpt[0]},
        }
        out[name].setdefault("train", None)
        pretrain = _pretrain_counts(name, spec, settings, sets, x_steps)
        if pretrain:
            out[name]["pretrain"] = pretrain
    return out


def _pretrain_counts(name: str, spec: dict, settings, sets: dict, x: torch.Tensor) -> dict:
    """A deep model's greedy RBMs counted on their own checkpoints where a run has them
    (``pretrain_source``): per layer k (1-based), ``_step_counts``' means over its checkpoints of
    a converged step from the rows that RBM trains on, ``x`` for the first and the hidden units
    of the one below (its last checkpoint; drawn, or their means, as ``pretrain.inputs`` says)
    for the next. Layers without checkpoints are left out (priced at the deep machine's counts).
    """
    from tapmachine.train.pretrain import PretrainSettings, layer_inputs

    if not spec.get("pretrain") or settings.train_iterations != "converge":
        return {}
    pre = PretrainSettings.from_spec(spec["pretrain"])
    rbm_settings = dataclasses.replace(
        settings, epochs=pre.epochs, learning_rate=pre.learning_rate, inference="tap"
    )
    generator = seeded_generator(0, "paper_counts", name, "pretrain")
    out = {}
    for layer in range(1, len(spec["hidden"]) + 1):
        paths = sets.get(pretrain_source(name, layer))
        if not paths:
            break
        rbms = [load_model(path, dtype=torch.float32) for path in paths]
        counts = [_step_counts(rbm, x, rbm_settings) for rbm in rbms]
        out[layer] = {k: _mean([c[k] for c in counts]) for k in counts[0]}
        x = layer_inputs(rbms[-1], x, pre.inputs == "samples", generator)
    return out


def harvest_costs(cfg: dict, sets: dict, quick: bool, models=None) -> dict:
    """Per ``harvest`` entry (of ``models`` only, where given): the harvest itself on its
    model's count checkpoints, with its settings and dtype from the first ``harvest_rows``
    training images, one thread. Returns ``{source, inits, rows, iterations,
    seconds_per_init}``: the initialisations of one of its jobs (``n_init``, at most the
    dataset's training images), the rows timed, the mean iterations per initialisation (both
    passes and the polishing of converged rows) and the CPU seconds per initialisation, each
    the mean over the checkpoints. Timed, not priced per sweep: an iteration of the polishing
    (Anderson, with the truncated priors' moments solved inside it) costs several of Alg. 1's
    damped sweeps."""
    from tapmachine.tap_paper import harvest as harvest_module

    out = {}
    for name, entry in cfg["harvest"].items():
        if models is not None and name not in models:
            continue
        spec = cfg["models"][name]
        source = count_source(name, spec, sets)
        settings = harvest_module.HarvestSettings(
            **{k: v for k, v in entry.items() if k not in ("epochs", "dtype")}
        )
        rows = harvest_rows(settings, quick)
        images = dataset_rows(spec["dataset"])[0].shape[0]
        dtype = getattr(torch, entry.get("dtype", "float64"))
        x = _rows(spec, cfg["models"].get(source), rows).to(dtype)
        counts, seconds = [], []
        for path in sets[source]:
            machine = load_model(path, dtype=dtype)
            start = time.process_time()
            arrays = harvest_module.harvest(machine, x, settings)
            seconds.append((time.process_time() - start) / x.shape[0])
            counts.append(float((arrays["iterations"] + arrays["polish_iterations"]).mean()))
        out[name] = {
            "source": source,
            "inits": min(settings.n_init or images, images),
            "rows": x.shape[0],
            "iterations": _mean(counts),
            "seconds_per_init": _mean(seconds),
        }
    return out


def harvest_rows(settings, quick: bool) -> int:
    """Initialisations a harvest is timed on: ``HARVEST_ROWS``, at most the harvest's own and
    one chunk of them (the rows it solves at once)."""
    rows = HARVEST_ROWS["quick" if quick else "full"]
    return min(rows, settings.n_init or rows, settings.chunk_size)


def denoise_seconds(cfg: dict, sets: dict, quick: bool) -> dict:
    """Per model of ``denoise.fig8``: CPU seconds of its ``denoise_bsc`` job, measured on its
    count source's last checkpoint: ``tap_denoise`` from the OPE of 10 (quick: 2) test-like
    images at every p (Alg. 1 at the section's damping, tol and cap), scaled to ``n_images``."""
    from tapmachine.tap_paper import denoise

    fig8 = cfg["denoise"]["fig8"]
    n = 2 if quick else 10
    ref, _ = dataset_rows("binary_mnist", fig8["n_reference"])
    x = ref[-n:]
    m = denoise.magnetisations(ref)
    y, p_rows, _ = denoise.stack_noise(x, fig8["ps"], seeded_generator(0, "paper_counts"))
    out = {}
    for model in dict.fromkeys(fig8["models"].values()):
        source = count_source(model, cfg["models"][model], sets)
        machine = load_model(sets[source][-1], dtype=torch.float32)
        t0 = time.process_time()
        denoise.tap_denoise(
            machine,
            y,
            p_rows,
            m,
            damping=fig8["damping"],
            tol=fig8["tol"],
            max_iter=fig8["max_iter"],
        )
        seconds = (time.process_time() - t0) * fig8["n_images"] / n
        out[model] = {"source": source, "seconds": seconds}
    return out
