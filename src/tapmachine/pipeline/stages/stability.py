"""``tapmachine stability``: which of a checkpoint's data-started TAP solutions Alg. 1 can
converge to (the spectral radius of its sweep's Jacobian at each fixed point).

A diagnostic over a model's checkpoints, run by hand (no rule, no tracking); the library side is
``tap_paper.stability``.
"""

from __future__ import annotations

from tapmachine.pipeline.stages.common import UsageError, set_threads


def stability(args) -> None:
    from tapmachine.io.modelfile import checkpoint_dir, checkpoint_epochs
    from tapmachine.tap_paper.stability import stability_curve

    set_threads(args.threads)
    if args.krylov is not None and args.krylov < 1:
        raise UsageError(f"--krylov must be at least 1, not {args.krylov}")
    found = checkpoint_epochs(checkpoint_dir(args.model_dir))
    epochs = found if args.epochs == "all" else [int(e) for e in args.epochs.split(",")]
    missing = sorted(set(epochs) - set(found))
    if missing:
        raise UsageError(f"{args.model_dir} has no checkpoint of epoch {missing[0]}")
    try:
        stability_curve(
            args.model_dir, args.data, epochs, args.out, rows=args.rows, krylov_dim=args.krylov
        )
    except (ValueError, FileNotFoundError) as err:
        raise UsageError(f"stability of {args.model_dir}: {err}") from err
    print(f"wrote {args.out}")


def register(subparsers) -> None:
    s = subparsers.add_parser(
        "stability",
        help="spectral radius of Alg. 1's sweep at a checkpoint's data-started fixed points",
    )
    s.add_argument("--model-dir", required=True, help="results/<run>/models/{model}")
    s.add_argument("--data", required=True, help="the model's dataset (.npz)")
    s.add_argument("--epochs", default="all", help="all | comma-separated checkpoint epochs")
    s.add_argument("--rows", type=int, default=300, help="first training images as starts")
    s.add_argument("--out", required=True, help="CSV to write, one row per fixed point")
    s.add_argument(
        "--krylov",
        type=int,
        default=None,
        metavar="M",
        help="estimate each radius from M Jacobian-vector products (Arnoldi) instead of the "
        "dense Jacobian: for large models (default: dense)",
    )
    s.add_argument("--threads", type=int, default=1)
    s.set_defaults(func=stability)
