"""The time each job of a run took: Snakemake's benchmark files, with the earlier starts of a
job that resumed (training, per-epoch scoring, harvests) counted from the run's own records, and
as a markdown table for the claims report (``claims.write_report``)."""

from __future__ import annotations

import math
import os
from pathlib import Path

from tapmachine.figures.common import FigureError, blank, markdown_cell

__all__ = ["wall_times", "wall_times_markdown"]


def wall_times(
    benchmarks_dir: str | os.PathLike,
    models_dir: str | os.PathLike | None = None,
    logs_dir: str | os.PathLike | None = None,
    dbm_dir: str | os.PathLike | None = None,
):
    """Wall and CPU time of each job of a run, from its Snakemake benchmark files.

    ``benchmarks_dir``: the run's ``benchmarks/`` folder (``<stage>/<job>.tsv``, Snakemake's
    columns ``s``, ``max_rss``, ``cpu_time``, ...); rows ``stage``, ``job``, ``seconds``,
    ``cpu_seconds``, ``max_rss_mb`` (the first repeat of each file), ``resumed``, ``exact``,
    sorted by stage and job.

    A training job that was stopped and started again resumes from its last checkpoint, and its
    benchmark file times only the last start. With ``models_dir`` (the run's ``models/``) such a
    job counts its earlier starts too, from its ``metrics.csv``:

    - with ``logs_dir`` (the run's ``logs/``, ``<stage>/<job>.log``), whose log names the epoch
      its last start resumed from (``resumed_epoch``) and the seconds of the next epoch trained
      before it (``resumed_within``): the ``epoch_seconds`` of the epochs up to it, those
      seconds and the benchmark. This is exact, up to the work each interrupted start did after
      its last kept state (which the next start did again), and includes a last start's
      evaluation of earlier epochs again.
    - otherwise, where its epochs sum to more ``epoch_seconds`` than the benchmark: that sum,
      marked not ``exact`` (it misses the time a start spent evaluating earlier epochs again).

    Its CPU time adds ``epoch_cpu_seconds`` in the same way when every epoch counted recorded
    one (older checkpoints did not), else it is NaN. A scoring job that resumes (Fig. 12's
    ``likelihood/score_epochs_<model>``, the exact curve's ``likelihood/exact_curve_<model>``)
    counts, with ``models_dir`` and ``logs_dir``, the epochs its last start's log names as kept
    from earlier starts, from their rows in the run's ``likelihood/<model>/`` (``seconds``,
    ``cpu_seconds``; ``_resumed_scoring``); a harvest (``harvest/<model>/epoch_<e>``), with
    ``logs_dir``, the seconds of the chunks of starts its log names as kept
    (``_resumed_harvest``). A DBM training job of the second paper
    (``ucd/dbm/train_<dataset>_<model>``) is counted alike with ``dbm_dir`` (the run's
    ``ucd/dbm/``): its epochs' times are the history of ``<dataset>/<model>/model.pt``.

    ``cpu_time`` is a lower bound: Snakemake samples a job's processes every 0.5 s for its first
    30 s and every 30 s after (``snakemake.benchmark.BENCHMARK_INTERVAL``), so it misses what a
    job used after its last sample, up to 30 CPU-seconds a job. ``seconds`` (``s``) is exact.
    """
    import pandas as pd

    folder = Path(benchmarks_dir)
    if not folder.is_dir():
        raise FigureError(f"{folder} is not a folder of Snakemake benchmark files")
    rows = []
    for path in sorted(folder.rglob("*.tsv")):
        t = pd.read_csv(path, sep="\t")
        if "s" not in t or t.empty:
            continue
        rel = path.relative_to(folder)
        row = {
            "stage": rel.parts[0] if len(rel.parts) > 1 else "",
            "job": str(rel.with_suffix("")),
            "seconds": float(t["s"].iloc[0]),
            "cpu_seconds": float(t["cpu_time"].iloc[0]) if "cpu_time" in t else math.nan,
            "max_rss_mb": float(t["max_rss"].iloc[0]) if "max_rss" in t else math.nan,
            "resumed": False,
            "exact": True,
        }
        epochs = None
        if models_dir is not None and row["stage"] == "train" and len(rel.parts) == 2:
            epochs = _epoch_times(Path(models_dir) / rel.stem / "metrics.csv")
        elif (
            dbm_dir is not None
            and rel.parts[:2] == ("ucd", "dbm")
            and rel.stem.startswith("train_")
        ):
            epochs = _dbm_epoch_times(Path(dbm_dir), rel.stem)
        if epochs is not None:
            log = None if logs_dir is None else Path(logs_dir) / rel.with_suffix(".log")
            row.update(_resumed_training(epochs, row, log))
        elif models_dir is not None and logs_dir is not None and row["stage"] == "likelihood":
            scored = _scored_rows(Path(models_dir).parent / "likelihood", rel.stem)
            if scored is not None:
                row.update(_resumed_scoring(scored, row, Path(logs_dir) / rel.with_suffix(".log")))
        elif logs_dir is not None and row["stage"] == "harvest":
            row.update(_resumed_harvest(row, Path(logs_dir) / rel.with_suffix(".log")))
        rows.append(row)
    columns = ["stage", "job", "seconds", "cpu_seconds", "max_rss_mb", "resumed", "exact"]
    return pd.DataFrame(rows, columns=columns)


