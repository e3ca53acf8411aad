"""tapmachine: TAP machines and UCD-LMI for Boltzmann machines.

The public names, scikit-learn estimators (``tapmachine.learn``):

- ``TAPMachine``: RBMs and deep TAP machines of the first paper (Tramel et al.);
- ``UCDDBM``: the second paper's DBMs (Taniguchi et al.), trained by UCD-LMI or PCD.

Both are imported on first use, so that ``import tapmachine`` (the command) loads neither torch
nor scikit-learn.
"""

__version__ = "0.1.0"

__all__ = ["TAPMachine", "UCDDBM", "__version__"]


def __getattr__(name: str):
    if name in ("TAPMachine", "UCDDBM"):
        from tapmachine import learn

        return getattr(learn, name)
    raise AttributeError(f"module 'tapmachine' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
