"""The jobs of a run at work now (``tapmachine progress``'s second table): which jobs the newest
Snakemake run started and has not finished (its run log), and each one's stage and ETA, read
from the tail of its own log (``core.eta``); and the jobs that run lost (``failed_snakemake_jobs``),
which ``--keep-going`` otherwise leaves to the run log. The first table, the epochs of training
read from checkpoints, is ``progress``'s own."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

__all__ = [
    "unfinished_snakemake_jobs",
    "failed_snakemake_jobs",
    "format_failed",
    "running_jobs",
    "format_running",
]

_JOB_START = re.compile(r"^(?:local)?rule \w+:$")
_JOB_FIELD = re.compile(r"^\s+(jobid|log): (.*)$")
_JOB_END = re.compile(r"^Finished jobid: (\d+)\b")
_JOB_ERROR = re.compile(r"^Error in rule (\w+):$")
# The end of a shell job's CalledProcessError, just before its "Error in rule" block.
_SHELL_EXIT = re.compile(
    r"(?:returned non-zero exit status (\d+)|died with <Signals\.(\w+): (\d+)>)\.$"
)
# Exit statuses of a job that a stopped run took down with it: SIGINT and SIGTERM, raw or as a
# shell's 128 + signal.
_STOPPED = {2, 15, 130, 143}


def _newest_run_log(workdir: str | Path) -> Path | None:
    """The newest Snakemake run log in ``workdir`` that built a DAG: an ``--unlock``, or a start
    the lock refused, is passed over."""
    runs = sorted((Path(workdir) / ".snakemake" / "log").glob("*.snakemake.log"), reverse=True)
    for run_log in runs:
        text = run_log.read_text(errors="replace")
        if "Building DAG of jobs" in text and "LockException" not in text:
            return run_log
    return None


def unfinished_snakemake_jobs(workdir: str | Path = ".") -> set[Path] | None:
    """The log files (resolved paths) of the jobs the newest Snakemake run in ``workdir`` started
    and has not finished or failed, read from its run log (``.snakemake/log/*.snakemake.log``).
    Logs of commands that run no workflow (``--unlock``, a start refused by the lock: no DAG
    built) are passed over; None where no run is logged, or where the newest run names no job
    (nothing to do, or ``--quiet``: nothing to filter by). A job killed with the run that started
    it is not in a later run's log."""
    run_log = _newest_run_log(workdir)
    if run_log is None:
        return None
    started, ended, block = {}, set(), None
    for line in run_log.read_text(errors="replace").splitlines():
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


def failed_snakemake_jobs(workdir: str | Path = ".") -> list[dict]:
    """The jobs the newest Snakemake run in ``workdir`` lost, read from its run log: rows
    ``{rule, jobid, log, exit, signal, stopped}``. ``exit`` is a shell job's exit status (None
    where the log gives none: a ``run:`` job's exception), ``signal`` the signal named where the
    job died of one, and ``stopped`` whether the job went down with a stopped run (SIGINT or
    SIGTERM, raw or as 130 and 143) rather than failing on its own: an exit status of 137 is a
    SIGKILL, often the kernel's out-of-memory killer (``dmesg``). Under ``--keep-going`` the run
    goes on past a failed job, which it runs again only on its next start."""
    run_log = _newest_run_log(workdir)
    if run_log is None:
        return []
    failed, block, exit_status, signal = [], None, None, None
    for line in run_log.read_text(errors="replace").splitlines():
        if shell_exit := _SHELL_EXIT.search(line):
            status, signal = shell_exit[1] or shell_exit[3], shell_exit[2]
            exit_status = int(status)
        elif error := _JOB_ERROR.match(line):
            block = {"rule": error[1], "exit": exit_status, "signal": signal}
            exit_status = signal = None
            failed.append(block)
        elif (field := _JOB_FIELD.match(line)) and block is not None:
            value = field[2].removesuffix(" (check log file(s) for error details)")
            block[field[1]] = value
        elif not line.startswith(" "):
            block = None
    for row in failed:
        row.setdefault("jobid", None)
        row.setdefault("log", None)
        row["stopped"] = row["exit"] in _STOPPED
    return failed


def format_failed(rows: list[dict]) -> str:
    """``failed_snakemake_jobs``'s jobs that failed on their own, each with its exit and log, and
    a count of those a stopped run took with it; empty where there are none."""
    lost = [r for r in rows if not r["stopped"]]
    lines = []
    if lost:
        lines.append(f"{'failed job (newest snakemake run)':<40} {'exit':>13}  log")
        for r in lost:
            if r["exit"] is None:
                status = "?"
            elif r["signal"]:
                status = f"{r['signal']} ({r['exit']})"
            else:
                status = str(r["exit"])
            if r["exit"] == 137:
                status += " SIGKILL"
            lines.append(f"{r['rule']:<40} {status:>13}  {r['log'] or '(no log)'}")
        if any(r["exit"] == 137 for r in lost):
            lines.append("SIGKILL: often the out-of-memory killer; `dmesg` names what it killed")
        lines.append("snakemake runs a failed job again on its next start")
    if stopped := len(rows) - len(lost):
        lines.append(f"{stopped} job(s) went down with the stopped run (SIGINT/SIGTERM)")
    return "\n".join(lines) + "\n" if lines else ""


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
