"""``tapmachine track``: replay the run records of ``results/`` into an MLflow store, idempotently.

Tracking during a run is best effort (``pipeline.tracking.store``): a store that is down, or a job
killed before it logged, leaves the result files complete and the store short. Every job keeps
its run as a record beside its output (``<stem>.run.json``, ``pipeline.tracking.records``);
this command logs each record found under ``--results`` and ``--data`` that the store lacks,
exactly as the live job logged it (params, tags, metrics by step with those of its series
files, artifacts, the machine as an MLflow model), knowing nothing of the stages.

A run already present (same experiment, run name, config run name and FINISHED) is kept, so a
second replay adds nothing; replayed runs carry ``tapmachine.replayed = true``. Records are
replayed after the records they link to, and each link (a tag naming another run, e.g.
``model_run_id``) is set to the id of that run *in this store*: of several FINISHED runs of a
name, the one the target's record names as its live run if the store has it, else the newest.
A record whose output is gone (removed by a failed rerun, or by hand) is skipped.
Present runs whose link tag names no such run (an id of another store, a run deleted and
replayed anew) get it replaced ("corrected"); a missing ``model_run_id`` is added ("retagged");
other missing links and link groups of present runs are left as they are. Only those tags of
present runs are written.
"""

from __future__ import annotations

from pathlib import Path

from tapmachine.core.errors import TapmachineError
from tapmachine.pipeline.tracking import store as tracking
from tapmachine.pipeline.tracking.recorder import find_run, is_run_of, log_machine, resolve_links
from tapmachine.pipeline.tracking.records import RunRecord, find_records, read_record

__all__ = ["TrackError", "replay", "register", "MODEL_TAG"]

#: Tag naming the training run a derived run was made from; added to present runs lacking it.
MODEL_TAG = "model_run_id"


class TrackError(TapmachineError):
    """The store cannot be reached or the results directory is not one."""


def ordered(records: list[RunRecord]) -> list[RunRecord]:
    """``records`` with every record after the records it links to (else in the given order)."""
    by_key = {(r.experiment, r.name): r for r in records}
    done: set[tuple[str, str]] = set()
    out: list[RunRecord] = []

    def visit(record: RunRecord, path: tuple) -> None:
        key = (record.experiment, record.name)
        if key in done or key in path:
            return
        targets = list(record.links.values())
        targets += [t for group in record.link_groups.values() for t in group.values()]
        for target in targets:
            if tuple(target[:2]) in by_key:
                visit(by_key[tuple(target[:2])], (*path, key))
        done.add(key)
        out.append(record)

    for record in records:
        visit(record, ())
    return out


def _link(client, found, label: str, tag: str, run_id: str, is_target) -> str | None:
    """Point a present run's link ``tag`` at ``run_id``: replaced where it names no run of that
    name and config run in this store ("corrected"), ``model_run_id`` also filled where it is
    missing ("retagged"). Only this tag is written; the run it names is only read."""
    current = found.data.tags.get(tag)
    if current in (None, "", "None"):
        if tag != MODEL_TAG:
            return None
        kind = "retagged"
    elif current == run_id or is_target(current):
        return None
    else:
        kind = "corrected"
    client.set_tag(found.info.run_id, tag, run_id)
    was = "" if kind == "retagged" else f" (was {current}, no such run here)"
    print(f"{kind:<8} {label}: {tag} = {run_id}{was}")
    return kind


