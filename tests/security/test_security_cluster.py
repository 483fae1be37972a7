"""Issue 12, items 9, 10 and 13 (the cluster path): TLS failures, in-cluster configuration
without a token, malformed server answers and a failing exec credential plugin are one
`error: cluster:` line and a hint (exit 3), never exit 70; credentials are masked in every
output, --debug included; a refused `submit --smoke` leaves nothing it created behind."""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import pytorch_container, run_module
from kube_helpers import NAME, NS, PROFILE, Render, error_lines, run
from kubeapi import KubeAPI

pytest_plugins = ("kube_fixtures",)

SMOKE_JOB, SMOKE_CM = f"{NAME}-smoke", f"{NAME}-smoke-preflight"


def one_cluster_error(result: Any, words: str) -> None:
    """Exit 3, exactly one `error: cluster:` line (naming `words`) and a hint, no traceback."""
    assert result.exit_code == 3, result.output
    lines = error_lines(result.stderr)
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: cluster: "), lines
    assert words in errors[0], errors[0]
    assert any(ln.startswith("hint: ") for ln in lines), lines
    assert "Traceback" not in result.output and "internal error" not in result.output


def kubeconfig_for(
    path: Path, server: str, user: dict[str, Any], cluster: dict[str, Any] | None = None
) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": "alice", "user": user}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "alice"}}],
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def put_job(api: KubeAPI, rendered: Render) -> dict[str, Any]:
    """The example's job as runai-spec would have stored it."""
    return api.kube.put("pytorchjobs", rendered()[0], manager="runai-spec")


# --- TLS -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["status", NAME, "--project", "nlp-lab"],
        ["submit", PROFILE],
        ["logs", NAME, "--project", "nlp-lab", "--out", "-"],
    ],
)
def test_an_https_kubeconfig_against_a_plain_http_port_is_exit_3(
    api: KubeAPI, tmp_path: Path, command: list[str]
) -> None:
    config = kubeconfig_for(
        tmp_path / "kc", api.url.replace("http://", "https://"), {"token": api.kube.token}
    )
    result = run(*command, "--kubeconfig", str(config))
    one_cluster_error(result, "the TLS handshake failed")


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A throwaway self-signed certificate for 127.0.0.1 (and its key)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def test_a_self_signed_server_without_its_ca_is_exit_3_and_with_it_works(
    certificate: tuple[Path, Path], tmp_path: Path, rendered: Render
) -> None:
    server = KubeAPI(tls=certificate)
    try:
        assert server.url.startswith("https://")
        put_job(server, rendered)
        untrusted = kubeconfig_for(tmp_path / "kc", server.url, {"token": server.kube.token})
        for command in (["status", NAME, "--project", "nlp-lab"], ["submit", PROFILE]):
            one_cluster_error(
                run(*command, "--kubeconfig", str(untrusted)), "the server's TLS certificate is not trusted"
            )
        ca = base64.b64encode(certificate[0].read_bytes()).decode()
        trusted = kubeconfig_for(
            tmp_path / "kc-ca", server.url, {"token": server.kube.token}, {"certificate-authority-data": ca}
        )
        result = run("status", NAME, "--project", "nlp-lab", "--kubeconfig", str(trusted))
        assert result.exit_code == 0, result.output  # the same server, with its CA: fine
        assert f"{NAME} ({NS}): Pending" in result.stdout
    finally:
        server.stop()


# --- in-cluster configuration ------------------------------------------------------------


def test_in_cluster_configuration_without_a_service_account_token_is_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes.config import incluster_config

    # session.py takes the in-cluster path when no --kubeconfig, no KUBECONFIG and no
    # ~/.kube/config exist and KUBERNETES_SERVICE_HOST is set (as in a pod)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "no-token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "no-ca.crt"))
    for command in (["status", NAME, "--project", "nlp-lab"], ["submit", PROFILE]):
        one_cluster_error(run(*command), "in-cluster configuration failed: Service token file does not exist")


# --- malformed server answers --------------------------------------------------------------


