"""Two-dimensional embeddings of TAP solutions and data: Isomap (the paper) and UMAP.

``embed(fit, others)`` fits the embedding on the rows of ``fit`` and maps each array of
``others`` into the same plane (Fig. 6: fitted on the last epoch's solutions, earlier epochs
transformed; Fig. 7: fitted on the initialisations, solutions transformed).

Small or degenerate sets are handled explicitly, never by a crash: exact duplicate rows are
fitted once (a zero distance breaks the neighbourhood graph) and mapped back; with fewer than
``MIN_MANIFOLD`` distinct rows, or if the manifold method fails, the embedding falls back to the
two leading principal components of the distinct rows (all zeros when every row is the same).
The ``info`` dict says which method was used and why.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["MIN_MANIFOLD", "embed", "pca_embedding"]

MIN_MANIFOLD = 5


class _PCA:
    """Projection on the (up to) two leading principal directions of the fitted rows.

    scikit-learn's PCA does the fit; the degenerate cases stay here (one row, no variance,
    rank 1: PCA needs n_components <= the rank, the figures still want two columns).
    """

    def __init__(self, X: np.ndarray):
        from sklearn.decomposition import PCA

        self.model, self.k = None, 0
        centred = X - X.mean(0)
        if X.shape[0] > 1 and np.abs(centred).max() > 0:
            s = np.linalg.svd(centred, compute_uv=False)
            self.k = min(2, int((s > s[0] * 1e-12).sum()))
            self.model = PCA(n_components=self.k, svd_solver="full").fit(X)

    def transform(self, X: np.ndarray) -> np.ndarray:
        out = np.zeros((X.shape[0], 2))
        if self.model is not None and X.shape[0]:
            out[:, : self.k] = self.model.transform(X)
        return out


def pca_embedding(fit: np.ndarray, others: Sequence[np.ndarray] = ()):
    """The PCA fallback of ``embed`` on its own: (fit coordinates, [other coordinates])."""
    fit = np.asarray(fit, dtype=np.float64)
    model = _PCA(fit)
    return model.transform(fit), [model.transform(np.asarray(o, np.float64)) for o in others]


def _umap(n_neighbors: int, seed: int, n: int):
    if not os.environ.get("NUMBA_CACHE_DIR"):
        cache = Path(tempfile.gettempdir()) / "tapmachine-numba-cache"
        cache.mkdir(parents=True, exist_ok=True)
        os.environ["NUMBA_CACHE_DIR"] = str(cache)
    import umap

    # Spectral initialisation needs a well-connected graph; tiny sets start at random.
    init = "spectral" if n > 3 * n_neighbors else "random"
    return umap.UMAP(
        n_components=2, n_neighbors=n_neighbors, random_state=seed, init=init, n_jobs=1
    )


def embed(
    fit: np.ndarray,
    others: Sequence[np.ndarray] = (),
    method: str = "isomap",
    n_neighbors: int = 10,
    seed: int = 0,
) -> tuple[np.ndarray, list[np.ndarray], dict]:
    """Fit a 2-D embedding on ``fit`` (n, d) and map ``others`` (each (m, d)) into it.

    Parameters
    ----------
    method : "isomap" (sklearn.manifold.Isomap) or "umap" (umap-learn)
    n_neighbors : int
        Neighbourhood size, reduced to (distinct rows - 1) for small sets.
    seed : int
        UMAP's random state (Isomap is deterministic).

    Returns
    -------
    (fit coordinates (n, 2), [coordinates (m, 2) of each of ``others``], info) where info holds
    ``method`` (the one actually used), ``n_neighbors``, ``n_fit``, ``n_distinct`` and ``note``.
    """
    if method not in ("isomap", "umap"):
        raise ValueError(f"embedding method must be 'isomap' or 'umap', got {method!r}")
    fit = np.asarray(fit, dtype=np.float64)
    others = [np.asarray(o, dtype=np.float64).reshape(-1, fit.shape[1]) for o in others]
    if fit.ndim != 2 or fit.shape[0] == 0:
        raise ValueError(f"embed needs a non-empty (n, d) array to fit, got shape {fit.shape}")
    if not np.isfinite(fit).all() or not all(np.isfinite(o).all() for o in others):
        raise ValueError("embed: rows contain NaN or inf (non-converged solutions?)")
    distinct, inverse = np.unique(fit, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    n_distinct = distinct.shape[0]
    k = max(1, min(int(n_neighbors), n_distinct - 1))
    info = {
        "method": method,
        "n_neighbors": k,
        "n_fit": int(fit.shape[0]),
        "n_distinct": int(n_distinct),
        "note": "",
    }

    def fallback(note: str):
        info.update(method="pca", note=note)
        model = _PCA(distinct)
        return model.transform(distinct)[inverse], [model.transform(o) for o in others], info

    if n_distinct < MIN_MANIFOLD:
        return fallback(
            f"{n_distinct} distinct points (< {MIN_MANIFOLD}): principal components instead "
            f"of {method}"
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if method == "isomap":
                from sklearn.manifold import Isomap

                model = Isomap(n_neighbors=k, n_components=2)
            else:
                model = _umap(max(2, k), seed, n_distinct)
            coords = model.fit_transform(distinct)
            mapped = [model.transform(o) if o.shape[0] else np.zeros((0, 2)) for o in others]
    except Exception as err:  # noqa: BLE001 - a degenerate geometry must not stop a figure
        return fallback(f"{method} failed ({type(err).__name__}: {err}); principal components")
    coords = np.asarray(coords, dtype=np.float64)
    mapped = [np.asarray(m, dtype=np.float64) for m in mapped]
    if not np.isfinite(coords).all() or not all(np.isfinite(m).all() for m in mapped):
        return fallback(f"{method} gave non-finite coordinates; principal components")
    return coords[inverse], mapped, info
