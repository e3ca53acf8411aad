"""The config schema (``config.schema.yaml``, package data beside this module) and its defaults,
the one place they are defined; settings classes below the pipeline read theirs from here, and the
workflow validates its config against the same file."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

__all__ = [
    "SCHEMA_FILE",
    "check_entry",
    "child",
    "defaults",
    "load_schema",
    "resolve",
    "schema_default",
    "schema_property",
]

#: The config schema (JSON Schema, draft 2020-12), shipped inside the package.
SCHEMA_FILE = Path(str(resources.files("tapmachine.io").joinpath("config.schema.yaml")))


def load_schema(schema_file: str | Path = SCHEMA_FILE) -> dict:
    import yaml

    return yaml.safe_load(Path(schema_file).read_text())


@functools.cache
def _cached_schema(schema_file: Path) -> dict:
    return load_schema(schema_file)


def _schema() -> dict:
    return _cached_schema(SCHEMA_FILE)


def resolve(node: dict, schema: dict) -> dict:
    """``node`` with a local ``$ref`` (``#/$defs/...``) replaced by its target, siblings kept."""
    ref = node.get("$ref")
    if ref is None:
        return node
    target = schema
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    return {**resolve(target, schema), **{k: v for k, v in node.items() if k != "$ref"}}


def child(node: dict, key: str, schema: dict) -> tuple[dict | None, bool]:
    """Subschema of ``key`` inside the object schema ``node``, and whether ``key`` is a name of
    a named collection (matched by ``additionalProperties``, as a model's name is)."""
    if key in node.get("properties", {}):
        return resolve(node["properties"][key], schema), False
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        return resolve(extra, schema), True
    return None, False


def schema_property(*path: str, schema_file: str | Path = SCHEMA_FILE) -> dict:
    """The subschema of the key at ``path`` (property names from the top, e.g. ``("device",)``),
    ``$ref`` resolved; a fresh copy."""
    import copy

    schema = _cached_schema(Path(schema_file).resolve())
    node = schema
    for key in path:
        node, _ = child(node, key, schema)
        if node is None:
            raise KeyError(f"no key {'.'.join(path)} in {schema_file}")
    return copy.deepcopy(node)


def schema_default(*path: str, schema_file: str | Path = SCHEMA_FILE):
    """The default the schema gives the key at ``path`` (property names from the top, e.g.
    ``schema_default("ucd", "fig1", "cap")``): defaults are defined once, in the schema, and the
    stages' command-line options read theirs from it."""
    node = schema_property(*path, schema_file=schema_file)
    if "default" not in node:
        raise KeyError(f"{'.'.join(path)} has no default in {schema_file}")
    return node["default"]


def _defaults_of(node: dict, schema: dict) -> dict:
    out = {}
    for key, prop in (node.get("properties") or {}).items():
        prop = resolve(prop, schema)
        if "properties" in prop and prop.get("default", {}) == {}:
            out[key] = _defaults_of(prop, schema)
        elif "default" in prop:
            out[key] = prop["default"]
    return out


@functools.cache
def _cached(definition: str) -> dict:
    return _defaults_of(_schema()["$defs"][definition], _schema())


def defaults(definition: str) -> dict:
    """``{key: default}`` of the properties of ``$defs/<definition>``; an object property whose
    default is ``{}`` gives the dict of its own properties' defaults (``tap: {damping: 0.5,
    ...}``), as validation fills them. A fresh copy."""
    import copy

    return copy.deepcopy(_cached(definition))


def check_entry(entry: dict, definition: str) -> None:
    """Raise ValueError at the key of ``entry`` that ``$defs/<definition>`` refuses (the best
    match of jsonschema's errors, as the workflow's config validation reports it): an estimator's
    parameters are checked by the schema its config entry is checked by."""
    import jsonschema
    from jsonschema.exceptions import best_match

    schema = _schema()
    node = {**schema["$defs"][definition], "$defs": schema["$defs"]}
    error = best_match(jsonschema.Draft202012Validator(node).iter_errors(entry))
    if error is not None:
        key = ".".join(str(k) for k in error.absolute_path) or "the entry"
        raise ValueError(f"{key}: {error.message} (schema $defs/{definition})")
