"""A second CEL implementation for the admission policy: cel-python (celpy, pure Python, its
own parser and evaluator), driven in the API server's order as cel_eval.Evaluator is, so that
a decision that depends on one implementation's quirks shows as a disagreement."""

from __future__ import annotations

from typing import Any

from cel_eval import Failure, api_object


class PyEvaluator:
    """One policy spec, compiled once per expression with celpy."""

    def __init__(self, spec: dict[str, Any]) -> None:
        import celpy

        self.celpy = celpy
        self.env = celpy.Environment()
        self.spec = spec
        self._programs: dict[str, Any] = {}

    def _program(self, expression: str) -> Any:
        if expression not in self._programs:
            self._programs[expression] = self.env.program(self.env.compile(expression))
        return self._programs[expression]

    def eval(self, expression: str, data: dict[str, Any]) -> Any:
        """The plain value, or the evaluation error (returned, not raised)."""
        try:
            value = self._program(expression).evaluate(data)
        except self.celpy.evaluation.CELEvalError as exc:
            return RuntimeError(str(exc))
        if isinstance(value, self.celpy.evaluation.CELEvalError):
            return RuntimeError(str(value))
        return value

    def failures(
        self,
        job: dict[str, Any],
        *,
        params: dict[str, Any] | None,
        namespace_labels: dict[str, str],
        old: dict[str, Any] | None = None,
        operation: str | None = None,
    ) -> list[Failure] | None:
        to_cel = self.celpy.adapter.json_to_cel
        namespace = str(job.get("metadata", {}).get("namespace", ""))
        data: dict[str, Any] = {
            "object": to_cel(api_object(job)),
            "oldObject": to_cel(api_object(old)),
            "params": to_cel(params),
            "request": to_cel(
                {"operation": operation or ("UPDATE" if old else "CREATE"), "namespace": namespace}
            ),
            "namespaceObject": to_cel({"metadata": {"name": namespace, "labels": namespace_labels}}),
        }
        for condition in self.spec.get("matchConditions", []):
            verdict = self.eval(condition["expression"], {**data, "variables": to_cel({})})
            if isinstance(verdict, Exception):
                return [Failure(-1, f"matchCondition error: {verdict}", "Invalid", error=True)]
            if not bool(verdict):
                return None
        variables: dict[str, Any] = {}
        for variable in self.spec.get("variables", []):
            value = self.eval(
                variable["expression"], {**data, "variables": self.celpy.celtypes.MapType(variables)}
            )
            if isinstance(value, Exception):
                return [Failure(-1, f"variable '{variable['name']}' error: {value}", "Invalid", error=True)]
            variables[self.celpy.celtypes.StringType(variable["name"])] = value
        data["variables"] = self.celpy.celtypes.MapType(variables)
        out: list[Failure] = []
        for index, validation in enumerate(self.spec.get("validations", [])):
            verdict = self.eval(validation["expression"], data)
            if isinstance(verdict, Exception):
                out.append(Failure(index, str(verdict), "Invalid", error=True))
                continue
            if bool(verdict):
                continue
            message = ""
            if "messageExpression" in validation:
                value = self.eval(validation["messageExpression"], data)
                if isinstance(value, str) and "\n" not in value.strip():
                    message = str(value).strip()
            expressed = bool(message)
            out.append(
                Failure(
                    index,
                    message or str(validation.get("message", "")),
                    str(validation.get("reason") or "Invalid"),
                    expressed=expressed,
                )
            )
        return out
