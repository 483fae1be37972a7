"""Validate rendered objects against a cluster's own CRD (`validate --crd FILE`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from . import __version__
from .errors import InputError, Location
from .findings import Finding
from .loading import parse_documents, read_text, replace_file
from .manifests import Manifest

CRD_MAX_BYTES = 8 * 1024 * 1024


def _cache_file(digest: str) -> Path | None:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = Path(base) / "runai-spec" / f"crd-{__version__}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder / f"{digest}.json"


def load_crd_schemas(path: Path) -> dict[str, dict[str, Any]]:
    """`{version: openAPIV3Schema}` of a CustomResourceDefinition file.

    Parsing a 600 KB CRD with the YAML loader costs ~0.4 s, so the derived schemas are
    cached as JSON under ~/.cache, keyed by the file's sha256.
    """
    data = path.read_bytes() if path.is_file() else None
    if data is None:
        read_text(path)  # raises the right "no such file" / "is a directory" error
        raise InputError("cannot read", file=str(path))
    digest = hashlib.sha256(data).hexdigest()
    cache = _cache_file(digest)
    if cache is not None and cache.is_file():
        try:
            cached: dict[str, dict[str, Any]] = json.loads(cache.read_text(encoding="utf-8"))
            return cached
        except (OSError, ValueError):
            pass
    docs = parse_documents(read_text(path, max_bytes=CRD_MAX_BYTES), str(path))
    if len(docs) != 1 or not isinstance(docs[0], dict) \
            or docs[0].get("kind") != "CustomResourceDefinition":
        raise InputError("not a CustomResourceDefinition", file=str(path),
                         hint="kubectl get crd pytorchjobs.kubeflow.org -o yaml > crd.yaml")
    schemas = crd_schemas(docs[0], str(path))
    if cache is not None:
        with contextlib.suppress(OSError):  # a cache that cannot be written: derived again
            replace_file(cache, json.dumps(schemas))
    return schemas


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
