"""Stage wiring: what each ``tapmachine <command>`` does.

Each module reads the files a stage needs, calls the library (which knows nothing of files it is
not given, nor of tracking), writes the outputs and records them as one run each
(``pipeline.tracking.records``, logged by ``pipeline.tracking.recorder``).
Each has ``register(subparsers)`` adding its commands; ``tapmachine.pipeline.cli`` calls them all.
"""
