"""`presets sync --from cluster`: the ConfigMap `presets publish` writes, read with the
researcher's kubeconfig (the fake API server), trusted only through the pinned allowed_signers."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ROOT, allow_signer, make_key
from kube_helpers import Sleeps, error_lines, run
from kubeapi import KubeAPI
from runai_spec.errors import EXIT_CLUSTER, EXIT_INPUT, EXIT_OK
from runai_spec.load.distribution import FILES_CONFIGMAP
from runai_spec.load.registry import PresetRegistry, synced_presets_dir
from runai_spec.outputs.admission.documents import PARAMS_NAMESPACE

pytest_plugins = ("kube_fixtures",)
pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")
WHERE = f"configmaps/{PARAMS_NAMESPACE}/{FILES_CONFIGMAP}"  # the files: WHERE/NAME
NEW = "h200-4gpu"


@pytest.fixture
def checkout(tmp_path: Path, presets_dir: Path, engineer_key: Path) -> Path:
    """The engineers' checkout after a merge: NEW approved with the key the installation pins."""
    folder = tmp_path / "repo" / "presets"
    shutil.copytree(presets_dir, folder)
    (folder / f"{NEW}.yaml").write_text(
        (folder / "h200-8gpu.yaml").read_text().replace("gpus_per_pod: 8", "gpus_per_pod: 4")
    )
    PresetRegistry(folder).approve(NEW, engineer_key)
    return folder


def publish(api: KubeAPI, folder: Path) -> dict[str, Any]:
    """`runai-spec presets publish --dir FOLDER | kubectl apply -f -` on the fake API server."""
    result = run("presets", "publish", "--dir", str(folder))
    assert result.exit_code == EXIT_OK, result.output
    stored: dict[str, Any] = api.kube.put("configmaps", yaml.safe_load(result.stdout))
    return stored


def test_published_presets_reach_the_researcher(api: KubeAPI, kubeconfig: Path, checkout: Path) -> None:
    stored = publish(api, checkout)
    assert "allowed_signers" not in stored["data"]  # the keys never travel with the presets
    result = run("presets", "sync", "--from", "cluster")
    assert result.exit_code == EXIT_OK, result.output
    assert f"ok: {NEW}.yaml" in result.stdout.splitlines()
    assert result.stderr.startswith(f"synced 7 files from {WHERE} into {synced_presets_dir()}")
    for name in stored["data"]:
        assert (synced_presets_dir() / name).read_bytes() == (checkout / name).read_bytes()
    assert PresetRegistry().get(NEW).preset.gpus_per_pod == 4


def test_a_tampered_configmap_is_refused(api: KubeAPI, kubeconfig: Path, checkout: Path) -> None:
    stored = publish(api, checkout)
    data = stored["data"]
    data[f"{NEW}.yaml"] = data[f"{NEW}.yaml"].replace("gpus_per_pod: 4", "gpus_per_pod: 64")
    result = run("presets", "sync", "--from", "cluster")
    assert result.exit_code == EXIT_INPUT
    assert error_lines(result.stderr)[0] == (
        f"error: {WHERE}/{NEW}.yaml: sha256: edited since it was approved (sha256 differs from the ledger)"
    )
    assert not synced_presets_dir().exists()


def test_a_configmap_signed_by_an_unknown_key_is_refused(
    api: KubeAPI, kubeconfig: Path, checkout: Path, tmp_path: Path
) -> None:
    rogue = make_key(tmp_path, "rogue")
    allow_signer(checkout, rogue, "rogue@example.org")
    PresetRegistry(checkout).approve(NEW, rogue)
    publish(api, checkout)  # the engineers' folder, by its own keys, verifies
    result = run("presets", "sync", "--from", "cluster")
    assert result.exit_code == EXIT_INPUT
    error = error_lines(result.stderr)[0]
    assert error.startswith(f"error: {WHERE}/{NEW}.yaml: signature: ") and "rogue@example.org" in error


def test_nothing_published_exits_3_with_the_engineers_command(api: KubeAPI, kubeconfig: Path) -> None:
    result = run("presets", "sync", "--from", "cluster")
    assert result.exit_code == EXIT_CLUSTER
    assert error_lines(result.stderr) == [
        f"error: cluster: {WHERE}: not found: no presets are published",
        "hint: the SCC AI Engineers publish them: "
        "`runai-spec presets publish --dir presets/ | kubectl apply -f -`",
    ]


def test_forbidden_exits_3(api: KubeAPI, kubeconfig: Path, checkout: Path) -> None:
    publish(api, checkout)
    api.kube.forbidden.add(("get", "configmaps"))
    result = run("presets", "sync", "--from", "cluster")
    assert result.exit_code == EXIT_CLUSTER
    lines = error_lines(result.stderr)
    assert lines[0].startswith(f"error: cluster: {WHERE}: forbidden (") and len(lines) == 2
    assert lines[1] == "hint: ask the SCC AI Engineers for read access to it, or use `--from DIR`"


def test_unreachable_exits_3(unreachable: tuple[Path, str], cli_sleeps: Sleeps) -> None:
    config, _ = unreachable
    result = run("presets", "sync", "--from", "cluster", "--kubeconfig", str(config))
    assert result.exit_code == EXIT_CLUSTER
    assert error_lines(result.stderr)[0].startswith("error: ")


def test_publish_refuses_a_folder_that_does_not_verify(presets_dir: Path) -> None:
    preset = presets_dir / "h200-8gpu.yaml"
    preset.write_text(preset.read_text().replace("gpus_per_pod: 8", "gpus_per_pod: 64"))
    result = run("presets", "publish", "--dir", str(presets_dir))
    assert result.exit_code == EXIT_INPUT and result.stdout == ""
    lines = error_lines(result.stderr)
    assert (
        lines[0] == f"error: {preset}: sha256: edited since it was approved (sha256 differs from the ledger)"
    )
    assert lines[-1] == "hint: only a presets folder that `runai-spec presets verify` accepts is published"


def test_publish_of_the_shipped_presets_carries_each_file_byte_for_byte() -> None:
    result = run("presets", "publish", "--dir", str(ROOT / "presets"))
    document = yaml.safe_load(result.stdout)
    assert document["metadata"] == {
        "name": FILES_CONFIGMAP,
        "namespace": PARAMS_NAMESPACE,
        "labels": {"app.kubernetes.io/managed-by": "runai-spec"},
    }
    names = sorted(p.name for p in (ROOT / "presets").glob("*.yaml"))
    assert sorted(document["data"]) == names
    for name in names:
        assert document["data"][name].encode() == (ROOT / "presets" / name).read_bytes()
