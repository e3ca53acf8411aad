"""``tapmachine progress``: how far a run's training jobs are, read from their checkpoints, and
the stage and ETA of every job at work, read from its log, and the jobs the newest Snakemake run
lost (``running_jobs``, a module of its own).

A paper-size run takes hours and, where sessions end, several starts. Snakemake's dry run
(``snakemake ... -n``) lists the jobs still to run, not the epochs inside a job that resumes from
its checkpoints. For every model of a run that has begun training (``results/<run>/models/*``
and the DBMs under ``results/<run>/ucd/dbm/*/*``) this reads ``model.pt`` once the job has
finished, else its latest checkpoint, and reports the epochs done of the total, the median wall
time of its latest epochs and what the remaining epochs take at that pace, in wall-clock hours
and in CPU hours. On a machine shared with other jobs the wall-clock pace is the share this job
got, so its hours overstate what the work costs; the CPU hours (each epoch's
``epoch_cpu_seconds``, all of the job's threads) do not, and their sum over the jobs divided by
the cores is the wall time left on idle cores (the table's last line gives it, or the longest
job's CPU hours where that is more: one thread a job). Models with no checkpoint yet are not
listed (the dry run lists their jobs); a deep model still pretraining is listed by its
pretraining layer at work (``pretraining_progress``).

A job resumed with another ``retry_damping`` (or second-pass tolerance) first evaluates its
earlier epochs again (``train.resume.reevaluate_history``), rewriting their checkpoints from epoch 1
on; while that pass runs, the epochs whose checkpoint still holds the old evaluation are
counted and priced at the original evaluation's pace (epoch minus training seconds: a lower
bound, the second pass makes an evaluation longer). A pass that has not begun (its job not yet
started) is seen only with the run's config (``--configfile``, the files given to snakemake):
every epoch whose checkpoint was evaluated otherwise than the config's settings evaluate
(``train.expected_signature``) is then counted, started or not. The config also gives each
model's epochs: a finished model that an overlay trains on (more epochs than its ``model.pt``
holds, as ``faces_substitute.yaml`` does) is counted to the config's epochs, not as finished.

One module: every part reads the same checkpoints and history rows to price what is left.
"""

from __future__ import annotations

import math
import os
import statistics
from pathlib import Path

from tapmachine.io.schema import SCHEMA_FILE as SCHEMA
from tapmachine.pipeline.stages.common import UsageError
from tapmachine.pipeline.stages.running_jobs import (
    failed_snakemake_jobs,
    format_failed,
    format_running,
    running_jobs,
    unfinished_snakemake_jobs,
)

#: Epochs whose median time sets the pace of what remains (the latest ones: TAP iterations, and
#: so an epoch's cost, grow as the machine trains; the median, since an epoch during which the
#: run was paused, e.g. SIGSTOP beside other work, counts the pause in its wall time).
PACE_EPOCHS = 5


def _pending_reevaluation(ckpt_dir: Path, latest) -> list[dict]:
    """History rows of the epochs a running re-evaluation pass has still to evaluate again: those
    whose checkpoint's evaluation (``train.evaluation_signature``: retry_damping and its
    tolerance) is not the one the pass has written into the oldest evaluated checkpoint's."""
    from tapmachine.io.modelfile import checkpoint_epochs
    from tapmachine.train import evaluation_signature, latest_evaluation

    def value(ckpt):
        return evaluation_signature(ckpt.settings, latest_evaluation(ckpt.history))

    epochs = checkpoint_epochs(ckpt_dir)
    first = None  # the oldest checkpoint that records an evaluation (eval.every skips some)
    for epoch in epochs[:-1]:
        ckpt = _checkpoint_if_kept(ckpt_dir / f"epoch_{epoch}.pt")
        if ckpt is not None and latest_evaluation(ckpt.history):
            first = ckpt
            break
    if first is None or value(first) == value(latest):
        return []  # no pass under way (one rewrites the latest checkpoint last)
    return _stale_epochs(ckpt_dir, latest, value(first))