def not_a_dict(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"] = "notadict"
    return obj


def first_pod_without_metadata(body: dict[str, Any]) -> dict[str, Any]:
    del body["items"][0]["metadata"]
    return body


def first_pod_not_a_dict(body: dict[str, Any]) -> dict[str, Any]:
    body["items"][0]["metadata"] = "notadict"
    return body


JOB_PATH = f"/pytorchjobs/{NAME}"


@pytest.mark.parametrize(
    ("command", "method", "path", "mangle", "words"),
    [
        (["status", NAME, "--project", "nlp-lab"], "GET", JOB_PATH, not_a_dict, "metadata is not an object"),
        (
            ["status", NAME, "--project", "nlp-lab"],
            "GET",
            "/pods",
            first_pod_without_metadata,
            "metadata is missing",
        ),
        (
            ["logs", NAME, "--project", "nlp-lab", "--out", "LOGS"],
            "GET",
            "/pods",
            first_pod_without_metadata,
            "metadata is missing",
        ),
        (
            ["logs", NAME, "--project", "nlp-lab", "--out", "-"],
            "GET",
            "/pods",
            first_pod_not_a_dict,
            "metadata is not an object",
        ),
        (["diff", PROFILE, "--live"], "GET", JOB_PATH, not_a_dict, "metadata is not an object"),
        (["diff", PROFILE, "--live"], "PATCH", JOB_PATH, not_a_dict, "metadata is not an object"),
    ],
)
def test_a_malformed_server_answer_is_exit_3(
    api: KubeAPI,
    kubeconfig: Path,
    rendered: Render,
    tmp_path: Path,
    command: list[str],
    method: str,
    path: str,
    mangle: Callable[[Any], Any],
    words: str,
) -> None:
    put_job(api, rendered)
    api.kube.add_pod(NAME, NS, "master", 0)
    api.kube.logs[(NS, f"{NAME}-master-0", False)] = "epoch 1\n"
    api.kube.inject(method=method, path_contains=path, mangle=mangle, keep=True)
    result = run(*[str(tmp_path / "logs") if c == "LOGS" else c for c in command])
    one_cluster_error(result, words)
    assert not (tmp_path / "logs").exists() or list((tmp_path / "logs").iterdir()) == []


def test_logs_to_stdout_refuse_a_server_chosen_pod_name_that_is_no_pod_name(
    api: KubeAPI, kubeconfig: Path, rendered: Render
) -> None:
    put_job(api, rendered)
    pod = api.kube.add_pod(NAME, NS, "master", 0)
    pod["metadata"]["name"] = "../\x1b]0;pwned\x07"
    result = run("logs", NAME, "--project", "nlp-lab", "--out", "-")
    one_cluster_error(result, "which is not a pod name")
    assert "\x1b" not in result.output and result.stdout == ""


def test_a_restart_count_of_many_reads_as_zero_in_status(
    api: KubeAPI, kubeconfig: Path, rendered: Render
) -> None:
    put_job(api, rendered)
    pod = api.kube.add_pod(NAME, NS, "master", 0)
    pod["status"]["containerStatuses"][0]["restartCount"] = "many"
    pod["status"]["conditions"] = "not a list"
    result = run("status", NAME, "--project", "nlp-lab")
    assert result.exit_code == 0, result.output
    assert f"{NAME}-master-0  master 0  Running  running  restarts 0" in result.stdout


def test_submit_with_a_malformed_create_answer_is_exit_3(api: KubeAPI, kubeconfig: Path) -> None:
    api.kube.inject(method="PATCH", path_contains=JOB_PATH, dry_run=False, mangle=not_a_dict)
    one_cluster_error(run("submit", PROFILE), "metadata is not an object")


def test_submit_reading_back_a_malformed_object_is_exit_3(api: KubeAPI, kubeconfig: Path) -> None:
    # the create happened but its answer was lost: the read-back finds a malformed object
    api.kube.inject(method="PATCH", path_contains=JOB_PATH, dry_run=False, commit=True, drop=True)
    api.kube.inject(method="GET", path_contains=JOB_PATH, mangle=not_a_dict, keep=True)
    result = run("submit", PROFILE)
    one_cluster_error(result, "metadata is not an object")
    assert api.kube.count("pytorchjobs") == 1  # never created twice


def test_validate_live_with_a_malformed_namespace_warns_instead_of_crashing(
    api: KubeAPI, kubeconfig: Path
) -> None:
    api.kube.inject(method="GET", path_contains=f"/api/v1/namespaces/{NS}", mangle=not_a_dict)
    result = run("validate", PROFILE, "--live")
    assert result.exit_code in (0, 1), result.output
    assert "not checked: the API server's answer is malformed (namespaces)" in result.stderr
    assert "Traceback" not in result.output


# --- a failing exec credential plugin --------------------------------------------------------

PLUGIN_SECRET = "s3cr3t-plugin-password-9f8e7d"  # no credential shape: only removal hides it


@pytest.mark.parametrize("debug", [[], ["--debug"]])
def test_a_failing_exec_plugin_is_one_line_and_its_stderr_never_shows(
    api: KubeAPI, tmp_path: Path, debug: list[str]
) -> None:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import sys\n"
        f"sys.stderr.write('login failed for alice:{PLUGIN_SECRET}\\n')\n"
        f"sys.stderr.write('token: {PLUGIN_SECRET}\\n')\n"
        "sys.exit(1)\n"
    )
    config = kubeconfig_for(
        tmp_path / "kc",
        api.url,
        {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1beta1",
                "command": sys.executable,
                "args": [str(plugin)],
                "interactiveMode": "Never",
            }
        },
    )
    for command in (["status", NAME, "--project", "nlp-lab"], ["submit", PROFILE]):
        result = run_module(*command, "--kubeconfig", str(config), *debug, timeout=120)
        assert result.returncode == 3, result.stderr
        assert PLUGIN_SECRET not in result.stdout + result.stderr
        errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
        assert errors == [
            f"error: {config}: the kubeconfig's exec credential plugin failed (exec: process returned 1)"
        ], result.stderr
        assert "Traceback" not in result.stderr
        if debug:  # the library's record, as a masked debug line without the plugin's output
            assert (
                "debug: runai_spec.cluster: kubernetes library: exec: process returned 1"
                in result.stderr.splitlines()
            )
    assert api.kube.requests == []  # nothing was sent without credentials


