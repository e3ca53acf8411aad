"""The workflow configuration: overlays merged as Snakemake merges them, then validated.

``config.yaml`` is the default; a ``--configfile`` overlays it (``merge``: mappings key by key,
any other value, a list included, replaced), and a section or named entry the overlay sets to
null is removed (``remove_nulled``). The JSON Schema (``tapmachine/io/config.schema.yaml``,
draft 2020-12) states types, ranges, defaults and what each key means; ``validate`` reports the
first violation as one line naming the key and the bad value, fills the defaults, then checks what
a schema cannot: that paths exist and that each model's dataset is produced by the data stage.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from tapmachine.core.errors import TapmachineError
from tapmachine.io import retention
from tapmachine.io.schema import SCHEMA_FILE, child, load_schema, resolve, schema_default

__all__ = [
    "ConfigError",
    "DEFAULT_CONFIG",
    "RAW_DATASETS",
    "SCHEMA",
    "check_device",
    "dataset_names",
    "load_config",
    "load_schema",
    "merge",
    "remove_nulled",
    "schema_default",
    "solution_columns",
    "validate",
]

RAW_DATASETS = ("mnist", "fashion_mnist", "faces")
#: The default configuration, relative to the workflow's working directory (the Snakefile's
#: ``configfile:``), and the schema, inside the package.
DEFAULT_CONFIG = "config.yaml"
SCHEMA = SCHEMA_FILE


class ConfigError(TapmachineError, ValueError):
    """The configuration is invalid; the message names the key and the value."""


def _key(path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def dataset_names(config: dict) -> list[str]:
    """Every dataset the data stage produces: the raw ones, the user's files and the derived
    ones."""
    data = config.get("data", {})
    return [*RAW_DATASETS, *data.get("files", {}), *data.get("derived", {})]


def _types(node: dict) -> set:
    kind = node.get("type", ())
    return {kind} if isinstance(kind, str) else set(kind)


def _admits_null(node: dict, schema: dict) -> bool:
    if "null" in _types(node) or node.get("const", 0) is None or None in node.get("enum", ()):
        return True
    return any(_admits_null(resolve(n, schema), schema) for n in node.get("oneOf", ()))


def remove_nulled(config: dict, schema: dict) -> dict:
    """Delete, in place, the keys set to null where null is not a value of the key: a section
    (``deep: null``) or a named entry (``models: {bmnist_h25: null}``) that an overlay removes
    from the default config. A setting that takes null (``n_train: null``) keeps it, and a null
    where the schema wants a number or string stays, for ``validate`` to report."""

    def walk(value: dict, node: dict) -> None:
        for key in list(value):
            sub, named = child(node, key, schema)
            if sub is None:
                continue
            if value[key] is None:
                if not _admits_null(sub, schema) and (named or "object" in _types(sub)):
                    del value[key]
            elif isinstance(value[key], dict):
                walk(value[key], sub)

    walk(config, schema)
    return config


def merge(*configs: dict) -> dict:
    """One config from several, each updating the ones before it as Snakemake merges the
    ``configfile:`` default and each ``--configfile`` (``snakemake.utils.update_config``):
    mappings key by key, recursively; any other value, a list or null included, replaces."""
    from snakemake.utils import update_config

    merged: dict = {}
    for config in configs:
        update_config(merged, config)
    return merged


def load_config(config_files, default: str | Path | None = DEFAULT_CONFIG, schema=SCHEMA) -> dict:
    """The config a ``snakemake --configfile config_files...`` run sees, before validation: the
    ``default`` file when it exists, then each of ``config_files`` merged in order, with the
    nulled sections and entries removed."""
    paths = [Path(default)] if default is not None and Path(default).is_file() else []
    configs = [yaml.safe_load(p.read_text()) or {} for p in [*paths, *map(Path, config_files)]]
    return remove_nulled(merge(*configs), load_schema(schema))


def validate(config: dict, schema_file: str | Path) -> dict:
    """Validate ``config`` in place (filling defaults) and return it; raise ``ConfigError``."""
    import jsonschema
    from jsonschema.exceptions import best_match

    schema = yaml.safe_load(Path(schema_file).read_text())
    error = best_match(jsonschema.Draft202012Validator(schema).iter_errors(config))
    if error is not None:
        raise ConfigError(f"config error at {_key(error.absolute_path)}: {error.message}")
    _filling_validator(schema).validate(config)
    derived, files = config["data"]["derived"], config["data"]["files"]
    for key, names, taken in (
        ("data.files", files, set(RAW_DATASETS)),
        ("data.derived", derived, set(RAW_DATASETS) | set(files)),
    ):
        clash = sorted(taken & set(names))
        if clash:
            raise ConfigError(f"config error at {key}: {clash} reuse the names of other datasets")
    for name, entry in files.items():
        for key, path in (("path", entry["path"]), ("test.path", entry["test"].get("path"))):
            if path is not None and not Path(path).is_file():
                where = f"data.files.{name}.{key}"
                raise ConfigError(f"config error at {where}: {path!r} is not a file")
    for key, path in (
        ("data.mnist.path", config["data"]["mnist"]["path"]),
        ("data.fashion_mnist.path", config["data"]["fashion_mnist"]["path"]),
        ("data.faces.cbcl_archive", config["data"]["faces"]["cbcl_archive"]),
    ):
        if path is not None and not Path(path).exists():
            raise ConfigError(f"config error at {key}: {path!r} does not exist")
    known = dataset_names(config)
    for name, model in config["models"].items():
        for key in ("dataset", "train_dataset"):
            if model[key] is not None and model[key] not in known:
                raise ConfigError(
                    f"config error at models.{name}.{key}: {model[key]!r} is not a dataset "
                    f"of the data stage (known: {', '.join(known)})"
                )
        if model["resample"] is not None and model["visible"]["prior"] != "bernoulli":
            raise ConfigError(
                f"config error at models.{name}.resample: {model['resample']} draws binary "
                f"rows, for bernoulli visible units only (here {model['visible']['prior']})"
            )
        rate = model["learning_rate"]
        if isinstance(rate, dict) and "end" in rate and rate["end"] > rate["start"]:
            raise ConfigError(
                f"config error at models.{name}.learning_rate: end {rate['end']} exceeds "
                f"start {rate['start']} (schedules decay)"
            )
        k = model["sampling_steps"]
        if isinstance(k, dict) and k["end"] < k["start"]:
            raise ConfigError(
                f"config error at models.{name}.sampling_steps: end {k['end']} is below "
                f"start {k['start']} (k rises)"
            )
    _check_likelihood(config)
    _check_harvest_and_figures(config)
    _check_denoise(config)
    _check_deep(config)
    return config


def _filling_validator(schema: dict):
    """A draft 2020-12 validator that fills each absent key with its default as it validates,
    as Snakemake's ``validate(..., set_default=True)`` does, and also where a key's schema is a
    ``$ref`` (``{$ref: "#/$defs/tap_solver/properties/damping"}``): the default is its own, else
    its target's, so a default shared by several blocks is written once."""
    import jsonschema
    from jsonschema import validators

    base = jsonschema.Draft202012Validator

    def fill(validator, properties, instance, node):
        if isinstance(instance, dict):
            for key, sub in properties.items():
                sub = resolve(sub, schema)
                if "default" in sub:
                    instance.setdefault(key, copy.deepcopy(sub["default"]))
        yield from base.VALIDATORS["properties"](validator, properties, instance, node)

    return validators.extend(base, {"properties": fill})(schema)