def _stale_epochs(ckpt_dir: Path, latest, expected: tuple) -> list[dict]:
    """History rows of the epochs whose checkpoint's evaluation is not ``expected`` (the
    ``train.expected_signature`` of the run's config): those its job evaluates again. None
    where the latest checkpoint's is ``expected``: its job reads only that one
    (``train.resume.evaluated_alike``: a pass rewrites the latest last), so the others, a
    thinned run's hundreds, are not read."""
    from tapmachine.io.modelfile import checkpoint_epochs
    from tapmachine.train import evaluated, evaluation_signature, latest_evaluation

    last = latest_evaluation(latest.history)
    if not last or evaluation_signature(latest.settings, last) == expected:
        return []
    rows = {row["epoch"]: row for row in latest.history}
    stale = []
    for epoch in checkpoint_epochs(ckpt_dir):
        ckpt = (
            latest if epoch == latest.epoch else _checkpoint_if_kept(ckpt_dir / f"epoch_{epoch}.pt")
        )
        if ckpt is None:
            continue
        row = ckpt.history[-1] if ckpt.history else {}
        if evaluated(row) and evaluation_signature(ckpt.settings, row) != expected:
            stale.append(rows.get(epoch, {}))
    return stale


def run_config(config_files: list, schema: str | Path = SCHEMA) -> dict:
    """The run's config: config.yaml overlaid by ``config_files`` as given to ``snakemake
    --configfile``, validated against ``schema``."""
    from tapmachine.pipeline.configuration import ConfigError, load_config, validate

    for path in config_files:
        if not Path(path).is_file():
            raise UsageError(f"config file {path} does not exist")
    if not Path(schema).is_file():
        raise UsageError(f"{schema} not found: run from the workflow's directory")
    config = load_config(config_files, schema=schema)
    try:
        validate(config, schema)
    except ConfigError as err:
        raise UsageError(str(err)) from None
    return config


def expected_evaluations(config: dict) -> dict[str, tuple]:
    """Each model's ``train.expected_signature`` under the run's ``config`` (``run_config``)."""
    from tapmachine.train import TrainSettings, expected_signature

    return {
        name: expected_signature(TrainSettings.from_spec(spec).solver_settings)
        for name, spec in config["models"].items()
    }


def configured_epochs(config: dict) -> dict[str, int]:
    """Each model's epochs under the run's ``config`` (``run_config``)."""
    from tapmachine.train import TrainSettings

    return {name: TrainSettings.from_spec(spec).epochs for name, spec in config["models"].items()}


def hidden_layers(config: dict) -> dict[str, int]:
    """Each model's hidden layers under the run's ``config`` (``run_config``)."""
    return {name: len(spec["hidden"]) for name, spec in config["models"].items()}


def _evaluation_seconds(rows: list[dict]) -> float:
    """Mean seconds of the rows' evaluations (epoch minus training time); NaN without times."""
    times = [
        r["epoch_seconds"] - r["train_seconds"]
        for r in rows
        if "epoch_seconds" in r and "train_seconds" in r
    ]
    return sum(times) / len(times) if times else math.nan


def _rising_k_seconds(
    history: list[dict], schedule: dict, done: int, total: int, key: str = "epoch_seconds"
) -> float:
    """Seconds of epochs ``done + 1`` to ``total`` of a CD-k whose k rises
    (``train.update.sampling_steps_at``), each priced by the line a + b k through the median
    ``key`` (``epoch_seconds``, or ``epoch_cpu_seconds``) of each k the history has seen (least
    squares); with one k seen, that k's median scaled by k / k_seen, an upper bound (an epoch's
    evaluation and data handling do not grow with k)."""
    from tapmachine.train.update import sampling_steps_at

    by_k: dict[int, list[float]] = {}
    for row in history:
        if key in row:
            k = row.get("sampling_steps", sampling_steps_at(schedule, row["epoch"]))
            by_k.setdefault(int(k), []).append(row[key])
    if not by_k:
        return math.nan
    ks = sorted(by_k)
    medians = [statistics.median(by_k[k]) for k in ks]
    if len(ks) == 1:
        a, b = 0.0, medians[0] / ks[0]
    else:
        k_mean, t_mean = statistics.fmean(ks), statistics.fmean(medians)
        b = sum((k - k_mean) * (t - t_mean) for k, t in zip(ks, medians, strict=True))
        b /= sum((k - k_mean) ** 2 for k in ks)
        a = t_mean - b * k_mean
    return sum(a + b * sampling_steps_at(schedule, e) for e in range(done + 1, total + 1))


