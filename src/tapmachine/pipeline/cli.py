"""Command-line entry points called by the Snakemake rules (``tapmachine <command> ...``).

The parser is built from the stage modules (``pipeline.stages.*``, each adding its commands
with ``register`` and importing torch only when a command runs); the science is in the library
modules. Also ``python -m tapmachine``. Errors the user can act on (``TapmachineError``, which
every package's error subclasses, and a missing file) are printed as one line prefixed with
``tapmachine: error:`` and exit with status 2; a job stopped by a signal once it had kept its
state (``StoppedBySignal``) exits with 128 + the signal's number.
"""

from __future__ import annotations

import argparse
import importlib
import sys

__all__ = ["main"]


#: The stage modules under ``pipeline.stages``, each adding its commands with ``register``; the
#: order is that of ``--help`` only (no stage reaches into another's parsers).
STAGES = (
    "tracking",
    "data",
    "train",
    "progress",
    "harvest",
    "stability",
    "likelihood",
    "figures",
    "claims",
    "ucd",
    "denoise",
    "deep",
    "track",
    "workflow",
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tapmachine", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    for stage in STAGES:
        importlib.import_module(f"tapmachine.pipeline.stages.{stage}").register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    # Parsed before anything heavy is imported: `tapmachine --help` answers without torch.
    args = _parser().parse_args(argv)
    from tapmachine.core import eta

    eta.ENABLED = True  # a job: long loops report progress and an ETA to its log
    from tapmachine.pipeline.heap import keep_freed_memory

    keep_freed_memory()
    import tapmachine.ucd  # noqa: F401  (registers the DBM methods in training's registry)
    from tapmachine.core.errors import TapmachineError, one_line
    from tapmachine.io.files import is_disk_full

    try:
        args.func(args)
    except (TapmachineError, FileNotFoundError) as err:
        print(f"tapmachine: error: {one_line(err)}", file=sys.stderr)
        return getattr(err, "exit_status", 2)
    except (OSError, RuntimeError) as err:
        if not is_disk_full(err):
            raise
        print(
            f"tapmachine: error: no space left on device ({err}); files written before are whole "
            "(atomic writes): free some space and run again",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
