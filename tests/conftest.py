"""Shared test settings."""

import torch

# Tiny models gain nothing from intra-op threads, and on a loaded 2-core machine OpenMP barriers
# turn each microsecond matmul into milliseconds.
torch.set_num_threads(1)
