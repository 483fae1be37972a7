"""A refused request as one clear error line with a hint, mapped back to the profile field."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ClusterError
from .session import clean, json_body

if TYPE_CHECKING:
    from .refs import Ref


# The API server's message for a request a ValidatingAdmissionPolicy denied (kubernetes
# staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating/dispatcher.go, v1.30+):
# `<resource> "<name>" is forbidden: ValidatingAdmissionPolicy '<policy>' with binding
# '<binding>' denied request: <message>`, code 403 or 422 (or 401/413) by the rule's reason.
_ADMISSION = re.compile(
    r"ValidatingAdmissionPolicy '(?P<policy>[^']*)'(?: with binding "
    r"'(?P<binding>[^']*)')? denied request: (?P<message>.*)$",
    re.S,
)
# The generated policy's messages start with the manifest field they judge.
_FIELD = re.compile(r"^(?P<field>[A-Za-z][\w./\[\]-]*): (?P<what>.+)$", re.S)


class AdmissionDenied(ClusterError):
    """The cluster's admission policy denied the object: `admission denied <where>: <field>:
    <message>`; the CLI names the profile file as WHERE (`for_file`)."""

    def __init__(self, ref: str, policy: str, binding: str | None, field: str | None, detail: str) -> None:
        self.ref, self.policy, self.binding = ref, policy, binding
        self.denied_field, self.detail = field, detail
        super().__init__(self._text(ref), file="cluster", hint=self._hint())

    def _text(self, where: str) -> str:
        field = f"{self.denied_field}: " if self.denied_field else ""
        return f"admission denied {where}: {field}{self.detail}"

    def _hint(self) -> str:
        return (
            f"the cluster admits only the exact shape of an approved, deployed preset "
            f"(ValidatingAdmissionPolicy {self.policy}; {self.ref}); render it again from "
            "an unchanged preset, or ask the AI Engineers to approve and deploy the change "
            "(`runai-spec presets verify --live` compares)"
        )

    def for_file(self, file: str) -> AdmissionDenied:
        """The same denial, naming the profile FILE instead of the object."""
        out = AdmissionDenied(self.ref, self.policy, self.binding, self.denied_field, self.detail)
        out.message = out._text(file)
        out.args = (out.message,)
        return out


def admission_denied(status: Mapping[str, Any], ref: str) -> AdmissionDenied | None:
    """The admission denial in a Status, or None when it is another refusal."""
    match = _ADMISSION.search(str(status.get("message") or ""))
    if match is None:
        return None
    detail = clean(match.group("message"), 600)
    found = _FIELD.match(detail)
    field, what = (found.group("field"), found.group("what")) if found else (None, detail)
    return AdmissionDenied(
        ref,
        clean(match.group("policy"), 120),
        clean(match.group("binding"), 120) if match.group("binding") else None,
        field,
        what,
    )


def refusal(resp: Any, ref: Ref | str, verb: str) -> ClusterError:
    """One clear line for a refused request, with a hint; never the headers or the token."""
    data = json_body(resp)
    status = data if isinstance(data, dict) and data.get("kind") == "Status" else {}
    message = clean(status.get("message") or resp.reason or f"HTTP {resp.status}")
    code = resp.status
    where = str(ref)
    # before the generic 401/403/422: a policy's denial carries one of those codes
    denied = admission_denied(status, where) if code in (401, 403, 413, 422) else None
    if denied is not None:
        return denied
    if code == 401:
        return ClusterError(
            "unauthorised: the API server refused the credentials",
            file="cluster",
            hint="log in again or refresh the token of the kubeconfig context",
        )
    if code == 409:
        conflicts = "; ".join(clean(c.get("message", ""), 120) for c in _causes(status))
        message = conflicts or message
    if code == 422:
        causes = _causes(status)
        parts = [f"{clean(c.get('field', ''), 120)}: {clean(c.get('message', ''), 160)}" for c in causes] or [
            message
        ]
        profile_field = next((f for c in causes if (f := profile_field_of(c.get("field", "")))), None)
        hint = (
            f"it comes from the profile's `{profile_field}`"
            if profile_field
            else "the field comes from the preset or template, not the profile: report it to the "
            "engineers (the cluster's CRD may differ from the upstream one)"
        )
        return ClusterError(f"{where}: invalid: {'; '.join(parts)}", file="cluster", hint=hint)
    return refused_line(
        where,
        code,
        message,
        "cluster",
        {
            403: f"ask the cluster engineers for permission to {verb} it",
            404: "check the name, the project (namespace) and the kubeconfig context",
            409: "another client changed it; check with `runai-spec status`, "
            "then submit again (or --replace)",
            400: "the server refused the manifest; an unknown field means the "
            "cluster's CRD is older than what runai-spec renders: report it",
        },
    )


# What each refused status means, in the `error:` line of every back-end.
REFUSED_WORDS = {400: "bad request", 403: "forbidden", 404: "not found", 409: "conflict", 422: "invalid"}


def refused_line(
    where: str,
    code: int,
    message: str,
    file: str,
    hints: Mapping[int, str],
    words: Mapping[int, str] = REFUSED_WORDS,
) -> ClusterError:
    """A refused request of any back-end as one line, `<where>: <what the status means>:
    <the server's reason>`, with that back-end's hint for it; a status without a hint there is
    `HTTP <code>`, to try again later."""
    if code in hints and code in words:
        return ClusterError(f"{where}: {words[code]}: {message}", file=file, hint=hints[code])
    return ClusterError(
        f"{where}: HTTP {code}: {message}", file=file, hint="try again later; report it if it persists"
    )


def _causes(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    causes = (status.get("details") or {}).get("causes") or []
    return [c for c in causes if isinstance(c, dict)]


_PROFILE_FIELDS = (
    (re.compile(r"containers\[\d+\]\.image$"), "image"),
    (re.compile(r"containers\[\d+\]\.(command|args)"), "command"),
    (re.compile(r"containers\[\d+\]\.env"), "env"),
    (re.compile(r"containers\[\d+\]\.workingDir"), "working_dir"),
    (re.compile(r"^\.?metadata\.name"), "name"),
    (re.compile(r"persistentVolumeClaim|volumeMounts"), "checkpoint / data"),
    (re.compile(r"^\.?metadata\.(namespace|labels)"), "project"),
)


def profile_field_of(manifest_path: str) -> str | None:
    """Map a server's field path (details.causes[].field) back to the profile field it came from."""
    for pattern, name in _PROFILE_FIELDS:
        if pattern.search(manifest_path):
            return name
    return None
