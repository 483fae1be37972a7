"""What the API server does with a ValidatingAdmissionPolicy, its binding and its parameters,
evaluated with a real CEL implementation (cel-expr-python, the Python binding of cel-cpp).

Shared by test_admission.py (the policy against renders) and kubeapi.py (the fake API server
enforces stored policies). The order and the messages follow the API server (read in
kubernetes/kubernetes, staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating/
validator.go at commit 1ad6fd7a and dispatcher.go, Kubernetes v1.30 and later): match conditions first (false:
the policy does not apply; an error denies under failurePolicy Fail), then the variables,
then every validation; a failing validation's message is its messageExpression when that
gives a non-empty single-line string, else its message, else `failed expression: <expr>`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

NAMES = ("object", "oldObject", "request", "params", "namespaceObject", "variables")
# expression -> compiled program, shared by every Evaluator of this process: the environment
# is the same for all (NAMES, the strings extension), so one expression compiles to the same
# program; cel-cpp plans a program on its first evaluation, a second or so for the generated
# policy, which each test's fake API server would otherwise pay again (issue 29)
_PROGRAMS: dict[str, Any] = {}


@lru_cache(maxsize=4)
def _typed(kind: tuple[str, str]) -> frozenset[str]:
    """The typed objects (with properties) of the schema of KIND (apiVersion, kind) that the
    policy judges (a PyTorchJob, an MPIJob), by schema path; empty for any other kind."""
    from runai_spec.outputs.admission.fields import FIELDS_FILES, shipped_fields

    return frozenset(shipped_fields(kind)) if kind in FIELDS_FILES else frozenset()


def api_object(obj: Any) -> Any:
    """OBJ as the API server hands it to CEL: in a judged job, a property of a typed object of
    the schema named by a CEL keyword is selected by its escaped name `__name__` (Kubernetes'
    property-name escaping: apiextensions-apiserver pkg/apis/apiextensions/v1/types.go,
    ValidationRule; kubernetes.io's CRD validation rules, "Escaping": `self.__namespace__`).
    Map keys (labels) are not escaped; nor is any object of other kinds here."""
    from runai_spec.outputs.admission.cel import ESCAPED

    typed = _typed((obj.get("apiVersion"), obj.get("kind"))) if isinstance(obj, dict) else frozenset()
    if not typed:
        return obj

    def walk(value: Any, path: str) -> Any:
        if isinstance(value, list):
            return [walk(v, f"{path}[]") for v in value]
        if not isinstance(value, dict):
            return value
        if path not in typed:  # a map: its keys as they are
            return {k: walk(v, f"{path}.*") for k, v in value.items()}
        return {
            (f"__{k}__" if k in ESCAPED else k): walk(v, f"{path}.{k}" if path else k)
            for k, v in value.items()
        }

    return walk(obj, "")


@dataclass(frozen=True)
class Failure:
    """One failing validation (index in spec.validations), or an evaluation error (index -1
    for a match condition or a variable)."""

    index: int
    message: str
    reason: str  # Forbidden, Invalid, ... (the validation's `reason`, default Invalid)
    error: bool = False
    expressed: bool = False  # the message is the messageExpression's


class Evaluator:
    """One policy spec, compiled once per expression."""

    def __init__(self, spec: dict[str, Any]) -> None:
        import cel_expr_python.cel as cel
        import cel_expr_python.ext.ext_strings as ext_strings

        self.cel = cel
        self.spec = spec
        self.env = cel.NewEnv(
            variables={n: cel.Type.DYN for n in NAMES}, extensions=[ext_strings.ExtStrings()]
        )
        self._compiled = _PROGRAMS

    def compile_all(self) -> Evaluator:
        """Compile every expression now (the fake API server does it before serving)."""
        spec = self.spec
        for item in [
            *spec.get("matchConditions", []),
            *spec.get("variables", []),
            *spec.get("validations", []),
        ]:
            for key in ("expression", "messageExpression"):
                if key in item and item[key] not in self._compiled:
                    self._compiled[item[key]] = self.env.compile(item[key])
        return self

    def eval(self, expression: str, data: dict[str, Any]) -> Any:
        """The plain value, or a RuntimeError (returned, not raised) for an evaluation error."""
        if expression not in self._compiled:
            self._compiled[expression] = self.env.compile(expression)
        result = self._compiled[expression].eval(data=data)
        if result.type() == self.cel.Type.ERROR:
            return RuntimeError(str(result.value()))
        return result.plain_value()

    def failures(
        self,
        job: dict[str, Any],
        *,
        params: dict[str, Any] | None,
        namespace_labels: dict[str, str],
        old: dict[str, Any] | None = None,
        operation: str | None = None,
        request: dict[str, Any] | None = None,
    ) -> list[Failure] | None:
        """Every failing validation in order; None when a match condition excludes the request.
        REQUEST: more fields of the request (userInfo, resource, kind)."""
        namespace = str(job.get("metadata", {}).get("namespace", ""))
        data: dict[str, Any] = {
            "object": api_object(job),
            "oldObject": api_object(old),
            "params": params,
            "request": {
                "operation": operation or ("UPDATE" if old else "CREATE"),
                "namespace": namespace,
                **(request or {}),
            },
            "namespaceObject": {"metadata": {"name": namespace, "labels": namespace_labels}},
        }
        for condition in self.spec.get("matchConditions", []):
            verdict = self.eval(condition["expression"], {**data, "variables": {}})
            if isinstance(verdict, Exception):
                return [
                    Failure(
                        -1,
                        f"matchCondition '{condition['name']}' resulted in error: {verdict}",
                        "Invalid",
                        error=True,
                    )
                ]
            if verdict is not True:
                return None
        variables: dict[str, Any] = {}
        for variable in self.spec.get("variables", []):
            value = self.eval(variable["expression"], {**data, "variables": variables})
            if isinstance(value, Exception):
                return [
                    Failure(
                        -1, f"variable '{variable['name']}' resulted in error: {value}", "Invalid", error=True
                    )
                ]
            variables[variable["name"]] = value
        data["variables"] = variables
        out: list[Failure] = []
        for index, validation in enumerate(self.spec.get("validations", [])):
            verdict = self.eval(validation["expression"], data)
            if verdict is True:
                continue
            if isinstance(verdict, Exception) or not isinstance(verdict, bool):
                out.append(
                    Failure(
                        index,
                        f"expression '{validation['expression']}' resulted in error: {verdict}",
                        "Invalid",
                        error=True,
                    )
                )
                continue
            message = ""
            if "messageExpression" in validation:
                value = self.eval(validation["messageExpression"], data)
                if isinstance(value, str) and "\n" not in value.strip():
                    message = value.strip()
            expressed = bool(message)
            message = (
                message
                or str(validation.get("message", "")).strip()
                or f"failed expression: {validation['expression'].strip()}"
            )
            out.append(
                Failure(index, message, str(validation.get("reason") or "Invalid"), expressed=expressed)
            )
        return out


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels and matchExpressions) against LABELS; an absent
    selector selects everything."""
    if not selector:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for term in selector.get("matchExpressions") or []:
        key, op, values = term["key"], term["operator"], term.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def rule_matches(
    rules: list[dict[str, Any]], group: str, version: str, resource: str, operation: str
) -> bool:
    def has(values: list[str], value: str) -> bool:
        return "*" in values or value in values

    return any(
        has(r.get("apiGroups", []), group)
        and has(r.get("apiVersions", []), version)
        and has(r.get("resources", []), resource)
        and has(r.get("operations", []), operation)
        for r in rules
    )