# --- credentials masked in every output ------------------------------------------------------

PEM_KEY = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7secretkeymaterial\n-----END RSA PRIVATE KEY-----"
CERT = "-----BEGIN CERTIFICATE-----\nMIIDazCCAlOgAwIBAgIUcertmaterial\n-----END CERTIFICATE-----"
KEY_DATA = base64.b64encode(PEM_KEY.encode()).decode()
JWT = (
    "eyJhbGciOiJSUzI1NiIsImtpZCI6ImFiYyJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ."
    "c2lnbmF0dXJlLXNpZ25hdHVyZQ"
)
HOSTILE = {
    "private key": PEM_KEY,
    "certificate": CERT,
    "client-key-data": f"client-key-data: {KEY_DATA}",
    "docker auth": '{"auths": {"r.io": {"auth": "YWxpY2U6aHVudGVyMg=="}}}',
    "bearer": "Authorization: Bearer abc.def-ghi_jkl",
    "password": "password=hunter2hunter2",
    "jwt": f"the token {JWT} expired",
    "url": "https://alice:hunter2hunter2@registry.example.org/x",
    "aws": "AKIAABCDEFGHIJKLMNOP",
}
SECRET_PARTS = [
    "secretkeymaterial",
    "certmaterial",
    KEY_DATA,
    "YWxpY2U6aHVudGVyMg==",
    "abc.def-ghi_jkl",
    "hunter2hunter2",
    JWT,
    "AKIAABCDEFGHIJKLMNOP",
]


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_mask_text_hides_every_credential_shape(name: str) -> None:
    from runai_spec.secrets import MASK, mask_text

    masked = mask_text(HOSTILE[name])
    assert MASK in masked and not any(part in masked for part in SECRET_PARTS), masked


@pytest.mark.parametrize(
    "benign",
    [
        "registry.scc.example.org/team-a/train@sha256:" + "ab12" * 16,
        "PATCH /apis/kubeflow.org/v1/namespaces/runai-nlp-lab/pytorchjobs/llm-7b-fsdp-smoke-long",
        "tokenizer: gpt2",
        "MAX_NEW_TOKENS=512",
        "TOKENIZERS_PARALLELISM=false",
        "training.kubeflow.org/replica-index",
    ],
)
def test_mask_text_leaves_ordinary_values_alone(benign: str) -> None:
    from runai_spec.secrets import mask_text

    assert mask_text(benign, runs=True) == benign


