"""Hostile values round-trip exactly and never change the structure of the output."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import BASE_PROFILE, ROOT
from runai_spec.loading import parse_documents
from runai_spec.manifests import dump, parse, parse_rendered, quote
from runai_spec.plan import plan_workload
from runai_spec.presets import PresetRegistry
from runai_spec.profile import parse_profile
from runai_spec.render import render_plan, render_text

HOSTILE = [
    "x\nhostNetwork: true",
    "{privileged: true}",
    "---",
    "--- \nkind: Pod",
    "{{ 7*7 }}",
    "{% raw %}",
    "\"quoted\" 'single'",
    "a: b",
    "- item",
    "&anchor *alias",
    "!!python/object:os.system",
    "# comment",
    "no", "on", "0777", "1e3", "~", "null", "true", "",
    "\\n\\t backslashes \\",
    "tab\tand\nnewline\r\n",
    "unicode \u2028 \u00e9 \U0001f680",
    "key: [1, 2]\n  nested: {a: 1}",
    "...",
]

# Printable text plus the line breaks and tabs the loader accepts in strings.
TEXT = st.lists(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\ufeff")
                | st.sampled_from(["\n", "\t", "\r\n", ": ", "{", "}", "[", "]", "- ", "#", "&",
                                   "*", "!", "|", ">", "'", '"', "%", "@", "`", "{{", "}}", "---",
                                   "\nhostNetwork: true", "{privileged: true}"]),
                max_size=30).map("".join)

REGISTRY = PresetRegistry(ROOT / "presets")


def render_profile(data: dict[str, Any]) -> list[dict[str, Any]]:
    text = dump([data])
    loaded = parse_profile(text, "hostile.yaml")
    plan = plan_workload(loaded, REGISTRY.get(loaded.profile.preset), REGISTRY.site())
    manifests = render_plan(plan)
    # The template's JSON output is YAML too: the strict YAML loader reads the same objects.
    assert parse_documents(render_text(plan), "rendered") == manifests
    return manifests


def shape(value: Any) -> Any:
    """The structure with every scalar replaced by its type name."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    return type(value).__name__


def hostile_profile(value: str) -> dict[str, Any]:
    data = copy.deepcopy(BASE_PROFILE)
    data["env"] = {"HOSTILE": value}
    data["command"] = ["train.py", value or "x", "--flag"]
    data["working_dir"] = "/" + value.replace("\n", "") if value else "/w"
    data["checkpoint"]["resume"] = value or "latest"
    return data


BENIGN_SHAPE = shape(render_profile(hostile_profile("benign"))[0])


def container(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]


def assert_round_trip(value: str) -> None:
    (job,) = render_profile(hostile_profile(value))
    assert shape(job) == BENIGN_SHAPE
    c = container(job)
    assert {"name": "HOSTILE", "value": value} in c["env"]
    command = c["command"]
    assert command[command.index("train.py") + 1] == (value or "x")
    assert "hostNetwork" not in job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    # The canonical dump reads back identically through the strict loader.
    assert parse(dump([job]), "again") == [job]


def test_known_hostile_strings_render_literally() -> None:
    for value in HOSTILE:
        assert_round_trip(value)


def test_template_syntax_in_a_value_is_not_evaluated() -> None:
    (job,) = render_profile(hostile_profile("{{ 7*7 }}"))
    command = container(job)["command"]
    assert command[command.index("train.py") + 1] == "{{ 7*7 }}"
    assert "49" not in str(container(job)["command"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXT)
def test_any_string_round_trips_without_changing_structure(value: str) -> None:
    assert_round_trip(value)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_quote_reads_back_as_the_same_string(value: str) -> None:
    try:
        docs = parse_documents(f"k: {quote(value)}\n", "q")
    except Exception as exc:  # control characters are refused by the loader: a clear error
        assert "control characters" in str(exc)
        return
    assert docs == [{"k": value}]


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                    lambda children: st.lists(children, max_size=3)
                    | st.dictionaries(st.text(min_size=1, max_size=8), children, max_size=3),
                    max_leaves=20))
def test_hostile_documents_give_a_value_or_a_clear_error(value: Any) -> None:
    import yaml

    text = yaml.safe_dump({"root": value})
    try:
        docs = parse_documents(text, "doc")
    except Exception as exc:
        assert type(exc).__name__ == "InputError", exc
        return
    assert docs == [{"root": value}] or "control characters" in text


def test_injection_attempt_in_profile_file_stays_a_string(tmp_path: Path) -> None:
    text = dump([hostile_profile("x")]).replace('"x"', '"x\\nhostNetwork: true"', 1)
    loaded = parse_profile(text, "p.yaml")
    assert "hostNetwork" not in loaded.profile.model_dump()


def test_rendered_text_with_a_duplicate_key_or_nan_is_refused() -> None:
    import pytest

    assert parse_rendered('{"a": {"b": 1, "c": 2}}') == {"a": {"b": 1, "c": 2}}
    for text, why in [('{"a": 1, "a": 2}', "duplicate key 'a'"), ('{"a": NaN}', "NaN"),
                      ('["a"]', "not a mapping"), ('{"a": 1} {"b": 2}', "Extra data")]:
        with pytest.raises(ValueError, match=why):
            parse_rendered(text)


