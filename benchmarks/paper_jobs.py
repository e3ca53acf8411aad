"""The jobs the first paper's targets run under a config, named as Snakemake's benchmark files
name them, their wall time on a few cores, and the join of a projection with a run's measured
job times.

A job's name is the path of its benchmark TSV under ``benchmarks/{run}/`` without ``.tsv``
(``workflow/rules/*.smk``): ``train/{model}``, ``harvest/{model}/epoch_{e}``,
``likelihood/score_epochs_{model}``, ``likelihood/score_final_{model}``,
``likelihood/exact_curve_{model}``, ``denoise/bsc_{model}``, ``denoise/baselines``,
``deep/curve_{model}`` and ``deep/timing``. Data preparation and the figure-drawing jobs
(minutes each) are not listed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

__all__ = [
    "PAPER_TARGETS",
    "Job",
    "paper_jobs",
    "schedule_hours",
    "longest_chain_hours",
    "measured_hours",
    "job_output",
    "compare",
    "totals",
]

#: The first paper's targets (``snakemake <targets> --configfile workflow/config/paper.yaml``).
PAPER_TARGETS = (
    "fig3",
    "fig4",
    "fig5",
    "fig6",
    "fig7",
    "fig12",
    "likelihood_table",
    "fig8",
    "fig9",
    "fig10",
    "fig11",
)


@dataclasses.dataclass(frozen=True)
class Job:
    """One Snakemake job: ``name`` (its benchmark file's stem, module docstring), ``kind`` (the
    rule's stage: train, harvest, score_epochs, score_final, exact_curve, denoise_bsc,
    denoise_baselines, deep_curve, deep_timing), its ``model`` and harvested ``epoch`` if any,
    and ``after``: the training job it waits for (None for training and the model-free jobs)."""

    name: str
    kind: str
    model: str | None = None
    epoch: int | None = None

    @property
    def after(self) -> str | None:
        if self.kind == "train" or self.model is None:
            return None
        return f"train/{self.model}"


def _figure_epochs(cfg: dict, fig: str) -> dict[str, list[int]]:
    """The harvested epochs a figure of Figs. 5-7 reads, by model (``figure_solution_files``)."""
    from tapmachine.pipeline.configuration import solution_columns

    return {
        m: sorted(column.get("epochs") or cfg["harvest"][m]["epochs"])
        for m, column in solution_columns(cfg["figures"][fig]).items()
    }


def paper_jobs(cfg: dict, targets=PAPER_TARGETS, all_harvests: bool = True) -> list[Job]:
    """The jobs that ``targets`` make under ``cfg`` (a validated whole config), each once, in
    the order first needed. ``all_harvests`` adds every ``harvest`` entry's epochs (the
    ``harvest`` target; Figs. 5-7 read their columns' epochs only)."""
    jobs: dict[str, Job] = {}

    def add(job: Job) -> None:
        jobs.setdefault(job.name, job)

    def train(models) -> None:
        for m in models:
            add(Job(f"train/{m}", "train", m))

    figures, lik, deep = cfg.get("figures", {}), cfg.get("likelihood", {}), cfg.get("deep", {})
    denoise = cfg.get("denoise", {})
    for target in targets:
        if target in ("fig3", "fig4") and target in figures:
            train(figures[target]["models"])
            exact = figures[target].get("exact") or {}
            for m in exact.get("models", []) if target == "fig3" else []:
                add(Job(f"likelihood/exact_curve_{m}", "exact_curve", m))
        elif target in ("fig5", "fig6", "fig7") and target in figures:
            for m, epochs in _figure_epochs(cfg, target).items():
                train([m])
                for e in epochs:
                    add(Job(f"harvest/{m}/epoch_{e}", "harvest", m, e))
        elif target == "fig12" and lik.get("fig12"):
            m = lik["fig12"]["model"]
            train([m])
            add(Job(f"likelihood/score_epochs_{m}", "score_epochs", m))
        elif target == "likelihood_table" and lik.get("table"):
            for m in lik["table"]["models"]:
                train([m])
                add(Job(f"likelihood/score_final_{m}", "score_final", m))
        elif target in ("fig8", "fig9") and denoise.get("fig8"):
            for m in denoise["fig8"]["models"].values():
                train([m])
                add(Job(f"denoise/bsc_{m}", "denoise_bsc", m))
            add(Job("denoise/baselines", "denoise_baselines"))
        elif target in ("fig10", "fig11") and deep.get(target):
            for m in deep[target]["models"]:
                train([m])
                add(Job(f"deep/curve_{m}", "deep_curve", m))
            if target == "fig10":
                add(Job("deep/timing", "deep_timing"))
    if all_harvests:
        for m, entry in cfg.get("harvest", {}).items():
            train([m])
            for e in entry["epochs"]:
                add(Job(f"harvest/{m}/epoch_{e}", "harvest", m, e))
    return list(jobs.values())


