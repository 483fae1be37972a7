"""Issue 23, item 8: diffs mask structured credentials (a ConfigMap's `client-key-data:` and
`auth:` values) and the values of variables named DB_PASS, REGISTRY_AUTH, SSH_KEY; a change
hidden by the mask still shows as a change."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import ROOT, pytorch_container
from kube_helpers import NAME, NS, PROFILE, Render, run
from kubeapi import KubeAPI
from runai_spec.outputs.diff import compare
from runai_spec.secrets import MASK, mask_object

pytest_plugins = ("kube_fixtures",)

# base64 that is no PEM (no `LS0tLS1`): only the key's name says it is a credential
KEY_DATA = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODk="
AUTH = "dXNlcjpodW50ZXIy"
VALUE = "s3cr3t-value-for-the-test"


def config_map(data: dict[str, str]) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{NAME}-notes", "namespace": NS},
        "data": data,
    }


def test_diff_against_masks_client_key_data_and_auth_of_a_committed_config_map(tmp_path: Path) -> None:
    folder = tmp_path / "manifests"
    folder.mkdir()
    job = (ROOT / "examples" / "multi-node" / "manifest.yaml").read_text()
    notes = yaml.safe_dump(
        config_map({"client-key-data": KEY_DATA, "auth": AUTH, "tls.key": VALUE, "ssh-privatekey": VALUE})
    )
    (folder / f"{NAME}.yaml").write_text(f"{job}---\n{notes}")
    for fmt in ("text", "markdown", "json"):
        result = run("diff", PROFILE, "--against", str(folder), "--format", fmt)
        assert result.exit_code == 1, result.output
        assert "client-key-data" in result.stdout and MASK in result.stdout
        for secret in (KEY_DATA, AUTH, VALUE):
            assert secret not in result.stdout + result.stderr, (fmt, secret)


@pytest.mark.parametrize(
    "variable",
    ["DB_PASS", "REGISTRY_AUTH", "SSH_KEY", "DB_PW", "MYSQL_PWD", "PGPASSWORD", "API_CREDS", "KEY"],
)
def test_diff_live_masks_a_credential_named_variable(
    api: KubeAPI, kubeconfig: Path, rendered: Render, variable: str
) -> None:
    job = rendered()[0]
    container = pytorch_container(job)
    container["env"] = [*container.get("env", []), {"name": variable, "value": VALUE}]
    api.kube.put("pytorchjobs", job, manager="runai-spec")
    result = run("diff", PROFILE, "--live")
    assert result.exit_code == 1, result.output
    assert variable in result.stdout and MASK in result.stdout
    assert VALUE not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "name",
    [
        "TOKENIZERS_PARALLELISM",
        "MAX_NEW_TOKENS",
        "PWD",
        "NCCL_IB_HCA",
        "BYPASS",
        "AUTHOR",
        "MASTER_ADDR",
        "OMP_NUM_THREADS",
    ],
)
def test_ordinary_variable_names_stay_visible(name: str) -> None:
    from runai_spec.secrets import secret_name

    assert not secret_name(name, variable=True)
    assert mask_object({"name": name, "value": "v"}) == {"name": name, "value": "v"}


def test_ordinary_mapping_keys_stay_visible() -> None:
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    affinity = {"topologyKey": "kubernetes.io/hostname"}
    ref = {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert mask_object([toleration, affinity, ref]) == [toleration, affinity, ref]


def test_a_change_only_in_a_masked_value_still_shows_as_a_change() -> None:
    before = config_map({"auth": AUTH})
    after = config_map({"auth": AUTH + "x"})
    (changed,) = compare([after], [before], new_label="render", old_label="committed")
    assert changed.status == "changed" and "a masked" in changed.diff
    assert AUTH not in changed.diff
    assert compare([before], [config_map({"auth": AUTH})], new_label="a", old_label="b") == ()