# Issue 12: hostile text in EVERY string field of the profile, not only the command. The
# free-text fields each get their own value; a field whose pattern refuses it must say so
# as bad input, never crash or render.
NONEMPTY = TEXT.filter(bool)
FREE_FIELDS: dict[str, Any] = {
    # a command that starts with a flag is the launcher rule's error: no smoke job for it
    "image": NONEMPTY, "command[0]": NONEMPTY.filter(lambda s: not s.startswith("-")),
    "command[1]": NONEMPTY, "command[2]": NONEMPTY,
    "working_dir": TEXT.map("/".__add__), "env.A_VALUE": TEXT, "env.OTHER": TEXT,
    "checkpoint.dir": TEXT.map("/ckpt".__add__), "checkpoint.resume": NONEMPTY,
    "data[0].path": TEXT.map("/data".__add__), "data[1].path": TEXT.map("/eval".__add__),
    "diagnostics.reason": TEXT, "metrics.tracker": NONEMPTY,
}
PATTERN_FIELDS = ("name", "project", "preset", "checkpoint.pvc", "data[0].pvc",
                  "secret_env.HF_TOKEN.secret", "secret_env.HF_TOKEN.key")


def _set(data: dict[str, Any], field: str, value: Any) -> None:
    parts = field.replace("[", ".").replace("]", "").split(".")
    target: Any = data
    for part in parts[:-1]:
        target = target[int(part)] if part.isdigit() else target[part]
    last = parts[-1]
    target[int(last) if last.isdigit() else last] = value


def every_field_profile(values: dict[str, str]) -> dict[str, Any]:
    data = copy.deepcopy(BASE_PROFILE)
    data["command"] = ["train.py", "x", "y"]
    data["env"] = {"A_VALUE": "", "OTHER": ""}
    data["secret_env"] = {"HF_TOKEN": {"secret": "hf", "key": "token"}}
    data["data"] = [{"path": "/d", "pvc": "d"}, {"path": "/e", "pvc": "e"}]
    data["diagnostics"] = {"nccl_debug": True, "reason": ""}
    data["metrics"] = {"writer": "rank0", "tracker": "t"}
    for field, value in values.items():
        _set(data, field, value)
    return data


def render_every(values: dict[str, str]) -> list[dict[str, Any]]:
    from runai_spec.render import render_smoke
    from runai_spec.smoke import smoke_plan

    loaded = parse_profile(dump([every_field_profile(values)]), "hostile.yaml")
    plan = plan_workload(loaded, REGISTRY.get(loaded.profile.preset), REGISTRY.site())
    return [*render_plan(plan), *render_smoke(smoke_plan(plan))]


def leaves(value: Any, path: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        return {k: v for key, child in value.items() for k, v in leaves(child, f"{path}.{key}").items()}
    if isinstance(value, list):
        return {k: v for i, child in enumerate(value) for k, v in leaves(child, f"{path}[{i}]").items()}
    return {path: value}


MARKERS = {field: f"/Qmark{i}Q" if field.endswith(("dir", "path")) or field == "working_dir"
           else f"Qmark{i}Q" for i, field in enumerate(FREE_FIELDS)}
BENIGN_EVERY = render_every(MARKERS)
BENIGN_EVERY_LEAVES = leaves(BENIGN_EVERY)


def test_every_free_text_field_lands_somewhere_or_is_documentation() -> None:
    """The markers show where each field goes; the fields the manifest does not carry are
    the ones only the review and the rules read."""
    landed = {f for f, m in MARKERS.items()
              if any(isinstance(v, str) and m in v for v in BENIGN_EVERY_LEAVES.values())}
    assert set(FREE_FIELDS) - landed == {"checkpoint.resume", "diagnostics.reason",
                                         "metrics.tracker"}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries(FREE_FIELDS))
def test_hostile_text_in_every_string_field_keeps_the_structure(values: dict[str, str]) -> None:
    manifests = render_every(values)
    assert [shape(m) for m in manifests] == [shape(m) for m in BENIGN_EVERY]
    got = leaves(manifests)
    for path, benign in BENIGN_EVERY_LEAVES.items():
        if not isinstance(benign, str) or "Qmark" not in benign:
            continue
        expected = benign
        for field, marker in MARKERS.items():
            # a marker of a path field carries the field's own leading "/"
            expected = expected.replace(marker, values[field])
        assert got[path] == expected, path
    for m in manifests:
        spec = m.get("spec", {}).get("pytorchReplicaSpecs", {})
        assert all("hostNetwork" not in r["template"]["spec"] for r in spec.values())
    assert parse(dump(manifests), "again") == manifests


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(PATTERN_FIELDS), TEXT)
def test_hostile_text_in_a_pattern_field_is_bad_input_or_a_plain_name(field: str, value: str
                                                                      ) -> None:
    from runai_spec.errors import InputError

    data = every_field_profile({})
    _set(data, field, value)
    try:
        loaded = parse_profile(dump([data]), "hostile.yaml")
    except InputError as exc:
        assert exc.lines()[0].startswith("error: hostile.yaml:")
        return
    # accepted: then it was a plain DNS-style name, and it reads back exactly
    import re

    assert re.fullmatch(r"[-._a-zA-Z0-9]+", value)
    target: Any = loaded.profile.model_dump(by_alias=True)
    for part in field.replace("[", ".").replace("]", "").split("."):
        target = target[int(part)] if part.isdigit() else target[part]
    assert target == value
