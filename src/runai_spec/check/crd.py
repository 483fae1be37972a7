"""Validate rendered objects against a cluster's own CRD (`validate --crd FILE`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..errors import InputError, Location
from ..facts.kubeflow import CRD_NAME
from ..findings import Finding
from ..load.yaml import parse_documents, read_text
from ..render.manifests import Manifest
from .rules import declare

CRD_MAX_BYTES = 8 * 1024 * 1024
CRD_FETCH = f"kubectl get crd {CRD_NAME} -o yaml > crd.yaml"
CRD_HINT = f"pass the cluster's own CRD: {CRD_FETCH}"
CRD_SCHEMA = declare(
    "crd-schema",
    "error",
    "With `--crd FILE`, the render passes the cluster's own PyTorchJob schema",
    "`validate --crd FILE` checks every rendered PyTorchJob against the schema of the cluster's "
    f"own CustomResourceDefinition (`{CRD_FETCH}`): a field the cluster's operator does not know, "
    "or a version it does not serve, is a finding naming the field.",
    kind="crd",
)


def load_crd_schemas(path: Path) -> dict[str, dict[str, Any]]:
    """`{version: openAPIV3Schema}` of a CustomResourceDefinition file, derived from the file
    itself at every call.

    No cache (issue 23, third red-team pass): an entry planted in `~/.cache` turned a
    finding into a pass, and a cache's own key would sit beside it. With libyaml a 600 KB CRD
    parses in ~30 ms (the pure-Python loader's ~0.4 s was the reason for the cache, and it is
    only on the `--crd` path).
    """
    if not path.is_file():
        read_text(path)  # raises the right "no such file" / "is a directory" error
        raise InputError("cannot read", file=str(path))
    docs = parse_documents(read_text(path, max_bytes=CRD_MAX_BYTES), str(path))
    if len(docs) != 1 or not isinstance(docs[0], dict) or docs[0].get("kind") != "CustomResourceDefinition":
        raise InputError("not a CustomResourceDefinition", file=str(path), hint=CRD_FETCH)
    return crd_schemas(docs[0], str(path))


def crd_schemas(crd: dict[str, Any], source: str) -> dict[str, dict[str, Any]]:
    """`{version: openAPIV3Schema}` of one CustomResourceDefinition object (a file's, or the
    one the cluster serves)."""
    schemas = {}
    for index, version in enumerate(crd.get("spec", {}).get("versions", []) or []):
        schema = (version.get("schema") or {}).get("openAPIV3Schema") if isinstance(version, dict) else None
        if isinstance(schema, dict):
            check_schema(schema, source, f"spec.versions[{index}].schema.openAPIV3Schema")
            schemas[str(version.get("name"))] = schema
    if not schemas:
        raise InputError("the CRD has no openAPIV3Schema", file=source)
    return schemas


def check_schema(schema: dict[str, Any], source: str, field: str) -> None:
    """Bad input, never a crash later (issue 23): a schema that is no JSON Schema (an unknown
    type, a `required` that is no list, a pattern that is no regular expression) or that uses
    `$ref` (which Kubernetes refuses in a CRD, and whose loops never end)."""
    import jsonschema  # only on the --crd path

    hint = CRD_HINT
    ref = _find_ref(schema)
    if ref is not None:
        raise InputError(
            "uses $ref, which a CustomResourceDefinition's schema cannot",
            file=source,
            field=f"{field}{ref}",
            hint=hint,
        )
    try:
        jsonschema.Draft7Validator.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.absolute_path)
        raise InputError(
            f"is no valid schema: {_short(exc.message)}", file=source, field=f"{field}{where}", hint=hint
        ) from None
    except RecursionError:
        raise InputError("is nested too deeply to check", file=source, field=field, hint=hint) from None


def _find_ref(value: Any, path: str = "") -> str | None:
    """The path of the first `$ref` key in value, walked without recursion."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, dict):
            if "$ref" in item:
                return f"{where}.$ref"
            stack.extend((v, f"{where}.{k}") for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
    return None


def _short(text: str, limit: int = 200) -> str:
    text = text.splitlines()[0] if text else text
    return text if len(text) <= limit else text[:limit] + "..."


def crd_findings(
    manifests: list[Manifest], schemas: dict[str, dict[str, Any]], kind: str, source: str
) -> list[Finding]:
    """One finding per schema violation of each object of `kind`."""
    import jsonschema  # only on the --crd path

    findings = []
    for manifest in manifests:
        if manifest.get("kind") != kind:
            continue
        version = str(manifest.get("apiVersion", "")).rsplit("/", 1)[-1]
        schema = schemas.get(version)
        if schema is None:
            findings.append(
                Finding(
                    CRD_SCHEMA,
                    Location(source, None, "apiVersion"),
                    f"the cluster's CRD does not serve version {version!r}",
                    "ask the AI Engineers which operator version runs",
                )
            )
            continue
        validator = jsonschema.Draft7Validator(schema)
        try:
            errors = sorted(validator.iter_errors(manifest), key=lambda e: list(e.absolute_path))
        except (
            jsonschema.exceptions.SchemaError,
            jsonschema.exceptions.UnknownType,
            RecursionError,
            re.error,
            TypeError,
            LookupError,
        ) as exc:
            # a schema crd_schemas never saw: still bad input, never exit 70
            raise InputError(
                f"the CRD's schema cannot be used: {_short(str(exc))}", field="--crd", hint=CRD_HINT
            ) from None
        for error in errors:
            path = ".".join(str(p) for p in error.absolute_path) or "<root>"
            findings.append(
                Finding(
                    CRD_SCHEMA,
                    Location(source, None, path),
                    error.message,
                    "the cluster's CRD refuses this object",
                )
            )
    return findings