#: The resuming scoring jobs (``likelihood/<kind>_<model>``): the file of their per-epoch rows
#: under the run's ``likelihood/<model>/``, and the columns of a row's CPU seconds (the exact
#: curve's AIS column only where it scored AIS).
_SCORED_ROWS = {
    "score_epochs": ("scores.csv", ("cpu_seconds",)),
    "exact_curve": ("exact.csv", ("cpu_seconds", "ais_cpu_seconds")),
}


def _scored_rows(likelihood_dir: Path, job: str):
    """(rows, CPU columns) of the resuming scoring job ``job`` (``_SCORED_ROWS``), or None."""
    import pandas as pd

    for kind, (name, cpu_columns) in _SCORED_ROWS.items():
        if job.startswith(f"{kind}_"):
            path = likelihood_dir / job.removeprefix(f"{kind}_") / name
            return (pd.read_csv(path), cpu_columns) if path.is_file() else None
    return None


def _resumed_scoring(scored, row: dict, log: Path) -> dict:
    """A resuming scoring job's times over all its starts (``wall_times``): its last start's
    benchmark plus the rows its log says were kept from earlier starts (``runlog.kept_epochs``),
    each with its own seconds. A row without wall seconds (rows kept by older code) adds its
    CPU seconds as the least wall time it took, and the total is marked not exact; the CPU total
    is NaN where a kept row recorded no CPU seconds."""
    from tapmachine.io.runlog import kept_epochs

    rows, cpu_columns = scored
    if not log.is_file():
        return {}
    earlier = rows[rows["epoch"].isin(kept_epochs(log.read_text(errors="replace")))]
    if earlier.empty:
        return {}
    main, *extra = cpu_columns
    if main in earlier and not earlier[main].isna().any():
        cpu = float(earlier[main].sum())
        cpu += sum(float(earlier[c].fillna(0.0).sum()) for c in extra if c in earlier)
    else:
        cpu = math.nan
    wall_known = "seconds" in earlier and not earlier["seconds"].isna().any()
    wall = float(earlier["seconds"].sum()) if wall_known else cpu
    return {
        "seconds": row["seconds"] + (0.0 if math.isnan(wall) else wall),
        "cpu_seconds": row["cpu_seconds"] + cpu,
        "resumed": True,
        "exact": wall_known and not math.isnan(cpu),
    }


def _resumed_harvest(row: dict, log: Path) -> dict:
    """A harvest's times over all its starts (``wall_times``): its last start's benchmark plus
    the seconds of the chunks of starts its log says it kept from earlier starts
    (``runlog.kept_chunk_seconds``)."""
    from tapmachine.io.runlog import kept_chunk_seconds

    if not log.is_file():
        return {}
    wall, cpu, chunks = kept_chunk_seconds(log.read_text(errors="replace"))
    if not chunks:
        return {}
    return {
        "seconds": row["seconds"] + wall,
        "cpu_seconds": row["cpu_seconds"] + cpu,
        "resumed": True,
        "exact": True,
    }


def _epoch_times(metrics_csv: Path):
    """A TAP training job's per-epoch rows (``metrics.csv``), or None."""
    import pandas as pd

    if not metrics_csv.is_file():
        return None
    epochs = pd.read_csv(metrics_csv)
    return epochs if "epoch_seconds" in epochs else None


def _dbm_epoch_times(dbm_dir: Path, job: str):
    """A DBM training job's per-epoch rows: the history of the model file whose
    ``<dataset>/<model>`` makes the job name ``train_<dataset>_<model>`` (both may hold
    underscores, so the folders are matched, not the name split), or None."""
    import pandas as pd

    from tapmachine.io.modelfile import ModelFile

    for model_pt in sorted(dbm_dir.glob("*/*/model.pt")):
        if job == f"train_{model_pt.parent.parent.name}_{model_pt.parent.name}":
            epochs = pd.DataFrame(ModelFile.load(model_pt).history)
            return epochs if "epoch_seconds" in epochs else None
    return None


