"""The one base of the errors a user can act on: bad input, a missing or damaged file, a run that
cannot go on. Each package's error subclasses it; the ``tapmachine`` command prints any of them as
one line, ``tapmachine: error: <message>``, and exits with the error's ``exit_status``: 2, or
128 + the signal's number for a job stopped by a signal (``StoppedBySignal``), as a shell reports
a process that signal ended (``pipeline.cli``)."""

import signal

__all__ = ["StoppedBySignal", "TapmachineError", "one_line"]


class TapmachineError(Exception):
    """An error whose message names what is wrong and where (the file, key or value at fault)."""

    #: The ``tapmachine`` command's exit status for it.
    exit_status = 2


class StoppedBySignal(TapmachineError):
    """A job that stopped on a signal (SIGTERM, Ctrl-C) once it had kept its state: running it
    again resumes it. MLflow marks its run KILLED, as for a job the signal ended at once."""

    def __init__(self, signum: int, message: str):
        super().__init__(f"stopped on {signal.Signals(signum).name}: {message}")
        self.signum = signum
        self.exit_status = 128 + signum


def one_line(error: BaseException) -> str:
    """The message of ``error`` as one line (its whitespace, newlines included, collapsed)."""
    return " ".join(str(error).split())