def _check_denoise(config: dict) -> None:
    """denoise.*: the TAP denoisers and the real-valued model exist, the BSC ones have Bernoulli
    visible units, and Fig. 9 shows only p of Fig. 8's grid."""
    section, models = config.get("denoise"), config["models"]
    if not section:
        return
    for label, name in section["fig8"]["models"].items():
        if name not in models:
            raise ConfigError(
                f"config error at denoise.fig8.models.{label}: {name!r} is not a model of `models`"
            )
        if models[name]["visible"]["prior"] != "bernoulli":
            raise ConfigError(
                f"config error at denoise.fig8.models.{label}: {name!r} needs bernoulli visible "
                "units for the binary symmetric channel"
            )
    name = section["real"]["model"]
    if name is not None and name not in models:
        raise ConfigError(
            f"config error at denoise.real.model: {name!r} is not a model of `models`"
        )
    grid = section["fig8"]["ps"]
    for p in section["fig9"]["ps"] or []:
        if p not in grid:
            raise ConfigError(f"config error at denoise.fig9.ps: {p} is not in denoise.fig8.ps")


BINARY_PRIORS = ("bernoulli", "spin")


#: The largest hidden layer `tapmachine exact-curve` enumerates (tap_paper.likelihood.exact_curve,
#: not imported here: it pulls in torch).
EXACT_CURVE_UNITS = 25


