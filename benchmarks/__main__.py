"""`python -m benchmarks [NAME ...]`: the same command line as `python benchmarks/run.py`."""

import sys

from benchmarks.run import main

sys.argv[0] = "python -m benchmarks"
sys.exit(main())
