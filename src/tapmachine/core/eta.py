"""Progress with an ETA in a job's log, and reading it back (``tapmachine progress``).

A long loop reports as ``with report(total, "AIS") as p: ... p.advance()``: in a job (the command
line sets ``ENABLED``), one line as it starts, then at most one every ``interval`` seconds on
stderr (the rule's log), and one at the end::

    progress AIS: 5000/14500 (34%), 2m10s elapsed, ETA 4m07s

Plain lines rather than a redrawn bar, so a log read with ``tail`` or ``grep`` shows them and
``last_status`` finds the newest one. tqdm's bars (training's minibatches, harvest's TAP starts)
are read back as well. ``advance`` is thread-safe (AIS runs groups of chains in threads).
"""

from __future__ import annotations

import math
import os
import re
import sys
import threading
import time

__all__ = ["Progress", "report", "format_seconds", "last_status", "unfinished_status"]

#: Whether ``report`` reports: the command line (a job) turns it on; a library user's loops stay
#: quiet.
ENABLED = False

#: Seconds between two lines of one loop (``$TAPMACHINE_PROGRESS_SECONDS``, default 30).
INTERVAL_ENV = "TAPMACHINE_PROGRESS_SECONDS"


def format_seconds(seconds: float) -> str:
    """``1h02m``, ``4m07s``, ``12s``; ``?`` when unknown."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


class Progress:
    """Count ``total`` steps of a loop named ``desc``; the ETA is the elapsed time per step times
    the steps left (steps of even cost: sweeps, betas, blocks, epochs)."""

    def __init__(
        self, total: int, desc: str, interval: float | None = None, initial: int = 0, file=None
    ):
        # ``initial``: steps done before this process (a resumed job); the pace is this one's
        self.total, self.desc, self.done, self.initial = (
            int(total),
            desc,
            int(initial),
            int(initial),
        )
        self._written = -1
        env = os.environ.get(INTERVAL_ENV)
        self.interval = interval if interval is not None else float(env) if env else 30.0
        self.file = file or sys.stderr
        self._lock = threading.Lock()
        self._start = self._last = time.monotonic()

    def __enter__(self) -> Progress:
        self.begin()
        return self

    def begin(self) -> None:
        """The opening line (``with`` writes it), so that the log shows the loop
        (``unfinished_status``) before its first step ends: a resumed job's first epoch, and its
        evaluation, can take an hour."""
        self._write(self._start)

    def __exit__(self, *exc) -> None:
        if exc[0] is None and self._written != self.done:
            self._write(time.monotonic())

    def line(self, now: float | None = None) -> str:
        elapsed = (now or time.monotonic()) - self._start
        steps = self.done - self.initial
        left = elapsed / steps * (self.total - self.done) if steps else math.nan
        pct = 100.0 * self.done / self.total if self.total else 100.0
        return (
            f"progress {self.desc}: {self.done}/{self.total} ({pct:.0f}%), "
            f"{format_seconds(elapsed)} elapsed, ETA {format_seconds(left)}"
        )

    def _write(self, now: float) -> None:
        print(self.line(now), file=self.file, flush=True)
        self._last, self._written = now, self.done

    def advance(self, n: int = 1) -> None:
        with self._lock:
            self.done += n
            now = time.monotonic()
            if now - self._last >= self.interval or self.done >= self.total:
                self._write(now)


class _Quiet:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def advance(self, n: int = 1) -> None:
        return None


def report(total: int, desc: str) -> Progress | _Quiet:
    """A ``Progress`` when running as a job (``ENABLED``), else one that says nothing."""
    return Progress(total, desc) if ENABLED else _Quiet()


_OURS = re.compile(
    r"progress (?P<desc>.+?): (?P<done>\d+)/(?P<total>\d+) \(\d+%\), \S+ elapsed, ETA (?P<eta>\S+)"
)
_TQDM = re.compile(
    r"(?P<desc>[^\r\n|]*?):\s*\d+%\|[^|]*\|\s*(?P<done>\d+)/(?P<total>\d+)\s*"
    r"\[[\d:]+<(?P<eta>[\d:?]+)"
)


def _seconds(text: str) -> float:
    """Seconds of ``format_seconds``' or tqdm's (``12:34``, ``1:02:03``) ETA."""
    if "?" in text:
        return math.nan
    if ":" in text:
        parts = [int(p) for p in text.split(":")]
        return float(sum(p * 60**i for i, p in enumerate(reversed(parts))))
    total = 0.0
    for value, unit in re.findall(r"(\d+)([hms])", text):
        total += int(value) * {"h": 3600, "m": 60, "s": 1}[unit]
    return total


def _reports(log_text: str) -> list[re.Match]:
    """Every progress report of a log (``_OURS`` and ``_TQDM``), oldest first."""
    matches = [m for pattern in (_OURS, _TQDM) for m in pattern.finditer(log_text)]
    return sorted(matches, key=lambda m: m.start())


def _status(match: re.Match) -> dict:
    return {
        "desc": match["desc"].strip(),
        "done": int(match["done"]),
        "total": int(match["total"]),
        "eta_seconds": _seconds(match["eta"]),
    }


def last_status(log_text: str) -> dict | None:
    """The newest progress report of a log: ``{desc, done, total, eta_seconds}``, or None."""
    reports = _reports(log_text)
    return _status(reports[-1]) if reports else None


def unfinished_status(log_text: str) -> dict | None:
    """The newest report, as ``last_status``, of a loop the log leaves unfinished, or None.

    Each loop (one description) counts by its newest report only. So a job between two bars
    (its epoch's bar complete, the epoch's evaluation running) is still seen by its own outer
    loop (``progress training tap: 24/100 ...``), while a job whose loops all reached their
    totals has none.
    """
    newest = {}
    for match in _reports(log_text):
        newest.pop(match["desc"].strip(), None)  # re-inserted last: dicts keep insertion order
        newest[match["desc"].strip()] = match
    open_loops = [m for m in newest.values() if int(m["done"]) < int(m["total"])]
    return _status(open_loops[-1]) if open_loops else None
