"""Validation of gateway output against the A2A v0.3.0 JSON schema."""

from __future__ import annotations

from functools import cache
from typing import Any

import jsonschema
import orjson

from tests.conftest import CONTRACTS


@cache
def _schema() -> dict[str, Any]:
    loaded: dict[str, Any] = orjson.loads((CONTRACTS / "a2a-v0.3.0.schema.json").read_bytes())
    return loaded


def assert_a2a(definition: str, instance: Any) -> None:
    schema = _schema()
    wrapper = {"$ref": f"#/definitions/{definition}", "definitions": schema["definitions"]}
    cls = jsonschema.validators.validator_for(schema)
    cls(wrapper).validate(instance)