def _check_exact_curves(fig3: dict, models: dict) -> None:
    """figures.fig3.exact: models that fig3 draws, each an RBM whose one hidden layer is binary
    with at most EXACT_CURVE_UNITS units, and epochs each of them trained."""
    exact = fig3.get("exact")
    if not exact:
        return
    for name in exact["models"]:
        key = f"config error at figures.fig3.exact.models: {name!r}"
        if name not in fig3["models"]:
            raise ConfigError(f"{key} is not one of figures.fig3.models")
        hidden = models[name]["hidden"]
        if len(hidden) != 1 or hidden[0]["prior"] not in BINARY_PRIORS:
            raise ConfigError(f"{key} needs one bernoulli or spin hidden layer to enumerate")
        if hidden[0]["units"] > EXACT_CURVE_UNITS:
            raise ConfigError(
                f"{key} has {hidden[0]['units']} hidden units; at most {EXACT_CURVE_UNITS} are "
                "enumerated (2^25 states take about 100 CPU-seconds an epoch)"
            )
        if isinstance(exact["epochs"], list):
            _check_checkpoints_read(
                "figures.fig3.exact.epochs", exact["epochs"], name, models[name]
            )


def _check_deep(config: dict) -> None:
    """Deep TAP machines (App. E), adaTAP (App. D) and Figs. 10-11: what the code supports."""
    for name, model in config["models"].items():
        key = f"models.{name}"
        hidden = model["hidden"]
        if len(hidden) > 1:
            for i, layer in enumerate(hidden):
                if layer["prior"] not in BINARY_PRIORS:
                    raise ConfigError(
                        f"config error at {key}.hidden[{i}].prior: {layer['prior']!r} is not "
                        "supported in a deep machine (hidden layers of a DBM must be bernoulli "
                        "or spin: pretraining feeds their magnetisations to binary RBMs)"
                    )
            if model["method"] != "tap":
                raise ConfigError(
                    f"config error at {key}.method: {model['method']!r} is not supported for a "
                    f"machine with {len(hidden)} hidden layers (deep machines train by TAP)"
                )
        if model.get("pretrain") is not None and len(hidden) < 2:
            raise ConfigError(
                f"config error at {key}.pretrain: greedy pretraining needs at least 2 hidden "
                f"layers, {name!r} has {len(hidden)}"
            )
        if model["inference"] == "adatap":
            layers = [("visible.prior", model["visible"])] + [
                (f"hidden[{i}].prior", h) for i, h in enumerate(hidden)
            ]
            for where, layer in layers:
                if layer["prior"] not in BINARY_PRIORS:
                    raise ConfigError(
                        f"config error at {key}.{where}: adaTAP (inference: adatap, Alg. 3) is "
                        f"implemented for bernoulli and spin units, not {layer['prior']!r}"
                    )
            if len(hidden) != 1 or model["method"] != "tap":
                raise ConfigError(
                    f"config error at {key}.inference: adatap needs an RBM trained by TAP "
                    f"(one hidden layer, method tap); {name!r} has {len(hidden)} hidden layers "
                    f"and method {model['method']!r}"
                )
    deep = config.get("deep", {})
    for fig, spec in deep.items():
        for i, name in enumerate(spec.get("models", [])):
            where = f"deep.{fig}.models[{i}]"
            if name not in config["models"]:
                raise ConfigError(f"config error at {where}: {name!r} is not a model of `models`")
            n_hidden = len(config["models"][name]["hidden"])
            if fig == "fig10" and n_hidden != 1:
                raise ConfigError(f"config error at {where}: {name!r} is not an RBM")
            epochs = config["models"][name]["epochs"]
            if fig == "fig10" and (spec.get("epoch") or 0) > epochs:
                raise ConfigError(
                    f"config error at {where}: {name!r} trains {epochs} epochs, fewer than "
                    f"deep.fig10.epoch = {spec['epoch']}"
                )
            if fig == "fig11" and n_hidden < 2:
                raise ConfigError(
                    f"config error at {where}: {name!r} has {n_hidden} hidden layer "
                    "(Fig. 11 draws deep machines)"
                )


def _check_checkpoints_read(key: str, epochs: list, name: str, model: dict) -> None:
    """The checkpoints a job reads at ``epochs`` (config ``key``) of model ``name``: each at most
    its training epochs, and kept by its ``checkpoint_every`` (``io.retention``)."""
    last = model["epochs"]
    late = sorted(e for e in epochs if e > last)
    if late:
        raise ConfigError(
            f"config error at {key}: {late} exceed the {last} training epochs of model "
            f"{name!r} (each needs that epoch's checkpoint)"
        )
    every = model.get("checkpoint_every", 1)
    dropped = retention.unkept(epochs, every, last)
    if dropped:
        raise ConfigError(
            f"config error at {key}: the checkpoints of {dropped} are not kept by model "
            f"{name!r} (checkpoint_every {every}: its multiples and the last epoch, {last})"
        )


