"""The package's layers: imports only point down, and nothing below the pipeline imports MLflow.

From the bottom: ``core`` (the numerics both papers share), ``io`` (datasets, model files, the
config schema), ``train`` (the training loop and its registry of gradient methods), then the two
papers side by side, ``tap_paper`` (the first paper's analyses) and ``ucd`` (the second paper,
whose DBM methods register themselves in training's registry), then ``figures`` beside ``learn``
(the scikit-learn estimators, which the package's top level exports), and ``pipeline`` (command
line, stages, configuration, tracking). A module may import from its own
package and from the layers below it, never from a layer above or from the other package of its
own layer (``train`` never imports ``ucd``, and the two papers never import each other). The walk
reads every import statement, those inside functions too.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "tapmachine"
LAYERS = [("core",), ("io",), ("train",), ("tap_paper", "ucd"), ("figures", "learn"), ("pipeline",)]
PACKAGES = [name for layer in LAYERS for name in layer]


def _height(package):
    return next(i for i, layer in enumerate(LAYERS) if package in layer)


def _imports(path):
    """Every module name imported by the file at ``path`` (absolute imports; the package uses no
    relative ones)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _layer(module):
    """The layer of ``tapmachine.<layer>...``, or None for the package root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in PACKAGES else None


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        yield ".".join(rel.parts), path


def test_every_module_lives_in_a_layer():
    loose = [m for m, p in _modules() if _layer(m) is None and p.parent != PACKAGE]
    top = {p.name for m, p in _modules() if p.parent == PACKAGE}
    assert not loose and top == {"__init__.py", "__main__.py"}, (loose, top)


def test_imports_point_down():
    upward = []
    for module, path in _modules():
        here = _layer(module)
        if here is None:
            continue
        for name in _imports(path):
            there = _layer(name) if name.startswith("tapmachine.") else None
            if there is not None and there != here and _height(there) >= _height(here):
                upward.append(f"{module} -> {name}")
    assert not upward, "\n".join(sorted(set(upward)))


def test_nothing_below_the_pipeline_imports_mlflow():
    found = [
        f"{module} -> {name}"
        for module, path in _modules()
        if _layer(module) not in (None, "pipeline")
        for name in _imports(path)
        if name == "mlflow" or name.startswith("mlflow.")
    ]
    assert not found, found


def test_train_knows_the_dbm_methods_only_through_its_registry():
    """The DBM methods are registered by importing ``tapmachine.ucd``, not by ``train``."""
    import subprocess
    import sys

    code = (
        "import tapmachine.train as t; before = sorted(t.METHODS); import tapmachine.ucd; "
        "print(before, sorted(t.METHODS))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("] [")
    assert out[0] == "['cd', 'pcd', 'tap'"
    assert out[1].rstrip().rstrip("]") == "'cd', 'centered_pcd', 'dbm_pcd', 'pcd', 'tap', 'ucd_lmi'"


def test_no_import_cycles():
    """No module imports, directly or through others, a module that imports it (a package's
    ``__init__`` re-exporting its own modules aside)."""
    modules = dict(_modules())
    graph = {}
    for module, path in modules.items():
        deps = set()
        for name in _imports(path):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):
                deps.add(name)
        graph[module] = deps

    def reaches(start, goal, seen):
        for dep in graph[start]:
            if dep == goal or (dep not in seen and (seen.add(dep) or reaches(dep, goal, seen))):
                return True
        return False

    cycles = sorted(m for m in graph if reaches(m, m, set()))
    assert not cycles, cycles
