"""The runtime cost of the admission policy (issue 41 item 8), estimated on every example render
and smoke render, against the limits the API server puts on a ValidatingAdmissionPolicy.

The limits (kubernetes/kubernetes, staging/src/k8s.io/apiserver/pkg/apis/cel/config.go):
`PerCallLimit` = 1,000,000 for one expression's evaluation, `RuntimeCELCostBudget` =
10,000,000 for one evaluation of a policy binding (all its expressions). Neither CEL
implementation the tests use reports cost (cel-expr-python has no cost tracking), so the cost
is estimated from cel-go's model (interpreter/runtimecost.go, the O(n) and O(nm) functions:
one unit for each expression node evaluated, comprehension bodies once per element;
`startsWith`/`endsWith` a tenth of a unit per character of the string; `contains`
ceil(len(s)/10) * ceil(len(sub)/10); `matches` ceil((1 + len(s))/10) * ceil(len(regex)/4):
a regular expression costs by its own length too, common/cost.go's
RegexStringLengthCostFactor 0.25) with cel-python's interpreter: every grammar rule it
visits counts one unit (several rules stand for one cel-go node, so this counts high). Every
variable is evaluated, as the tests' evaluators do (the API server evaluates one lazily, only
when an expression reads it): an upper bound. The goal is ten times headroom under each limit."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src")]
from runai_spec.outputs.admission.rules import PER_CALL_LIMIT  # noqa: E402  (the policy's own figure)

BUDGET = 10_000_000
STRING_FUNCTIONS = {"matches", "contains", "startsWith", "endsWith"}


class Counter:
    """Cost units, counted by patching cel-python's interpreter."""

    def __init__(self) -> None:
        import celpy.evaluation as evaluation
        import lark

        self.units = 0
        counter = self
        visit = lark.visitors.Interpreter.visit

        def counted_visit(self: Any, tree: Any) -> Any:
            counter.units += 1
            return visit(self, tree)

        method_eval = evaluation.Evaluator.method_eval

        def counted_method(self: Any, object: Any, method_ident: Any, exprlist: Any = None) -> Any:
            name = str(getattr(method_ident, "value", method_ident))
            args = list(exprlist or [])
            if name in STRING_FUNCTIONS and isinstance(object, str):
                counter.units += string_cost(name, object, args)
            return method_eval(self, object, method_ident, args)

        evaluation.Evaluator.visit = counted_visit  # type: ignore[method-assign]
        evaluation.Evaluator.method_eval = counted_method  # type: ignore[method-assign]


def string_cost(name: str, text: str, args: list[Any]) -> int:
    """cel-go's runtime cost of the string function NAME on TEXT with ARGS."""
    other = len(args[0]) if args and isinstance(args[0], str) else 0
    if name == "matches":
        return math.ceil((1 + len(text)) / 10) * math.ceil(other / 4)
    if name == "contains":
        return math.ceil(len(text) / 10) * math.ceil(other / 10)
    return math.ceil(len(text) / 10)


def heavy(
    profile_file: Path = ROOT / "examples" / "multi-node" / "profile.yaml",
    registry: Any = None,
    kind: str = "PyTorchJob",
) -> tuple[str, dict[str, Any]]:
    """The job of PROFILE_FILE (the multi-node example's) made as costly as validate lets a
    profile make it (the admission tests' at_the_bounds: the most arguments and variables,
    each as long as allowed, every argument a flag), rendered with REGISTRY (the shipped
    presets')."""
    import json
    import tempfile

    import yaml

    from outputs.admission.admission_policy import REGISTRY, at_the_bounds
    from runai_spec.pipeline.workload import prepare_workload

    profile = yaml.safe_load(profile_file.read_text(encoding="utf-8"))
    at_the_bounds(profile)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "profile.yaml"
        path.write_text(json.dumps(profile), encoding="utf-8")
        workload = prepare_workload(path, registry or REGISTRY)
    assert not workload.errors, [f.rule for f in workload.errors]
    job = next(m for m in workload.manifests if m.get("kind") == kind)
    name = f"{profile_file.parent.name}-job with the most and longest arguments and variables validate allows"
    return name, dict(job)


class Costs:
    """The estimated cost of each of a policy's expressions on one job (Counter, cel-python)."""

    def __init__(self, policy: dict[str, Any], params: dict[str, Any]) -> None:
        import celpy

        self.counter = Counter()
        self.spec, self.params = policy["spec"], params
        self.items = [
            *self.spec.get("matchConditions", []),
            *self.spec["variables"],
            *self.spec["validations"],
        ]
        env = celpy.Environment()
        self.programs = {
            item["expression"]: env.program(env.compile(item["expression"])) for item in self.items
        }

    def of(self, job: dict[str, Any], projects: dict[str, str]) -> dict[str, int]:
        """Each expression's cost (by variable or validation name) on JOB."""
        import celpy

        from cel_eval import api_object

        namespace = job["metadata"]["namespace"]
        to_cel = celpy.adapter.json_to_cel
        data: dict[str, Any] = {
            "object": to_cel(api_object(job)),
            "oldObject": to_cel(None),
            "params": to_cel(self.params),
            "request": to_cel({"operation": "CREATE", "namespace": namespace}),
            "namespaceObject": to_cel(
                {"metadata": {"name": namespace, "labels": {"runai/queue": projects.get(namespace, "")}}}
            ),
        }
        costs: dict[str, int] = {}
        variables: dict[Any, Any] = {}
        for item in self.items:
            self.counter.units = 0
            value = self.programs[item["expression"]].evaluate(
                {**data, "variables": celpy.celtypes.MapType(variables)}
            )
            costs[item.get("name", item["expression"][:30])] = self.counter.units
            if item in self.spec["variables"]:
                variables[celpy.celtypes.StringType(item["name"])] = value
        return costs


def measure(limit: int) -> int:
    sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]
    from outputs.admission.admission_policy import PROJECTS, documents, renders

    policy, params = documents()[0], documents()[-1]
    costs = Costs(policy, params)
    worst_call, worst_total = 0, 0
    for name, job in [
        *renders()[:limit],
        *([heavy()] if limit >= 1000 else []),
    ]:
        each = costs.of(job, PROJECTS)
        call, total = max(each.values()), sum(each.values())
        worst_call, worst_total = max(worst_call, call), max(worst_total, total)
        top = max(each, key=lambda k: each[k])
        print(f"{name}: costliest expression {call:,} units ({top}), all {total:,}")
    print(
        f"ratio per-expression limit / costliest: {PER_CALL_LIMIT / max(worst_call, 1):.1f} x "
        f"(PerCallLimit {PER_CALL_LIMIT:,}; goal >= 10)"
    )
    print(
        f"ratio evaluation budget / costliest evaluation: {BUDGET / max(worst_total, 1):.1f} x "
        f"(RuntimeCELCostBudget {BUDGET:,}; goal >= 10)"
    )
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--renders", type=int, default=1000, help="the first N renders (all by default)")
    args = parser.parse_args()
    raise SystemExit(measure(args.renders))


if __name__ == "__main__":
    main()
