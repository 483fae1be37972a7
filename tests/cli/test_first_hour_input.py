"""The researcher's first hour (issue 16 items 4-6 and the input habits; issue 12 item 7):
values exactly as written, every mistake in one pass, hints that name the fix, a profile hash
that ignores layout."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import kubelet_sees, pytorch_container, run
from runai_spec.check.catalogue import READS, RULES
from runai_spec.facts.kubeflow import PROFILE_SHA_ANNOTATION
from runai_spec.load.profile import parse_profile
from runai_spec.load.registry import PresetRegistry
from runai_spec.load.yaml import load_mapping_text, parse_documents
from runai_spec.pipeline.workload import prepare_workload

# The base profile of conftest, written by hand so that its values are plain YAML scalars.
PROFILE = """\
name: demo
project: team-a
preset: h200-2x8-ib
image: registry.scc.example.org/team-a/train:1.0@sha256:{digest}
command: [train.py, --config, cfg.yaml]
working_dir: /workspace
env:
  MY_FLAG: "1"
batch:
  local: 4
  grad_accum: 2
  global: 128
strategy: ddp
model:
  parameters: 1000000
  precision: bf16
metrics:
  writer: rank0
checkpoint:
  dir: /checkpoints
  pvc: team-a-ckpt
  format: dcp
  resume: latest
""".replace("{digest}", "ab" * 32)


def container(text: str) -> dict[str, Any]:
    (job,) = [d for d in parse_documents(text, "rendered") if d and d["kind"] == "PyTorchJob"]
    return pytorch_container(job)


def env_of(text: str) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container(text).get("env", [])}


def annotation(text: str) -> str:
    (job,) = [d for d in parse_documents(text, "rendered") if d and d["kind"] == "PyTorchJob"]
    return str(job["metadata"]["annotations"][PROFILE_SHA_ANNOTATION])


# --- literal scalars (issue 12 item 7, DESIGN section 5) -----------------------------


def test_plain_numbers_in_env_and_command_keep_their_text(write_profile: Callable[..., Path]) -> None:
    text = PROFILE.replace(
        '  MY_FLAG: "1"', "  TORCH_VERSION: 1.10\n  SEED: 1e3\n  ON: true\n  OCTAL: 0777\n  RATIO: -0.50"
    ).replace("command: [train.py, --config, cfg.yaml]", "command: [train.py, --epochs, 90, --lr, 3e-4]")
    result = run("render", str(write_profile(text)))
    assert result.exit_code == 0, result.output
    env = env_of(result.stdout)
    assert {k: env[k] for k in ("TORCH_VERSION", "SEED", "ON", "OCTAL", "RATIO")} == {
        "TORCH_VERSION": "1.10",
        "SEED": "1e3",
        "ON": "true",
        "OCTAL": "0777",
        "RATIO": "-0.50",
    }
    assert '"1.10"' in result.stdout and '"1e3"' in result.stdout
    assert container(result.stdout)["command"][-4:] == ["--epochs", "90", "--lr", "3e-4"]


def test_plain_numbers_in_other_string_fields_keep_their_text() -> None:
    text = PROFILE.replace("  resume: latest", "  resume: 1.50") + "diagnostics:\n  reason: 2026.10\n"
    loaded = parse_profile(text, "p.yaml")
    assert loaded.profile.checkpoint.resume == "1.50"
    assert loaded.profile.diagnostics.reason == "2026.10"


def test_number_fields_still_take_numbers() -> None:
    loaded = parse_profile(PROFILE.replace("parameters: 1000000", "parameters: 13e9"), "p")
    assert loaded.profile.model is not None and loaded.profile.model.parameters == 13_000_000_000


@pytest.mark.parametrize(
    "field, word",
    [
        ("read_only", "no"),
        ("read_only", "off"),
        ("on_sigterm", "yes"),
        ("on_sigterm", "on"),
        ("nccl_debug", "no"),
        ("on_sigterm", "1"),
    ],
)
def test_switches_take_only_true_or_false(write_profile: Callable[..., Path], field: str, word: str) -> None:
    text = PROFILE
    if field == "read_only":
        text += f"data:\n  - path: /data\n    pvc: team-a-data\n    read_only: {word}\n"
    elif field == "on_sigterm":
        text += f"  on_sigterm: {word}\n"
    else:
        text += f"diagnostics:\n  nccl_debug: {word}\n  reason: ticket 1\n"
    result = run("validate", str(write_profile(text)))
    assert result.exit_code == 2, result.output
    assert f"{field}: must be true or false" in result.stderr
    assert "hint: write true or false" in result.stderr
    if word != "1":
        assert f"{word!r} is not a boolean here" in result.stderr


# Texts a researcher might write unquoted: numbers of every shape, YAML 1.1's surprises, words.
NUMERIC = st.from_regex(r"\A[-+]?[0-9]{1,6}(\.[0-9]{0,5})?([eE][-+]?[0-9]{1,3})?\Z")
SURPRISES = st.sampled_from(
    [
        "yes",
        "no",
        "on",
        "off",
        "y",
        "n",
        "True",
        "FALSE",
        "0777",
        "0o17",
        "0x1F",
        "1_000",
        "1:30",
        ".inf",
        "-.inf",
        ".nan",
        "2026-12-03",
        "12e3",
        "1.",
        ".5",
        "+1",
        "00",
        "-0",
        "0.10",
    ]
)
WORDS = st.text(st.characters(codec="utf-8", categories=["L", "N", "P", "S", "Zs"]), min_size=1, max_size=24)
SCALARS = st.one_of(NUMERIC, SURPRISES, WORDS)
_REGISTRY: list[PresetRegistry] = []


def _plain(text: str) -> bool:
    """True when text, written unquoted as a block mapping's value and as a flow-sequence
    item, is one plain scalar of exactly that text that is not null."""
    if text != text.strip() or text in ("~", "null", "Null", "NULL"):
        return False
    for doc, count in ((f"k: [{text}]\n", 10), (f"k: {text}\n", 8)):
        try:
            events = list(yaml.parse(doc, Loader=yaml.CSafeLoader))  # the loader's parser
        except yaml.YAMLError:
            return False
        scalars = [e for e in events if isinstance(e, yaml.ScalarEvent)]
        if len(events) != count or len(scalars) != 2 or scalars[1].value != text or scalars[1].style:
            return False
    return True


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=SCALARS)
def test_any_scalar_text_in_a_string_field_comes_back_byte_for_byte(value: str) -> None:
    assume(_plain(value))
    text = PROFILE.replace('  MY_FLAG: "1"', f"  MY_VALUE: {value}").replace(
        "command: [train.py, --config, cfg.yaml]", f"command: [train.py, --tag, {value}]"
    )
    text += f"diagnostics:\n  reason: {value}\n"
    try:
        load_mapping_text(text, "p")
    except Exception:  # noqa: BLE001 - a text that is not YAML as a mapping value: skipped
        assume(False)
    if not _REGISTRY:  # one registry: its ledger, signatures and presets are read once
        _REGISTRY.append(PresetRegistry())
    workload = prepare_workload(Path("profile.yaml"), _REGISTRY[0], text=text)
    assert workload.loaded.profile.diagnostics.reason == value
    rendered = container(workload.text)  # the text `render` prints, read back once
    # the text the container gets, after the kubelet's $(VAR) expansion (`$` written `$$`)
    assert kubelet_sees({e["name"]: e.get("value") for e in rendered["env"]}["MY_VALUE"]) == value
    assert [kubelet_sees(a) for a in rendered["command"][-2:]] == ["--tag", value]


# --- item 4: every mistake in one pass ---------------------------------------------

SIX = """\
name: LLM_13B
project: nlp-lab
preset: h200-2x8-ib
image: registry.scc.example.org/nlp-lab/llm-train:1.8.0
command: [train.py, --epochs, 90]
workdir: /workspace
env:
  NCCL_SOCKET_IFNAME: eth0
  TORCH_VERSION: 1.10
