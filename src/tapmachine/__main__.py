"""``python -m tapmachine``: the ``tapmachine`` command."""

import sys

from tapmachine.pipeline.cli import main

sys.exit(main())
