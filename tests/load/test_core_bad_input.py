"""Each bad input: one error line, a hint where useful, the documented exit code, no output."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import pytorch_container, run
from runai_spec.facts.kubeflow import DIAGNOSTICS_ANNOTATION, NAME_MAX, WORKER, pod_name


def assert_refused(result: Any, code: int, *needles: str) -> None:
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) >= 1
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in result.stderr, result.stderr


def test_missing_file_is_bad_input(tmp_path: Path) -> None:
    result = run("render", str(tmp_path / "nope.yaml"))
    assert_refused(result, 2, "nope.yaml: no such file", "hint:")


@pytest.mark.parametrize(
    "text, needle",
    [
        ("- a\n- b\n", "top level must be a mapping"),
        ("", "top level must be a mapping, got empty"),
        ("name: a\nname: b\n", "duplicate key 'name'"),
        ("a: &x [1]\nb: *x\n", "anchors"),
        ("a: !!python/object/apply:os.system [ls]\n", "tags"),
        ("<<: {name: x}\n", "merge keys"),
        ("name: a\n---\nname: b\n", "expected one YAML document, found 2"),
        ("name: [unclosed\n", "not valid YAML"),
        ('name: "bell\\a"\n', "control characters"),
    ],
)
def test_malformed_yaml_is_bad_input(write_profile: Callable[..., Path], text: str, needle: str) -> None:
    for command in ("validate", "render"):
        assert_refused(run(command, str(write_profile(text))), 2, needle)


def test_alias_bomb_is_refused_quickly(write_profile: Callable[..., Path]) -> None:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [
        f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, "
        f"*a{i - 1}, *a{i - 1}]"
        for i in range(1, 10)
    ]
    assert_refused(run("render", str(write_profile("\n".join(lines)))), 2, "anchors")


def test_invalid_utf8_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes(b"name: \xff\xfe\n")
    assert_refused(run("render", str(path)), 2, "not valid UTF-8")


def test_huge_file_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("x: " + "a" * (2 * 1024 * 1024), encoding="utf-8")
    assert_refused(run("render", str(path)), 2, "larger than")


def test_unknown_field_is_bad_input(write_profile: Callable[..., Path], base_profile: dict[str, Any]) -> None:
    base_profile["colour"] = "blue"
    assert_refused(
        run("render", str(write_profile(base_profile))),
        2,
        "colour: unknown field",
        "hint: see `runai-spec schema`",
    )


def test_wrong_type_names_the_field(write_profile: Callable[..., Path], base_profile: dict[str, Any]) -> None:
    base_profile["batch"]["local"] = "four"
    assert_refused(run("validate", str(write_profile(base_profile))), 2, "batch.local")


def test_every_schema_problem_gets_its_own_line_with_the_line_number(
    write_profile: Callable[..., Path], base_profile: dict[str, Any]
) -> None:
    base_profile["batch"]["local"] = 0
    base_profile["strategy"] = "magic"
    base_profile["command"] = ["train.py", ""]  # (a plain 3 is the text "3": DESIGN section 5)
    base_profile["colour"] = "blue"
    del base_profile["checkpoint"]
    path = write_profile(base_profile)
    text = path.read_text().splitlines()

    def line(prefix: str) -> int:
        return next(i for i, ln in enumerate(text, 1) if ln.startswith(prefix))

    result = run("validate", str(path))
    assert_refused(result, 2)
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    EMPTY = "- ''"  # noqa: N806
    assert sorted(errors) == sorted(
        [
            f"error: {path}:{line(EMPTY)}: command[1]: String should have at least 1 character",
            f"error: {path}:{line('  local:')}: batch.local: Input should be greater than 0",
            f"error: {path}:{line('strategy:')}: strategy: Input should be 'ddp', 'fsdp', "
            "'deepspeed', 'tensor', 'pipeline' or 'hybrid'",
            f"error: {path}: checkpoint: required field is missing",
            f"error: {path}:{line('colour:')}: colour: unknown field",
        ]
    )
    # one pass, sorted by line (a missing field has none: first), each with its own hint
    numbers = [
        int(ln.split(":")[2]) if ln.split(":")[2].isdigit() else 0
        for ln in result.stderr.splitlines()
        if not ln.startswith("hint:")
    ]
    assert numbers == sorted(numbers)
    assert "hint: see examples/ for a complete profile" in result.stderr


def test_tag_only_image_is_a_finding(
    write_profile: Callable[..., Path], base_profile: dict[str, Any]
) -> None:
    base_profile["image"] = "registry.scc.example.org/team-a/train:latest"
    result = run("render", str(write_profile(base_profile)))
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "image: tag-only images are mutable [image-digest]" in result.stderr
    assert "hint: pin the digest" in result.stderr


def test_unapproved_preset_is_bad_input(
    write_profile: Callable[..., Path], base_profile: dict[str, Any], presets_dir: Path
) -> None:
    (presets_dir / "rogue-64gpu.yaml").write_text(
        (presets_dir / "h200-2x8-ib.yaml").read_text().replace("nodes: 2", "nodes: 8")
    )
    base_profile["preset"] = "rogue-64gpu"
    assert_refused(
        run("render", str(write_profile(base_profile))),
        2,
        "not recorded in the approvals ledger",
        "presets approve",
    )


def test_edited_preset_is_bad_input(
    write_profile: Callable[..., Path], base_profile: dict[str, Any], presets_dir: Path
) -> None:
    preset = presets_dir / "h200-2x8-ib.yaml"
    preset.write_text(preset.read_text().replace("priority: high", "priority: urgent"))
    assert_refused(run("render", str(write_profile(base_profile))), 2, "edited since it was approved")


def test_a_site_asking_for_an_unsupported_manifest_family_is_bad_input_not_a_bug(
    write_profile: Callable[..., Path], base_profile: dict[str, Any], presets_dir: Path, engineer_key: Path
) -> None:
    from runai_spec.load.registry import PresetRegistry

    site = presets_dir / "site.yaml"
    site.write_text(site.read_text().replace("family: kubeflow", "family: runai"))
    PresetRegistry(presets_dir).approve("site", engineer_key)
    result = run("render", str(write_profile(base_profile)))
    assert_refused(
        result,
        2,
        "site.yaml: family: manifest family 'runai' is not supported yet",
        "hint: set `family: kubeflow`",
    )


def test_unknown_preset_suggests_the_closest(
    write_profile: Callable[..., Path], base_profile: dict[str, Any]
) -> None:
    base_profile["preset"] = "h200-2x8-lb"
    assert_refused(
        run("render", str(write_profile(base_profile))),
        2,
        "unknown preset 'h200-2x8-lb'",
        "did you mean 'h200-2x8-ib'?",
    )


def test_name_too_long_for_worker_pods_is_a_finding(
    write_profile: Callable[..., Path], base_profile: dict[str, Any]
) -> None:
    base_profile["name"] = "a" * 55
    assert len(pod_name(base_profile["name"], WORKER, 0)) == NAME_MAX + 1
    result = run("render", str(write_profile(base_profile)))
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "[name-length]" in result.stderr and "shorten name to at most 48" in result.stderr


def test_a_name_only_the_smoke_test_outgrows_is_refused_by_validate_with_its_line(
    write_profile: Callable[..., Path], base_profile: dict[str, Any]
) -> None:
    """Issue 26 item 3: validate -> plan -> rehearse -> submit --smoke never fails at the end
    on a name validate passed."""
    base_profile["name"] = "a" * 51
    assert len(pod_name(base_profile["name"], WORKER, 0)) <= NAME_MAX
    path = write_profile(base_profile)
    line = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if ln.startswith("name:"))
    result = run("validate", str(path))
    assert result.exit_code == 1, result.output
    assert (
        f"error: {path}:{line}: name: the smoke test's pod name '{'a' * 51}-smoke-master-0' "
        "would have 66 characters (limit 63)"
    ) in result.stderr, result.stderr
    assert "[name-length]" in result.stderr and "shorten name to at most 48" in result.stderr
    assert run("validate", str(write_profile({**base_profile, "name": "a" * 48}))).exit_code == 0


def test_reserved_fields_are_findings_naming_the_rule(
    write_profile: Callable[..., Path], base_profile: dict[str, Any]
) -> None:
    base_profile.update(
        {
            "gpus": 8,
            "workers": 4,
            "priority": "high",
            "elastic": True,
            "node_pool": "x",
            "annotations": {"k8s.v1.cni.cncf.io/networks": "ib"},
        }
    )
    base_profile["env"] = {"NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_HCA": "mlx5"}
    result = run("validate", str(write_profile(base_profile)))
    assert result.exit_code == 1
    for field in ("gpus", "workers", "priority", "elastic", "node_pool", "annotations"):
        assert f": {field}: reserved for the SCC AI Engineers" in result.stderr
    assert result.stderr.count("[nccl-transport-env]") == 2


def test_global_batch_arithmetic_is_checked(
    write_profile: Callable[..., Path], base_profile: dict[str, Any]
) -> None:
    base_profile["batch"] = {"local": 4, "grad_accum": 2, "global": 100}
    result = run("validate", str(write_profile(base_profile)))
    assert result.exit_code == 1
    assert "100 != local 4 x processes 16 x grad_accum 2 = 128 [global-batch]" in result.stderr


@pytest.mark.parametrize(
    "change, rule",
    [
        ({"strategy": "pipeline"}, "strategy-allowed"),
        ({"image": f"docker.io/me/train@sha256:{'ab' * 32}"}, "registry"),
        ({"checkpoint": {"dir": "/ckpt", "format": "torch"}}, "checkpoint-on-pvc"),
        ({"checkpoint": {"dir": "/ckpt", "source": "my-bucket"}}, "data-source"),
        ({"command": ["torchrun", "--nproc-per-node=8", "train.py"]}, "launcher"),
        ({"env": {"RANK": "0"}}, "reserved-env"),
        ({"env": {"NCCL_DEBUG": "INFO"}}, "nccl-debug-temporary"),
    ],
)
def test_core_rules_fail_on_their_case(
    write_profile: Callable[..., Path], base_profile: dict[str, Any], change: dict[str, Any], rule: str
) -> None:
    base_profile.update(change)
    result = run("validate", str(write_profile(base_profile)))
    assert result.exit_code == 1, result.output
    assert f"[{rule}]" in result.stderr


def test_clean_profile_passes(write_profile: Callable[..., Path], base_profile: dict[str, Any]) -> None:
    result = run("validate", str(write_profile(base_profile)))
    assert result.exit_code == 0, result.output
    assert "world size 16" in result.stderr


def test_nccl_debug_switch_is_reported_not_refused(
    write_profile: Callable[..., Path], base_profile: dict[str, Any]
) -> None:
    base_profile["diagnostics"] = {"nccl_debug": True, "reason": "hang in INC-42"}
    path = write_profile(base_profile)
    result = run("render", str(path))
    assert result.exit_code == 0, result.output
    assert "temporary diagnostic NCCL_DEBUG=INFO is on (hang in INC-42)" in result.stderr
    job = yaml.safe_load(result.stdout)
    env = pytorch_container(job)["env"]
    assert {"name": "NCCL_DEBUG", "value": "INFO"} in env
    assert job["metadata"]["annotations"][DIAGNOSTICS_ANNOTATION] == "nccl-debug"


def test_one_bad_profile_writes_nothing_for_the_others(
    write_profile: Callable[..., Path], base_profile: dict[str, Any], tmp_path: Path
) -> None:
    good = write_profile(base_profile)
    bad = write_profile("name: [\n")
    out = tmp_path / "out"
    result = run("render", str(good), str(bad), "-o", str(out))
    assert result.exit_code == 2
    assert not out.exists()


def test_duplicate_workload_names_are_refused(
    write_profile: Callable[..., Path], base_profile: dict[str, Any], tmp_path: Path
) -> None:
    result = run(
        "render",
        str(write_profile(base_profile)),
        str(write_profile(base_profile)),
        "-o",
        str(tmp_path / "out"),
    )
    assert_refused(result, 2, "two profiles render the workload 'demo'")
    assert not (tmp_path / "out").exists()


def test_findings_from_several_profiles_are_all_reported(
    write_profile: Callable[..., Path], base_profile: dict[str, Any]
) -> None:
    first = dict(base_profile, image="registry.scc.example.org/a/b:1")
    second = dict(base_profile, strategy="hybrid", env={"NCCL_NET": "Socket"})
    result = run("validate", str(write_profile(first)), str(write_profile(second)))
    assert result.exit_code == 1
    assert "[image-digest]" in result.stderr
    assert "[strategy-allowed]" in result.stderr and "[nccl-transport-env]" in result.stderr


def test_usage_error_exits_2() -> None:
    assert run("render").exit_code == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["render", "p.yaml", "--bogus"], "error: No such option: --bogus"),
        (["validate", "p.yaml", "--format", "xml"], "error: Invalid value for '--format' / '-f'"),
        (["render"], "error: Missing argument 'PROFILE'."),
        (["no-such-command"], "error: No such command 'no-such-command'."),
    ],
)
def test_usage_errors_are_one_error_line_and_a_hint_not_a_panel(argv: list[str], message: str) -> None:
    result = run(*argv)
    assert result.exit_code == 2
    error, hint = result.stderr.splitlines()
    assert error.startswith(message), error
    assert hint.startswith("hint: see `") and hint.endswith(" --help`")
    assert result.stdout == ""


def test_schema_command_prints_field_descriptions() -> None:
    result = run("schema")
    assert result.exit_code == 0
    schema = yaml.safe_load(result.stdout)
    assert "batch" in schema["properties"]
    assert schema["$defs"]["Batch"]["properties"]["global"]["description"].startswith("Intended")
