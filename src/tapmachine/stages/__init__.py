"""Stage wiring: what the CLI calls (read files, call the library, write outputs, track)."""
