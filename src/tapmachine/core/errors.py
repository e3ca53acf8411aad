"""The one base of the errors a user can act on: bad input, a missing or damaged file, a run that
cannot go on. Each package's error subclasses it; the ``tapmachine`` command prints any of them as
one line, ``tapmachine: error: <message>``, and exits with status 2 (``pipeline.cli``)."""

__all__ = ["TapmachineError", "one_line"]


class TapmachineError(Exception):
    """An error whose message names what is wrong and where (the file, key or value at fault)."""


def one_line(error: BaseException) -> str:
    """The message of ``error`` as one line (its whitespace, newlines included, collapsed)."""
    return " ".join(str(error).split())
