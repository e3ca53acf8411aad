"""``tapmachine score``: AIS, TAP and pseudo-likelihood of a model or its checkpoints (App. F);
``tapmachine exact-curve``: Fig. 3's curve computed exactly for an enumerable RBM;
``tapmachine ais-check``: how far a model's AIS estimate moves with more runs, a finer schedule,
other seeds and reverse annealing (``tap_paper.likelihood.ais_check``; a CSV, no tracking).

The library side is ``tap_paper.likelihood``; here the scores are logged to a run of experiment
"likelihood" of their own (step = epoch for checkpoints), tagged ``model_run_id`` = the model's
training run. Nothing is written into the finished training run, so a rerun never adds a second
point at the same step there. The run's record is kept beside the CSV (``<stem>.run.json``).
"""

from __future__ import annotations

import math
from pathlib import Path

from tapmachine.pipeline.stages.common import (
    UsageError,
    add_numeric_args,
    job_kwargs,
    parse_json,
    set_threads,
)


def _record(model_file, kind: str, out_csv):
    """The record of a scoring run ``{model}-{kind}`` (its name set on start), linked to the
    model's training run, the CSV as artifact."""
    from tapmachine.pipeline.tracking.records import RunRecord, source_run

    train_run = source_run(model_file)
    links = {"model_run_id": train_run} if train_run else {}
    return RunRecord("likelihood", "", links=links, artifacts=[out_csv])


def _starter(run, kind: str):
    def on_start(params, tags, *_):
        run.record.name = f"{params['model']}-{kind}"
        return run.start(params, tags)

    return on_start


def score_checkpoints(model_dir, data_path, out_csv, settings, epochs="all", manifest=None, **kw):
    """``likelihood.score_checkpoints`` with each epoch's numbers logged (step = epoch) to a run
    ``{model}-epochs`` of experiment "likelihood"."""
    from tapmachine.io.modelfile import model_path
    from tapmachine.pipeline.tracking.recorder import recording
    from tapmachine.tap_paper import likelihood

    record = _record(model_path(model_dir), "epochs", out_csv)
    with recording(manifest, record, out_csv) as run:

        def on_row(epoch, row):
            run.log(likelihood.tracked_metrics(row), step=epoch)

        rows = likelihood.score_checkpoints(
            model_dir,
            data_path,
            out_csv,
            settings,
            epochs=epochs,
            on_start=_starter(run, "epochs"),
            on_row=on_row,
            **kw,
        )
    return rows


def score_model(model_file, data_path, out_csv, settings, manifest=None, **kw):
    """``likelihood.score_model`` logged to a run ``{model}-final`` of experiment "likelihood"."""
    from tapmachine.pipeline.tracking.recorder import recording
    from tapmachine.tap_paper import likelihood

    with recording(manifest, _record(model_file, "final", out_csv), out_csv) as run:
        row = likelihood.score_model(
            model_file, data_path, out_csv, settings, on_start=_starter(run, "final"), **kw
        )
        run.record.add_metrics(likelihood.tracked_metrics(row))
    return row


def exact_curve(args) -> None:
    """The exact log-likelihood of chosen epochs, logged (step = epoch) to a run
    ``{model}-exact`` of experiment "likelihood"."""
    from tapmachine.io.modelfile import model_path
    from tapmachine.pipeline.tracking.recorder import recording
    from tapmachine.tap_paper import likelihood

    set_threads(args.threads)
    epochs = args.epochs if args.epochs in ("all", "last") else args.epochs.split(",")
    ais = parse_json(args.ais, "--ais") if args.ais else None
    if args.while_training:
        _exact_curve_while_training(args, epochs, ais)
        return
    if args.n_train is not None:
        raise UsageError("--n-train is for --while-training (a finished model records its rows)")
    record = _record(model_path(args.model_dir), "exact", args.out)
    try:
        with recording(args.tracking, record, args.out) as run:
            run.record.name = f"{Path(args.model_dir).name}-exact"
            run.start({"epochs": args.epochs}, {"model": Path(args.model_dir).name})

            def on_row(epoch, row):
                keys = ("exact_ll", "log_z_exact", "tap_ll", "log_z_ais", "ais_z")
                run.log(
                    {k: row[k] for k in keys if math.isfinite(row.get(k, math.nan))}, step=epoch
                )

            likelihood.exact_curve(
                args.model_dir,
                args.data,
                args.out,
                epochs,
                args.device,
                on_row=on_row,
                ais=ais,
                seed=args.seed,
            )
    except (ValueError, FileNotFoundError) as err:
        raise UsageError(f"exact curve of {args.model_dir}: {err}") from err
    print(f"wrote {args.out}")


