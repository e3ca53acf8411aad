"""The whole configs that the overlays paper.yaml and ucd_cpu.yaml replaced, and the settings the
overlays gained since, for the tests that check an overlay still gives that whole config."""

import copy
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
#: The last commit whose paper.yaml and ucd_cpu.yaml were whole configs, not overlays.
FULL_CONFIGS_COMMIT = "b720a32"
#: Settings an overlay gained after that commit (dotted paths), each absent from the old file.
ADDED_SINCE = {
    "workflow/config/paper.yaml": ["figures.fig3.exact"],
    "workflow/config/ucd_cpu.yaml": [],
}


def whole_config(name: str) -> dict:
    """The whole config ``name`` was at FULL_CONFIGS_COMMIT, with the settings its overlay gained
    since (``ADDED_SINCE``) copied in from the overlay."""
    old = yaml.safe_load(
        subprocess.run(
            ["git", "show", f"{FULL_CONFIGS_COMMIT}:{name}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    overlay = yaml.safe_load((ROOT / name).read_text())
    for path in ADDED_SINCE[name]:
        *parents, key = path.split(".")
        source, target = overlay, old
        for p in parents:
            source, target = source[p], target[p]
        assert key not in target, f"{path} was in the whole config already"
        target[key] = copy.deepcopy(source[key])
    return old
