"""``python -m tapmachine``: the ``tapmachine`` command."""

import sys

from tapmachine.cli import main

sys.exit(main())
