"""Validate rendered objects against a cluster's own CRD (`validate --crd FILE`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import InputError, Location
from .findings import Finding
from .loading import parse_documents, read_text
from .manifests import Manifest

CRD_MAX_BYTES = 8 * 1024 * 1024


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
    if len(docs) != 1 or not isinstance(docs[0], dict) \
            or docs[0].get("kind") != "CustomResourceDefinition":
        raise InputError("not a CustomResourceDefinition", file=str(path),
                         hint="kubectl get crd pytorchjobs.kubeflow.org -o yaml > crd.yaml")
    return crd_schemas(docs[0], str(path))


def crd_schemas(crd: dict[str, Any], source: str) -> dict[str, dict[str, Any]]:
    """`{version: openAPIV3Schema}` of one CustomResourceDefinition object (a file's, or the
    one the cluster serves)."""
    schemas = {}
    for version in crd.get("spec", {}).get("versions", []) or []:
        schema = (version.get("schema") or {}).get("openAPIV3Schema") \
            if isinstance(version, dict) else None
        if isinstance(schema, dict):
            schemas[str(version.get("name"))] = schema
    if not schemas:
        raise InputError("the CRD has no openAPIV3Schema", file=source)
    return schemas


def crd_findings(manifests: list[Manifest], schemas: dict[str, dict[str, Any]],
                 kind: str, source: str) -> list[Finding]:
    """One finding per schema violation of each object of `kind`."""
    import jsonschema  # only on the --crd path

    findings = []
    for manifest in manifests:
        if manifest.get("kind") != kind:
            continue
        version = str(manifest.get("apiVersion", "")).rsplit("/", 1)[-1]
        schema = schemas.get(version)
        if schema is None:
            findings.append(Finding("crd-schema", Location(source, None, "apiVersion"),
                                    f"the cluster's CRD does not serve version {version!r}",
                                    "ask the AI Engineers which operator version runs"))
            continue
        validator = jsonschema.Draft7Validator(schema)
        for error in sorted(validator.iter_errors(manifest), key=lambda e: list(e.absolute_path)):
            path = ".".join(str(p) for p in error.absolute_path) or "<root>"
            findings.append(Finding("crd-schema", Location(source, None, path), error.message,
                                    "the cluster's CRD refuses this object"))
    return findings
