"""The jobs of a run at work now (``tapmachine progress``'s second table): which jobs the newest
Snakemake run started and has not finished (its run log), and each one's stage and ETA, read
from the tail of its own log (``core.eta``). The first table, the epochs of training read from
checkpoints, is ``progress``'s own."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

__all__ = ["unfinished_snakemake_jobs", "running_jobs", "format_running"]

_JOB_START = re.compile(r"^(?:local)?rule \w+:$")
_JOB_FIELD = re.compile(r"^\s+(jobid|log): (.*)$")
_JOB_END = re.compile(r"^Finished jobid: (\d+)\b")


def unfinished_snakemake_jobs(workdir: str | Path = ".") -> set[Path] | None:
    """The log files (resolved paths) of the jobs the newest Snakemake run in ``workdir`` started
    and has not finished or failed, read from its run log (``.snakemake/log/*.snakemake.log``).
    Logs of commands that run no workflow (``--unlock``, a start refused by the lock: no DAG
    built) are passed over; None where no run is logged, or where the newest run names no job
    (nothing to do, or ``--quiet``: nothing to filter by). A job killed with the run that started
    it is not in a later run's log."""
    runs = sorted((Path(workdir) / ".snakemake" / "log").glob("*.snakemake.log"), reverse=True)
    for run_log in runs:
        text = run_log.read_text(errors="replace")
        if "Building DAG of jobs" not in text or "LockException" in text:
            continue
        started, ended, block = {}, set(), None
        for line in text.splitlines():
            if _JOB_START.match(line):
                block = {}
            elif line.startswith("Error in rule "):
                block = {"error": True}
            elif (field := _JOB_FIELD.match(line)) and block is not None:
                block[field[1]] = field[2]
                if "jobid" in block and "log" in block:
                    if block.get("error"):
                        ended.add(block["jobid"])
                    else:
                        started[block["jobid"]] = block["log"]
                    block = None
            elif end := _JOB_END.match(line):
                ended.add(end[1])
            elif not line.startswith(" "):
                block = None
        if not started:
            return None
        return {
            (Path(workdir) / log.strip()).resolve()
            for jobid, logs in started.items()
            if jobid not in ended
            for log in logs.split(",")
        }
    return None


def running_jobs(
    logs: str | Path,
    active_minutes: float = 15.0,
    now: float | None = None,
    unfinished: set[Path] | None = None,
):
    """The jobs of a run still at work, read from their logs under ``logs`` (``logs/<run>``):
    every log written in the last ``active_minutes`` that leaves a loop unfinished, with that
    loop's newest report (``eta.unfinished_status``: a job's own ``progress ...`` line or a tqdm
    bar; between two epochs, while the job evaluates, the job's own line). Given ``unfinished``
    (``unfinished_snakemake_jobs``), only those logs: a job stopped with an earlier run is not
    listed while its log is still recent. The ETA counts from the log's last write, so it
    overstates by the time since the report where that is older. Rows ``{job, desc, done,
    total, eta_hours}``; ``job`` is the log's path below ``logs`` (stage/name)."""
    from tapmachine.core import eta

    logs = Path(logs)
    now = time.time() if now is None else now
    rows = []
    for log in sorted(logs.rglob("*.log")) if logs.is_dir() else []:
        age = now - log.stat().st_mtime
        if age > active_minutes * 60:
            continue
        if unfinished is not None and log.resolve() not in unfinished:
            continue
        with open(log, "rb") as fh:  # the tail: a long job's log is long
            fh.seek(max(0, log.stat().st_size - 65536))
            status = eta.unfinished_status(fh.read().decode(errors="replace"))
        if status is None:
            continue
        left = max(status["eta_seconds"] - age, 0.0)  # the report is at least `age` seconds old
        rows.append(
            {
                "job": str(log.relative_to(logs).with_suffix("")),
                "desc": status["desc"],
                "done": status["done"],
                "total": status["total"],
                "eta_hours": left / 3600.0,
            }
        )
    return rows


def format_running(rows: list[dict]) -> str:
    if not rows:
        return "no job reports progress now\n"
    lines = [f"{'running job':<40} {'done':>13} {'ETA':>8}  stage"]
    for r in rows:
        done = f"{r['done']}/{r['total']}"
        left = "?" if math.isnan(r["eta_hours"]) else _eta_text(r["eta_hours"])
        lines.append(f"{r['job']:<40} {done:>13} {left:>8}  {r['desc']}")
    return "\n".join(lines) + "\n"


def _eta_text(hours: float) -> str:
    from tapmachine.core.eta import format_seconds

    return format_seconds(hours * 3600.0)
