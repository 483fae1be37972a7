"""Reading the rendered PyTorchJob: its replicas, containers, and the operator's env."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import InputError
from ..facts.kubeflow import API_VERSION, DEFAULT_PORT, KIND, PORT_NAME, operator_env
from ..facts.kubeflow import nproc_int as nproc_of
from ..facts.kubeflow import pytorch_container as container_of
from ..facts.kubeflow import replica_specs as replicas_of

# The operator's facts live in kubeflow.py; the rehearsal's names for them stay importable.
__all__ = ["DEFAULT_PORT", "PORT_NAME", "container_of", "find_job", "nproc_of", "operator_env", "replicas_of"]


def find_job(manifests: Iterable[Mapping[str, Any]]) -> Mapping[str, Any]:
    jobs = [m for m in manifests if m.get("kind") == KIND]
    if len(jobs) != 1:
        raise InputError(
            f"expected one PyTorchJob among the manifests, found {len(jobs)}",
            hint="rehearse takes the rendered output of one profile",
        )
    job = jobs[0]
    if job.get("apiVersion") != API_VERSION:
        raise InputError(f"PyTorchJob apiVersion {job.get('apiVersion')!r} is not {API_VERSION}")
    return job
