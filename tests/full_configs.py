"""The whole configs that the overlays paper.yaml and ucd_cpu.yaml replaced, and the settings the
overlays gained since, for the tests that check an overlay still gives that whole config."""

import copy
import json
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
#: The last commit whose paper.yaml and ucd_cpu.yaml were whole configs, not overlays.
FULL_CONFIGS_COMMIT = "b720a32"
#: The models whose converged TAP steps and evaluation paper.yaml gave ``solver: newton_sor``.
CONVERGED_NEWTON_SOR = [
    *("bmnist_h25", "bmnist_h50", "bmnist_h100", "bmnist_h500", "bmnist_h500_noiseaug"),
    *("bmnist_h500_cd1", "bmnist_h500_cd25", "bmnist_h500_pcd", "sbmnist_h500"),
    *("sbmnist_h500_cd25", "rmnist_h100", "rmnist_h500", "faces_h256"),
    *("bmnist_dbm2", "bmnist_dbm3"),
]
#: Settings an overlay gained after that commit (dotted paths), each absent from the old file.
ADDED_SINCE = {
    "workflow/config/paper.yaml": ["figures.fig3.exact", "harvest.rmnist_h500"]
    + [f"models.{m}.tap.solver" for m in CONVERGED_NEWTON_SOR],
    "workflow/config/ucd_cpu.yaml": [],
}
#: Fig. 10's models (their epochs set by the measured budget, ``FIG_BUDGET``).
FIG10_MODELS = [f"bmnist_fig10_{m}{n}" for m in ("tap", "adatap") for n in (3, 10, 100)]
#: Fig. 10's epochs and Fig. 11's size (units, joint epochs), chosen from
#: ``benchmarks/run.py paper_profile``'s measured costs to fit the 12-hour budget on 2 cores.
FIG_BUDGET = [f"models.{m}.epochs" for m in FIG10_MODELS] + [
    f"models.{m}.{key}" for m in ("bmnist_dbm2", "bmnist_dbm3") for key in ("hidden", "epochs")
]
#: Settings an overlay changed after that commit (dotted paths), each in the old file: converged
#: training's cap went from 100 to 2000 with the newton_sor solver (docs/departures.md); Figs. 3
#: and 4 gained the real-MNIST and faces models; Figs. 5-7 went from one model to a column per
#: model (their whole entries); ``FIG_BUDGET``; real MNIST's rho went from the plain step to the
#: logit step (docs/departures.md).
CHANGED_SINCE = {
    "workflow/config/paper.yaml": [f"models.{m}.tap.train_max_iter" for m in CONVERGED_NEWTON_SOR]
    + ["figures.fig3.models", "figures.fig4.models"]
    + ["figures.fig5", "figures.fig6", "figures.fig7"]
    + FIG_BUDGET
    + [f"models.{m}.rho_step" for m in ("rmnist_h100", "rmnist_h500")],
    "workflow/config/ucd_cpu.yaml": [],
}


def whole_config(name: str) -> dict:
    """The whole config ``name`` was at FULL_CONFIGS_COMMIT, with the settings its overlay gained
    or changed since (``ADDED_SINCE``, ``CHANGED_SINCE``) copied in as a run sees them: the
    overlay's, merged into config.yaml's where the overlay leaves them to it (``_as_run``)."""
    # YAML aliases load as one shared object; the JSON round trip gives each model its own
    old = _unshared(
        yaml.safe_load(
            subprocess.run(
                ["git", "show", f"{FULL_CONFIGS_COMMIT}:{name}"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
    )
    overlay = yaml.safe_load((ROOT / name).read_text())
    default = _unshared(yaml.safe_load((ROOT / "config.yaml").read_text()))
    for path in ADDED_SINCE[name] + CHANGED_SINCE[name]:
        *parents, key = path.split(".")
        target = old
        for p in parents:
            target = target[p]
        added = path in ADDED_SINCE[name]
        assert (key in target) != added, f"{path}: {'in' if added else 'not in'} the whole config"
        target[key] = _as_run(_at(default, path), _at(overlay, path))
    return old


def _at(config: dict, path: str):
    """The value at the dotted ``path`` of ``config``, or None where it has none."""
    for key in path.split("."):
        if not isinstance(config, dict) or key not in config:
            return None
        config = config[key]
    return config


def _as_run(default, overlay):
    """A setting as a run sees it: the overlay's value merged into config.yaml's (mappings key
    by key, anything else replaced), for a setting the overlay leaves, wholly or in part, to
    config.yaml."""
    from tapmachine.pipeline.configuration import merge

    if isinstance(default, dict) and isinstance(overlay, dict):
        return merge(default, overlay)
    return copy.deepcopy(default if overlay is None else overlay)


def _unshared(config: dict) -> dict:
    """``config`` with every mapping its own object (no two keys share one through an alias)."""
    return json.loads(json.dumps(config))
