"""Jinja environment (one safe encoder, StrictUndefined) and render_plan()."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jinja2

from . import kubeflow
from .errors import InternalError
from .kubeflow import operator_problems
from .loading import shipped_dir
from .manifests import Manifest, parse_rendered, scalar
from .plan import Plan

TEMPLATES = {"kubeflow": "pytorchjob.json.j2"}
CONFIGMAP_TEMPLATE = "configmap.json.j2"


def _finalize(value: Any) -> str:
    # Every {{ }} ends here: strings become double-quoted YAML scalars, so a value can
    # never open a mapping, a list or a new document, whatever characters it holds.
    try:
        return scalar(value)
    except TypeError as exc:
        raise InternalError(f"template produced a non-scalar value: {exc}") from None


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    # No on-disk bytecode cache: a writable cache folder let anyone with access to it change
    # what render emits while validate passed (issue 12, item 6). Compiling costs one-off ms.
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(shipped_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        finalize=_finalize,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=False,
        lstrip_blocks=False,
    )
    # The operator's names (container, port, kind) come from kubeflow.py, not the template.
    env.globals["kubeflow"] = kubeflow
    return env


def render_text(plan: Plan, family: str = "kubeflow", *, smoke: Any = None) -> str:
    """The template's raw output for a plan (with `smoke`, a SmokePlan: its smoke test's job)."""
    try:
        name = TEMPLATES[family]
    except KeyError:
        raise InternalError(f"no template for manifest family {family!r}") from None
    return _render(name, plan=plan, smoke=smoke)


def _render(name: str, **context: Any) -> str:
    template = environment().get_template(name)
    try:
        return template.render(**context)
    except jinja2.UndefinedError as exc:
        raise InternalError(f"template uses an undefined value: {exc.message}") from None


def _checked(texts: list[str], what: str) -> list[Manifest]:
    """Re-parse strictly and check the operator's rules."""
    try:
        manifests = [parse_rendered(text) for text in texts]
    except ValueError as exc:  # JSONDecodeError included: the template or encoder has a bug
        raise InternalError(f"rendered {what} is not a valid manifest: {exc}") from None
    for manifest in manifests:
        if manifest.get("kind") == kubeflow.KIND:
            problems = operator_problems(manifest)
            if problems:
                raise InternalError(f"rendered PyTorchJob breaks an operator rule: {problems[0]}")
    return manifests


def render_plan(plan: Plan, family: str = "kubeflow") -> list[Manifest]:
    """Render, re-parse strictly and check the operator's rules."""
    return _checked([render_text(plan, family)], plan.name)


def render_smoke(smoke: Any, family: str = "kubeflow") -> list[Manifest]:
    """A smoke test (smoke.SmokePlan): its ConfigMap, then its job, through the same encoder,
    strict re-parse and operator checks as the real job."""
    texts = [_render(CONFIGMAP_TEMPLATE, config_map=smoke.config_map),
             render_text(smoke.job, family, smoke=smoke)]
    return _checked(texts, smoke.job.name)
