"""The admission suite's shared parts: the generated policy as the API server evaluates it (two
CEL implementations: cel-expr-python, the binding of cel-cpp; cel-python, a pure-Python one), and
the renders it is judged on (every example's job and smoke job)."""

from __future__ import annotations

import copy
import datetime as dt
import os
import re
import subprocess
import sys
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import pytest
import yaml

from cel_eval import Evaluator, Failure
from conftest import EXAMPLES, ROOT, example_job
from runai_spec.load.registry import PresetRegistry
from runai_spec.outputs.admission import documents as admission
from runai_spec.outputs.admission import gate as admission_gate
from runai_spec.render.manifests import parse

pytest.importorskip("cel_expr_python.cel")

TODAY = dt.date(2027, 1, 1)
Job = dict[str, Any]
REGISTRY = PresetRegistry(ROOT / "presets", today=TODAY)
SITE = REGISTRY.site()
PROJECTS = {"runai-nlp-lab": "nlp-lab", "runai-vision-lab": "vision-lab"}
NAMES = [v.name for v in admission_gate.validations()]
# cel-python is pure Python (seconds per job): the properties run every case on cel-cpp, and
# in the `long` test every SAMPLE-th case on both, which must then agree
SAMPLE = 0
ROLE = re.compile(r"(?<=pytorchReplicaSpecs\.)(Master|Worker)(?=\.)")
# Each example's preset (its profile's `preset`): the properties' ids name it
PRESET_OF = {
    name: str(yaml.safe_load((ROOT / "examples" / name / "profile.yaml").read_text())["preset"])
    for name in EXAMPLES
}


class Policy:
    """The generated policy and its parameters as the API server evaluates them, for a
    namespace -> project map (the namespaces' queue label), in one CEL implementation or
    both."""

    def __init__(self, documents: list[dict[str, Any]], namespaces: dict[str, str]) -> None:
        policy, binding, params = documents[0], documents[1], documents[-1]
        assert binding["spec"]["paramRef"]["name"] == params["metadata"]["name"]
        self.spec = policy["spec"]
        self.evaluator = Evaluator(self.spec)
        self._py: Any = None
        self.params = params
        self.namespaces = namespaces

    @property
    def py(self) -> Any:
        if self._py is None:
            from cel_celpy import PyEvaluator

            self._py = PyEvaluator(self.spec)
        return self._py

    def agreed(self, job: Job, case: int) -> dict[str, str]:
        """denials(JOB) by cel-cpp, and for every SAMPLE-th CASE the same decision by
        cel-python."""
        denied = self.denials(job)
        sample = SAMPLE  # the `long` test sets it (monkeypatch)
        if sample and case % sample == 0:
            assert bool(self.denials(job, python=True)) == bool(denied), (case, denied)
        return denied

    def failures(self, job: Job, *, old: Job | None = None, python: bool = False) -> list[Failure] | None:
        namespace = job["metadata"]["namespace"]
        labels = {"runai/queue": self.namespaces[namespace]} if namespace in self.namespaces else {}
        evaluator = self.py if python else self.evaluator
        failures: list[Failure] | None = evaluator.failures(
            job, params=self.params, namespace_labels=labels, old=old
        )
        return failures

    def denials(self, job: Job, *, old: Job | None = None, python: bool = False) -> dict[str, str]:
        """{validation name: message} of every failing validation; {} = admitted."""
        out: dict[str, str] = {}
        for failure in self.failures(job, old=old, python=python) or []:
            assert not failure.error, failure  # an evaluation error would be a bug of ours
            assert failure.expressed, failure  # every messageExpression gives one line
            assert failure.reason == "Forbidden", failure
            out[NAMES[failure.index]] = failure.message
        return out


@lru_cache(maxsize=1)
def documents() -> list[dict[str, Any]]:
    return admission.policy_documents(REGISTRY)


@lru_cache(maxsize=1)
def shared_policy() -> Policy:
    """The generated policy, one a process for every file's `policy` fixture: cel-python
    compiles it once (about 10 s of CPU) under `-n N --dist loadgroup` (its tests' group)."""
    return Policy(copy.deepcopy(documents()), PROJECTS)


@lru_cache(maxsize=1)
def _smoke_jobs() -> str:
    profiles = [str(ROOT / "examples" / e / "profile.yaml") for e in EXAMPLES]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-m", "runai_spec", "render", "--smoke", *profiles],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def smoke_jobs() -> list[Job]:
    return [m for m in parse(_smoke_jobs(), "smoke") if m["kind"] == "PyTorchJob"]


def pods(job: Job) -> list[dict[str, Any]]:
    return [r["template"] for r in job["spec"]["pytorchReplicaSpecs"].values()]


def container(template: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = template["spec"]["containers"][0]
    return found


def renders() -> list[tuple[str, Job]]:
    """Every example's job and smoke job, with an id."""
    return [(f"{name}-job", example_job(name)) for name in EXAMPLES] + [
        (f"{j['metadata']['name']}-smoke", j) for j in smoke_jobs()
    ]


# cel-python compiles the policy in about 10 s of CPU a process: its tests share one worker
# under `-n N --dist loadgroup` (the README's test command), so it compiles once (issue 29)
CEL_PYTHON = pytest.mark.xdist_group("cel-python")


# -- changes to a job, for the tampers -------------------------------------------------
def every_pod(job: Job, change: Callable[[dict[str, Any]], None]) -> Job:
    for template in pods(job):
        change(template)
    return job


def in_container(change: Callable[[dict[str, Any]], None]) -> Callable[[Job], Job]:
    return lambda job: every_pod(job, lambda t: change(container(t)))


def in_pod_spec(change: Callable[[dict[str, Any]], None]) -> Callable[[Job], Job]:
    return lambda job: every_pod(job, lambda t: change(t["spec"]))


def in_metadata(change: Callable[[dict[str, Any]], None]) -> Callable[[Job], Job]:
    def apply(job: Job) -> Job:
        change(job["metadata"])
        return job

    return apply


def set_key(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d.__setitem__(key, value)


def insert_argument(arg: str) -> Callable[[dict[str, Any]], None]:
    return lambda c: c["command"].insert(1, arg)


def _filled(prefixes: list[str], total: int, fill: str) -> list[str]:
    """Each of PREFIXES padded with FILL so that together they hold exactly TOTAL characters."""
    room = total - sum(map(len, prefixes))
    return [p + fill * (room // len(prefixes) + (i < room % len(prefixes))) for i, p in enumerate(prefixes)]


def at_the_bounds(profile: dict[str, Any]) -> None:
    """PROFILE's command, env and secret_env as long as validate allows (load/profile.py): the
    costliest shape the policy must admit (issue 41 item 8): the most arguments, every one a
    flag, the most variables, with names and values as long as the totals allow."""
    from runai_spec.load.profile import MAX_ARGS, MAX_COMMAND_TEXT, MAX_ENTRIES, MAX_ENV_TEXT, MAX_NAME

    entry = profile["command"][0]
    args = _filled([f"--opt{i:03d}=" for i in range(MAX_ARGS)], MAX_COMMAND_TEXT - len(entry), "x")
    profile["command"] = [entry, *args]
    names = [f"V{i:02d}_" + "N" * (MAX_NAME - 4) for i in range(MAX_ENTRIES)]
    profile["env"] = dict(zip(names, _filled([""] * MAX_ENTRIES, MAX_ENV_TEXT, "y"), strict=True))
    profile["secret_env"] = {f"S{i:02d}": {"secret": "s", "key": "k"} for i in range(MAX_ENTRIES)}
