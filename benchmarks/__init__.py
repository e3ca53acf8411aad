"""The project benchmarks (``benchmarks/run.py``): one module per area, ratios measured in one run.

Importing the package puts the repository's ``src`` first on ``sys.path``, so the benchmarks run
the checkout's ``tapmachine`` without installing it.
"""

import sys
from pathlib import Path

#: The repository root.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))