batch:
  local: 4
  grad_accum: 8
  global: 500
strategy: fsdp
model:
  parameters: 13B
  precision: bf16
metrics:
  writer: rank0
checkpoint:
  dir: /checkpoints
  pvc: nlp-lab-checkpoints
  resume: latest
"""


def test_six_mistakes_come_in_one_pass_sorted_by_line(write_profile: Callable[..., Path]) -> None:
    path = write_profile(SIX)
    result = run("validate", str(path))
    assert result.exit_code == 2, result.output  # bad input wins over findings
    heads = [ln for ln in result.stderr.splitlines() if not ln.startswith("hint:")]
    assert heads == [
        f"error: {path}:1: name: must be a DNS-1035 label: lowercase letters, digits and '-', "
        "starting with a letter",
        f"error: {path}:4: image: tag-only images are mutable [image-digest]",
        f"error: {path}:6: workdir: unknown field",
        f"error: {path}:8: env.NCCL_SOCKET_IFNAME: NCCL_SOCKET_IFNAME configures NCCL (the "
        "network path between GPUs), which the preset owns [nccl-transport-env]",
        f"error: {path}:13: batch.global: 500 != local 4 x processes 16 x grad_accum 8 = 512 [global-batch]",
        f"error: {path}:16: model.parameters: '13B' is not a number",
    ]
    lines = result.stderr.splitlines()
    # each problem is followed by its own hint
    assert lines[lines.index(heads[0]) + 1] == "hint: use 'llm-13b'"
    assert lines[lines.index(heads[2]) + 1].startswith("hint: did you mean 'working_dir'?")
    assert lines[lines.index(heads[5]) + 1] == ("hint: write the number out: 13000000000 or 13e9")


def test_six_mistakes_in_json_list_errors_and_findings(write_profile: Callable[..., Path]) -> None:
    result = run("validate", "--format", "json", str(write_profile(SIX)))
    assert result.exit_code == 2
    (bad,) = json.loads(result.stdout)["bad_input"]
    assert [e["field"] for e in bad["errors"]] == ["name", "workdir", "model.parameters"]
    assert [f["rule"] for f in bad["findings"]] == ["image-digest", "nccl-transport-env", "global-batch"]
    assert [e["line"] for e in bad["errors"]] == [1, 6, 16]


def test_six_mistakes_in_markdown_sorted_by_line(write_profile: Callable[..., Path]) -> None:
    result = run("validate", "--format", "markdown", str(write_profile(SIX)))
    assert result.exit_code == 2
    rows = [ln for ln in result.stdout.splitlines() if ln.startswith("- ")]
    assert [int(row.split()[2]) for row in rows] == [1, 4, 6, 8, 13, 16]


def test_findings_that_depend_on_a_field_that_did_not_parse_are_left_out(
    write_profile: Callable[..., Path],
) -> None:
    # `strategy: fsdpp` falls back to ddp while the rules run: the memory check on a DDP
    # replica would be a guess, so it is not reported; the unrelated finding still is.
    text = (
        PROFILE.replace("strategy: ddp", "strategy: fsdpp")
        .replace("parameters: 1000000", "parameters: 70000000000")
        .replace(
            "image: registry.scc.example.org/team-a/train:1.0@sha256:" + "ab" * 32,
            "image: registry.scc.example.org/team-a/train:1.0",
        )
    )
    result = run("validate", str(write_profile(text)))
    assert result.exit_code == 2
    assert "strategy: Input should be" in result.stderr
    assert "[image-digest]" in result.stderr
    assert "ddp-replica-fits" not in result.stderr and "strategy-allowed" not in result.stderr
    # without the schema error, the same profile gets the memory finding
    fixed = run("validate", str(write_profile(text.replace("fsdpp", "ddp"))))
    assert "[ddp-replica-fits]" in fixed.stderr


def test_reserved_fields_are_reported_with_schema_errors(write_profile: Callable[..., Path]) -> None:
    result = run("validate", str(write_profile(PROFILE + "gpus: 8\ncolour: blue\n")))
    assert result.exit_code == 2
    assert "gpus: reserved for the SCC AI Engineers" in result.stderr
    assert "colour: unknown field" in result.stderr


def test_an_unknown_preset_is_listed_with_the_schema_errors(write_profile: Callable[..., Path]) -> None:
    text = PROFILE.replace("preset: h200-2x8-ib", "preset: h200-2x8-ibb") + "colour: blue\n"
    result = run("validate", str(write_profile(text)))
    assert result.exit_code == 2
    assert re.search(r":3: preset: unknown preset 'h200-2x8-ibb'", result.stderr), result.stderr
    assert "colour: unknown field" in result.stderr


def test_every_rule_says_what_it_reads() -> None:
    assert set(READS) == set(RULES)


# --- item 5: did you mean, tabs, 13B, upper-case names, line numbers ------------------


@pytest.mark.parametrize(
    "typo, field, where",
    [
        ("workdir: /workspace\n", "working_dir", "workdir"),
        ("Strategy: ddp\n", "strategy", "Strategy"),
        ("secret_envs: {}\n", "secret_env", "secret_envs"),
    ],
)
def test_unknown_fields_get_did_you_mean(
    write_profile: Callable[..., Path], typo: str, field: str, where: str
) -> None:
    text = PROFILE.replace("working_dir: /workspace\n", "").replace("strategy: ddp\n", "")
    result = run("validate", str(write_profile(text + typo)))
    assert result.exit_code == 2
    assert f"{where}: unknown field" in result.stderr
    assert f"hint: did you mean {field!r}?" in result.stderr


def test_nested_unknown_fields_get_did_you_mean(write_profile: Callable[..., Path]) -> None:
    text = PROFILE.replace("  format: dcp", "  formatt: dcp").replace(
        "  writer: rank0", "  writer: rank0\n  trackr: tensorboard"
    )
    result = run("validate", str(write_profile(text)))
    assert "checkpoint.formatt: unknown field" in result.stderr
    assert "hint: did you mean 'format'?" in result.stderr
    assert "hint: did you mean 'tracker'?" in result.stderr


def test_a_tab_is_named_with_its_line_and_column(write_profile: Callable[..., Path]) -> None:
    path = write_profile(PROFILE.replace("  local: 4", "\tlocal: 4"))
    result = run("validate", str(path))
    assert result.exit_code == 2
    assert f"error: {path}:10: a tab character at column 1" in result.stderr
    assert "cannot start any token" not in result.stderr
    assert "hint: replace the tab with spaces" in result.stderr


@pytest.mark.parametrize(
    "written, hint",
    [
        ("13B", "13000000000 or 13e9"),
        ("1.5b", "1500000000 or 1.5e9"),
        ("70M", "70000000 or 70e6"),
        ("2T", "2000000000000 or 2e12"),
    ],
)
def test_a_parameter_count_with_a_suffix_gets_the_number(
    write_profile: Callable[..., Path], written: str, hint: str
) -> None:
    text = PROFILE.replace("parameters: 1000000", f"parameters: {written}")
    result = run("validate", str(write_profile(text)))
    assert result.exit_code == 2
    assert f"hint: write the number out: {hint}" in result.stderr
    # and the hint's spelling is accepted
    for spelling in hint.split(" or "):
        assert run("validate", str(write_profile(text.replace(written, spelling)))).exit_code in (0, 1)


@pytest.mark.parametrize(
    "field, written, suggestion",
    [("name", "ResNet_Baseline", "resnet-baseline"), ("project", "Team-A", "team-a")],
)
def test_an_upper_case_name_gets_the_lower_case_name(
    write_profile: Callable[..., Path], field: str, written: str, suggestion: str
) -> None:
    text = re.sub(rf"(?m)^{field}: .*$", f"{field}: {written}", PROFILE)
    result = run("validate", str(write_profile(text)))
    assert result.exit_code == 2
    assert f"hint: use {suggestion!r}" in result.stderr


def test_preset_and_deepspeed_findings_have_line_numbers(write_profile: Callable[..., Path]) -> None:
    path = write_profile(PROFILE.replace("preset: h200-2x8-ib", "preset: h200-2x8-ibx"))
    result = run("validate", str(path))
    assert f"error: {path}:3: preset: unknown preset" in result.stderr
    path = write_profile(PROFILE.replace("strategy: ddp", "strategy: deepspeed"))
    result = run("validate", str(path))
    assert f"error: {path}:13: zero_stage: deepspeed needs an explicit ZeRO stage" in (result.stderr)


# --- item 6: profile-sha256 hashes the parsed profile -------------------------------


def test_profile_sha256_ignores_line_endings_comments_and_order(tmp_path: Path) -> None:
    def render(text: str, name: str) -> str:
        path = tmp_path / name
        path.write_bytes(text.encode("utf-8"))
        return annotation(prepare_workload(path).text)

    base = render(PROFILE, "lf.yaml")
    assert render(PROFILE.replace("\n", "\r\n"), "crlf.yaml") == base
    assert (
        render("# a new comment\n" + PROFILE.replace("local: 4", "local: 4  # per GPU"), "comment.yaml")
        == base
    )
    assert (
        render(
            PROFILE.replace("  local: 4\n  grad_accum: 2\n", "  grad_accum: 2\n  local: 4\n"), "order.yaml"
        )
        == base
    )
    assert render(PROFILE.replace('MY_FLAG: "1"', "MY_FLAG: '1'"), "quotes.yaml") == base
    assert render(PROFILE.replace('MY_FLAG: "1"', 'MY_FLAG: "2"'), "value.yaml") != base
    # 1.10 and 1.1 render differently, so they hash differently
    assert render(PROFILE.replace('MY_FLAG: "1"', "MY_FLAG: 1.10"), "a.yaml") != render(
        PROFILE.replace('MY_FLAG: "1"', "MY_FLAG: 1.1"), "b.yaml"
    )


@pytest.mark.parametrize(
    "before, after", [("local: 4", "local: true"), ("parameters: 1000000", "parameters: false")]
)
def test_a_count_is_never_a_boolean(write_profile: Callable[..., Path], before: str, after: str) -> None:
    result = run("validate", str(write_profile(PROFILE.replace(before, after))))
    assert result.exit_code == 2
    assert f"must be a number, not {after.split()[-1]}" in result.stderr


def test_an_unknown_field_inside_a_field_that_did_not_parse(write_profile: Callable[..., Path]) -> None:
    text = PROFILE + ("data:\n  - path: data\n    pvc: team-a-data\n  - path: /more\n    pvcc: team-a-more\n")
    result = run("validate", str(write_profile(text)))
    assert result.exit_code == 2, result.output
    assert "data[0].path: String should match pattern" in result.stderr
    assert "data[1].pvcc: unknown field" in result.stderr
    assert "Traceback" not in result.output
