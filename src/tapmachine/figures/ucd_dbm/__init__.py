"""Second paper, Figs. 2-3 and Tables 1-2: what DBMs trained by UCD-LMI and the baselines do.

- ``samples`` (Fig. 2): samples by local search from uniform states (Sec. 4.4), one panel per
  (dataset, model); CSV rows per sample: local-search steps T, the fraction of pixels on and the
  Hamming distance to the nearest training image; claims per model (``ucd.diversity``): distinct
  samples of n, mean pairwise Hamming distance against the data's (n test images), distance to
  the nearest training image (0 = a copy); verdicts: UCD-LMI's samples are diverse and no copies
  (Fig. 2b), PCD without pretraining fails (Fig. 2a: collapsed or not diverse).
- ``completion`` (Fig. 3): test images with the lower half masked, completed by local search on
  the clamped model (``ucd.generate.complete``); rows: masked input, completion, truth. CSV: per
  image the per-pixel error of the completed half; claim: mean error per model against the error
  of filling the half with the training mean (a baseline that ignores the visible half); verdict:
  close to, not equal to, the truth (0 < error < the mean fill's).
- ``table1`` / ``table2``: classifier FID (``tapmachine.ucd.fid``; NOT the paper's Inception FID) of
  every DBM, with the TAP log-likelihood of test images (first paper, App. E) beside it in
  Table 1, and whether the two measures rank the methods alike (Kendall's tau per dataset); the
  FID of two halves of the test set as the floor row; the coupling time tau and local-search
  steps T of training (Sec. 5: "from 5 to 30"). Verdicts on the paper's claims: UCD-LMI has the
  lowest FID (Table 1); removing the unbiased gradient raises it most, and removing any one
  component raises it (Table 2, against the full model at the ablation's size: ``full`` when the
  ablation has one, else ``ucd_lmi``); the titles say where the DBMs are below the paper's size.

Modules: ``images`` (Figs. 2-3, and ``epoch_image``: the per-epoch image of DBM training),
``tables`` (Tables 1-2).
"""

from tapmachine.figures.ucd_dbm.images import completion, epoch_image, image_grid, samples
from tapmachine.figures.ucd_dbm.tables import FLOOR_MODEL, table1, table2

__all__ = [
    "FLOOR_MODEL",
    "completion",
    "epoch_image",
    "image_grid",
    "samples",
    "table1",
    "table2",
]