def replay(results, store, manifest=None, data=None, run_name=None) -> dict[str, int]:
    """Replay the records under ``results`` (and ``data``) into the store
    (``$MLFLOW_TRACKING_URI`` or ``store``/mlflow.db).

    Returns {"replayed": n, "present": m, "retagged": k, "corrected": c, "skipped": s} (s:
    records whose output is gone, e.g. removed by a failed rerun). Raises TrackError if the
    store fails.
    """
    results = Path(results)
    if not results.is_dir():
        raise TrackError(f"--results {results}: no such directory")
    run_name = run_name or results.name
    manifest = Path(manifest) if manifest else Path(store) / "experiments.json"
    try:
        info = tracking.init_store(store, manifest)
    except Exception as err:  # noqa: BLE001 - replay must say why it could not start
        raise TrackError(f"tracking store {tracking.default_tracking_uri(store)}: {err}") from err
    uri = info["tracking_uri"]
    client = tracking.client_for(uri)
    exps = info["experiments"]
    counts = {"replayed": 0, "present": 0, "retagged": 0, "corrected": 0, "skipped": 0}
    run_ids: dict[tuple[str, str], str] = {}  # (experiment, run name) -> id in this store

    def is_target(run_id: str, target: tuple[str, str]) -> bool:
        return is_run_of(client, run_id, exps[target[0]], target[1], run_name)

    def lookup(link: tuple) -> str | None:
        experiment, name, hint = (*link, None)[:3]
        target = (experiment, name)
        if target not in run_ids and experiment in exps:
            found = find_run(client, exps[experiment], name, run_name, hint)
            if found:
                run_ids[target] = found
        return run_ids.get(target)

    records = [read_record(p) for p in find_records(data, results)]
    for record in ordered(records):
        key = (record.experiment, record.name)
        label = f"{record.experiment}/{record.name}"
        if record.output is not None and not record.output.exists():
            counts["skipped"] += 1
            print(f"skipped  {label}: its output {record.output} is gone")
            continue
        links = resolve_links(record, lookup)
        found = find_run(client, exps[record.experiment], record.name, run_name, record.run_id)
        if found is not None:
            run_ids[key] = found
            counts["present"] += 1
            print(f"present  {label}")
            present = client.get_run(found)
            for tag, target in record.links.items():
                if tag in links:
                    check = lambda rid, t=tuple(target[:2]): is_target(rid, t)  # noqa: E731
                    kind = _link(client, present, label, tag, links[tag], check)
                    if kind is not None:
                        counts[kind] += 1
            continue
        tags = {**record.tags, **links, "tapmachine.run_name": run_name}
        tags["tapmachine.replayed"] = "true"
        with tracking.start_run(manifest, *key, record.params, tags) as run:
            steps = record.all_metrics()
            for step, values in sorted(steps.items(), key=lambda kv: _order(kv[0])):
                run.log_metrics(values, step=step)
            for path, artifact_folder in record.artifacts:
                if Path(path).exists():
                    run.log_artifact(path, artifact_folder)
            if record.machine is not None:
                log_machine(run, record.machine)
        if tracking.disabled_reason(uri):
            raise TrackError(f"replaying {label}: {tracking.disabled_reason(uri)}")
        run_ids[key] = run.run_id
        counts["replayed"] += 1
        print(f"replayed {label}")
    return counts


def _order(step) -> int:
    return -1 if step is None else step


def _cmd_track(args) -> None:
    counts = replay(args.results, args.store, args.manifest, args.data, args.run_name)
    links = "".join(f", {counts[k]} {k}" for k in ("retagged", "corrected", "skipped") if counts[k])
    print(
        f"tapmachine track: {counts['replayed']} runs replayed, {counts['present']} already "
        f"in the store{links} ({tracking.default_tracking_uri(args.store)})"
    )


def register(subparsers) -> None:
    s = subparsers.add_parser(
        "track", help="replay the run records of results/ into an MLflow store (idempotent)"
    )
    s.add_argument("--results", default="results/default", help="results/{run name}")
    s.add_argument("--data", default="results/data", help="shared datasets ('' to skip)")
    s.add_argument("--store", default="results/mlflow", help="embedded store directory")
    s.add_argument("--manifest", default=None, help="default: STORE/experiments.json")
    s.add_argument("--run-name", default=None, help="config run name (default: RESULTS's name)")
    s.set_defaults(func=_cmd_track)