def _exact_curve_while_training(args, epochs, ais) -> None:
    """``exact-curve --while-training``: the epochs training has written so far, kept for the
    job (``likelihood.partial_path``); nothing logged, no curve written."""
    from tapmachine.tap_paper import likelihood

    try:
        rows = likelihood.exact_curve(
            args.model_dir,
            args.data,
            args.out,
            epochs,
            args.device,
            ais=ais,
            seed=args.seed,
            while_training=True,
            n_train=args.n_train,
        )
    except (ValueError, FileNotFoundError) as err:
        raise UsageError(f"exact curve of {args.model_dir}: {err}") from err
    done = ", ".join(str(row["epoch"]) for row in rows) or "none"
    print(
        f"kept epochs {done} in {likelihood.partial_path(args.out)}; the exact-curve job "
        f"computes the rest and writes {args.out} once training has finished"
    )


def _int_list(text: str, flag: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise UsageError(f"{flag} takes comma-separated integers, not {text!r}") from None


def ais_check(args) -> None:
    """AIS of one parameter set (``model.pt``, or the checkpoint of ``--epoch``) at the baseline
    and with more work, one row per estimate (``likelihood.ais_check_model``), written to
    ``--out``."""
    from tapmachine.io.files import write_csv
    from tapmachine.tap_paper import likelihood
    from tapmachine.tap_paper.likelihood import ais_check as check

    set_threads(args.threads)
    what = Path(args.model_dir).name + ("" if args.epoch is None else f" epoch {args.epoch}")

    def on_row(row):
        print(
            f"{what}: {row['direction']} {row['runs']} runs x {row['n_betas']} temperatures, "
            f"seed {row['seed']}: ln Z {row['log_z']:.3f} +- {row['log_z_stderr']:.3f}, "
            f"test {row['ll_test']:.3f} nats ({row['seconds']:.1f} s)",
            flush=True,
        )

    try:
        settings = check.AISCheckSettings(
            runs=_int_list(args.runs, "--runs"),
            densities=_int_list(args.density, "--density"),
            seeds=args.seeds,
            reverse=not args.no_reverse,
            n_betas=args.n_betas,
        )
        rows = likelihood.ais_check_model(
            args.model_dir, args.data, settings, args.epoch, args.seed, args.device, args.dtype,
            on_row,
        )  # fmt: skip
    except (ValueError, FileNotFoundError) as err:
        raise UsageError(f"ais-check of {args.model_dir}: {err}") from err
    write_csv(rows, args.out)
    print(check.summary(rows))
    print(f"wrote {args.out}")


def score(args) -> None:
    from tapmachine.io.modelfile import ModelFile, model_path
    from tapmachine.tap_paper import likelihood

    set_threads(args.threads)
    section = parse_json(args.spec, "--spec")
    model_dir = Path(args.model_dir)
    spec = ModelFile.load(model_path(model_dir)).spec
    settings = likelihood.ScoreSettings.from_config(section, spec)
    common = dict(
        data_path=args.data,
        out_csv=args.out,
        settings=settings,
        seed=args.seed,
        **job_kwargs(args),
    )
    try:
        if args.epochs is None:
            score_model(model_path(model_dir), **common)
        else:
            epochs = args.epochs
            if epochs not in ("all", "last"):
                epochs = [int(e) for e in epochs.split(",")]
            score_checkpoints(model_dir, epochs=epochs, **common)
    except (ValueError, RuntimeError) as err:
        raise UsageError(f"scoring {model_dir}: {err}") from err
    print(f"wrote {args.out}")


def register(subparsers) -> None:
    s = subparsers.add_parser("score", help="AIS, TAP and pseudo-likelihood of a model (App. F)")
    s.add_argument("--model-dir", required=True, help="results/models/{model} (model.pt inside)")
    s.add_argument("--data", required=True, help="the model's dataset (.npz)")
    s.add_argument(
        "--epochs",
        default=None,
        help="all | last | comma-separated epochs: score those checkpoints (one row each); "
        "omitted: score model.pt (one row with the training settings)",
    )
    s.add_argument(
        "--spec",
        default="{}",
        help='JSON: {"ais": {"n_runs", "schedule", "n_betas"}, "pl_sites", "n_train", '
        '"n_test", "tap_inits"} (a likelihood.fig12 / likelihood.table config section)',
    )
    s.add_argument("--out", required=True, help="CSV to write")
    add_numeric_args(s)
    s.add_argument("--tracking", default=None)
    s.set_defaults(func=score)

    e = subparsers.add_parser(
        "exact-curve",
        help="exact log-likelihood per unit of an enumerable RBM's checkpoints (Fig. 3)",
    )
    e.add_argument("--model-dir", required=True, help="results/models/{model} (model.pt inside)")
    e.add_argument("--data", required=True, help="the model's dataset (.npz)")
    e.add_argument("--epochs", default="all", help="all | last | comma-separated epochs")
    e.add_argument("--out", required=True, help="CSV to write")
    e.add_argument(
        "--ais",
        default=None,
        help='JSON {"n_runs", "schedule", "n_betas"}: also score each epoch by AIS against the '
        "enumeration (figures.fig3.exact.ais)",
    )
    e.add_argument("--seed", type=int, default=0, help="the config's seed (AIS's generator)")
    e.add_argument(
        "--while-training",
        action="store_true",
        help="the model is still training: compute the chosen epochs whose checkpoints exist "
        "and keep them beside --out for the job, which then computes only the rest",
    )
    e.add_argument(
        "--n-train",
        type=int,
        default=None,
        help="with --while-training: the rows the model trains on (its config's n_train; "
        "default all)",
    )
    e.add_argument("--device", default="cpu")
    e.add_argument("--threads", type=int, default=1)
    e.add_argument("--tracking", default=None)
    e.set_defaults(func=exact_curve)

    a = subparsers.add_parser(
        "ais-check",
        help="how far a model's AIS test log-likelihood moves with more runs, a finer schedule, "
        "other seeds and reverse annealing",
    )
    a.add_argument("--model-dir", required=True, help="results/models/{model} (model.pt inside)")
    a.add_argument("--data", required=True, help="the model's dataset (.npz)")
    a.add_argument("--epoch", type=int, default=None, help="a checkpoint's epoch (else model.pt)")
    a.add_argument("--runs", default="100,1000", help="AIS runs; the first is the baseline")
    a.add_argument(
        "--density",
        default="1,10",
        help="refinements of Salakhutdinov's 14,501 temperatures (each step divided by it); "
        "the first is the baseline",
    )
    a.add_argument(
        "--n-betas",
        type=int,
        default=None,
        help="thin the baseline schedule to this many temperatures (as likelihood's ais.n_betas)",
    )
    a.add_argument("--seeds", type=int, default=4, help="seeds of the baseline")
    a.add_argument("--no-reverse", action="store_true", help="leave out reverse AIS")
    a.add_argument("--out", required=True, help="CSV to write")
    add_numeric_args(a)
    a.set_defaults(func=ais_check)