def model_progress(
    model_dir: str | Path,
    expected: tuple | None = None,
    epochs: int | None = None,
    ckpt_dir: str | Path | None = None,
) -> dict | None:
    """``{model, epochs_done, epochs_total, finished, extended, epoch_seconds, reevaluating,
    remaining_hours, remaining_cpu_hours, converged_step_share, row_iterations,
    epoch_fraction}`` of the model trained in ``model_dir``; None where training has kept nothing
    yet (no checkpoint, nor its first epoch part-way). ``epochs``: the run's config's epochs for
    the model, where known; a total beyond what its checkpoints or ``model.pt`` say (an overlay
    that trains a model on) is counted to it, and a finished model it extends is ``extended``,
    not ``finished``. ``epoch_fraction`` is the share of the
    next epoch's minibatches done, as training last kept them part-way through it
    (``checkpoints/in_progress.pt``; 0 without one), and the hours left count only the rest of
    that epoch.

    ``epoch_seconds`` is the median ``epoch_seconds`` of the latest ``PACE_EPOCHS`` epochs (NaN if
    the history has no times), ``reevaluating`` the epochs a running re-evaluation pass has
    still to evaluate (with ``expected``, the signature the run's config gives the model: every
    epoch evaluated otherwise, ``_stale_epochs``), ``remaining_hours`` the epochs left at that
    pace plus those evaluations at their original pace (0 once finished); for a CD-k whose k
    rises, the epochs left at their own k (``_rising_k_seconds``, on the line through the
    epochs' CPU times where they have them, turned into wall time by the latest epochs' CPU
    share: their wall times move with the machine's load). ``remaining_cpu_hours`` is the
    same time in CPU hours: ``remaining_hours`` times the ratio of the median CPU to the median
    wall time of the same latest epochs (NaN where they recorded no CPU time; 0 once
    finished). ``converged_step_share`` is
    the share of training steps so far with at least 99% of their rows converged (the mean of the
    epochs' ``train_converged_step_share``: Fig. 3's ``training_steps_converged``, goal 0.99) and
    ``row_iterations`` the latest epoch's mean solver iterations per row in a training step (what
    an epoch's cost grows with); both NaN for training that does not solve to convergence.
    ``ckpt_dir``: read the checkpoints there instead of ``model_dir``'s, and no ``model.pt``
    (a deep model's pretraining layer, ``pretraining_progress``).
    """
    from tapmachine.io.modelfile import ModelFile, checkpoint_dir

    model_dir = Path(model_dir)
    final = model_dir / "model.pt"
    kept = Path(ckpt_dir) if ckpt_dir is not None else checkpoint_dir(model_dir)
    pending: list[dict] = []
    if ckpt_dir is None and final.exists():
        record = ModelFile.load(final)
        history, total, finished = record.history, record.n_epochs, True
        settings = record.spec
    else:
        ckpt = _latest_checkpoint(kept)
        if ckpt is None:  # perhaps part-way through its first epoch
            ckpt = _first_epoch_in_progress(kept)
            if ckpt is None:
                return None
        else:
            if expected is None:
                pending = _pending_reevaluation(kept, ckpt)
            else:
                pending = _stale_epochs(kept, ckpt, expected)
        history, total, finished = ckpt.history, int(ckpt.settings.get("epochs", 0)), False
        settings = ckpt.settings
    extended = finished and epochs is not None and epochs > total
    total = max(total, epochs or 0)
    finished = finished and not extended
    done = len(history)
    times = [row["epoch_seconds"] for row in history[-PACE_EPOCHS:] if "epoch_seconds" in row]
    pace = statistics.median(times) if times else math.nan
    fraction = 0.0 if finished else _epoch_fraction(kept, done)
    left = 0 if finished else max(total - done - fraction, 0)
    seconds = left * pace if left else 0.0
    cpu = [row["epoch_cpu_seconds"] for row in history[-PACE_EPOCHS:] if "epoch_cpu_seconds" in row]
    cpu_share = statistics.median(cpu) / pace if cpu and times and pace > 0 else math.nan
    k = settings.get("sampling_steps") if not finished else None
    if left and isinstance(k, dict):
        # The line through CPU times where the history has them: an epoch's wall time is its
        # share of a shared machine's cores, which moves with the load, not with k.
        if cpu_share > 0:
            cpu_left = _rising_k_seconds(history, k, done, total, "epoch_cpu_seconds")
            seconds = cpu_left / cpu_share
        else:
            seconds = _rising_k_seconds(history, k, done, total)
    if pending:
        seconds += len(pending) * _evaluation_seconds(pending)
    return {
        "model": model_dir.name,
        "epochs_done": done,
        "epochs_total": max(total, done),
        "finished": finished,
        "extended": extended,
        "epoch_seconds": pace,
        "reevaluating": len(pending),
        "remaining_hours": seconds / 3600.0,
        "remaining_cpu_hours": 0.0 if seconds == 0 else seconds * cpu_share / 3600.0,
        "converged_step_share": _mean_of(history, "train_converged_step_share"),
        "row_iterations": (history or [{}])[-1].get("train_mean_iterations", math.nan),
        "epoch_fraction": fraction,
    }


