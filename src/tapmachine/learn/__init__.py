"""scikit-learn estimators of both papers' machines, the public names of the library.

- ``TAPMachine`` (``tap_machine``): RBMs and deep TAP machines of the first paper (Tramel et al.),
  any unit prior of its App. C, trained by TAP (Alg. 2), CD-k or PCD-k, with greedy pretraining
  (Alg. 4) for several hidden layers;
- ``UCDDBM`` (``ucd_dbm``): the second paper's DBMs (Taniguchi et al.), trained by UCD-LMI or its
  PCD baselines.

Both are trained by the workflow's one training path: their machine, training rows and random
stream come from the gradient method's ``start`` in ``train.methods``' registry, and ``fit`` and
``partial_fit`` run ``train.loop.train`` (``partial_fit``: one epoch on the ``train.loop.Carried``
state of the epochs before). ``base`` holds what they share: validation, the support of the
visible units, seeding, the training calls and the TAP log-likelihood.

Layer: above ``tap_paper`` and ``ucd`` (``UCDDBM`` needs the DBM methods registered), beside
``figures``; ``tapmachine`` exports both names lazily, so the command does not import
scikit-learn.
"""

from tapmachine.learn.tap_machine import TAPMachine
from tapmachine.learn.ucd_dbm import UCDDBM

__all__ = ["TAPMachine", "UCDDBM"]