def longest_chain_hours(jobs: list[Job], hours: dict[str, float]) -> float:
    """The longest path through the jobs: a training job plus its longest follower (or a
    model-free job alone)."""
    chain = {j.name: hours[j.name] for j in jobs if j.after is None}
    for j in jobs:
        if j.after is not None:
            chain[j.after] = max(chain[j.after], hours[j.after] + hours[j.name])
    return max(chain.values(), default=0.0)


def schedule_hours(jobs: list[Job], hours: dict[str, float], cores: int = 2) -> float:
    """Wall hours of the jobs on ``cores`` single-threaded workers: list scheduling, longest
    chain first (a job starts when a core is free and its training job has finished; among the
    ready jobs the one heading the longest remaining chain goes first). Not below the lower
    bounds max(sum / cores, longest chain); Snakemake's own order may be worse."""
    tail = {j.name: hours[j.name] for j in jobs}
    for j in jobs:
        if j.after is not None:
            tail[j.after] = max(tail[j.after], hours[j.after] + hours[j.name])
    done: dict[str, float] = {}
    free = [0.0] * cores
    pending = sorted(jobs, key=lambda j: -tail[j.name])
    while pending:
        ready = [j for j in pending if j.after is None or j.after in done]
        job = ready[0]
        core = min(range(cores), key=lambda c: free[c])
        start = max(free[core], done.get(job.after, 0.0) if job.after else 0.0)
        done[job.name] = free[core] = start + hours[job.name]
        pending.remove(job)
    return max(done.values(), default=0.0)


def measured_hours(
    folder: str | Path,
    models_dir: str | Path | None = None,
    logs_dir: str | Path | None = None,
    clock: str = "cpu",
) -> dict[str, float]:
    """Hours of every job in a run's benchmark folder (``benchmarks/{run}``), keyed by the
    file's path under ``folder`` without ``.tsv``: with ``clock="cpu"`` its CPU time, the
    measure a projection prices (one thread's seconds on idle cores; wall time is that only when
    the job had a core to itself), where recorded, else its wall time; with ``clock="wall"`` its
    wall time. A training or per-epoch scoring job stopped and resumed counts every start with
    ``models_dir`` and ``logs_dir`` (the run's ``models/`` and ``logs/``;
    ``job_times.wall_times``), else its last."""
    from tapmachine.figures.job_times import wall_times

    if clock not in ("cpu", "wall"):
        raise ValueError(f"clock is 'cpu' or 'wall', not {clock!r}")
    models_dir = models_dir if models_dir is None or Path(models_dir).is_dir() else None
    logs_dir = logs_dir if logs_dir is None or Path(logs_dir).is_dir() else None
    out = {}
    for _, row in wall_times(folder, models_dir, logs_dir).iterrows():
        seconds = row["seconds"]
        if clock == "cpu" and row["cpu_seconds"] == row["cpu_seconds"]:  # not NaN
            seconds = row["cpu_seconds"]
        out[row["job"]] = float(seconds) / 3600
    return out


#: Where each kind of job writes its first output, under ``results/{run}/`` (by its name's
#: pattern; ``workflow/rules/*.smk``).
_OUTPUTS = (
    ("train/", "models/{}/model.pt"),
    ("likelihood/score_epochs_", "likelihood/{}/scores.csv"),
    ("likelihood/score_final_", "likelihood/{}/final.csv"),
    ("likelihood/exact_curve_", "likelihood/{}/exact.csv"),
    ("denoise/bsc_", "denoise/{}/denoise_bsc.csv"),
    ("deep/curve_", "deep/{}/curve.csv"),
)


def job_output(name: str) -> str | None:
    """The output under ``results/{run}/`` whose presence says that the job ``name`` finished
    (Snakemake removes a job's outputs before it runs it again, and those of a job that failed
    or was stopped); None for a name that is not a ``paper_jobs`` job."""
    if name == "denoise/baselines":
        return "denoise/baselines/bsc.csv"
    if name == "deep/timing":
        return "deep/fig10_timing.csv"
    if name.startswith("harvest/") and name.count("/") == 2:
        _, model, epoch = name.split("/")
        return f"solutions/{model}/{epoch}.npz"
    for prefix, path in _OUTPUTS:
        if name.startswith(prefix) and "/" not in name.removeprefix(prefix):
            return path.format(name.removeprefix(prefix))
    return None


#: A job's state in ``compare`` with the run's results folder.
FINISHED, UNFINISHED, BROUGHT_IN = "finished", "not finished", "brought in"


