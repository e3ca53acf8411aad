"""Log one ``RunRecord`` live and keep it beside the job's output.

``Recorder`` opens the record's run (best effort, ``pipeline.tracking.store``: a store that is down
never fails the job), logs the metrics a job reports as it goes, and on success logs the rest
(metrics, series, artifacts, the machine) and writes the record atomically beside the output
(``records.write_record``), whether or not the store answered, so that ``tapmachine track`` can
replay it. ``publish`` does all of it at once for a job that reports at its end.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path

from tapmachine.pipeline.tracking import environment
from tapmachine.pipeline.tracking import store as tracking
from tapmachine.pipeline.tracking.records import RunRecord, write_record

__all__ = ["Recorder", "recording", "publish", "resolve_links", "find_run"]


def find_run(client, exp_id: str, name: str, run_name: str | None, hint: str | None = None):
    """Id of the FINISHED run ``name`` in experiment ``exp_id`` of config run ``run_name`` (any
    config run if None): ``hint`` where it is such a run, else the newest; None if there is none."""
    if hint and is_run_of(client, hint, exp_id, name, run_name):
        return hint
    quoted = name.replace("'", "\\'")
    filt = f"attributes.run_name = '{quoted}' and attributes.status = 'FINISHED'"
    if run_name:
        filt += f" and tags.`tapmachine.run_name` = '{run_name}'"
    found = client.search_runs([exp_id], filt, max_results=1, order_by=["start_time DESC"])
    return found[0].info.run_id if found else None


def is_run_of(client, run_id: str, exp_id: str, name: str, run_name: str | None) -> bool:
    """Whether ``run_id`` is an active FINISHED run ``name`` of experiment ``exp_id`` and config
    run ``run_name`` in this store (an id the store does not know is not)."""
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException as err:
        if err.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return False
        raise
    return (
        run.info.experiment_id == exp_id
        and run.info.run_name == name
        and run.info.status == "FINISHED"
        and run.info.lifecycle_stage == "active"
        and (run_name is None or run.data.tags.get("tapmachine.run_name") == run_name)
    )


def resolve_links(record: RunRecord, lookup) -> dict[str, str]:
    """The record's links as tags: ``lookup(link)`` gives an id or None; a single link without
    an id is left out, a group's member without one is ""."""
    tags = {}
    for tag, target in record.links.items():
        run_id = lookup(tuple(target))
        if run_id:
            tags[tag] = run_id
    for tag, group in record.link_groups.items():
        ids = {key: lookup(tuple(target)) or "" for key, target in group.items()}
        tags[tag] = json.dumps(ids, sort_keys=True)
    return tags


def _live_lookup(manifest):
    """``resolve_links``'s lookup in the store of ``manifest``, for the config run of this job
    (``run_name`` of the job environment, ``environment``). Best effort, as the run itself: the
    first failure disables tracking for the rest of the job (``tracking.disable``) and leaves
    the links absent."""
    run_name = environment.get("run_name")
    try:
        uri = tracking.store_uri(manifest)
    except (OSError, ValueError, KeyError) as err:
        tracking.warn(f"reading the tracking manifest {manifest}", err)
        uri = None

    def lookup(target):
        experiment, name, hint = (*target, None)[:3]
        if uri is None or tracking.disabled_reason(uri):
            return None
        try:
            found_uri, exp_id = tracking.experiment_id(manifest, experiment)
            return find_run(tracking.client_for(found_uri), exp_id, name, run_name, hint)
        except Exception as err:  # noqa: BLE001
            tracking.disable(uri, f"looking up run {experiment}/{name}", err)
            return None

    return lookup


