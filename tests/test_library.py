"""The library works without MLflow: numerics never import the tracking module or mlflow."""

import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

LIBRARY = [
    "core.priors",
    "core.machine",
    "core.tap",
    "core.estimators",
    "core.contrastive",
    "core.adatap",
    "core.seeding",
    "train",
    "train.pretrain",
    "tap_paper.harvest",
    "tap_paper.likelihood",
    "tap_paper.embed",
    "tap_paper.denoise",
    "tap_paper.curves",
    "io.modelfile",
    "io.data",
    "io.runlog",
    "pipeline.configuration",
    "figures.common",
    "figures.fig3",
    "figures.fig4",
    "figures.fig5",
    "figures.fig6",
    "figures.fig7",
    "figures.fig12",
    "figures.likelihood_table",
    "ucd",
    "ucd.search",
    "ucd.couplings",
    "ucd.target",
    "ucd.unbiased",
    "ucd.init",
    "ucd.dbm",
    "ucd.generate",
    "ucd.cifar",
    "ucd.fid",
    "figures.ucd_fig1",
    "figures.ucd_dbm",
    "figures.fig8",
    "figures.fig9",
    "figures.fig_denoise_real",
    "figures.fig10",
    "figures.fig11",
    "learn",
]

SCRIPT = textwrap.dedent(
    """
    import importlib, importlib.abc, sys
    from pathlib import Path

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            tracking = name == "tapmachine.pipeline.tracking"
            if name == "mlflow" or name.startswith("mlflow.") or tracking:
                raise ImportError(f"{name} is blocked in this test")
            return None

    sys.meta_path.insert(0, Block())
    import numpy as np, torch
    for name in LIBRARY:
        importlib.import_module(f"tapmachine.{name}")
    from tapmachine.core.seeding import seeded_generator
    from tapmachine.train import TrainSettings, train, train_from_spec
    from tapmachine.io.data import Dataset, save_dataset
    from tapmachine.io.modelfile import ModelFile

    out = Path(sys.argv[1])
    rng = np.random.default_rng(0)
    x = (rng.random((120, 9)) < 0.3).astype(np.uint8)
    y = np.zeros(120, dtype=np.int64)
    save_dataset(Dataset(x, y, x[:20], y[:20], (3, 3), {}, "toy"), out / "toy.npz")
    spec = {
        "visible": {"prior": "bernoulli"},
        "hidden": [{"prior": "bernoulli", "units": 4}],
        "epochs": 2,
        "batch_size": 40,
        "eval": {"n_samples": 30},
    }
    seen = []
    train_from_spec(
        "toy", spec, str(out / "toy.npz"), str(out / "toy"),
        on_epoch=lambda epoch, metrics, machine: seen.append(epoch),
    )
    model = ModelFile.load(out / "toy" / "model.pt")
    assert seen == [1, 2] and len(model.history) == 2, (seen, model.history)
    assert model.mlflow_run_id is None
    deep = {**spec, "hidden": [{"prior": "bernoulli", "units": 4}] * 2,
            "pretrain": {"epochs": 1, "learning_rate": 0.05}}
    pre = []
    train_from_spec(
        "toydeep", deep, str(out / "toy.npz"), str(out / "toydeep"),
        on_pretrain_epoch=lambda layer, epoch, metrics: pre.append((layer, epoch)),
    )
    assert pre == [(1, 1), (2, 1)], pre
    assert ModelFile.load(out / "toydeep" / "model.pt").sizes == (9, 4, 4)
    from tapmachine.ucd import dbm

    g = seeded_generator(0, "toy", "dbm")
    machine = dbm.build_dbm([9, 4, 3], g, dbm.DBMOptions(), 0.01)
    settings = TrainSettings(
        epochs=2, batch_size=40, method="ucd_lmi", evaluate=False, momentum=0.0
    )
    steps = []
    machine, history = train(
        machine, dbm.data_for(machine, torch.as_tensor(x, dtype=torch.float32)), settings, g,
        checkpoint_dir=out / "dbm" / "checkpoints", progress=False,
        on_step=lambda step, metrics: steps.append((step, metrics["tau_mean"])),
    )
    ModelFile.from_machine(machine, "dbm", history=history, extras={"method": "ucd_lmi"}).save(
        out / "dbm" / "model.pt"
    )
    assert [s for s, _ in steps] == list(range(1, 7)), steps
    assert ModelFile.load(out / "dbm" / "model.pt").extras == {"method": "ucd_lmi"}
    loaded = [m for m in sys.modules if m == "mlflow" or m.startswith("mlflow.")]
    assert not loaded and "tapmachine.pipeline.tracking" not in sys.modules, loaded
    print("ok", model.sizes)
    """
)


def test_library_imports_and_trains_without_mlflow(tmp_path):
    code = f"LIBRARY = {LIBRARY!r}\n" + SCRIPT
    env = {"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "ok (9, 4)"


def test_installed_package_carries_its_config_schema(tmp_path):
    """The wheel holds the config schema, and the library reads its defaults from the installed
    copy with no repository around it; the workflow validates against that same file."""
    import shutil
    import zipfile

    from tapmachine.pipeline.configuration import SCHEMA

    source = tmp_path / "source"
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(tmp_path / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = (tmp_path / "dist").glob("tapmachine-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp_path / "site")
    code = (
        "from tapmachine.io.schema import SCHEMA_FILE, defaults, schema_default\n"
        "print(SCHEMA_FILE.parent.parent.name, defaults('model')['epochs'], "
        "schema_default('seed'))"
    )
    env = {"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    schema = yaml.safe_load(SCHEMA.read_text())
    epochs = schema["$defs"]["model"]["properties"]["epochs"]["default"]
    assert result.stdout.split() == [
        "tapmachine",
        str(epochs),
        str(schema["properties"]["seed"]["default"]),
    ]
    assert SCHEMA.parent == ROOT / "src" / "tapmachine" / "io"
    assert not list(ROOT.glob("workflow/**/*.schema.yaml"))
