"""`runai-spec schema` is JSON Schema (issue 26 item 5): it validates against the 2020-12
meta-schema, uses only that dialect's keywords, and a standard validator refuses what the
profile model refuses (the editor's view and validate's agree)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pydantic
import pytest
import yaml

from conftest import BASE_PROFILE, ROOT, run
from runai_spec.load.profile import Profile

# The 2020-12 dialect's keywords (core, applicator, validation, meta-data, format, content).
KEYWORDS = {
    "$schema",
    "$id",
    "$ref",
    "$defs",
    "$comment",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "$vocabulary",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "prefixItems",
    "items",
    "contains",
    "properties",
    "patternProperties",
    "additionalProperties",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "type",
    "enum",
    "const",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxContains",
    "minContains",
    "maxProperties",
    "minProperties",
    "required",
    "dependentRequired",
    "title",
    "description",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "examples",
    "format",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
}
_MAPS = ("properties", "patternProperties", "$defs", "dependentSchemas")
_ONE = (
    "additionalProperties",
    "items",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
)
_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")


def subschemas(schema: Any, where: str = "#") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema object in SCHEMA (not the values of enum/default/examples)."""
    if not isinstance(schema, dict):
        return
    yield where, schema
    for key in _MAPS:
        for name, sub in (schema.get(key) or {}).items():
            yield from subschemas(sub, f"{where}/{key}/{name}")
    for key in _ONE:
        yield from subschemas(schema.get(key), f"{where}/{key}")
    for key in _LISTS:
        for i, sub in enumerate(schema.get(key) or []):
            yield from subschemas(sub, f"{where}/{key}/{i}")


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    result = run("schema")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_the_schema_is_valid_json_schema_2020_12(schema: dict[str, Any]) -> None:
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_the_schema_uses_only_json_schema_keywords(schema: dict[str, Any]) -> None:
    """pydantic's own constraint names (`gt`, `ge`, `le`) are ignored by every validator."""
    unknown = {f"{where}: {key}" for where, sub in subschemas(schema) for key in sub if key not in KEYWORDS}
    assert not unknown, sorted(unknown)


def _shipped_profiles() -> list[Path]:
    return [
        *sorted((ROOT / "examples").glob("*/profile.yaml")),
        *sorted((ROOT / "tests" / "rules").glob("*/pass.yaml")),
    ]


@pytest.mark.parametrize("path", _shipped_profiles(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_standard_validator_accepts_the_shipped_profiles(schema: dict[str, Any], path: Path) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(data)


# The profile's own negative cases: (dotted field, value); each is refused by the model.
NEGATIVE = [
    ("model.sequence_length", -5),
    ("model.sequence_length", 0),
    ("model.sequence_length", 1.5),
    ("model.sequence_length", "4096"),
    ("zero_stage", 7),
    ("zero_stage", -1),
    ("zero_stage", 4),
    ("batch.local", 0),
    ("batch.local", -4),
    ("batch.grad_accum", 0),
    ("batch.global", -1),
    ("batch.global", True),
    ("model.parameters", 0),
    ("model.precision", "fp64"),
    ("model.optimizer", "lamb"),
    ("strategy", "magic"),
    ("checkpoint.dir", "checkpoints"),
    ("checkpoint.pvc", "Team_A"),
    ("checkpoint.format", "pickle"),
    ("name", "Demo"),
    ("name", "-demo"),
    ("name", "a" * 70),
    ("project", "team a"),
    ("working_dir", "workspace"),
    ("command", []),
    ("command", "train.py"),
    ("env.1BAD", "x"),
    ("colour", "blue"),
    ("batch.colour", "blue"),
    ("metrics.writer", "everyone"),
    ("diagnostics.nccl_debug", "yes"),
    ("data", [{"path": "/data", "pvc": "d", "read_only": "no"}]),
    ("data", [{"path": "data", "pvc": "d"}]),
    ("secret_env.TOKEN", {"secret": "s"}),
]


def _with(field: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE_PROFILE)
    data["model"] = {"parameters": 1_000_000_000, "precision": "bf16", "sequence_length": 2048}
    data["zero_stage"] = 2
    node = data
    *parents, last = field.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return data


def test_the_base_of_the_negative_cases_is_accepted(schema: dict[str, Any]) -> None:
    data = _with("zero_stage", 3)
    Profile.model_validate(data)
    jsonschema.Draft202012Validator(schema).validate(data)


@pytest.mark.parametrize("field, value", NEGATIVE, ids=[f"{f}={v!r}"[:40] for f, v in NEGATIVE])
def test_a_standard_validator_refuses_what_the_profile_refuses(
    schema: dict[str, Any], field: str, value: Any
) -> None:
    data = _with(field, value)
    with pytest.raises(pydantic.ValidationError):
        Profile.model_validate(data)
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(data))
    assert errors, f"the JSON Schema accepts {field}: {value!r}"
