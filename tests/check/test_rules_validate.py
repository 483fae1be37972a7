"""validate reports every finding at once, as text, JSON or Markdown."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from conftest import pytorch_container, run, schema_errors
from runai_spec.pipeline.workload import prepare_workload
from runai_spec.secrets import looks_secret as secret_name
from runai_spec.secrets import secret_value


def five_problems(base: dict[str, Any]) -> dict[str, Any]:
    base.update(
        image="registry.scc.example.org/team-a/train:1.0",  # image-digest
        gpus=8,
    )  # reserved-field
    base["env"] = {
        "NCCL_SOCKET_IFNAME": "ib0",  # nccl-transport-env
        "HF_TOKEN": "hf_" + "a" * 34,
    }  # secret-env
    base["batch"] = {"local": 4, "grad_accum": 2, "global": 100}  # global-batch
    return base


def test_five_problems_give_five_findings_with_file_path_line_rule_and_hint(
    write_profile: Callable[..., Path], base_profile: dict[str, Any]
) -> None:
    path = write_profile(five_problems(base_profile))
    result = run("validate", "--format", "json", str(path))
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    (entry,) = doc["profiles"]
    errors = [f for f in entry["findings"] if f["severity"] == "error"]
    assert sorted(f["rule"] for f in errors) == [
        "global-batch",
        "image-digest",
        "nccl-transport-env",
        "reserved-field",
        "secret-env",
    ]
    for finding in errors:
        assert finding["file"] == str(path)
        assert isinstance(finding["line"], int) and finding["line"] > 0
        assert finding["path"] and finding["hint"]
    assert doc["summary"]["error"] == 5 and doc["summary"]["with_errors"] == 1


def test_text_output_lists_all_findings_on_stderr(
    write_profile: Callable[..., Path], base_profile: dict[str, Any]
) -> None:
    result = run("validate", str(write_profile(five_problems(base_profile))))
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.count("\nhint: ") + result.stderr.startswith("hint: ") >= 5
    assert sum(line.startswith("error: ") for line in result.stderr.splitlines()) == 5


def test_markdown_output_is_a_table_per_profile(
    write_profile: Callable[..., Path], base_profile: dict[str, Any]
) -> None:
    bad = write_profile(five_problems(dict(base_profile)))
    good = write_profile(base_profile)
    broken = write_profile("name: [\n")
    result = run("validate", "-f", "markdown", str(bad), str(good), str(broken))
    assert result.exit_code == 2  # bad input wins over findings
    out = result.stdout
    assert out.startswith("### runai-spec validate: 2 of 3 failed")
    assert "| error | `secret-env` | `env.HF_TOKEN` |" in out
    assert f"✅ `{good}`" in out and f"❌ `{bad}`" in out
    assert "**Bad input**" in out and "not valid YAML" in out


def test_json_reports_bad_input_next_to_findings(write_profile: Callable[..., Path]) -> None:
    result = run("validate", "-f", "json", str(write_profile("- a\n")))
    assert result.exit_code == 2
    (bad,) = json.loads(result.stdout)["bad_input"]
    assert "top level must be a mapping" in bad["message"] and bad["exit_code"] == 2


def test_secret_env_renders_secret_key_ref_not_a_value(
    write_profile: Callable[..., Path], base_profile: dict[str, Any]
) -> None:
    base_profile["secret_env"] = {"WANDB_API_KEY": {"secret": "team-a-wandb", "key": "api-key"}}
    workload = prepare_workload(write_profile(base_profile))
    assert [f for f in workload.findings if f.severity == "error"] == []
    job = yaml.safe_load(workload.text)
    env = pytorch_container(job, "Worker")["env"]
    assert {
        "name": "WANDB_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "team-a-wandb", "key": "api-key"}},
    } in env
    assert schema_errors(job) == []


def test_secret_names_and_values() -> None:
    for name in (
        "HF_TOKEN",
        "WANDB_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "githubToken",
        "MY_CREDENTIALS",
    ):
        assert secret_name(name), name
    for name in ("TOKENIZERS_PARALLELISM", "PWD", "MAX_NEW_TOKENS", "KEYBOARD", "OMP_NUM_THREADS"):
        assert not secret_name(name), name
    assert secret_value("AKIA" + "A" * 16) and secret_value("https://u:p@host/x")
    assert secret_value("-----BEGIN RSA PRIVATE KEY-----")
    assert not secret_value("https://host/x") and not secret_value("false")


def test_nested_reserved_keys_are_findings_not_unknown_fields(
    write_profile: Callable[..., Path], base_profile: dict[str, Any]
) -> None:
    base_profile["checkpoint"]["annotations"] = {"k8s.v1.cni.cncf.io/networks": "ib"}
    base_profile["nvidia.com/rdma_ib"] = 8
    result = run("validate", str(write_profile(base_profile)))
    assert result.exit_code == 1, result.output
    assert ": checkpoint.annotations: reserved for the SCC AI Engineers" in result.stderr
    assert ": nvidia.com/rdma_ib: reserved for the SCC AI Engineers" in result.stderr
