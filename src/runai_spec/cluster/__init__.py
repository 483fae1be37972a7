"""Back-ends behind one interface (backend.py), chosen by name; the only importer of kubernetes."""

from ..facts.kubeflow import (
    CONTAINER,
    JOB_NAME_LABEL,
    MANAGED_BY_LABEL,
    PROFILE_SHA_ANNOTATION,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
)
from .delete import DeleteResult, delete_job
from .logs import LogsResult, SavedLog, save_logs
from .objects import (
    FIELD_MANAGER,
    SERVER_META,
    contains,
    get_object,
    managed_by_us,
    ref_of,
    same_render,
    strip_server_fields,
)
from .refs import CONFIGMAP, EVENTS, PODS, PYTORCHJOB, RESOURCES, Ref, Resource, job_ref
from .refusals import AdmissionDenied, admission_denied, profile_field_of, refusal
from .session import RedactFilter, RetryPolicy, Session, Target, clean, enable_debug
from .status import PodState, StatusResult, explain, job_status
from .submit import APPLY_TYPE, LiveObject, ObjectOutcome, SubmitResult, live_objects_all, submit_manifests

__all__ = [
    "APPLY_TYPE",
    "CONFIGMAP",
    "CONTAINER",
    "EVENTS",
    "FIELD_MANAGER",
    "JOB_NAME_LABEL",
    "MANAGED_BY_LABEL",
    "PODS",
    "PROFILE_SHA_ANNOTATION",
    "PYTORCHJOB",
    "REPLICA_INDEX_LABEL",
    "REPLICA_TYPE_LABEL",
    "RESOURCES",
    "SERVER_META",
    "AdmissionDenied",
    "DeleteResult",
    "LiveObject",
    "LogsResult",
    "ObjectOutcome",
    "PodState",
    "RedactFilter",
    "Ref",
    "Resource",
    "RetryPolicy",
    "SavedLog",
    "Session",
    "StatusResult",
    "SubmitResult",
    "Target",
    "clean",
    "contains",
    "delete_job",
    "enable_debug",
    "explain",
    "get_object",
    "admission_denied",
    "job_ref",
    "job_status",
    "live_objects_all",
    "managed_by_us",
    "profile_field_of",
    "ref_of",
    "refusal",
    "same_render",
    "save_logs",
    "strip_server_fields",
    "submit_manifests",
]