def pretraining_progress(
    model_dir: str | Path, layers: int | None = None, joint_epochs: int | None = None
) -> dict | None:
    """``model_progress`` of a deep model that is still pretraining (Alg. 4: no checkpoint of
    its joint training yet), for the layer at work: the latest ``pretrain/layer_{l}`` that has
    kept anything. ``stage`` says which layer of how many (``layers``, the model's hidden
    layers, where the run's config gives them; else the layers begun) and, where given, the
    joint epochs that follow. Its hours left price that layer's rest alone: the layers after it
    are of other sizes, and the joint epochs have no pace yet. None without pretraining."""
    pre = Path(model_dir) / "pretrain"
    begun = sorted(
        (p for p in pre.glob("layer_*") if p.is_dir() and p.name[6:].isdigit()),
        key=lambda p: int(p.name[6:]),
    )
    for layer_dir in reversed(begun):
        row = model_progress(model_dir, ckpt_dir=layer_dir)
        if row is None:
            continue
        of = max(layers or 0, len(begun))
        stage = f"pretraining layer {layer_dir.name[6:]} of {of}"
        if joint_epochs:
            stage += f", then {joint_epochs} joint epochs"
        return {**row, "model": Path(model_dir).name, "stage": stage}
    return None


def _latest_checkpoint(ckpt_dir: Path, tries: int = 3):
    """The ``Checkpoint`` of the highest epoch in ``ckpt_dir`` (None if there is none), read
    beside a training that writes the next one and then removes those it does not keep
    (``checkpoint_every``): a file listed and gone before it was read is listed again."""
    from tapmachine.io.modelfile import Checkpoint, ModelFileError, latest_checkpoint

    for attempt in range(tries):
        latest = latest_checkpoint(ckpt_dir)
        if latest is None:
            return None
        try:
            return Checkpoint.load(latest)
        except ModelFileError:
            if latest.exists() or attempt == tries - 1:
                raise
    return None


def _checkpoint_if_kept(path: Path):
    """The ``Checkpoint`` at ``path``; None where training removed it after it was listed (the
    newest checkpoint is kept until the next is written, then dropped unless ``checkpoint_every``
    keeps it)."""
    from tapmachine.io.modelfile import Checkpoint, ModelFileError

    try:
        return Checkpoint.load(path)
    except ModelFileError:
        if path.exists():
            raise
        return None


def _kept_in_progress(ckpt_dir: Path):
    """The ``EpochInProgress`` training kept in ``ckpt_dir``; None if none or unreadable."""
    from tapmachine.io.modelfile import EpochInProgress, ModelFileError, in_progress_path

    path = in_progress_path(ckpt_dir)
    try:
        return EpochInProgress.load(path) if path.exists() else None
    except ModelFileError:
        return None