def test_a_refusal_message_carrying_credentials_is_masked_also_with_debug(
    api: KubeAPI, kubeconfig: Path
) -> None:
    message = " ".join(HOSTILE.values()).replace("\n", " ")
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": 403,
        "reason": "Forbidden",
        "message": message,
    }
    api.kube.inject(403, method="GET", path_contains=JOB_PATH, body=body)
    result = run("status", NAME, "--project", "nlp-lab", "--debug")
    assert result.exit_code == 3
    assert "forbidden" in result.stderr
    assert not any(part in result.output for part in SECRET_PARTS), result.output
    assert api.kube.token not in result.output


def test_debug_lines_are_masked_whatever_they_say(capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    from runai_spec import cluster

    cluster.enable_debug()
    logging.getLogger("urllib3").debug("connect %s", HOSTILE["client-key-data"])
    logging.getLogger("runai_spec.cluster").debug("%s", PEM_KEY)
    err = capsys.readouterr().err
    assert "debug: " in err and KEY_DATA not in err and "secretkeymaterial" not in err


def test_diff_live_masks_credentials_another_client_put_in_the_job(
    api: KubeAPI, kubeconfig: Path, rendered: Render
) -> None:
    job = put_job(api, rendered)
    container = pytorch_container(job)
    container["env"] = [
        *container.get("env", []),
        {"name": "NOTES", "value": PEM_KEY},
        {"name": "KUBE", "value": f"client-key-data: {KEY_DATA}"},
    ]
    result = run("diff", PROFILE, "--live")
    assert result.exit_code == 1, result.output
    assert "NOTES" in result.stdout and "***" in result.stdout
    assert "secretkeymaterial" not in result.stdout and KEY_DATA not in result.stdout


# --- submit --smoke refused after its ConfigMap was stored ----------------------------------


def test_a_refused_smoke_job_removes_the_config_map_this_submit_created(
    api: KubeAPI, kubeconfig: Path
) -> None:
    # an unrelated ConfigMap of the project: never touched
    api.kube.put("configmaps", {"metadata": {"name": "team-notes", "namespace": NS}, "data": {}})
    # the dry runs pass; the job's real create is refused (as an admission webhook might)
    api.kube.inject(403, method="PATCH", path_contains=f"/pytorchjobs/{SMOKE_JOB}", dry_run=False)
    result = run("submit", PROFILE, "--smoke")
    assert result.exit_code == 3, result.output
    lines = error_lines(result.stderr)
    assert [ln for ln in lines if ln.startswith("error:")][0].startswith(
        f"error: cluster: pytorchjobs/{NS}/{SMOKE_JOB}: "
    )
    assert f"note: removed configmaps/{NS}/{SMOKE_CM}, which this submit had created" in lines
    assert api.kube.get("configmaps", NS, SMOKE_CM) is None
    assert api.kube.get("configmaps", NS, "team-notes") is not None
    assert api.kube.count("pytorchjobs") == 0


def test_a_refused_smoke_job_keeps_a_config_map_an_earlier_submit_stored(
    api: KubeAPI, kubeconfig: Path
) -> None:
    first = run("submit", PROFILE, "--smoke")
    assert first.exit_code == 0, first.output
    job = api.kube.get("pytorchjobs", NS, SMOKE_JOB)
    assert job is not None
    del api.kube.objects[("pytorchjobs", NS, SMOKE_JOB)]  # deleted by hand, its ConfigMap kept
    api.kube.inject(403, method="PATCH", path_contains=f"/pytorchjobs/{SMOKE_JOB}", dry_run=False)
    result = run("submit", PROFILE, "--smoke")
    assert result.exit_code == 3, result.output
    assert "note: removed" not in result.stderr  # this submit created nothing: nothing removed
    assert api.kube.get("configmaps", NS, SMOKE_CM) is not None


def test_a_password_in_the_server_address_is_masked_in_errors(
    unreachable: tuple[Path, str], tmp_path: Path
) -> None:
    config, token = unreachable
    server = yaml.safe_load(config.read_text())["clusters"][0]["cluster"]["server"]
    with_password = server.replace("http://", "http://alice:hunter2hunter2@")
    path = kubeconfig_for(tmp_path / "kc", with_password, {"token": token})
    result = run("status", NAME, "--project", "nlp-lab", "--kubeconfig", str(path), "--debug")
    one_cluster_error(result, "connection refused")
    assert "alice:***@" in result.stderr and "hunter2hunter2" not in result.output
