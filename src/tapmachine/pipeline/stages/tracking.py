"""``tapmachine tracking-init``: create the MLflow store and its experiments."""

from __future__ import annotations


def init(args) -> None:
    from tapmachine.pipeline.tracking import store as tracking

    info = tracking.init_store(args.store, args.manifest, best_effort=True)
    print(f"tracking store {info['tracking_uri']}; experiments {info['experiments']}")


def register(subparsers) -> None:
    s = subparsers.add_parser("tracking-init", help="create the MLflow store and experiments")
    s.add_argument("--store", required=True, help="directory of the embedded SQLite store")
    s.add_argument("--manifest", required=True, help="JSON file receiving the experiment ids")
    s.set_defaults(func=init)
