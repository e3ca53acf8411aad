"""Harvest of TAP solutions over training (first paper, Sec. VII.2-VII.3, Figs. 5-7).

For a machine saved after a given epoch, TAP (Alg. 1) is started from the first ``n_init``
training images (eqs. 37-38: a_v = x, c_v = 0, hidden layers at their prior means) and iterated
until the mean squared step of the magnetisations falls below ``tol`` (the paper: 1e-8), or
``max_iter`` iterations. Converged solutions are grouped into unique solutions by
``tap.unique`` (max-abs distance of all layers' magnetisations within ``dedup_tol``); every
initialisation maps to its unique solution, or to -1 if it did not converge. Non-converged rows
are counted and reported and never used: their magnetisations, variances and free energies are
stored as NaN.

The solutions of one epoch are written to one ``.npz`` file (``save_solutions``; keys below) and
one small CSV of the unique solutions. ``run_harvest`` is the stage the workflow runs: it reads a
training checkpoint, harvests, writes both files atomically and logs to MLflow (a run in the
"harvest" experiment, plus per-epoch metrics on the model's training run).

Keys of the ``.npz`` (K initialisations, G unique solutions, Nv visible, Nh hidden units of all
hidden layers side by side):

    a_visible, c_visible (K, Nv); a_hidden, c_hidden (K, Nh)   converged a and c (float32),
                                 NaN where not converged
    free_energy (K,)             TAP free energy F (``tap.free_energy``), NaN if not converged
    converged (K,) bool; iterations (K,) int
    inverse (K,) int             unique solution of each initialisation, -1 if not converged
    representatives (G,) int     initialisation whose solution represents each unique solution
    multiplicity (G,) int        initialisations mapped to each unique solution
    unique_free_energy (G,)      F of each unique solution (its representative's)
    unique_site_visible, unique_site_hidden, unique_mean_field, unique_onsager (G,)
                                 the parts of -F of each unique solution
                                 (``tap.free_energy_terms``, eq. 36)
    energy_normaliser ()         sum of ln Z_B over the units (``tap.energy_normaliser``):
                                 F minus it is the usual binary-RBM free energy; NaN unless
                                 every layer is binary
    nearest_separation (G,)      max-abs distance of each unique solution to its nearest other
                                 (``separation_stats``: near copies split by the tolerance)
    init_index (K,) int          row of the dataset's training split each initialisation is
    labels (K,) int              label of each initialisation
    layer_sizes, image_shape     unit counts per layer; (H, W) of the visible layer
    dedup_tol, tol, max_iter, damping, retry_damping   the settings that produced the file
                                 (retry_damping NaN: no second pass)
    merge_rule, solver, polish_solver, polish_tol      merging and solving (polish_tol NaN: not
                                 polished; ``HarvestSettings``)
    polished (K,) bool; polish_iterations (K,) int     rows brought to polish_tol, and how many
                                 iterations that took
    epoch, model, dataset, substitute, train_run_id, harvest_run_id, dtype   provenance
    summary                      JSON of ``summarise`` (counts, Helmholtz estimate, spread, ...)

Modules: ``settings``, ``solutions`` (solving and merging), ``files``, ``run`` (the stage).
"""

from tapmachine.tap_paper.harvest.files import load_solutions, save_solutions, unique_table
from tapmachine.tap_paper.harvest.run import load_checkpoint, run_harvest
from tapmachine.tap_paper.harvest.settings import MERGE_RULES, HarvestError, HarvestSettings
from tapmachine.tap_paper.harvest.solutions import (
    NEAR_COPY_DISTANCE,
    harvest,
    merge,
    nearest_separation,
    polish,
    separation_stats,
    summarise,
)

__all__ = [
    "HarvestError",
    "HarvestSettings",
    "MERGE_RULES",
    "NEAR_COPY_DISTANCE",
    "harvest",
    "load_checkpoint",
    "load_solutions",
    "merge",
    "nearest_separation",
    "polish",
    "run_harvest",
    "save_solutions",
    "separation_stats",
    "summarise",
    "unique_table",
]