def compare(
    profile: dict, folder: str | Path, results: str | Path | None = None, **measured
) -> list[dict]:
    """Per job of a ``paper_profile`` result (its ``jobs_hours``), the projected hours beside
    the measured ones in the benchmark folder ``folder`` (``measured_hours(folder,
    **measured)``) and their ratio (measured / projected; None where either is missing). Jobs
    measured but not projected are listed too (projected None). Ordered by projected hours,
    largest first.

    With ``results`` (the run's ``results/{run}``) each job of ``paper_jobs`` also gets a
    ``state``: ``finished`` (its output is there, and measured), ``not finished`` (its output
    is not there: a benchmark file it left when stopped is not a measurement, as Snakemake
    writes one for a job it stops too, so it counts as not measured) or ``brought in`` (its
    output is there without a benchmark file: made elsewhere and copied into the run, as
    Fig. 10's adaTAP models from a GPU, so this run has no time of it to compare). Without
    ``results`` the state is None."""
    projected = profile["jobs_hours"]
    hours = measured_hours(folder, **measured)
    states = {}
    if results is not None:
        for name in {*projected, *hours}:
            if (path := job_output(name)) is None:
                continue
            if not (Path(results) / path).exists():
                states[name] = UNFINISHED
            else:
                states[name] = FINISHED if name in hours else BROUGHT_IN
        hours = {name: h for name, h in hours.items() if states.get(name) != UNFINISHED}
    rows = []
    for name in [*projected, *sorted(set(hours) - set(projected))]:
        p, m = projected.get(name), hours.get(name)
        ratio = m / p if p and m is not None else None
        rows.append(
            {
                "job": name,
                "projected_hours": p,
                "measured_hours": m,
                "ratio": ratio,
                "state": states.get(name),
            }
        )
    rows.sort(key=lambda r: -(r["projected_hours"] or 0.0))
    return rows


def totals(rows: list[dict]) -> dict:
    """Projected and measured hours summed over the rows of ``compare`` that have both, and
    their ratio (None where nothing was projected)."""
    both = [r for r in rows if r["projected_hours"] is not None and r["measured_hours"] is not None]
    p = sum(r["projected_hours"] for r in both)
    m = sum(r["measured_hours"] for r in both)
    return {"jobs": len(both), "projected_hours": p, "measured_hours": m,
            "ratio": m / p if p else None}  # fmt: skip


def _run_folders(benchmarks: Path) -> tuple[Path, Path]:
    """The models and logs folders of the run whose benchmark folder is ``benchmarks``
    (``<root>/benchmarks/<run>`` -> ``<root>/results/<run>/models``, ``<root>/logs/<run>``)."""
    root, run = benchmarks.resolve().parent.parent, benchmarks.resolve().name
    return root / "results" / run / "models", root / "logs" / run


def main(argv=None) -> int:
    """``python -m benchmarks.paper_jobs PROFILE_JSON BENCHMARK_DIR``: the per-job table of a
    ``paper_profile`` result (one JSON line, as ``benchmarks/run.py`` prints it) against a run's
    benchmark folder (e.g. ``benchmarks/paper``), in markdown: CPU hours, every start of a
    resumed training or scoring job counted (``measured_hours``), and only jobs whose output is
    in the run's results (``compare``); with ``--configfile``, only the jobs the run's config
    plans."""
    import argparse
    import json

    p = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    p.add_argument("profile", type=Path)
    p.add_argument("benchmarks", type=Path)
    p.add_argument(
        "--models", type=Path, help="the run's models folder (default: results/<run>/models)"
    )
    p.add_argument("--logs", type=Path, help="the run's logs folder (default: logs/<run>)")
    p.add_argument(
        "--configfile",
        nargs="+",
        help="the run's config files, as given to snakemake: only the jobs they plan (an "
        "overlay that leaves models out, as paper_cpu.yaml)",
    )
    p.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default="cpu",
        help="compare CPU time (default: what the projection prices) or wall time",
    )
    args = p.parse_args(argv)
    profile = json.loads(args.profile.read_text().strip().splitlines()[-1])
    models, logs = _run_folders(args.benchmarks)
    models = args.models or models
    rows = compare(
        profile,
        args.benchmarks,
        results=models.parent if models.is_dir() else None,
        models_dir=models,
        logs_dir=args.logs or logs,
        clock=args.clock,
    )

    if args.configfile:
        from tapmachine.pipeline.stages.progress import run_config

        planned = {job.name for job in paper_jobs(run_config(args.configfile))}
        rows = [r for r in rows if r["job"] in planned]

    def cell(v):
        return "" if v is None else f"{v:.2f}"

    print(
        f"| job | projected (h) | measured, {args.clock} (h) | measured / projected | state |\n"
        "|---|---|---|---|---|"
    )
    for r in rows:
        row = (r["projected_hours"], r["measured_hours"], r["ratio"])
        print(f"| {r['job']} | " + " | ".join(cell(v) for v in row) + f" | {r['state'] or ''} |")
    total = totals(rows)
    row = (total["projected_hours"], total["measured_hours"], total["ratio"])
    print(
        f"| summed over the {total['jobs']} jobs measured | " + " | ".join(map(cell, row)) + " | |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
