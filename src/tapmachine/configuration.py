"""Validation of the workflow configuration (a dict; this module never reads the config file).

The JSON Schema (``workflow/schemas/config.schema.yaml``, draft 2020-12) states types, ranges and
defaults; ``validate`` reports the first violation as one line naming the key and the bad value,
fills the defaults, then checks what a schema cannot: that paths exist and that each model's
dataset is produced by the data stage.
"""

from __future__ import annotations

from pathlib import Path

import jsonschema
import yaml
from jsonschema.exceptions import best_match

__all__ = ["ConfigError", "RAW_DATASETS", "validate", "dataset_names"]

RAW_DATASETS = ("mnist", "fashion_mnist", "faces")


class ConfigError(ValueError):
    """The configuration is invalid; the message names the key and the value."""


def _key(path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _fill_defaults(validator_class):
    """A validator that also writes each property's ``default`` into the instance."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = _copy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _copy(value):
    return yaml.safe_load(yaml.safe_dump(value))


def dataset_names(config: dict) -> list[str]:
    """Every dataset the data stage produces: the raw ones and the derived ones."""
    return [*RAW_DATASETS, *config.get("data", {}).get("derived", {})]


def validate(config: dict, schema_file: str | Path) -> dict:
    """Validate ``config`` in place (filling defaults) and return it; raise ``ConfigError``."""
    schema = yaml.safe_load(Path(schema_file).read_text())
    error = best_match(jsonschema.Draft202012Validator(schema).iter_errors(config))
    if error is not None:
        raise ConfigError(f"config error at {_key(error.absolute_path)}: {error.message}")
    _fill_defaults(jsonschema.Draft202012Validator)(schema).validate(config)
    derived = config["data"]["derived"]
    clash = sorted(set(RAW_DATASETS) & set(derived))
    if clash:
        raise ConfigError(f"config error at data.derived: {clash} reuse raw dataset names")
    for key, path in (
        ("data.mnist.path", config["data"]["mnist"]["path"]),
        ("data.fashion_mnist.path", config["data"]["fashion_mnist"]["path"]),
        ("data.faces.cbcl_archive", config["data"]["faces"]["cbcl_archive"]),
    ):
        if path is not None and not Path(path).exists():
            raise ConfigError(f"config error at {key}: {path!r} does not exist")
    known = dataset_names(config)
    for name, model in config["models"].items():
        if model["dataset"] not in known:
            raise ConfigError(
                f"config error at models.{name}.dataset: {model['dataset']!r} is not a dataset "
                f"of the data stage (known: {', '.join(known)})"
            )
        rate = model["learning_rate"]
        if isinstance(rate, dict) and rate["end"] > rate["start"]:
            raise ConfigError(
                f"config error at models.{name}.learning_rate: end {rate['end']} exceeds "
                f"start {rate['start']} (schedules decay)"
            )
    return config