def _check_likelihood(config: dict) -> None:
    """likelihood.*: named models exist, are RBMs, and fig12's epochs exist; AIS settings."""
    section = config.get("likelihood", {})
    fig12, tab = section.get("fig12", {}), section.get("table", {})
    named = [("likelihood.fig12.model", fig12.get("model"))]
    named += [(f"likelihood.table.models[{i}]", m) for i, m in enumerate(tab.get("models", []))]
    for key, name in named:
        if name is None:
            continue
        if name not in config["models"]:
            raise ConfigError(
                f"config error at {key}: {name!r} is not a model of `models` "
                f"(known: {', '.join(config['models']) or 'none'})"
            )
        if len(config["models"][name]["hidden"]) != 1:
            raise ConfigError(f"config error at {key}: {name!r} is not an RBM (one hidden layer)")
    if fig12.get("model") is not None and isinstance(fig12.get("epochs"), list):
        name = fig12["model"]
        _check_checkpoints_read(
            "likelihood.fig12.epochs", fig12["epochs"], name, config["models"][name]
        )
    for part in ("fig12", "table"):
        ais = section.get(part, {}).get("ais", {})
        if ais.get("schedule") == "linear" and ais.get("n_betas") is None:
            raise ConfigError(
                f"config error at likelihood.{part}.ais.n_betas: a linear schedule needs n_betas"
            )


def _check_harvest_and_figures(config: dict) -> None:
    """Harvested epochs exist (checkpoints), figures name known models and harvested epochs."""
    models, harvest = config["models"], config.get("harvest", {})
    for name, entry in harvest.items():
        if name not in models:
            raise ConfigError(
                f"config error at harvest.{name}: {name!r} is not a model of `models`"
            )
        _check_checkpoints_read(f"harvest.{name}.epochs", entry["epochs"], name, models[name])
    figures = config.get("figures", {})
    for fig in ("fig3", "fig4"):
        for name in figures.get(fig, {}).get("models", []):
            if name not in models:
                raise ConfigError(
                    f"config error at figures.{fig}.models: {name!r} is not a model of `models`"
                )
    _check_exact_curves(figures.get("fig3") or {}, models)
    for fig in ("fig5", "fig6", "fig7"):
        if fig in figures:
            _check_solution_figure(fig, figures[fig], harvest, models)


def solution_columns(spec: dict) -> dict[str, dict]:
    """The columns of Fig. 5, 6 or 7 (``figures.<fig>``): model -> its settings, the figure's
    (every key but ``models`` and ``per_model``) with ``per_model``'s entry for it on top, for
    each model of ``models`` in order."""
    shared = {k: v for k, v in spec.items() if k not in ("models", "per_model")}
    own = spec.get("per_model") or {}
    return {name: {**shared, **(own.get(name) or {})} for name in spec["models"]}


def _check_solution_figure(fig: str, spec: dict, harvest: dict, models: dict) -> None:
    """Each column of Fig. 5-7 draws a harvested model, at harvested epochs, and Fig. 7 from no
    more initialisations than were harvested; ``per_model`` names models of ``models`` (an entry
    for a model the figure does not draw is unused: an overlay may swap the figure's models)."""
    stray = sorted(set(spec.get("per_model") or {}) - set(models))
    if stray:
        raise ConfigError(
            f"config error at figures.{fig}.per_model: {stray} are not models of `models`"
        )
    key = "slices" if fig == "fig5" else "epochs"
    for name, column in solution_columns(spec).items():
        if name not in harvest:
            raise ConfigError(
                f"config error at figures.{fig}.models: {name!r} has no `harvest` entry "
                "(the figure draws harvested TAP solutions)"
            )
        harvested = harvest[name]["epochs"]
        missing = sorted(set(column.get(key) or []) - set(harvested))
        if missing:
            raise ConfigError(
                f"config error at figures.{fig} ({name}): {key} {missing} are not harvested "
                f"epochs of {name} (harvest.{name}.epochs: {harvested})"
            )
        n_images, n_init = column.get("n_images"), harvest[name]["n_init"]
        if n_images is not None and n_init is not None and n_images > n_init:
            raise ConfigError(
                f"config error at figures.{fig} ({name}): n_images {n_images} exceeds "
                f"harvest.{name}.n_init = {n_init} (fig7 uses the harvest's initialisations)"
            )


def check_device(device: str) -> None:
    """ConfigError (one line) when ``device`` is cuda and this machine's torch sees no CUDA device
    (``train.settings.device_problem``, which the estimators' ``device`` is checked by too).

    The workflow calls it where jobs run on this machine, so the run fails before any job.
    """
    if not device.startswith("cuda"):
        return
    from tapmachine.train.settings import device_problem

    problem = device_problem(device)
    if problem is not None:
        raise ConfigError(f"config error at device: {problem}")
