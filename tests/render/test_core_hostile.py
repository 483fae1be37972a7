"""Hostile values round-trip exactly and never change the structure of the output."""

from __future__ import annotations

import copy
import re
import types
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from conftest import BASE_PROFILE, ROOT, kubelet_sees, pytorch_container
from runai_spec import render
from runai_spec.facts.kubeflow import kubelet_literal
from runai_spec.load.profile import Profile, parse_profile
from runai_spec.load.registry import PresetRegistry
from runai_spec.load.yaml import parse_documents
from runai_spec.plan.plan import plan_workload
from runai_spec.render import render_plan, render_text
from runai_spec.render.manifests import dump, parse, parse_rendered, quote

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
    "no",
    "on",
    "0777",
    "1e3",
    "~",
    "null",
    "true",
    "",
    "\\n\\t backslashes \\",
    "tab\tand\nnewline\r\n",
    "unicode \u2028 \u00e9 \U0001f680",
    "key: [1, 2]\n  nested: {a: 1}",
    "...",
]

# What a value would use to open a mapping, a list, a document, a comment, a template tag, an
# HTML comment, a code span or a table cell, or to change a line or the reading order: YAML
# indicators, Jinja delimiters, the line breaks YAML and Unicode know (U+2028, U+2029) and the
# bidi overrides. Every one is a character the strict loader accepts in a string (it refuses
# the other control characters: REFUSED below).
PIECES = [
    "\n",
    "\t",
    "\r",
    "\r\n",
    "\u2028",
    "\u2029",
    ": ",
    ":",
    "{",
    "}",
    "[",
    "]",
    "- ",
    "-",
    "? ",
    ",",
    "#",
    " #",
    "&",
    "&a ",
    "*",
    "*a",
    "!",
    "!!str ",
    "!!python/object:os.system",
    "|",
    "|-",
    ">",
    ">+",
    "'",
    '"',
    "%",
    "%YAML 1.1",
    "@",
    "`",
    "```",
    "{{",
    "}}",
    "{%",
    "%}",
    "{#",
    "#}",
    "<!--",
    "-->",
    "---",
    "--- ",
    "...",
    "~",
    "null",
    "no",
    "1e3",
    "0777",
    "\\",
    "\\n",
    "\u202e",
    "\u202d",
    "\u202a",
    "\u202b",
    "\u202c",
    "\u2066",
    "\u2067",
    "\u2068",
    "\u2069",
    "\u200e",
    "\u200f",
    "\u061c",
    "\u00a0",
    "\u3000",
    "\nhostNetwork: true",
    "{privileged: true}",
    # spaces next to a line break, which a YAML reader folds or strips
    " ",
    "  ",
    " \n",
    "\n ",
    " \u2028",
    "\u2029 ",
]
# Any other character but surrogates, controls and the byte-order mark.
CHARS = st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\ufeff")
# Printable text plus those pieces (st.text draws a run of characters in one choice, so an
# example costs a few draws, not one per character).
TEXT = st.lists(st.sampled_from(PIECES) | st.text(CHARS, min_size=1, max_size=6), max_size=8).map("".join)
# One value of many fields in one example: the same pieces, a fixed number of draws each.
_PIECE = st.sampled_from(["", *PIECES])
_RUN = st.text(CHARS, max_size=8)
FIELD_TEXT = st.tuples(_RUN, _PIECE, _RUN, _PIECE, _RUN).map("".join)
# The control characters the loader refuses in any string (loading.py's _CONTROL): NUL and
# its neighbours, DEL, C1 (U+0085 NEL included). Tab, LF and CR are text.
REFUSED = [chr(c) for c in [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x7F, 0xA0)]]


def test_the_hostile_alphabet_has_every_piece_the_issue_names() -> None:
    for piece in [
        "\u2028",
        "\u2029",
        "\r",
        "\u202e",
        "{{",
        "{%",
        "<!--",
        "`",
        "|",
        ": ",
        "- ",
        "? ",
        "&",
        "*",
        "!",
        "%",
        "@",
        "#",
        "'",
        '"',
        ">",
        "[",
        "{",
        "---",
    ]:
        assert piece in PIECES, piece
    assert {"\x00", "\x01", "\x1f", "\x7f", "\x85", "\x9f"} <= set(REFUSED)
    assert "\t" not in REFUSED and "\n" not in REFUSED and "\r" not in REFUSED


