"""A template that renders text that is not a manifest names its own file and line, and the
container filters render a mapping or a list as one value through the one encoder."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT
from runai_spec import render
from runai_spec.errors import InternalError
from runai_spec.pipeline.workload import prepare_workload
from runai_spec.plan.env import env_entries
from runai_spec.plan.launcher import MPIJOB
from runai_spec.plan.plan import Plan
from runai_spec.render.manifests import parse_rendered

JOB = render.TEMPLATES["kubeflow"]


@pytest.fixture(scope="module")
def plan() -> Plan:
    return prepare_workload(ROOT / "examples" / "multi-node" / "profile.yaml").plan


@pytest.fixture
def templates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A templates folder of this test's own, holding copies of the shipped templates."""
    folder = tmp_path / "templates"
    folder.mkdir()
    for path in (ROOT / "templates").glob("*.j2"):
        (folder / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    render.template.cache_clear()
    render.environment.cache_clear()
    monkeypatch.setattr(render, "shipped_dir", lambda name: tmp_path / name)
    yield folder
    render.template.cache_clear()
    render.environment.cache_clear()


def line_of(text: str, needle: str) -> int:
    (number,) = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    return number


def render_error(plan: Plan) -> str:
    """The first line the error boundary prints for rendering PLAN."""
    with pytest.raises(InternalError) as caught:
        render.render_plan(plan)
    return caught.value.lines()[0]


def test_a_broken_line_of_the_shipped_template_is_named_by_its_template_line(
    templates: Path, plan: Plan
) -> None:
    path = templates / JOB
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('"IfNotPresent",', '"IfNotPresent",,'), encoding="utf-8")
    message = render_error(plan)
    assert message.startswith(
        f"error: {JOB}:{line_of(text, 'IfNotPresent')}: rendered {plan.name} is not a valid manifest"
    ), message


def test_a_missing_comma_in_a_loop_names_the_line_the_parser_stopped_on(templates: Path, plan: Plan) -> None:
    (templates / JOB).write_text(
        "{#- a template whose loop forgets its commas\n"
        "    over two lines -#}\n"
        "{\n"
        '  "kind": {{ kubeflow.KIND }},\n'
        "{%- for key, value in plan.labels %}\n"
        "  {{ key }}: {{ value }}\n"
        "{%- endfor %}\n"
        "}\n",
        encoding="utf-8",
    )
    assert render_error(plan).startswith(f"error: {JOB}:6: rendered "), render_error(plan)


def test_an_undefined_value_names_its_template_line(templates: Path, plan: Plan) -> None:
    (templates / JOB).write_text(
        '{\n  "kind": {{ kubeflow.KIND }},\n  "x": {{ plan.no_such_field }}\n}\n', encoding="utf-8"
    )
    message = render_error(plan)
    assert message.startswith(f"error: {JOB}:3: template uses an undefined value"), message
    assert "no_such_field" in message


def test_a_value_the_encoder_refuses_names_its_template_line(templates: Path, plan: Plan) -> None:
    (templates / JOB).write_text('{\n\n  "volumes": {{ plan.volumes }}\n}\n', encoding="utf-8")
    message = render_error(plan)
    assert message.startswith(f"error: {JOB}:3: template produced a non-scalar value"), message


def test_a_record_through_the_json_filter_is_refused_not_written_as_a_list(
    templates: Path, plan: Plan
) -> None:
    # the plan's records are NamedTuples, tuples too: `| json` of one would write its values as
    # a list, no field names, where a template meant a mapping
    (templates / JOB).write_text('{\n\n  "volumes": {{ plan.volumes[0] | json }}\n}\n', encoding="utf-8")
    message = render_error(plan)
    assert message.startswith(f"error: {JOB}:3: template produced a value it cannot encode"), message
    assert "Volume" in message


def test_a_template_that_does_not_compile_names_its_line(templates: Path, plan: Plan) -> None:
    (templates / JOB).write_text('{\n  "kind": {{ kubeflow.KIND }},\n{% if %}\n}\n', encoding="utf-8")
    assert render_error(plan).startswith(f"error: {JOB}:3: template does not compile"), render_error(plan)


def test_the_shipped_templates_keep_no_comma_by_hand_but_between_replicas() -> None:
    # Each mapping or list is one value (`| mapping`, `| json`): a new label, limit or
    # argument needs no template edit, and no comma depends on another block.
    for path in (ROOT / "templates").glob("*.j2"):
        text = path.read_text(encoding="utf-8")
        commas = re.findall(r"\{%-? if not loop\.last[^%]*%\},", text)
        assert len(commas) == (1 if path.name in (JOB, MPIJOB.template) else 0), path.name  # a job's
        assert "or smoke %}," not in text and "or plan." not in text, path.name


HOSTILE = ['", "x": "', "}", "]", "\n---\n", "\u2028", "{{ x }}", "\x00"]


@pytest.mark.parametrize("value", HOSTILE)
def test_the_container_filters_keep_any_text_a_value(value: str) -> None:
    env = render.environment()
    pairs = ((value, value), ("k", [value, 1, True, None]))
    text = env.from_string("{{ pairs | mapping }}").render(pairs=pairs)
    assert json.loads(text) == {value: value, "k": [value, 1, True, None]}
    listed = env.from_string("{{ items | json }}").render(items=(value, {value: (value,)}))
    assert json.loads(listed) == [value, {value: [value]}]


def test_the_mapping_filter_writes_a_key_given_twice_so_the_strict_parse_refuses_it() -> None:
    text = render.environment().from_string("{{ a | mapping(b) }}").render(a=(("k", "1"),), b=[("k", "2")])
    assert text == '{"k": "1", "k": "2"}'
    with pytest.raises(ValueError, match="duplicate key 'k'"):
        parse_rendered(text)


def test_the_container_filters_refuse_what_is_no_json_value() -> None:
    env = render.environment()
    with pytest.raises(InternalError, match="cannot encode"):
        env.from_string("{{ x | json }}").render(x=[object()])
    with pytest.raises(InternalError, match="as a mapping key"):
        env.from_string("{{ x | mapping }}").render(x=[(1, "one")])


def test_the_env_list_is_the_downward_api_then_values_then_secret_references(plan: Plan) -> None:
    plan = plan._replace(secret_env=(("TOKEN", "s", "k"),))
    entries = env_entries(plan)
    assert [e["name"] for e in entries] == [
        *(k for k, _ in plan.field_env),
        *(k for k, _ in plan.env),
        "TOKEN",
    ]
    assert entries[-1] == {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
