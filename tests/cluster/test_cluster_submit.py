"""submit through the real kubernetes client against the fake API server: SSA, idempotency, faults."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import pytorch_container
from kube_helpers import NAME, NS, Render, Sleeps, live_job, put_foreign_job
from kubeapi import KubeAPI
from runai_spec.cluster import RetryPolicy, Target, submit_manifests
from runai_spec.errors import EXIT_CLUSTER, ClusterError, InputError

pytest_plugins = ("kube_fixtures",)


def one_line(exc: ClusterError, token: str) -> str:
    lines = exc.lines()
    assert exc.exit_code == EXIT_CLUSTER
    assert lines[0].startswith("error: ") and "\n" not in lines[0]
    assert all(token not in line for line in lines)
    return lines[0]


def test_submit_creates_by_server_side_apply_with_fixed_manager_and_strict_validation(
    api: KubeAPI, target: Target, rendered: Render
) -> None:
    result = submit_manifests(rendered(), target)
    assert [o.action for o in result.outcomes] == ["created"]
    (patch,) = api.kube.sent("PATCH")
    assert patch.headers["Content-Type"] == "application/apply-patch+yaml"
    assert patch.query["fieldManager"] == ["runai-spec"]
    assert patch.query["fieldValidation"] == ["Strict"]
    assert "force" not in patch.query and "dryRun" not in patch.query
    stored = result.outcomes[0].stored
    assert stored is not None and "managedFields" not in stored["metadata"]
    assert "uid" not in stored["metadata"] and "resourceVersion" not in stored["metadata"]
    assert api.kube.get("pytorchjobs", NS, NAME) is not None


def test_resubmitting_the_same_render_says_unchanged_and_writes_nothing(
    api: KubeAPI, target: Target, rendered: Render
) -> None:
    submit_manifests(rendered(), target)
    version = live_job(api)["metadata"]["resourceVersion"]
    before = len(api.kube.writes())
    result = submit_manifests(rendered(), target)
    assert [o.action for o in result.outcomes] == ["unchanged"] and not result.changed
    assert len(api.kube.writes()) == before
    assert live_job(api)["metadata"]["resourceVersion"] == version


def changed_render(rendered: Render) -> list[dict[str, Any]]:
    manifests = rendered()
    manifests[0]["metadata"]["annotations"]["runai-spec/profile-sha256"] = "f" * 64
    pytorch_container(manifests[0], "Master")["command"].append("--lr=3e-4")
    return manifests


def test_a_different_render_of_the_same_name_is_refused_and_nothing_written(
    api: KubeAPI, target: Target, rendered: Render
) -> None:
    submit_manifests(rendered(), target)
    before = len(api.kube.writes())
    with pytest.raises(ClusterError) as info:
        submit_manifests(changed_render(rendered), target)
    line = one_line(info.value, api.kube.token)
    assert f"pytorchjobs/{NS}/{NAME}: exists with a different render" in line
    assert "--replace" in (info.value.hint or "")
    assert len(api.kube.writes()) == before


def test_replace_deletes_the_old_job_and_creates_the_new_render(
    api: KubeAPI, target: Target, rendered: Render
) -> None:
    submit_manifests(rendered(), target)
    old_uid = live_job(api)["metadata"]["uid"]
    result = submit_manifests(changed_render(rendered), target, replace=True)
    assert [o.action for o in result.outcomes] == ["replaced"]
    live = live_job(api)
    assert live["metadata"]["uid"] != old_uid
    assert "--lr=3e-4" in str(live["spec"])
    assert api.kube.count("pytorchjobs") == 1
    (delete,) = api.kube.sent("DELETE")
    assert old_uid in delete.body.decode()  # precondition: exactly the object that was checked


@pytest.mark.parametrize("replace", [False, True])
def test_an_object_runai_spec_did_not_create_is_never_touched(
    api: KubeAPI, target: Target, replace: bool, rendered: Render
) -> None:
    put_foreign_job(api)
    with pytest.raises(ClusterError) as info:
        submit_manifests(rendered(), target, replace=replace)
    assert "was not created by runai-spec; not touched" in one_line(info.value, api.kube.token)
    assert api.kube.writes() == []


def test_server_dry_run_sends_dry_run_all_and_persists_nothing(
    api: KubeAPI, target: Target, rendered: Render
) -> None:
    result = submit_manifests(rendered(), target, dry_run=True)
    assert [o.action for o in result.outcomes] == ["would create"]
    (patch,) = api.kube.sent("PATCH")
    assert patch.query["dryRun"] == ["All"]
    assert api.kube.count("pytorchjobs") == 0
    stored = result.outcomes[0].stored
    assert stored is not None and stored["spec"] == rendered()[0]["spec"]


def test_dry_run_of_a_replacement_changes_nothing(api: KubeAPI, target: Target, rendered: Render) -> None:
    submit_manifests(rendered(), target)
    before = api.kube.get("pytorchjobs", NS, NAME)
    result = submit_manifests(changed_render(rendered), target, dry_run=True, replace=True)
    assert [o.action for o in result.outcomes] == ["would replace"]
    assert api.kube.get("pytorchjobs", NS, NAME) == before


# --- faults: no duplicates, read back before any retry ---------------------------------


@pytest.mark.parametrize(
    "fault", [{"status": 500}, {"drop": True}, {"delay": 4.0}], ids=["500", "dropped", "timed-out"]
)  # the client's read timeout is 2 s (kube_fixtures.target)
@pytest.mark.parametrize("stored", [True, False], ids=["stored", "not-stored"])
def test_a_write_of_unknown_outcome_is_read_back_and_retried_only_if_not_stored(
    api: KubeAPI, target: Target, fault: dict[str, Any], stored: bool, rendered: Render
) -> None:
    api.kube.inject(method="PATCH", commit=stored, **fault)
    result = submit_manifests(rendered(), target)
    assert [o.action for o in result.outcomes] == ["created"]
    assert api.kube.count("pytorchjobs") == 1  # never a duplicate
    methods = [r.method for r in api.kube.requests]
    after = methods[methods.index("PATCH") + 1 :]
    assert after[0] == "GET"  # read back before anything else
    assert after.count("PATCH") == (0 if stored else 1)


def test_429_with_retry_after_waits_as_told_then_succeeds(
    api: KubeAPI, target: Target, sleeps: Sleeps, rendered: Render
) -> None:
    api.kube.inject(429, method="PATCH", retry_after="1")
    api.kube.inject(429, method="PATCH", retry_after="1")
    submit_manifests(rendered(), target)
    assert sleeps == [1.0, 1.0]
    assert api.kube.count("pytorchjobs") == 1


def test_503_without_retry_after_backs_off_exponentially(
    api: KubeAPI, target: Target, sleeps: Sleeps, rendered: Render
) -> None:
    for _ in range(3):
        api.kube.inject(503, method="GET")
    submit_manifests(rendered(), target)
    assert sleeps == pytest.approx([0.1, 0.2, 0.4])


def test_retry_after_is_capped(api: KubeAPI, target: Target, sleeps: Sleeps, rendered: Render) -> None:
    api.kube.inject(503, method="PATCH", retry_after="3600")
    submit_manifests(rendered(), target)
    assert sleeps == [2.0]


def test_retries_are_bounded_and_say_so(
    api: KubeAPI, target: Target, sleeps: Sleeps, rendered: Render
) -> None:
    for _ in range(10):
        api.kube.inject(429, retry_after="1")
    with pytest.raises(ClusterError) as info:
        submit_manifests(rendered(), target)
    assert "gave up after 4 attempt(s)" in one_line(info.value, api.kube.token)
    assert len(sleeps) == 3 and sum(sleeps) <= target.retry.max_total
    assert api.kube.count("pytorchjobs") == 0


def test_total_waiting_is_capped_below_the_attempt_limit(
    api: KubeAPI, kubeconfig: Path, sleeps: Sleeps, rendered: Render
) -> None:
    slow = Target(
        kubeconfig=kubeconfig,
        sleep=sleeps,
        timeout=(2, 2.0),
        retry=RetryPolicy(attempts=10, max_delay=2.0, max_total=3.0),
    )
    for _ in range(10):
        api.kube.inject(503, retry_after="2")
    with pytest.raises(ClusterError) as info:
        submit_manifests(rendered(), slow)
    assert "gave up after 2 attempt(s)" in one_line(info.value, api.kube.token)
    assert sleeps == [2.0] and api.kube.count("pytorchjobs") == 0


# --- refusals: one clear line each, exit 3 ----------------------------------------------


def test_401_says_unauthorised_and_never_prints_the_token(
    api: KubeAPI, tmp_path: Path, sleeps: Sleeps, rendered: Render
) -> None:
    wrong = api.kubeconfig(tmp_path / "wrong", token="wrong-token-abcdef0123456789")
    with pytest.raises(ClusterError) as info:
        submit_manifests(rendered(), Target(kubeconfig=wrong, sleep=sleeps))
    line = one_line(info.value, "wrong-token-abcdef0123456789")
    assert "unauthorised" in line and api.kube.count("pytorchjobs") == 0


def test_403_names_the_object_and_the_permission(api: KubeAPI, target: Target, rendered: Render) -> None:
    api.kube.forbidden.add(("patch", "pytorchjobs"))
    with pytest.raises(ClusterError) as info:
        submit_manifests(rendered(), target)
    line = one_line(info.value, api.kube.token)
    assert line.startswith(f"error: cluster: pytorchjobs/{NS}/{NAME}: forbidden: ")
    assert "cannot patch" in line


def test_404_when_the_crd_is_not_installed_says_so(api: KubeAPI, target: Target, rendered: Render) -> None:
    api.kube.crd_installed = False
    with pytest.raises(ClusterError) as info:
        submit_manifests(rendered(), target)
    assert "does not serve kubeflow.org/v1 pytorchjobs" in one_line(info.value, api.kube.token)
    assert "training operator" in (info.value.hint or "")


def test_404_for_a_missing_namespace_names_it(api: KubeAPI, target: Target, rendered: Render) -> None:
    api.kube.namespaces.discard(NS)
    with pytest.raises(ClusterError) as info:
        submit_manifests(rendered(), target)
    assert f'namespaces "{NS}" not found' in one_line(info.value, api.kube.token)


def test_409_conflict_is_one_line(api: KubeAPI, target: Target, rendered: Render) -> None:
    api.kube.inject(
        409,
        method="PATCH",
        body={
            "kind": "Status",
            "code": 409,
            "reason": "Conflict",
            "message": "Apply failed with 1 conflict",
            "details": {
                "causes": [
                    {
                        "reason": "FieldManagerConflict",
                        "field": ".spec.runPolicy",
                        "message": 'conflict with "kubectl": .spec.runPolicy',
                    }
                ]
            },
        },
    )
    with pytest.raises(ClusterError) as info:
        submit_manifests(rendered(), target)
    assert 'conflict: conflict with "kubectl": .spec.runPolicy' in one_line(info.value, api.kube.token)


def test_422_maps_the_servers_causes_back_to_the_profile_field(
    api: KubeAPI, target: Target, rendered: Render
) -> None:
    manifests = rendered()
    pytorch_container(manifests[0], "Master")["image"] = 42
    with pytest.raises(ClusterError) as info:
        submit_manifests(manifests, target)
    line = one_line(info.value, api.kube.token)
    assert "invalid: spec.pytorchReplicaSpecs.Master.template.spec.containers[0].image:" in line
    assert "profile's `image`" in (info.value.hint or "")
    assert api.kube.count("pytorchjobs") == 0


def test_422_of_a_template_field_points_at_the_engineers(
    api: KubeAPI, target: Target, rendered: Render
) -> None:
    manifests = rendered()
    manifests[0]["spec"]["runPolicy"]["backoffLimit"] = "three"
    with pytest.raises(ClusterError) as info:
        submit_manifests(manifests, target)
    assert "spec.runPolicy.backoffLimit" in one_line(info.value, api.kube.token)
    assert "preset or template" in (info.value.hint or "")


def test_strict_field_validation_refuses_an_unknown_field_with_400(
    api: KubeAPI, target: Target, rendered: Render
) -> None:
    manifests = rendered()
    manifests[0]["spec"]["runPolicy"]["backofLimit"] = 3
    with pytest.raises(ClusterError) as info:
        submit_manifests(manifests, target)
    line = one_line(info.value, api.kube.token)
    assert "bad request" in line and ".spec.runPolicy.backofLimit: field not declared" in line
    assert api.kube.count("pytorchjobs") == 0


def test_a_refused_connection_is_one_line_without_retries(
    unreachable: tuple[Path, str], sleeps: Sleeps, rendered: Render
) -> None:
    config, token = unreachable
    with pytest.raises(ClusterError) as info:
        submit_manifests(rendered(), Target(kubeconfig=config, sleep=sleeps, retry=RetryPolicy(attempts=3)))
    line = one_line(info.value, token)
    assert "cannot connect to http://127.0.0.1:" in line and "connection refused" in line
    assert sleeps == []  # nothing listens: only what can recover (429/503, timeouts) is retried


def test_a_missing_kubeconfig_or_context_is_one_line(
    api: KubeAPI, kubeconfig: Path, tmp_path: Path, rendered: Render
) -> None:
    with pytest.raises(ClusterError) as info:
        submit_manifests(rendered(), Target(kubeconfig=tmp_path / "nope"))
    assert "no kubeconfig found" in one_line(info.value, api.kube.token)
    with pytest.raises(InputError) as bad:  # bad input (exit 2), not a cluster error
        submit_manifests(rendered(), Target(kubeconfig=kubeconfig, context="prod"))
    assert bad.value.exit_code == 2
    assert "context 'prod' not in the kubeconfig" in bad.value.lines()[0]
    garbage = tmp_path / "garbage"
    garbage.write_text(f"users: [{{token: {api.kube.token}}}]\n")
    with pytest.raises(ClusterError) as info:
        submit_manifests(rendered(), Target(kubeconfig=garbage))
    assert "cannot use the kubeconfig" in one_line(info.value, api.kube.token)
    assert api.kube.requests == []


def test_kubeconfig_comes_from_the_environment_when_not_given(
    api: KubeAPI, kubeconfig: Path, sleeps: Sleeps, rendered: Render
) -> None:
    submit_manifests(rendered(), Target(sleep=sleeps))  # KUBECONFIG set by the fixture
    assert api.kube.count("pytorchjobs") == 1


def with_configmap(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    job = manifests[0]
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{NAME}-preflight", "namespace": NS, "labels": dict(job["metadata"]["labels"])},
        "data": {"preflight.py": "print('ok')\n"},
    }
    return [configmap, job]


def test_a_config_map_and_its_job_are_submitted_together_and_idempotently(
    api: KubeAPI, target: Target, rendered: Render
) -> None:
    result = submit_manifests(with_configmap(rendered()), target)
    assert [(o.ref, o.action) for o in result.outcomes] == [
        (f"configmaps/{NS}/{NAME}-preflight", "created"),
        (f"pytorchjobs/{NS}/{NAME}", "created"),
    ]
    again = submit_manifests(with_configmap(rendered()), target)
    assert [o.action for o in again.outcomes] == ["unchanged", "unchanged"]
    assert api.kube.count("configmaps") == 1 and api.kube.count("pytorchjobs") == 1


def test_an_invalid_job_leaves_no_config_map_behind(api: KubeAPI, target: Target, rendered: Render) -> None:
    manifests = with_configmap(rendered())
    manifests[1]["spec"]["runPolicy"]["backoffLimit"] = "three"
    with pytest.raises(ClusterError, match="spec.runPolicy.backoffLimit"):
        submit_manifests(manifests, target)
    assert api.kube.count("configmaps") == 0 and api.kube.writes() == []
