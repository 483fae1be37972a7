"""The generated admission policy admits every example's job and smoke job, and denies each of them
with any leaf of the preset, the site, the ledger or the template changed, any key inserted and any
required key removed: the policy is derived from the renders, as an allow-list.

After a change of one preset, its cases with `-k "(<preset> or not heavy) and not
second_implementation"` (docs/engineer.md, "Testing a preset or rule change")."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from conftest import EXAMPLES, ROOT, example_job
from outputs.admission import admission_policy
from outputs.admission.admission_policy import (
    CEL_PYTHON,
    PRESET_OF,
    REGISTRY,
    Job,
    Policy,
    container,
    pods,
    renders,
    shared_policy,
    smoke_jobs,
)
from runai_spec.outputs.explain import explain_workload
from runai_spec.pipeline.workload import prepare_workload

pytest.importorskip("cel_expr_python.cel")


@pytest.fixture(scope="module")
def policy() -> Policy:
    return shared_policy()


# -- admitted ----------------------------------------------------------------------------
def test_every_example_and_smoke_render_is_admitted(policy: Policy) -> None:
    jobs = renders()
    assert len(jobs) == 2 * len(EXAMPLES)
    for name, job in jobs:
        assert policy.denials(job) == {}, name


def test_each_launcher_a_preset_allows_has_its_own_checks(policy: Policy) -> None:
    """Issue 41 (with issue 38's `launcher: accelerate`): the gate derives a shape for each
    launcher a preset allows, from that launcher's render; an accelerate job tampered into a
    torchrun one's command is denied, and a preset that does not allow accelerate (elastic)
    has only torchrun's checks. accelerate's render carries the strategy: a family for each
    the preset allows (ddp, fsdp, deepspeed), torchrun's one for all."""
    accelerate = [
        (name, job) for name, job in renders() if container(pods(job)[0])["command"][0] == "accelerate"
    ]
    assert len(accelerate) == 4
    assert [name for name, job in accelerate if policy.denials(job)] == []
    variables = {v["name"]: v["expression"] for v in policy.spec["variables"]}
    families = json.loads(variables["families"])  # a CEL map literal of JSON's strings
    assert {name: len(ids) for name, ids in families.items()} == {
        "h200-1gpu": 1,  # one GPU runs python, whichever launcher
        "h200-2x8-ib": 1 + 3,
        "h200-8gpu": 1 + 3,
        "h200-elastic-2to4x8-ib": 1,  # validate refuses accelerate on an elastic preset
    }
    job = dict(accelerate)["accelerate-multi-node-job"]
    for template in pods(job):
        container(template)["command"][0] = "torchrun"
    assert list(policy.denials(job)) == ["shape"]


# cel-python compiles the policy in ~4 CPU s and evaluates a job in ~2: CI admits the multi-node
# job with it, `long` the smoke job too (and every render in the test below)
@CEL_PYTHON
@pytest.mark.parametrize(
    "which", ["multi-node-job", pytest.param("llm-7b-fsdp-smoke-smoke", marks=pytest.mark.long)]
)
def test_the_second_implementation_admits_them_too(policy: Policy, which: str) -> None:
    job = dict(renders())[which]
    assert policy.denials(job, python=True) == {}


@pytest.mark.long
def test_the_second_implementation_admits_every_render_and_agrees_on_the_properties(
    policy: Policy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pytest -m long`: every render with cel-python, and the leaf, key and removal
    properties with every SAMPLE-th case evaluated by both implementations."""
    for name, job in renders():
        assert policy.denials(job, python=True) == {}, name
    monkeypatch.setattr(admission_policy, "SAMPLE", 11)
    for kind in ("job", "smoke"):
        for name in EXAMPLES:
            test_every_leaf_of_the_preset_site_ledger_or_template_changed_is_denied(policy, kind, name)
            test_a_key_inserted_at_every_mapping_level_is_denied(policy, kind, name)
    for name in EXAMPLES:
        test_every_required_key_removed_is_denied(policy, name)


def test_a_job_whose_quantities_are_strings_is_admitted(policy: Policy) -> None:
    job = example_job("multi-node")
    for template in pods(job):
        resources = container(template)["resources"]
        for part in ("requests", "limits"):
            resources[part] = {k: str(v) for k, v in resources[part].items()}
    assert policy.denials(job) == {}


# -- every leaf, key and value (the property of the issue) -------------------------------
def _leaves(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _leaves(value, (*path, i))
    else:
        yield path, node


def _maps(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _maps(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _maps(value, (*path, i))


def _at(job: Job, path: tuple[Any, ...]) -> Any:
    node: Any = job
    for step in path:
        node = node[step]
    return node


def _profile_texts(name: str) -> list[str]:
    """The example's profile values as text: a rendered leaf that holds one is the profile's."""
    profile = yaml.safe_load((ROOT / "examples" / name / "profile.yaml").read_text())
    return [str(v) for _, v in _leaves(profile) if isinstance(v, str) and len(v) >= 3]


def _from_profile(value: Any, texts: list[str]) -> bool:
    text = str(value)
    return any(t in text for t in texts) or (
        isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
    )  # the profile's sha256


def _non_profile_leaves(name: str, job: Job, smoke: bool) -> list[tuple[Any, ...]]:
    """Leaves whose origin is the preset, the site, the ledger or the template: for a job,
    from `render --explain`'s provenance; for its smoke test, every leaf that holds no value of
    the profile. Data volumes' readOnly is the profile's (data[].read_only)."""
    texts = _profile_texts(name)
    profile = yaml.safe_load((ROOT / "examples" / name / "profile.yaml").read_text())
    own_env = {*profile.get("env", {}), *profile.get("secret_env", {})}

    def profile_env(path: tuple[Any, ...]) -> bool:
        return "env" in path and _at(job, path[: path.index("env") + 2])["name"] in own_env

    if smoke:
        out = [p for p, v in _leaves(job) if not _from_profile(v, texts) and not profile_env(p)]
    else:
        workload = prepare_workload(ROOT / "examples" / name / "profile.yaml", REGISTRY)
        kinds = {f.path: f.origin.kind for f in explain_workload(workload).fields}
        out = []
        for path, value in _leaves(job):
            dotted = "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in path)[1:]
            if kinds.get(dotted) != "profile" and not _from_profile(value, texts):
                out.append(path)

    def data_volume(path: tuple[Any, ...]) -> bool:
        item = _at(job, path[: path.index("volumes" if "volumes" in path else "volumeMounts") + 2])
        return str(item.get("name", "")).startswith("data-")

    return [
        p for p in out if not (p[-1] == "readOnly" and data_volume(p)) and p[:2] != ("metadata", "namespace")
    ]


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    return f"{value}x"


# The properties run per example and kind, each id naming the example's preset: after a change
# of one preset, `-k "<preset> or not heavy"` runs its cases and every other test (engineer.md).
# CI runs every example but the accelerate multi-node one, whose exhaustive cases cost about
# 140 CPU s (its family's shape is the multi-node example's but for the launcher head, which the
# accelerate single-node cases cover); they run with the long tests.
LONG_EXAMPLES = {"accelerate-multi-node"}
CASES = [
    pytest.param(k, n, marks=pytest.mark.long) if n in LONG_EXAMPLES else (k, n)
    for k in ("job", "smoke")
    for n in EXAMPLES
]
CASE_IDS = [f"{k}-{n}-{PRESET_OF[n]}" for k in ("job", "smoke") for n in EXAMPLES]
REQUIRED = [pytest.param(n, marks=pytest.mark.long) if n in LONG_EXAMPLES else n for n in EXAMPLES]


def _job(kind: str, name: str) -> Job:
    """The example's job, or its smoke job."""
    if kind == "job":
        return example_job(name)
    prefix = yaml.safe_load((ROOT / "examples" / name / "profile.yaml").read_text())["name"]
    return next(j for j in smoke_jobs() if j["metadata"]["name"].startswith(prefix))


@pytest.mark.heavy
@pytest.mark.parametrize(("kind", "name"), CASES, ids=CASE_IDS)
def test_every_leaf_of_the_preset_site_ledger_or_template_changed_is_denied(
    policy: Policy, kind: str, name: str
) -> None:
    job = _job(kind, name)
    paths = _non_profile_leaves(name, job, kind == "smoke")
    assert len(paths) > 40
    for case, path in enumerate(paths):
        tampered = copy.deepcopy(job)
        parent = _at(tampered, path[:-1])
        parent[path[-1]] = _changed(parent[path[-1]])
        assert policy.agreed(tampered, case), (kind, name, path)


def _schema_at(path: tuple[Any, ...]) -> dict[str, Any]:
    from conftest import upstream_crd

    version = next(v for v in upstream_crd()["spec"]["versions"] if v["name"] == "v1")
    node: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    for step in path:
        if isinstance(step, int):
            node = node["items"]
        elif step in node.get("properties", {}):
            node = node["properties"][step]
        else:
            node = node.get("additionalProperties") or {}
    return node


def _sample(schema: dict[str, Any]) -> Any:
    """A value of the type SCHEMA asks for (the API server refuses another before admission)."""
    kind = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        return "1"
    return {"object": {}, "array": [], "integer": 1, "boolean": True, "number": 1}.get(str(kind), "x")


def _inserted(path: tuple[Any, ...], node: dict[str, Any]) -> tuple[str, Any] | None:
    """A key the CRD schema allows at PATH that NODE lacks, with a value of its type (an
    unknown key would be pruned by the API server before admission)."""
    schema = _schema_at(path)
    props = schema.get("properties")
    if props is None:
        extra = schema.get("additionalProperties")
        return ("zz-inserted", _sample(extra)) if isinstance(extra, dict) else None
    key = next((p for p in props if p not in node), None)
    return None if key is None else (key, _sample(props[key]))


@pytest.mark.heavy
@pytest.mark.parametrize(("kind", "name"), CASES, ids=CASE_IDS)
def test_a_key_inserted_at_every_mapping_level_is_denied(policy: Policy, kind: str, name: str) -> None:
    job = _job(kind, name)
    tried = 0
    for path, node in _maps(job):
        if path in ((), ("metadata",)):
            continue  # status, uid, resourceVersion, ...: the server's
        found = _inserted(path, node)
        if found is None:
            continue
        tampered = copy.deepcopy(job)
        _at(tampered, path)[found[0]] = found[1]
        key = found[0]
        assert policy.agreed(tampered, tried), (job["metadata"]["name"], path, key)
        tried += 1
    assert tried > 12


@pytest.mark.heavy
@pytest.mark.parametrize("name", REQUIRED, ids=[f"{n}-{PRESET_OF[n]}" for n in EXAMPLES])
def test_every_required_key_removed_is_denied(policy: Policy, name: str) -> None:
    tried = 0
    job = example_job(name)
    texts = _profile_texts(name)
    for path, node in _maps(job):
        for key in list(node):
            if (path, key) in (((), "metadata"), (("metadata",), "namespace")):
                continue  # the API server's own, or required before admission
            leaves = list(_leaves(node[key]))
            if all(_from_profile(v, texts) for _, v in leaves):
                continue  # the profile's own (workingDir): optional
            tampered = copy.deepcopy(job)
            del _at(tampered, path)[key]
            assert policy.agreed(tampered, tried), (name, path, key)
            tried += 1
    assert tried > 25