REGISTRY = PresetRegistry(ROOT / "presets")


def render_profile(data: dict[str, Any]) -> list[dict[str, Any]]:
    text = dump([data])
    loaded = parse_profile(text, "hostile.yaml")
    plan = plan_workload(loaded, REGISTRY.get(loaded.profile.preset), REGISTRY.site())
    manifests = render_plan(plan)
    # The template's JSON output is YAML too: the strict YAML loader reads the same objects.
    assert parse_documents(render_text(plan), "rendered") == manifests
    assert_same_both_ways(render.TEMPLATES["kubeflow"], plan=plan, smoke=None)
    return manifests


def assert_same_both_ways(name: str, **context: Any) -> None:
    """render's normal path (the compiled template on render/runtime.py, which must cover it)
    writes what Jinja writes (test_render_runtime.py)."""
    assert render.render_compiled(name, **context) == render.render_with_jinja(name, **context)


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


def assert_round_trip(value: str) -> None:
    (job,) = render_profile(hostile_profile(value))
    assert shape(job) == BENIGN_SHAPE
    c = pytorch_container(job)
    # each value written for the kubelet (`$` as `$$`), which passes it on exactly as typed
    assert {"name": "HOSTILE", "value": kubelet_literal(value)} in c["env"]
    assert kubelet_sees(kubelet_literal(value)) == value
    command = c["command"]
    assert kubelet_sees(command[command.index("train.py") + 1]) == (value or "x")
    assert "hostNetwork" not in job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    # The canonical dump reads back identically through the strict loader.
    assert parse(dump([job]), "again") == [job]


def test_known_hostile_strings_render_literally() -> None:
    for value in HOSTILE:
        assert_round_trip(value)


def test_template_syntax_in_a_value_is_not_evaluated() -> None:
    (job,) = render_profile(hostile_profile("{{ 7*7 }}"))
    command = pytorch_container(job)["command"]
    assert command[command.index("train.py") + 1] == "{{ 7*7 }}"
    assert "49" not in str(pytorch_container(job)["command"])


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXT)
def test_any_string_round_trips_without_changing_structure(value: str) -> None:
    assert_round_trip(value)


@settings(deadline=None)
@given(
    st.text(max_size=80)
    | st.lists(st.sampled_from([*PIECES, *REFUSED]) | st.text(max_size=4), max_size=16).map("".join)
)
def test_quote_reads_back_as_the_same_string(value: str) -> None:
    try:
        docs = parse_documents(f"k: {quote(value)}\n", "q")
    except Exception as exc:  # control characters are refused by the loader: a clear error
        assert "control characters" in str(exc)
        return
    assert docs == [{"k": value}]


@settings(deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=10),
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(st.text(min_size=1, max_size=8), children, max_size=3)
        ),
        max_leaves=20,
    )
)
def test_hostile_documents_give_a_value_or_a_clear_error(value: Any) -> None:
    import yaml

    text = yaml.dump({"root": value}, Dumper=yaml.CSafeDumper)  # libyaml: the same YAML, faster
    try:
        docs = parse_documents(text, "doc")
    except Exception as exc:
        assert type(exc).__name__ == "InputError", exc
        return
    assert docs == [{"root": as_read(value)}] or "control characters" in text


def as_read(value: Any) -> Any:
    """VALUE as the tool's loader reads PyYAML's dump of it. PyYAML writes YAML 1.1 and
    leaves a string plain where 1.1 would not read a number (`0E0`, `1e5`: 1.1 floats need a
    dot and a signed exponent); the loader gives the JSON number grammar its number type
    (DESIGN section 5: only JSON-shaped scalars are numbers), so that plain text comes
    back as the number it spells. Every other value comes back as it was."""
    import yaml

    from runai_spec.load.yaml import _FLOAT, _INT

    if isinstance(value, list):
        return [as_read(v) for v in value]
    if isinstance(value, dict):
        return {k: as_read(v) for k, v in value.items()}
    plain_in_11 = (
        isinstance(value, str)
        and yaml.resolver.Resolver().resolve(yaml.ScalarNode, value, (True, False)) == "tag:yaml.org,2002:str"
    )
    if plain_in_11 and _INT.match(value):
        return int(value)
    if plain_in_11 and _FLOAT.match(value):
        return float(value)
    return value


