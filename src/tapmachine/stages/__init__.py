"""Stage wiring: the functions the CLI calls (read files, call the library, write outputs, track)
and a ``register(subparsers)`` per stage that adds its subcommands."""
