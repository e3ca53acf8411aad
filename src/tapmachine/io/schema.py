"""The defaults of the workflow's config schema (``workflow/schemas/config.schema.yaml``), the one
place they are defined; settings classes below the pipeline read theirs from here."""

from __future__ import annotations

import functools
from pathlib import Path

__all__ = ["SCHEMA_FILE", "defaults"]

#: The schema beside the package's source tree (the repository's ``workflow/`` folder).
SCHEMA_FILE = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "config.schema.yaml"


@functools.cache
def _schema() -> dict:
    import yaml

    return yaml.safe_load(SCHEMA_FILE.read_text())


def _defaults_of(node: dict) -> dict:
    out = {}
    for key, prop in (node.get("properties") or {}).items():
        if "properties" in prop and prop.get("default", {}) == {}:
            out[key] = _defaults_of(prop)
        elif "default" in prop:
            out[key] = prop["default"]
    return out


@functools.cache
def _cached(definition: str) -> dict:
    return _defaults_of(_schema()["$defs"][definition])


def defaults(definition: str) -> dict:
    """``{key: default}`` of the properties of ``$defs/<definition>``; an object property whose
    default is ``{}`` gives the dict of its own properties' defaults (``tap: {damping: 0.5,
    ...}``), as validation fills them. A fresh copy."""
    import copy

    return copy.deepcopy(_cached(definition))