def _first_epoch_in_progress(ckpt_dir: Path):
    """The state kept part-way through a model's first epoch (its ``Checkpoint``: no history
    yet, the settings), or None."""
    within = _kept_in_progress(ckpt_dir)
    return within.checkpoint if within is not None and within.epoch == 0 else None


def _epoch_fraction(ckpt_dir: Path, done: int) -> float:
    """Share of epoch ``done + 1``'s minibatches that training has kept part-way through it; 0
    where it kept none (or of another epoch, or unreadable)."""
    within = _kept_in_progress(ckpt_dir)
    if within is None or within.epoch != done:
        return 0.0
    batch = int(within.checkpoint.settings.get("batch_size") or 0)
    n_batches = max(1, within.order.numel() // batch) if batch > 0 else 0
    return min(within.batches / n_batches, 1.0) if n_batches else 0.0


def _mean_of(history: list[dict], key: str) -> float:
    """Mean of ``key`` over the epochs that have it; NaN where none has."""
    values = [row[key] for row in history if key in row]
    return statistics.fmean(values) if values else math.nan


def run_progress(
    results: str | Path,
    expected: dict[str, tuple] | None = None,
    epochs: dict[str, int] | None = None,
    layers: dict[str, int] | None = None,
) -> list[dict]:
    """``model_progress`` of every model of the run in ``results`` that has begun training (a
    deep model still pretraining: ``pretraining_progress``); DBMs are named
    ``{dataset}/{model}``. ``expected``, ``epochs``, ``layers``: ``expected_evaluations``,
    ``configured_epochs`` and ``hidden_layers`` of the run's config, by model name."""
    results = Path(results)
    if not results.is_dir():
        raise UsageError(f"{results} is not a run's results folder (results/<run>)")
    rows = []
    for model_dir in sorted(p for p in (results / "models").glob("*") if p.is_dir()):
        name = model_dir.name
        row = model_progress(model_dir, (expected or {}).get(name), (epochs or {}).get(name))
        if row is None:
            row = pretraining_progress(
                model_dir, (layers or {}).get(name), (epochs or {}).get(name)
            )
        if row is not None:
            rows.append(row)
    for model_dir in sorted(p for p in (results / "ucd" / "dbm").glob("*/*") if p.is_dir()):
        row = model_progress(model_dir)
        if row is not None:
            rows.append({**row, "model": f"{model_dir.parent.name}/{model_dir.name}"})
    return rows


def format_progress(rows: list[dict], cores: int | None = None, not_started=()) -> str:
    """The rows as an aligned text table, with the remaining hours summed (one job after the
    other): wall-clock hours at each job's recent pace, and CPU hours; with ``cores``, also the
    least wall time the training left takes on that many idle cores (``least_wall_hours``).
    ``not_started``: models of the run's config without a checkpoint, named on a last line
    (they have no pace yet, so their hours are not in the sums)."""
    waiting = ""
    if not_started:
        waiting = (
            f"not started (no checkpoint yet; not in the hours above): {', '.join(not_started)}\n"
        )
    if not rows:
        return "no model has a checkpoint yet\n" + waiting
    header = (
        f"{'model':<28} {'epochs':>9} {'s/epoch':>8} {'hours left':>10} {'CPU h left':>10} "
        f"{'conv. steps':>11} {'sweeps/row':>10}  state"
    )
    lines = [header]
    for r in rows:
        state = "finished" if r["finished"] else "in progress"
        if r.get("stage"):
            state = f"{r['stage']} (hours left: this layer's)"
        if r.get("extended"):
            state = "to train on (the config asks for more epochs)"
        if r.get("reevaluating"):
            n = r["reevaluating"]
            state += f" (evaluating {n} earlier epoch{'s' if n > 1 else ''} again first)"
        pace = _pace_text(r["epoch_seconds"])
        epochs = f"{r['epochs_done']}/{r['epochs_total']}"
        if r.get("epoch_fraction") == 1.0:  # every minibatch done: the evaluation is left
            state += f" (epoch {r['epochs_done'] + 1} trained, its evaluation left)"
        elif r.get("epoch_fraction"):
            state += f" ({r['epoch_fraction']:.0%} of epoch {r['epochs_done'] + 1})"
        share = _or_na(r.get("converged_step_share", math.nan), "{:.2%}")
        sweeps = _or_na(r.get("row_iterations", math.nan), "{:.1f}")
        cpu = _or_na(r.get("remaining_cpu_hours", math.nan), "{:.2f}")
        hours = _or_na(r["remaining_hours"], "{:.2f}")
        lines.append(
            f"{r['model']:<28} {epochs:>9} {pace:>8} {hours:>10} {cpu:>10} "
            f"{share:>11} {sweeps:>10}  {state}"
        )
    left = _sum_known(r["remaining_hours"] for r in rows)
    cpu_left = _sum_known(r.get("remaining_cpu_hours", math.nan) for r in rows)
    lines.append(
        f"{'total (one after the other)':<28} {'':>9} {'':>8} {left:>10.2f} {cpu_left:>10.2f}"
    )
    if cores:
        least = least_wall_hours([r.get("remaining_cpu_hours", math.nan) for r in rows], cores)
        lines.append(
            f"on {cores} idle core{'s' if cores > 1 else ''}, one thread a job: at least "
            f"{least:.1f} h of training left (its CPU hours over the cores, or the longest job's)"
        )
    return "\n".join(lines) + "\n" + waiting


def least_wall_hours(cpu_hours, cores: int) -> float:
    """A lower bound of the wall hours that jobs of ``cpu_hours`` CPU hours left (NaN: unknown,
    not counted) take on ``cores`` idle cores, each job on one thread: their sum spread evenly
    over the cores, or the longest job, whose epochs run one after another, whichever is more."""
    known = [h for h in cpu_hours if not math.isnan(h)]
    return max(sum(known) / cores, max(known, default=0.0))


def _pace_text(seconds: float) -> str:
    """Seconds an epoch: whole seconds from 10 s, two significant figures below (a sub-second
    epoch would otherwise read "0")."""
    if math.isnan(seconds):
        return "n/a"
    return f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.2g}"


