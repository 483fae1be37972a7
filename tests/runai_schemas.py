"""The request-body schemas the fake Run:ai control plane validates against: a subset written
by hand from NVIDIA Run:ai's published OpenAPI documents (control-plane API 2.24,
run-ai-docs.nvidia.com/api/2.24/...; self-hosted v3.0 reference, docs.nvidia.com/run-ai/
self-hosted/reference/rest-api/endpoints/...; as republished in github.com/api-evangelist/runai
openapi/runai-workloads-v2-api-openapi.yml and runai-tokens-api-openapi.yml, "version:
latest"). Descriptions are left out; types, enums, required fields and patterns are kept.

Where the documents leave a field open (`pattern: .*`, `additionalProperties: true`) the
schema does too: the fake's own semantic checks (a known priority, an existing project) are
apart, in runaiapi.py, as the real control plane's are."""

from __future__ import annotations

from typing import Any

# components/schemas/ProjectId: a string (the example is a number's text)
PROJECT_ID: dict[str, Any] = {"type": "string", "pattern": ".*"}
# components/schemas/ClusterId: string, format uuid
CLUSTER_ID: dict[str, Any] = {"type": "string", "format": "uuid"}
# components/schemas/PriorityClass and Category: string or null, any text (the server checks
# the priority against its dictionary: very-low ... very-high)
PRIORITY_CLASS: dict[str, Any] = {"type": ["string", "null"], "pattern": ".*"}
CATEGORY: dict[str, Any] = {"type": ["string", "null"], "pattern": ".*"}
# components/schemas/Preemptibility: string or null, minLength 1, enum
PREEMPTIBILITY: dict[str, Any] = {
    "type": ["string", "null"],
    "minLength": 1,
    "enum": ["preemptible", "non-preemptible", None],
}
# components/schemas/Manifest: an object, any properties
MANIFEST: dict[str, Any] = {"type": "object", "additionalProperties": True}
# components/schemas/ManifestEncoded: base 64 text (format byte), at most 2 MiB (v3.0 page)
MANIFEST_ENCODED: dict[str, Any] = {"type": "string", "maxLength": 2097152}

# components/schemas/WorkloadV2MetadataCreateParams
METADATA_CREATE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": ".*"},
        "useGivenNameAsPrefix": {"type": "boolean"},
        "projectId": PROJECT_ID,
        "clusterId": CLUSTER_ID,
        "priority": PRIORITY_CLASS,
        "category": CATEGORY,
        "preemptibility": PREEMPTIBILITY,
    },
}

# components/schemas/WorkloadV2CreateRequest (POST /api/v2/workloads, create_workload_v2);
# manifest and manifestBase64Encoded are mutually exclusive (their descriptions say so)
WORKLOAD_V2_CREATE: dict[str, Any] = {
    "type": "object",
    "required": ["metadata"],
    "properties": {
        "metadata": METADATA_CREATE,
        "manifest": MANIFEST,
        "manifestBase64Encoded": MANIFEST_ENCODED,
    },
    "not": {"required": ["manifest", "manifestBase64Encoded"]},
}

# components/schemas/WorkloadV2MetadataUpdateParams and WorkloadV2UpdateRequest
# (PUT /api/v2/workloads/{WorkloadV2Id}, update_workload_v2)
WORKLOAD_V2_UPDATE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "metadata": {"type": "object", "properties": {"priority": PRIORITY_CLASS, "category": CATEGORY}},
        "manifest": MANIFEST,
        "manifestBase64Encoded": MANIFEST_ENCODED,
    },
    "not": {"required": ["manifest", "manifestBase64Encoded"]},
}

# components/schemas/TokenRequest (POST /api/v1/token, grant_token) and its
# TokenRequestGrantTypeEnum
TOKEN_REQUEST: dict[str, Any] = {
    "type": "object",
    "properties": {
        "grantType": {
            "enum": [
                "app_token",
                "client_credentials",
                "refresh_token",
                "exchange_token",
                "password",
                "external_token_exchange",
            ]
        },
        **{
            k: {"type": "string"}
            for k in (
                "appID",
                "appSecret",
                "code",
                "redirectUri",
                "refreshToken",
                "username",
                "password",
                "clientID",
                "clientSecret",
                "externalToken",
            )
        },
    },
}

# components/schemas/Phase of the Workloads API ("latest", runai-workloads-api-openapi.yml): the
# 14 phases get_workloads reports
PHASES = (
    "Creating",
    "Initializing",
    "Resuming",
    "Pending",
    "Deleting",
    "Running",
    "Updating",
    "Stopped",
    "Stopping",
    "Degraded",
    "Failed",
    "Completed",
    "Terminating",
    "Unknown",
)

# The priority dictionary the PriorityClass description lists.
PRIORITIES = ("very-low", "low", "medium-low", "medium", "medium-high", "high", "very-high")


def errors(schema: dict[str, Any], body: Any) -> list[str]:
    """Every way BODY breaks SCHEMA, as `path: message` lines (none: valid)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    return [
        f"{'.'.join(map(str, e.absolute_path)) or '(body)'}: {e.message}" for e in validator.iter_errors(body)
    ]
