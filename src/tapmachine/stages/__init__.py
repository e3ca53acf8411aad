"""Stage wiring: the functions the command line calls (read files, call the library, write
outputs, track with ``tapmachine.tracking``), each module with a ``register(subparsers)``."""