def _sum_known(values) -> float:
    """Sum of the values that are not NaN (a model without times adds nothing)."""
    return sum(v for v in values if not math.isnan(v))


def _or_na(value: float, spec: str) -> str:
    return "n/a" if math.isnan(value) else spec.format(value)


def progress(args) -> None:
    expected = epochs = layers = None
    if args.configfile:
        config = run_config(args.configfile)
        expected, epochs = expected_evaluations(config), configured_epochs(config)
        layers = hidden_layers(config)
    rows = run_progress(args.results, expected, epochs, layers)
    not_started = sorted(set(epochs or {}) - {r["model"] for r in rows})
    print(format_progress(rows, args.cores, not_started), end="")
    logs = Path(args.logs) if args.logs else Path("logs") / Path(args.results).name
    running = running_jobs(logs, args.active_minutes, unfinished=unfinished_snakemake_jobs())
    if running:
        print()
        print(format_running(running), end="")
    if failed := format_failed(failed_snakemake_jobs()):
        print()
        print(failed, end="")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "progress",
        help="epochs done and hours left of a run's training jobs (checkpoints), the stage "
        "and ETA of every running job (their logs), and the jobs the newest snakemake run lost",
    )
    p.add_argument("--results", required=True, help="a run's results folder (results/<run>)")
    p.add_argument(
        "--configfile",
        nargs="+",
        default=None,
        help="the run's config files, as given to snakemake: also count the earlier epochs a "
        "job not yet started will evaluate again, and the epochs an overlay adds to a finished "
        "model (run from the workflow's directory)",
    )
    p.add_argument(
        "--logs", default=None, help="the run's job logs (default logs/<run>, beside results/)"
    )
    p.add_argument(
        "--cores",
        type=int,
        default=os.cpu_count(),
        help="the cores the run has, for the least wall time its training still takes (default: "
        "this machine's)",
    )
    p.add_argument(
        "--active-minutes",
        type=float,
        default=15.0,
        help="a job whose log was written within this many minutes counts as running (and, "
        "run from the workflow's directory, that the newest Snakemake run started and has not "
        "finished)",
    )
    p.set_defaults(func=progress)