class Recorder:
    """The live run of one record, opened by ``start`` (or at the end, by ``finish``).

    ``start(params, tags, *_)`` fits the libraries' ``on_start`` callbacks: it adds the params
    and tags to the record (a tag the record links is set from the link) and opens the run.
    ``log(metrics, step, keep)`` logs metrics now and keeps them in the record unless ``keep``
    is False (a series file holds them)."""

    def __init__(self, stack, manifest, record: RunRecord, output, system_metrics=False):
        self.stack, self.manifest, self.record = stack, manifest, record
        self.output, self.system_metrics = output, system_metrics
        self.run = tracking.Run(None, None)
        self.opened = False
        self.logged: dict[int | None, set[str]] = {}
        self.logged_artifacts: set[tuple] = set()

    @property
    def run_id(self) -> str | None:
        return self.run.run_id

    def start(self, params: Mapping | None = None, tags: Mapping | None = None, *_) -> str | None:
        self.record.params.update(params or {})
        self.record.tags.update(tags or {})
        if environment.get("config_digest"):  # so that a replay carries it too
            self.record.tags.setdefault("config_digest", environment.get("config_digest"))
        for tag in list(self.record.links) + list(self.record.link_groups):
            self.record.tags.pop(tag, None)
        tags = dict(self.record.tags)
        if self.manifest is not None:
            tags.update(resolve_links(self.record, _live_lookup(self.manifest)))
        self.run = self.stack.enter_context(
            tracking.start_run(
                self.manifest,
                self.record.experiment,
                self.record.name,
                self.record.params,
                tags,
                system_metrics=self.system_metrics,
            )
        )
        self.opened = True
        return self.run.run_id

    def log(self, metrics: Mapping[str, float], step: int | None = None, keep=True) -> None:
        self.log_steps({step: metrics}, keep=keep)

    def log_steps(self, steps: Mapping[int | None, Mapping[str, float]], keep=True) -> None:
        """``log`` for several steps at once (step -> metrics), in as few store writes as the
        values allow."""
        if keep:
            for step, metrics in steps.items():
                self.record.add_metrics(metrics, step)
                self.logged.setdefault(step, set()).update(metrics)
        self.run.log_steps(steps)

    def log_artifact(self, path, folder: str | None = None) -> None:
        """Log a file now (e.g. an image per epoch) and keep it among the record's artifacts."""
        self.record.artifacts.append((path, folder))
        self.logged_artifacts.add((str(path), folder))
        self.run.log_artifact(path, folder)

    def finish(self) -> None:
        """Open the run if no one did, log the record's metrics not logged yet (a series is
        logged by the job as it goes), its artifacts and machine; write the record."""
        if not self.opened:
            self.start()
        for step, values in sorted(self.record.metrics.items(), key=_step_order):
            rest = {k: v for k, v in values.items() if k not in self.logged.get(step, ())}
            if rest:
                self.run.log_metrics(rest, step=step)
        for path, folder in _pairs(self.record.artifacts):
            if Path(path).exists() and (str(path), folder) not in self.logged_artifacts:
                self.run.log_artifact(path, folder)
        if self.record.machine is not None:
            log_machine(self.run, self.record.machine)
        self.record.run_id = self.run.run_id
        write_record(self.record, self.output)


def _step_order(item) -> int:
    return -1 if item[0] is None else item[0]


def _pairs(artifacts) -> list[tuple]:
    return [a if isinstance(a, tuple) else (a, None) for a in artifacts]


def log_machine(run: tracking.Run, machine: tuple) -> None:
    """The machine (model.pt, dataset .npz, training rows) as an MLflow model with its
    dataset; a file that cannot be read leaves the run without it (said on stderr)."""
    if not run.active:
        return
    from tapmachine.io import data

    model_file, dataset_file, n_rows = machine
    try:
        ds = data.load_dataset(dataset_file)
    except Exception as err:  # noqa: BLE001 - the rest of the run is logged regardless
        tracking.warn(f"model {model_file}: its dataset", err)
        return
    rows = ds.x_train[:n_rows] if n_rows else ds.x_train
    run.log_machine(model_file, rows, dataset_file, ds.name, input_tags=input_tags(ds.provenance))


def input_tags(provenance: dict) -> dict[str, str]:
    """Tags of a training run's dataset input: the user's file (``data.files``) and its sha256,
    those of the test file too; none for the papers' datasets (their checksums are in the data
    run's provenance)."""
    if provenance.get("source") != "file":
        return {}
    tags = {"file": provenance["file"], "sha256": provenance["sha256"]}
    test = provenance.get("test") or {}
    if "file" in test:
        tags.update({"test_file": test["file"], "test_sha256": test["sha256"]})
    return tags


@contextlib.contextmanager
def recording(manifest, record: RunRecord, output, system_metrics=False) -> Iterator[Recorder]:
    """A ``Recorder`` whose run ends with the block: FAILED if the block raises (no record is
    written then), else finished with ``Recorder.finish``."""
    with contextlib.ExitStack() as stack:
        recorder = Recorder(stack, manifest, record, output, system_metrics)
        yield recorder
        recorder.finish()


def publish(manifest, record: RunRecord, output) -> str | None:
    """Log a finished job's record in one go and write it beside ``output``; the run's id."""
    with recording(manifest, record, output) as recorder:
        pass
    return recorder.run.run_id
