"""Run:ai's control-plane API as published: workload phases, dryRun's versions, what an update changes."""

# A model of someone else's behaviour, like kubeflow.py; each fact names the document it follows:
# - "latest": NVIDIA Run:ai control-plane OpenAPI, `info.version: latest`, as republished in
#   github.com/api-evangelist/runai openapi/runai-workloads-api-openapi.yml,
#   runai-workloads-v2-api-openapi.yml and runai-tokens-api-openapi.yml.
# - "v3.0": the self-hosted v3.0 REST reference, docs.nvidia.com/run-ai/self-hosted/reference/
#   rest-api/endpoints/workloads/workloads-v-2/create-workload-v-2 (and update-workload-v-2).
# - "2.24": the control-plane API 2.24 pages, run-ai-docs.nvidia.com/api/2.24/... (issue 27).
# tests/cluster/test_runai_published.py checks each table against the fake control plane.

from __future__ import annotations

import re
from typing import Literal

# POST /api/v2/workloads?dryRun=true ("True to perform validations only, without side
# effects"): listed by the 2.24 and v3.0 references, absent from "latest". A control plane
# that does not know the parameter ignores it and CREATES the workload, so a dry run goes
# through Run:ai only when the cluster reports one of these versions (major.minor).
DRY_RUN_VERSIONS = ("2.24", "3.0")

_VERSION = re.compile(r"^v?(\d+)\.(\d+)")


def documents_dry_run(version: str | None) -> bool:
    """Whether the reference of the cluster's VERSION (DisplayedCluster.version) lists dryRun."""
    found = _VERSION.match(version or "")
    return found is not None and f"{int(found[1])}.{int(found[2])}" in DRY_RUN_VERSIONS


# What `status --watch` and `submit --wait` do with each phase of components/schemas/Phase
# ("latest", runai-workloads-api-openapi.yml: 14 values): settle on it (the job runs or has
# ended well), fail (it ended badly or will not run without someone acting), or wait.
Outcome = Literal["settle", "fail", "wait"]
PHASES: dict[str, tuple[Outcome, str]] = {
    "Creating": ("wait", "the control plane is creating it"),
    "Initializing": ("wait", "its pods are starting"),
    "Resuming": ("wait", "it is being resumed"),
    "Pending": ("wait", "it waits to be scheduled"),
    "Updating": ("wait", "an update is being applied"),
    "Stopping": ("wait", "it is being stopped"),
    "Terminating": ("wait", "its pods are ending"),
    "Running": ("settle", "it runs"),
    "Completed": ("settle", "it ended well"),
    "Failed": ("fail", "it ended badly"),
    "Degraded": ("fail", "some of its pods do not run: it will not recover by itself"),
    "Stopped": ("fail", "it was stopped: it runs again only once resumed"),
    "Deleting": ("fail", "it is being deleted"),
    "Unknown": ("fail", "the control plane cannot tell its state (a cluster it lost touch with?)"),
}
DELETING = "Deleting"


def outcome_of(phase: str) -> Outcome:
    """A phase's outcome; one the table does not know (a later release's) is waited on."""
    return PHASES.get(phase, ("wait", ""))[0]


# PUT /api/v2/workloads/{id} (update_workload_v2, "latest" and v3.0): WorkloadV2UpdateRequest
# {metadata: WorkloadV2MetadataUpdateParams, manifest}; the metadata it changes is these
# fields only. Name, project, cluster and preemptibility stay as created.
UPDATABLE_METADATA = ("priority", "category")
FIXED_METADATA = ("preemptibility",)

# Tokens: POST /api/v2/token (grant_token_v2; form-encoded OAuth2 client_credentials ->
# OAuth2TokenResponse {access_token, token_type, expires_in}); POST /api/v1/token (grant_token,
# JSON TokenRequest -> {accessToken, expiresIn}) "is deprecated. Use /api/v2/token instead"
# (v3.0), kept for control planes without v2 (they answer 404 or 405 there).
TOKEN_V2_PATH = "/api/v2/token"
TOKEN_V1_PATH = "/api/v1/token"
