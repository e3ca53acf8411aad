"""``paper_profile``: projected hours of every job of the first paper's targets under
``workflow/config/paper.yaml``, from unit costs measured in the same run (``paper_prices``) and
TAP iterations counted on trained checkpoints (``paper_counts``); the jobs and their names
(Snakemake's benchmark files) come from ``paper_jobs``. Also the Fig. 10 epochs and the Fig. 11
size that keep the projection within the budget (``choose_fig10_epochs``, ``choose_fig11_size``).
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import torch

from benchmarks import ROOT
from benchmarks import paper_counts as counting
from benchmarks import paper_prices as pricing
from benchmarks.checkpoints import CHECKPOINTS
from benchmarks.paper_jobs import (
    PAPER_TARGETS,
    longest_chain_hours,
    paper_jobs,
    schedule_hours,
)
from tapmachine.train import TrainSettings, load_model
from tapmachine.train.evaluation import evaluation_due

__all__ = [
    "BUDGET_HOURS",
    "LEFT_OUT",
    "PROFILE_TARGETS",
    "bench_paper_profile",
    "choose_fig10_epochs",
    "choose_fig11_size",
    "profile_jobs",
    "project",
]

#: What the profile prices by default: the first paper's targets and ``harvest`` (every harvest
#: entry's epochs, where Figs. 5-7 read only their columns'). A run of some of them (one
#: dataset's Figs. 3-7, say) is priced with those alone (``--targets``).
PROFILE_TARGETS = (*PAPER_TARGETS, "harvest")
#: The goal: the whole first paper within this many hours on 2 cores, projected.
BUDGET_HOURS = 12.0
#: The model whose jobs the goal leaves out (adaTAP-100, about 8 h an epoch on a CPU).
LEFT_OUT = "bmnist_fig10_adatap100"
#: Fig. 10's epochs: the largest count in this range that fits, the low end when none fits. At
#: the paper's settings (lr 0.001 from couplings of std 0.001, 50 updates an epoch) training only
#: starts to show after about 40 epochs: TAP-3's exact pseudo-likelihood of the 5,000 images is
#: -205.92 nats at epoch 5, -205.77 at 20, -198.5 at 40, -151.8 at 100 and -124.9 at 200
#: (docs/runbook.md#what-it-costs). 100 epochs is the fewest that draws a curve over training.
FIG10_EPOCHS = (100, 200)
#: Fig. 11's hidden units per layer, tried largest first (the paper's 500 is its largest RBM),
#: each with the most joint epochs in ``FIG11_JOINT`` that fit; pretraining keeps the paper's
#: ``FIG11_PRETRAIN`` epochs (App. E: 50 per RBM).
FIG11_UNITS = (500, 400, 300, 250, 200, 150, 100, 50)
#: Fig. 11's joint epochs: at least 20 (a curve over training), at most the paper's 3,000.
FIG11_JOINT = (20, 3000)
#: Fig. 11's greedy pretraining epochs per RBM, the paper's (App. E).
FIG11_PRETRAIN = 50
#: The smallest Fig. 11 (units, joint epochs, pretraining epochs) tried, and taken when none fits.
FIG11_SMALLEST = (FIG11_UNITS[-1], FIG11_JOINT[0], FIG11_PRETRAIN)


def profile_jobs(cfg: dict, targets=PROFILE_TARGETS) -> list:
    """The jobs ``targets`` (names of ``PROFILE_TARGETS``) make under ``cfg``
    (``paper_jobs``; ``harvest`` adds every harvest entry's epochs)."""
    figures = [t for t in targets if t != "harvest"]
    return paper_jobs(cfg, figures, all_harvests="harvest" in targets)


def _paper_config(overlays=()) -> dict:
    """``paper.yaml`` over ``config.yaml``, then ``overlays`` (a run's further config files, as
    given to snakemake after it), validated."""
    from tapmachine.pipeline.configuration import SCHEMA, load_config, validate

    files = [ROOT / "workflow" / "config" / "paper.yaml", *map(Path, overlays)]
    return validate(load_config(files, default=ROOT / "config.yaml"), SCHEMA)


#: The likelihood section each kind of score job reads.
SCORE_PARTS = {"score_epochs": "fig12", "score_final": "table"}


def _score_settings(cfg: dict, job):
    """A score job's ``ScoreSettings`` and whether it solves TAP's ln Z itself: its settings
    differ from training's per-epoch evaluation (``likelihood.evaluation_differs``; else the
    score reads training's record)."""
    from tapmachine.tap_paper import likelihood

    spec = cfg["models"][job.model]
    settings = likelihood.ScoreSettings.from_config(cfg["likelihood"][SCORE_PARTS[job.kind]], spec)
    trained = dataclasses.asdict(TrainSettings.from_spec(spec))
    return settings, likelihood.evaluation_differs(trained, settings)


def _scores_solving_tap(cfg: dict, jobs=None) -> dict[str, dict]:
    """Per model, ``{part: ScoreSettings}`` of those of ``jobs`` (default: the whole paper's,
    ``profile_jobs``) that score it and solve TAP's ln Z themselves (``_score_settings``)."""
    out: dict[str, dict] = {}
    for job in profile_jobs(cfg) if jobs is None else jobs:
        if job.kind in SCORE_PARTS:
            settings, solves = _score_settings(cfg, job)
            if solves:
                out.setdefault(job.model, {})[SCORE_PARTS[job.kind]] = settings
    return out


class Measurements:
    """Everything the projection of ``targets``' jobs multiplies, measured on demand and kept:
    each model's training prices (``paper_prices.training_price``, by its spec: a resized
    Fig. 11 machine is priced again), the counts (``paper_counts``), and the other jobs'
    prices; a kind of job the targets do not run is not measured (None)."""

    def __init__(
        self,
        cfg: dict,
        checkpoints: Path,
        quick: bool,
        counts_from: Path | None = None,
        targets=PROFILE_TARGETS,
    ):
        self.cfg, self.quick = cfg, quick
        jobs = profile_jobs(cfg, targets)
        kinds = {job.kind for job in jobs}
        models = sorted({job.model for job in jobs if job.model})
        self.sets = counting.checkpoint_sets(cfg, checkpoints, quick, counts_from, models)
        self._training: dict[str, dict] = {}
        self._priced_on: dict[tuple, Path | None] = {}
        self._curve: dict[str, dict] = {}
        self._score: dict[str, dict] = {}
        self._pl: dict[tuple, float] = {}
        self._ais: dict[tuple, float] = {}
        deep = cfg["deep"]
        fig11 = deep["fig11"]["models"] if deep.get("fig11") else []
        trained = [job.model for job in jobs if job.kind == "train"]
        scored = _scores_solving_tap(cfg, jobs)
        self.counts = counting.measured_iterations(cfg, trained, self.sets, fig11, scored)
        self.harvest = counting.harvest_costs(cfg, self.sets, quick, models)
        self.denoise = (
            counting.denoise_seconds(cfg, self.sets, quick) if "denoise_bsc" in kinds else {}
        )
        self.exact_epoch = pricing.exact_price(25, quick) if "exact_curve" in kinds else None
        self.baselines = (
            pricing.denoise_baselines_price(cfg["denoise"]["fig8"], quick)
            if "denoise_baselines" in kinds
            else None
        )
        self.timing = (
            pricing.timing_price(deep["fig10"]["timing"], quick) if "deep_timing" in kinds else None
        )
        self.start = pricing.job_start_price()

    @staticmethod
    def _key(spec: dict) -> str:
        """What a price depends on: the spec without its epoch counts."""
        priced = {k: v for k, v in spec.items() if k not in ("epochs", "pretrain")}
        return repr(sorted((k, repr(v)) for k, v in priced.items())) + repr(
            bool(spec.get("pretrain"))
        )

    def training(self, spec: dict, name: str | None = None) -> dict:
        """``name``'s training prices, on the latest checkpoint of its count source where that
        machine has the spec's sizes and priors (``priced_on``), else on a fresh machine."""
        checkpoint = self._pricing_checkpoint(spec, name)
        key = self._key(spec) + repr(checkpoint)
        if key not in self._training:
            machine = load_model(checkpoint, dtype=torch.float32) if checkpoint else None
            price = pricing.training_price(spec, self.quick, machine=machine)
            self._training[key] = {**price, "priced_on": str(checkpoint) if checkpoint else None}
        return self._training[key]

    def _pricing_checkpoint(self, spec: dict, name: str | None) -> Path | None:
        """The last checkpoint of ``name``'s count source if it is a machine like ``spec``'s:
        the same layer sizes and unit priors (a sweep's cost depends on both and, for the
        truncated priors, on the trained values); looked up once per spec and model."""
        if name is None or name not in self.counts:
            return None
        key = (self._key(spec), name)
        if key not in self._priced_on:
            self._priced_on[key] = self._matching_checkpoint(spec, name)
        return self._priced_on[key]

    def _matching_checkpoint(self, spec: dict, name: str) -> Path | None:
        paths = self.sets.get(self.counts[name]["source"]) or []
        if not paths or spec.get("pretrain"):
            return None
        machine = load_model(paths[-1], dtype=torch.float32)
        layers = [spec["visible"], *spec["hidden"]]
        if list(machine.sizes[1:]) != [layer["units"] for layer in spec["hidden"]]:
            return None
        priors = [type(p).__name__.lower() for p in machine.priors]
        wanted = [layer.get("prior", "bernoulli").replace("_", "") for layer in layers]
        if [p.replace("_", "") for p in priors] != wanted:
            return None
        return paths[-1]

    def curve_solve(self, spec: dict) -> dict:
        """Fig. 11's curve solve per row: Alg. 1 (``tap_likelihood_curve`` has no solver key)
        on a machine of ``spec``."""
        key = self._key(spec)
        if key not in self._curve:
            from benchmarks.common import dataset_rows
            from tapmachine.core.seeding import seeded_generator
            from tapmachine.train import build_machine

            x, _ = dataset_rows(spec["dataset"], 1000)
            g = seeded_generator(0, "paper_profile", "curve")
            settings = dataclasses.replace(TrainSettings.from_spec(spec), solver="damped")
            machine = build_machine(spec, x, 0.05, g)
            rows = x[: pricing.PRICE_ROWS["quick" if self.quick else "full"]]
            self._curve[key] = pricing.solve_price(machine, rows, settings, 2)
        return self._curve[key]

    def ais(self, ais: dict, nh: int) -> float:
        key = (repr(sorted(ais.items())), nh)
        if key not in self._ais:
            self._ais[key] = pricing.ais_price(ais, nh, self.quick)
        return self._ais[key]

    def score(self, part: str, nh: int) -> dict:
        if (part, nh) not in self._score:
            section = self.cfg["likelihood"][part]
            self._score[(part, nh)] = pricing.score_price(section, nh, self.quick)
        return self._score[(part, nh)]

    def pl_image(self, nh: int, sites, n_images: int) -> float:
        """Fig. 10's curve: the pseudo-likelihood of one of its ``n_images`` per epoch."""
        key = (nh, sites, n_images)
        if key not in self._pl:
            from benchmarks.common import dataset_rows
            from tapmachine.core.seeding import seeded_generator

            x, _ = dataset_rows("binary_mnist", min(n_images, pricing.pl_rows(self.quick)))
            g = seeded_generator(0, "paper_profile", "pl")
            self._pl[key] = pricing.pl_price(
                pricing._binary_rbm(784, nh, g), x, sites, g, self.quick
            )
        return self._pl[key]


def _solve_seconds(price: dict, rows: int, iterations: float, fixed: bool = True) -> float:
    per_row = price["one"] + price["per_iter"] * max(0.0, iterations - 1)
    return rows * (per_row + (price.get("fixed", 0.0) if fixed else 0.0))


def _step_seconds(step: dict, iterations, counts: dict | None = None) -> float:
    """A training step: the loop's own work around the gradient (``loop``, where priced) plus
    the gradient: a CD/PCD batch; a converged TAP step as the step at one sweep less its
    one-sweep solve plus the step's own solve timed on the count checkpoints
    (``train_solve_seconds``), where the price and the counts have them; else from its counts'
    sweeps and rows swept (the first sweep, of all K rows, is in ``one``); else the line at
    ``iterations`` per row."""
    return step.get("loop", 0.0) + _gradient_seconds(step, iterations, counts)


def _gradient_seconds(step: dict, iterations, counts: dict | None) -> float:
    if "batch" in step:
        return step["batch"]
    if "solve_one" in step and counts and counts.get("train_solve_seconds") is not None:
        return max(0.0, step["one"] - step["solve_one"]) + counts["train_solve_seconds"]
    if "per_row_sweep" in step and counts and counts.get("train_sweeps") is not None:
        extra_sweeps = max(0.0, counts["train_sweeps"] - 1)
        extra_rows = max(0.0, counts["train_row_sweeps"] - step["rows"])
        return step["one"] + step["per_sweep"] * extra_sweeps + step["per_row_sweep"] * extra_rows
    return step["one"] + step["per_iter"] * max(0.0, iterations - 1)


def _solver_label(settings: TrainSettings) -> str:
    """How a training step reaches its model term: CD-k / PCD-k, the converged solver, or k
    fixed iterations (of adaTAP where ``inference`` says so)."""
    if settings.method in ("cd", "pcd"):
        k = settings.sampling_steps
        steps = f"{k['start']}..{k['end']}" if isinstance(k, dict) else k
        return f"{settings.method.upper()}-{steps}"
    if settings.train_iterations == "converge":
        return f"{settings.solver} to convergence"
    prefix = "adaTAP" if settings.inference == "adatap" else "Alg. 1"
    return f"{prefix}, {settings.train_iterations} iterations"


def train_seconds(meas: Measurements, name: str, spec: dict) -> dict:
    """Seconds of a training job: epochs x minibatches x step, plus the evaluation of each
    epoch it is due (``eval.every``: ``evaluation_due``), plus greedy
    pretraining (each RBM's step at its own counts where a run's checkpoints of it were counted,
    ``pretrain_counted_on_own``, else at the deep machine's; each epoch's evaluation priced as
    the deep machine's: an upper bound). The evaluation is its rows times its CPU seconds
    per row timed on the count checkpoints (``eval_seconds_per_row``), else the solve's price
    at the counted iterations."""
    price = meas.training(spec, name)
    counts = meas.counts[name]
    settings = TrainSettings.from_spec(spec)
    n_batches = max(1, price["n_rows"] // settings.batch_size)
    it = settings.train_iterations
    iterations = counts["train"] if it == "converge" else it
    step = _step_seconds(price["step"], iterations, counts if it == "converge" else None)
    evaluation = 0.0
    if price["eval"] is not None:
        per_row = counts.get("eval_seconds_per_row")  # the evaluation timed whole, if it was
        if per_row is not None:
            evaluation = price["eval_rows"] * per_row
        else:
            evaluation = _solve_seconds(price["eval"], price["eval_rows"], counts["eval"])
    epochs = range(1, settings.epochs + 1)
    evaluated = sum(evaluation_due(e, settings.eval_every, settings.epochs) for e in epochs)
    total = settings.epochs * n_batches * step + evaluated * evaluation
    pretrain, own_counts = 0.0, counts.get("pretrain", {})
    layers = range(1, len(price.get("pretrain", [])) + 1)
    for layer, rbm_step in zip(layers, price.get("pretrain", []), strict=True):
        own = own_counts.get(layer)
        step_rbm = _step_seconds(rbm_step, *((own["train"], own) if own else (iterations,)))
        pretrain += spec["pretrain"]["epochs"] * (n_batches * step_rbm + evaluation)
    return {
        "seconds": total + pretrain,
        "epochs": settings.epochs,
        "n_rows": price["n_rows"],
        "batch_size": settings.batch_size,
        "solver": _solver_label(settings),
        "inference": settings.inference,
        "train_iterations": iterations,
        "train_sweeps": counts.get("train_sweeps") if it == "converge" else None,
        "train_row_sweeps": counts.get("train_row_sweeps") if it == "converge" else None,
        "eval_rows": price.get("eval_rows"),
        "eval_iterations": counts["eval"],
        "seconds_per_step": step,
        "eval_seconds_per_epoch": evaluation,
        "evaluated_epochs": evaluated,
        "pretrain_seconds": pretrain,
        "pretrain_counted_on_own": [layer for layer in layers if layer in own_counts],
        "counted_on": counts["source"],
        "priced_on": price.get("priced_on"),
        "data": price["data"],
    }


def job_seconds(meas: Measurements, cfg: dict, job) -> tuple[float, dict]:
    """Seconds of one job of ``paper_jobs`` and what they are made of: its work and its start
    (``start``, ``paper_prices.job_start_price``: what a job pays before its work, which a
    small job's time is mostly made of)."""
    seconds, detail = _work_seconds(meas, cfg, job)
    return seconds + meas.start, {**detail, "start": meas.start}


def _work_seconds(meas: Measurements, cfg: dict, job) -> tuple[float, dict]:

    models = cfg["models"]
    spec = models.get(job.model) if job.model else None
    if job.kind == "train":
        detail = train_seconds(meas, job.model, spec)
        return detail["seconds"], detail
    if job.kind == "harvest":
        cost = meas.harvest[job.model]
        return cost["inits"] * cost["seconds_per_init"], cost
    if job.kind in ("score_epochs", "score_final"):
        part = SCORE_PARTS[job.kind]
        section = cfg["likelihood"][part]
        parts = meas.score(part, spec["hidden"][0]["units"])
        reused = not _score_settings(cfg, job)[1]
        counts = meas.counts[job.model]
        timed = counts.get(f"score_tap_seconds_per_row_{part}")
        if timed is not None:
            tap_s = section["tap_inits"] * timed
        else:
            eval_price = meas.training(spec, job.model)["eval"]
            tap_s = _solve_seconds(eval_price, section["tap_inits"], counts["eval"])
        per = parts["ais"] + parts["pl"] + (0.0 if reused else tap_s)
        n = 1
        if part == "fig12":
            n = spec["epochs"] if section["epochs"] == "all" else len(section["epochs"])
        return n * per, {"checkpoints": n, **parts, "tap_reused": reused, "tap_if_solved": tap_s}
    if job.kind == "exact_curve":
        exact = cfg["figures"]["fig3"]["exact"]
        n = len(exact["epochs"])
        # AIS beside the enumeration at the same epochs, where the config asks for it
        ais = meas.ais(exact["ais"], spec["hidden"][0]["units"]) if exact.get("ais") else 0.0
        per = meas.exact_epoch + ais
        return n * per, {"epochs": n, "seconds_per_epoch": per, "ais_seconds_per_epoch": ais}
    if job.kind == "denoise_bsc":
        return meas.denoise[job.model]["seconds"], meas.denoise[job.model]
    if job.kind == "denoise_baselines":
        return meas.baselines, {}
    if job.kind == "deep_timing":
        return meas.timing, {}
    if job.kind == "deep_curve":
        deep = cfg["deep"]
        if job.model in deep["fig10"]["models"]:
            fig10 = deep["fig10"]
            units, n_images = spec["hidden"][0]["units"], fig10["n_images"]
            per = n_images * meas.pl_image(units, fig10["pl_sites"], n_images)
            return spec["epochs"] * per, {"measure": "pl", "seconds_per_epoch": per}
        fig11 = deep["fig11"]
        price = meas.curve_solve(spec)
        solve = _solve_seconds(price, fig11["tap_inits"], meas.counts[job.model]["curve"], False)
        scored = (fig11["n_train"] + fig11["n_test"]) * price["fixed"]
        per = solve + scored
        return spec["epochs"] * per, {"measure": "tap", "seconds_per_epoch": per}
    raise ValueError(f"no price for job kind {job.kind!r}")


def project(meas: Measurements, cfg: dict, targets=PROFILE_TARGETS) -> dict:
    """Per job of ``targets`` its projected hours (``jobs_hours``; names: ``paper_jobs``), their
    sum, the longest chain and the wall hours on 2 cores (``schedule_hours``), all with and
    without ``LEFT_OUT``'s jobs (training and curve)."""
    jobs = profile_jobs(cfg, targets)
    hours, detail = {}, {}
    for job in jobs:
        seconds, detail[job.name] = job_seconds(meas, cfg, job)
        hours[job.name] = seconds / 3600
    kept = [j for j in jobs if j.model != LEFT_OUT]
    return {
        "jobs_hours": dict(sorted(hours.items(), key=lambda kv: -kv[1])),
        "detail": detail,
        "serial_hours": sum(hours.values()),
        "longest_chain_hours": longest_chain_hours(jobs, hours),
        "wall_hours_2_cores": schedule_hours(jobs, hours, 2),
        "without_adatap100": {
            "left_out": LEFT_OUT,
            "serial_hours": sum(hours[j.name] for j in kept),
            "longest_chain_hours": longest_chain_hours(kept, hours),
            "wall_hours_2_cores": schedule_hours(kept, hours, 2),
        },
    }


def _with_fig10_epochs(cfg: dict, epochs: int) -> dict:
    cfg = copy.deepcopy(cfg)
    for m in cfg["deep"]["fig10"]["models"]:
        cfg["models"][m]["epochs"] = epochs
    return cfg


def _with_fig11_size(cfg: dict, size: tuple[int, int, int]) -> dict:
    units, joint, pre = size
    cfg = copy.deepcopy(cfg)
    for m in cfg["deep"]["fig11"]["models"]:
        spec = cfg["models"][m]
        spec["hidden"] = [{**layer, "units": units} for layer in spec["hidden"]]
        spec["epochs"] = joint
        spec["pretrain"] = {**spec["pretrain"], "epochs": pre}
    return cfg


def _largest(lo: int, hi: int, fits) -> int | None:
    """The largest n in [lo, hi] with ``fits(n)``, for ``fits`` true up to some n and false
    above (bisection); None if not even ``lo`` fits."""
    if not fits(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def _wall(meas: Measurements, cfg: dict) -> float:
    return project(meas, cfg)["without_adatap100"]["wall_hours_2_cores"]


def _fig10_hours(meas: Measurements, cfg: dict) -> float:
    """Summed hours of Fig. 10's jobs but ``LEFT_OUT``'s (training, curves, timing)."""
    models = set(cfg["deep"]["fig10"]["models"]) - {LEFT_OUT}
    hours = project(meas, cfg)["jobs_hours"]
    names = {f"train/{m}" for m in models} | {f"deep/curve_{m}" for m in models} | {"deep/timing"}
    return sum(h for n, h in hours.items() if n in names)


def choose_fig10_epochs(meas: Measurements, cfg: dict, smallest_fig11=FIG11_SMALLEST) -> dict:
    """The most epochs in ``FIG10_EPOCHS`` for Fig. 10 whose jobs (without ``LEFT_OUT``) take at
    most half of the core-hours the other jobs leave in the budget (2 x ``BUDGET_HOURS`` minus
    their sum; the other half is Fig. 11's) and keep the projection, with Fig. 11 at
    ``smallest_fig11``, within ``BUDGET_HOURS`` on 2 cores; the range's low end, with ``fits``
    False, when none does."""
    base = _with_fig11_size(cfg, smallest_fig11)
    deep = {*cfg["deep"]["fig10"]["models"], *cfg["deep"]["fig11"]["models"]}
    hours = project(meas, base)["jobs_hours"]
    deep_jobs = {f"train/{m}" for m in deep} | {f"deep/curve_{m}" for m in deep} | {"deep/timing"}
    others = sum(h for n, h in hours.items() if n not in deep_jobs)
    share = (2 * BUDGET_HOURS - others) / 2

    def fits(epochs: int) -> bool:
        trial = _with_fig10_epochs(base, epochs)
        return _fig10_hours(meas, trial) <= share and _wall(meas, trial) <= BUDGET_HOURS

    epochs = _largest(*FIG10_EPOCHS, fits)
    out = {"epochs": epochs or FIG10_EPOCHS[0], "fits": epochs is not None}
    trial = _with_fig10_epochs(base, out["epochs"])
    out.update(share_hours=share, others_hours=others, fig10_hours=_fig10_hours(meas, trial))
    out["wall_hours_2_cores"] = _wall(meas, trial)
    return out


def choose_fig11_size(meas: Measurements, cfg: dict) -> dict:
    """Fig. 11's size: the first of ``FIG11_UNITS`` at which some joint epochs in
    ``FIG11_JOINT`` (pretraining ``FIG11_PRETRAIN``) keep the projection (Fig. 10 as in ``cfg``)
    within ``BUDGET_HOURS`` on 2 cores without ``LEFT_OUT``, with the most joint epochs that do;
    ``FIG11_SMALLEST``, with ``fits`` False, when none does."""
    tried = []
    for units in FIG11_UNITS:

        def fits(joint: int, units=units) -> bool:
            size = (units, joint, FIG11_PRETRAIN)
            return _wall(meas, _with_fig11_size(cfg, size)) <= BUDGET_HOURS

        joint = _largest(*FIG11_JOINT, fits)
        smallest = (units, FIG11_JOINT[0], FIG11_PRETRAIN)
        tried.append({"units": units, "wall_hours_at_20_epochs": _wall(
            meas, _with_fig11_size(cfg, smallest)
        )})  # fmt: skip
        if joint is not None:
            size = [units, joint, FIG11_PRETRAIN]
            wall = _wall(meas, _with_fig11_size(cfg, tuple(size)))
            return {"size": size, "fits": True, "wall_hours_2_cores": wall, "tried": tried}
    wall = _wall(meas, _with_fig11_size(cfg, FIG11_SMALLEST))
    return {"size": list(FIG11_SMALLEST), "fits": False, "wall_hours_2_cores": wall, "tried": tried}


def bench_paper_profile(
    device,
    quick: bool,
    checkpoints: Path | None = None,
    counts_from: Path | None = None,
    overlays=(),
    targets=PROFILE_TARGETS,
) -> dict:
    """Projected hours of every job of ``targets`` (default: ``PROFILE_TARGETS``, the whole
    first paper) under workflow/config/paper.yaml (with ``overlays`` laid over it: a run's
    further config files, such as paper_cpu.yaml), and, for the whole paper, the Fig. 10 epochs
    and Fig. 11 size the budget allows (``BUDGET_HOURS`` on 2 cores without ``LEFT_OUT``;
    ``chosen`` and ``at_chosen`` are None for a part of it: the budget is the whole paper's).

    Each job is priced with the settings its config entry gives (solver, tolerances, caps, data,
    unit priors, rows, epochs): training (minibatch steps, per-epoch evaluation, pretraining),
    harvests, scoring, the exact curve, the denoising, Fig. 10's and Fig. 11's curves and
    Fig. 10's timing; how, in ``paper_prices`` and ``paper_counts``. Costs are CPU seconds of one
    torch thread, so the projection is for idle cores. ``chosen`` holds the choices and
    ``at_chosen`` the projection with them set. With ``counts_from`` (a run's
    ``results/{run}/models``) the iterations are counted on that run's own checkpoints where it
    has them (``paper_counts.run_checkpoint_sets``).
    """
    if torch.device(device).type != "cpu":
        raise ValueError(f"paper_profile prices CPU time of one thread, not {device}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # CPU time of one thread = idle-core wall time (see cpu_seconds)
    try:
        return _paper_profile(
            quick, Path(checkpoints or CHECKPOINTS), counts_from, overlays, tuple(targets)
        )
    finally:
        torch.set_num_threads(threads)


def _paper_profile(
    quick: bool,
    checkpoints: Path,
    counts_from: Path | None = None,
    overlays=(),
    targets=PROFILE_TARGETS,
) -> dict:
    unknown = sorted(set(targets) - set(PROFILE_TARGETS))
    if unknown:
        raise ValueError(f"no such target(s) {unknown}; choose from {list(PROFILE_TARGETS)}")
    cfg = _paper_config(overlays)
    meas = Measurements(cfg, checkpoints, quick, counts_from, targets)
    as_configured = project(meas, cfg, targets)
    chosen, at_chosen = None, None
    if set(targets) == set(PROFILE_TARGETS):
        fig10 = choose_fig10_epochs(meas, cfg)
        chosen_cfg = _with_fig10_epochs(cfg, fig10["epochs"])
        fig11 = choose_fig11_size(meas, chosen_cfg)
        chosen_cfg = _with_fig11_size(chosen_cfg, tuple(fig11["size"]))
        chosen, at_chosen = {"fig10": fig10, "fig11": fig11}, project(meas, chosen_cfg)
    faces = cfg["data"]["faces"]["cbcl_archive"]
    return {
        "name": "paper_profile",
        "seconds": as_configured["serial_hours"] * 3600,
        "gflops": None,
        "ratio_to_matmul": None,
        "targets": list(targets),
        **as_configured,
        "chosen": chosen,
        "at_chosen": at_chosen,
        "counts": {"models": meas.counts, "harvest": meas.harvest},
        "faces": "CBCL" if faces else "the substitute (data.faces.cbcl_archive is null)",
        "goal_hours": BUDGET_HOURS,
        "basis": "CPU seconds of one torch thread (idle-machine projection)",
        "counts_from": str(counts_from) if counts_from else None,
        "overlays": [str(f) for f in overlays],
    }