def _resumed_training(epochs, row: dict, log: Path | None) -> dict:
    """A training job's times over all its starts (``wall_times``), from its per-epoch rows
    ``epochs`` (``epoch``, ``epoch_seconds``, optionally ``epoch_cpu_seconds``): the epochs
    done before its last start, the part of the next one trained before it (named in the log),
    and the last start's benchmark."""
    if log is not None and log.is_file():
        from tapmachine.io.runlog import resumed_epoch, resumed_within

        text = log.read_text(errors="replace")
        earlier = epochs[epochs["epoch"] <= resumed_epoch(text)]
        part_wall, part_cpu = resumed_within(text)
        if earlier.empty and part_wall == 0.0:
            return {}
        wall, cpu_time, exact = row["seconds"] + part_wall, row["cpu_seconds"] + part_cpu, True
    elif float(epochs["epoch_seconds"].sum()) > row["seconds"]:
        earlier, wall, cpu_time, exact = epochs, 0.0, 0.0, False
    else:
        return {}
    cpu = earlier.get("epoch_cpu_seconds")
    complete = cpu is not None and not cpu.isna().any()
    return {
        "seconds": float(earlier["epoch_seconds"].sum()) + wall,
        "cpu_seconds": float(cpu.sum()) + cpu_time if complete else math.nan,
        "resumed": True,
        "exact": exact,
    }


def wall_times_markdown(times, title: str | None = None, level: int = 3) -> str:
    """A per-stage summary (jobs, total wall and CPU seconds) and the ten longest jobs of
    ``wall_times``; resumed training jobs are marked and explained."""
    h = "#" * level
    out = [f"{h} {title}", ""] if title else []
    out += ["| Stage | Jobs | Wall time, sum (s) | CPU time, sum (s) |", "|---|---|---|---|"]

    def cpu_sum(part):
        return "n/a" if part["cpu_seconds"].isna().any() else round(part["cpu_seconds"].sum(), 1)

    for stage, part in times.groupby("stage", sort=True):
        wall = round(part["seconds"].sum(), 1)
        cells = (markdown_cell(stage), len(part), markdown_cell(wall), markdown_cell(cpu_sum(part)))
        out.append("| " + " | ".join(map(str, cells)) + " |")
    total = round(times["seconds"].sum(), 1)
    out.append(
        f"| total | {len(times)} | {markdown_cell(total)} | {markdown_cell(cpu_sum(times))} |"
    )
    out += ["", "Longest jobs:", "", "| Job | Wall time (s) | CPU time (s) | Max RSS (MB) |"]
    out.append("|---|---|---|---|")
    for _, r in times.sort_values("seconds", ascending=False).head(10).iterrows():
        job = r["job"]
        if r["resumed"]:
            job += " (resumed)" if r["exact"] else " (resumed, at least)"
        cpu = "n/a" if blank(r["cpu_seconds"]) else r["cpu_seconds"]
        cells = (job, r["seconds"], cpu, r["max_rss_mb"])
        out.append("| " + " | ".join(markdown_cell(c) for c in cells) + " |")
    out += [
        "",
        "CPU time is what Snakemake's benchmark sampled: a job's processes every 0.5 s for its "
        "first 30 s, then every 30 s, so it misses up to 30 CPU-seconds of each job after its "
        "last sample (a lower bound; wall times are exact).",
    ]
    if times["resumed"].any():
        out += [
            "",
            "A training job marked resumed ran over several starts (it resumes from its last "
            "epoch checkpoint, or part-way through an epoch), and its benchmark file times only "
            "the last start. Its times add the `epoch_seconds` (and `epoch_cpu_seconds`) of the "
            "epochs its earlier starts trained (from `metrics.csv`, or a DBM's `model.pt` "
            "history) and the seconds of an epoch they trained part of, read from its log; "
            "its CPU time is n/a where epochs from before `epoch_cpu_seconds` was recorded are "
            "among them. Its maximum RSS is the last start's.",
        ]
    if (times["resumed"] & times["stage"].isin(["likelihood", "harvest"])).any():
        out += [
            "",
            "A scoring job or harvest marked resumed (Fig. 12's per-epoch scores, the exact "
            "curve; Figs. 5-7's solutions) kept the rows of the epochs, or the chunks of starts, "
            "that its earlier starts finished, which its last start's log names; its times add "
            "their seconds.",
        ]
    if (times["resumed"] & ~times["exact"]).any():
        out += [
            "",
            "Marked 'at least': a training job without its log, the sum of all its epochs' "
            "times, which misses the time a start spent evaluating earlier epochs again; a "
            "scoring job whose kept rows recorded no wall time, their CPU time.",
        ]
    return "\n".join(out) + "\n"