def test_a_json_number_that_yaml_1_1_writes_plain_is_read_as_that_number() -> None:
    import yaml

    # found by the property above: PyYAML leaves 0E0 plain, the loader reads a float
    text = yaml.dump({"root": ["0E0", "1e5", "1.0", "no"]}, Dumper=yaml.CSafeDumper)
    assert parse_documents(text, "doc") == [{"root": [0.0, 100000.0, "1.0", "no"]}]
    assert as_read(["0E0", "1e5", "1.0", "no"]) == [0.0, 100000.0, "1.0", "no"]


def test_injection_attempt_in_profile_file_stays_a_string(tmp_path: Path) -> None:
    text = dump([hostile_profile("x")]).replace('"x"', '"x\\nhostNetwork: true"', 1)
    loaded = parse_profile(text, "p.yaml")
    assert "hostNetwork" not in loaded.profile.model_dump()


def test_rendered_text_with_a_duplicate_key_or_nan_is_refused() -> None:
    import pytest

    assert parse_rendered('{"a": {"b": 1, "c": 2}}') == {"a": {"b": 1, "c": 2}}
    for text, why in [
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ('{"a": NaN}', "NaN"),
        ('["a"]', "not a mapping"),
        ('{"a": 1} {"b": 2}', "Extra data"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_rendered(text)


# Issue 12: hostile text in EVERY string field of the profile, not only the command. The
# fields are enumerated from the profile model, so that a new string field fails
# test_every_string_field_of_the_profile_is_tested until it is given a place below.


def _string_paths(annotation: Any, path: str, out: dict[str, tuple[str, ...] | None]) -> None:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        _string_paths(args[0], path, out)
    elif origin in (Union, types.UnionType):
        for arg in args:
            _string_paths(arg, path, out)
    elif origin is list:
        _string_paths(args[0], f"{path}[]", out)
    elif origin is dict:
        _string_paths(args[0], f"{path}{{}}", out)  # the key: a variable's name
        _string_paths(args[1], f"{path}.*", out)
    elif origin is Literal:
        if all(isinstance(a, str) for a in args):
            out[path] = tuple(args)
    elif annotation is str:
        out[path] = None
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, info in annotation.model_fields.items():
            key = info.alias or name
            _string_paths(info.annotation, f"{path}.{key}" if path else key, out)


def string_fields() -> dict[str, tuple[str, ...] | None]:
    """Every string a profile holds, as a path pattern (`command[]`, `env.*`, `env{}` for a
    variable's name) -> its choices (a Literal), or None for text."""
    out: dict[str, tuple[str, ...] | None] = {}
    _string_paths(Profile, "", out)
    return out


STRING_FIELDS = string_fields()
NONEMPTY = FIELD_TEXT.map(lambda s: s or "x")
FREE_FIELDS: dict[str, Any] = {
    # a command that starts with a flag is the launcher rule's error: no smoke job for it;
    # the entry point's suffix says how it runs (`.sh`: torchrun --no-python), so a Python one
    "image": NONEMPTY,
    "command[0]": NONEMPTY.map(lambda s: ("x" + s if s[0] == "-" else s) + ".py"),
    "command[1]": NONEMPTY,
    "command[2]": NONEMPTY,
    "working_dir": FIELD_TEXT.map("/".__add__),
    "env.A_VALUE": FIELD_TEXT,
    "env.OTHER": FIELD_TEXT,
    "checkpoint.dir": FIELD_TEXT.map("/ckpt".__add__),
    "checkpoint.resume": NONEMPTY,
    "data[0].path": FIELD_TEXT.map("/data".__add__),
    "data[1].path": FIELD_TEXT.map("/eval".__add__),
    "diagnostics.reason": FIELD_TEXT,
    "metrics.tracker": NONEMPTY,
}
# Names (a pattern), a variable's name (`env{}`) and the choices (Literal fields, from the
# model): hostile text in them is bad input, never a crash or a render.
PATTERN_FIELDS = (
    "name",
    "project",
    "preset",
    "checkpoint.pvc",
    "checkpoint.source",
    "data[0].pvc",
    "data[0].source",
    "secret_env.HF_TOKEN.secret",
    "secret_env.HF_TOKEN.key",
    "env{}",
    "secret_env{}",
    "torch_version",
)
CHOICE_FIELDS = {path: choices for path, choices in STRING_FIELDS.items() if choices}
# A file beside the profile (load_profile reads it; its content, not its name, reaches the render):
# its text is refused or read back exactly, never a path out of the profile's folder.
FILE_FIELDS = ("accelerate_config",)


def general(field: str) -> str:
    """`data[0].path` -> `data[].path`, `env.A_VALUE` -> `env.*`: the path string_fields names."""
    field = re.sub(r"\[\d+\]", "[]", field)
    return re.sub(r"^(env|secret_env)\.[A-Z_]+", r"\1.*", field)


def test_every_string_field_of_the_profile_is_tested() -> None:
    assert len(STRING_FIELDS) >= 20 and "diagnostics.reason" in STRING_FIELDS
    assert set(CHOICE_FIELDS) >= {"strategy", "model.precision", "checkpoint.format"}
    tested = {general(f) for f in [*FREE_FIELDS, *PATTERN_FIELDS, *CHOICE_FIELDS, *FILE_FIELDS]}
    assert tested == set(STRING_FIELDS)


def _set(data: dict[str, Any], field: str, value: Any) -> None:
    if field.endswith("{}"):  # a variable's name: the first variable renamed
        table = data[field[:-2]]
        first = next(iter(table))
        data[field[:-2]] = {value: table[first], **{k: v for k, v in table.items() if k != first}}
        return
    parts = field.replace("[", ".").replace("]", "").split(".")
    target: Any = data
    for part in parts[:-1]:
        target = target[int(part)] if part.isdigit() else target[part]
    last = parts[-1]
    target[int(last) if last.isdigit() else last] = value


def _get(data: Any, field: str) -> Any:
    if field.endswith("{}"):
        return next(iter(data[field[:-2]]))
    for part in field.replace("[", ".").replace("]", "").split("."):
        data = data[int(part)] if part.isdigit() else data[part]
    return data


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
    from runai_spec.pipeline.smoke import smoke_plan
    from runai_spec.render import render_smoke

    loaded = parse_profile(dump([every_field_profile(values)]), "hostile.yaml")
    plan = plan_workload(loaded, REGISTRY.get(loaded.profile.preset), REGISTRY.site())
    smoke = smoke_plan(plan)
    assert_same_both_ways(render.TEMPLATES["kubeflow"], plan=plan, smoke=None)
    assert_same_both_ways(render.TEMPLATES["kubeflow"], plan=smoke.job, smoke=smoke)
    assert_same_both_ways(render.CONFIGMAP_TEMPLATE, config_map=smoke.config_map)
    return [*render_plan(plan), *render_smoke(smoke)]


def leaves(value: Any, path: str = "") -> dict[str, Any]:
    """Every scalar by its path; an empty mapping or list is a leaf too, so that the types
    of the leaves are the whole structure (what shape() compares)."""
    if isinstance(value, dict) and value:
        return {k: v for key, child in value.items() for k, v in leaves(child, f"{path}.{key}").items()}
    if isinstance(value, list) and value:
        return {k: v for i, child in enumerate(value) for k, v in leaves(child, f"{path}[{i}]").items()}
    return {path: value}


MARKERS = {
    field: f"/Qmark{i}Q" if field.endswith(("dir", "path")) or field == "working_dir" else f"Qmark{i}Q"
    for i, field in enumerate(FREE_FIELDS)
}
MARKERS["command[0]"] += ".py"  # a marker carries its field's own prefix or suffix
BENIGN_EVERY = render_every(MARKERS)
BENIGN_EVERY_LEAVES = leaves(BENIGN_EVERY)
BENIGN_EVERY_TYPES = {path: type(v) for path, v in BENIGN_EVERY_LEAVES.items()}
# Where each field's value lands: path -> (benign text, the fields whose markers it holds).
LANDED = {
    path: (benign, [f for f, m in MARKERS.items() if m in benign])
    for path, benign in BENIGN_EVERY_LEAVES.items()
    if isinstance(benign, str) and "Qmark" in benign
}


KUBELET_EXPANDED = re.compile(
    r"\.containers\[\d+\]\.(command|args)\[\d+\]$|"
    r"\.containers\[\d+\]\.env\[\d+\]\.value$"
)


def test_every_free_text_field_lands_somewhere_or_is_documentation() -> None:
    """The markers show where each field goes; the fields the manifest does not carry are
    the ones only the review and the rules read."""
    landed = {f for _, fields in LANDED.values() for f in fields}
    assert set(FREE_FIELDS) - landed == {"checkpoint.resume", "diagnostics.reason", "metrics.tracker"}
    assert [shape(m) for m in BENIGN_EVERY] == [shape(m) for m in render_every({})]


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries(FREE_FIELDS))
def test_hostile_text_in_every_string_field_keeps_the_structure(values: dict[str, str]) -> None:
    manifests = render_every(values)
    got = leaves(manifests)
    # the same structure: the same paths (list lengths included), each of the same type
    assert {path: type(v) for path, v in got.items()} == BENIGN_EVERY_TYPES
    for path, (benign, fields) in LANDED.items():
        expected = benign
        # command, args and env values are read by the kubelet's $(VAR) expansion: the
        # researcher's text is written for it (`$` as `$$`), the tool's own $(POD_NAME) not
        expanded = KUBELET_EXPANDED.search(path) is not None
        for field in fields:
            value = values[field]
            expected = expected.replace(MARKERS[field], kubelet_literal(value) if expanded else value)
        assert got[path] == expected, path
    for m in manifests:
        spec = m.get("spec", {}).get("pytorchReplicaSpecs", {})
        assert all("hostNetwork" not in r["template"]["spec"] for r in spec.values())
    assert parse(dump(manifests), "again") == manifests


# Text for a name or a choice: hostile text, and now and then a plain name or a choice.
NAME_TEXT = TEXT | st.sampled_from(
    ["a", "x-1", "a.b", "A_B", "team-a", "ddp", "bf16", "rank0", "dcp", "adamw", "-a", "a-", "1a"]
)


def _parsed_or_bad_input(field: str, value: str) -> Any:
    """The every-field profile with FIELD set to VALUE, parsed; None where it is bad input, which
    must then be one `error: hostile.yaml:` line."""
    from runai_spec.errors import InputError

    data = every_field_profile({})
    _set(data, field, value)
    try:
        return parse_profile(dump([data]), "hostile.yaml")
    except InputError as exc:
        assert exc.lines()[0].startswith("error: hostile.yaml:")
        return None


@settings(deadline=None)
@given(st.sampled_from([*PATTERN_FIELDS, *CHOICE_FIELDS]), NAME_TEXT)
def test_hostile_text_in_a_pattern_field_is_bad_input_or_a_plain_name(field: str, value: str) -> None:
    loaded = _parsed_or_bad_input(field, value)
    if loaded is None:
        return
    # accepted: then it was a plain name (or one of the field's choices), and it reads back
    # exactly
    assert re.fullmatch(r"[-._a-zA-Z0-9]+", value)
    if field in CHOICE_FIELDS:
        assert value in CHOICE_FIELDS[field]
    assert _get(loaded.profile.model_dump(by_alias=True), field) == value


@settings(deadline=None)
@given(st.sampled_from(FILE_FIELDS), TEXT)
def test_hostile_text_in_a_file_field_is_bad_input_or_read_back_exactly(field: str, value: str) -> None:
    loaded = _parsed_or_bad_input(field, value)
    if loaded is None:
        return
    assert value and not value.startswith("/")
    assert _get(loaded.profile.model_dump(by_alias=True), field) == value


@settings(deadline=None)
@given(
    st.sampled_from([*FREE_FIELDS, *PATTERN_FIELDS, *CHOICE_FIELDS, *FILE_FIELDS]),
    FIELD_TEXT,
    st.sampled_from(REFUSED),
    FIELD_TEXT,
)
def test_a_control_character_in_any_string_field_is_bad_input_on_its_line(
    field: str, before: str, char: str, after: str
) -> None:
    """NUL, ESC, DEL, U+0085 and the other controls the loader refuses: one `error:` line
    naming the file and the line that holds the value, wherever the value is."""
    from runai_spec.errors import InputError

    value = before + char + after
    text = dump([every_field_profile({field: value})])
    try:
        parse_profile(text, "hostile.yaml")
    except InputError as exc:
        first = exc.lines()[0]
    else:
        raise AssertionError(f"{field}: {value!r} was accepted")
    match = re.match(
        r"error: hostile\.yaml:(\d+): (?:(\S+): )?control characters are not "
        r"allowed",
        first,
    )
    assert match, first
    # the value's own field, where the value is one (a variable's name is a key: its line)
    assert match.group(2) == (None if field.endswith("{}") else field), first
    assert quote(value)[1:-1] in text.splitlines()[int(match.group(1)) - 1]
