"""Stopping a checkpointed training on a signal, with its state kept.

A scheduler ends a job with SIGTERM (SLURM at its time limit, then SIGKILL after ``KillWait``,
30 s by default; ``scancel``), a user with Ctrl-C. Ended at once, a job loses what it trained
since its state was last kept, up to ``checkpointing.IN_PROGRESS_SECONDS``. Inside
``StopRequests`` the first of ``STOP_SIGNALS`` is only noted: the loop keeps the state at the
next minibatch boundary (or, in an epoch's evaluation, in that epoch's checkpoint) and then
raises ``StoppedBySignal``, so a stop costs at most the minibatch under way and the job resumes
where it stopped. A second signal gets what it would have got without (the handler before): a
job in a long step or evaluation can still be ended at once.
"""

from __future__ import annotations

import os
import signal
import threading

__all__ = ["STOP_SIGNALS", "StopRequests"]

#: Signals that ask a checkpointed training to keep its state and stop.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequests:
    """A context in which ``STOP_SIGNALS`` are noted (``requested``: the first one's number, or
    None) instead of acted on; the handlers before it are restored on exit. Outside the main
    thread, where Python cannot set handlers, nothing is caught and ``requested`` stays None."""

    def __init__(self):
        self.requested: int | None = None
        self.previous: dict[int, object] = {}

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self.previous[signum] = signal.signal(signum, self._note)
        return self

    def __exit__(self, exc_type, *_) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        self.previous.clear()
        if self.requested is not None and exc_type is None:
            os.kill(os.getpid(), self.requested)  # noted but not acted on: as without

    def _note(self, signum, frame) -> None:
        if self.requested is None:
            self.requested = signum
            return
        # A second signal: as without this context (the default ends the process).
        before = self.previous.pop(signum, None)
        signal.signal(signum, signal.SIG_DFL if before is None else before)
        os.kill(os.getpid(), signum)
