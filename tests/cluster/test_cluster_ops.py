"""status, logs, delete and diff --live against the fake API server; secrets stay out of output."""

from __future__ import annotations

import http.client
import logging
from pathlib import Path
from typing import Any

import pytest

from kube_helpers import NAME, NS, Render, live_job, put_foreign_job
from kubeapi import KubeAPI
from runai_spec import cluster
from runai_spec.cluster import Target, delete_job, job_ref, job_status, live_objects_all, save_logs
from runai_spec.errors import ClusterError
from runai_spec.outputs.diff import diff_live

pytest_plugins = ("kube_fixtures",)


def running_job(
    api: KubeAPI, rendered: Render, conditions: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    cluster.submit_manifests(rendered(), Target(kubeconfig=None, sleep=lambda s: None))
    job = live_job(api)
    job["status"] = {
        "conditions": conditions
        if conditions is not None
        else [
            {"type": "Created", "status": "True", "message": "PyTorchJob llm-7b-fsdp is created."},
            {"type": "Running", "status": "True", "message": "PyTorchJob llm-7b-fsdp is running."},
        ]
    }
    return job


# --- status ----------------------------------------------------------------------------


def test_status_reports_the_phase_and_each_pod_in_rank_order(
    api: KubeAPI, target: Target, rendered: Render
) -> None:
    running_job(api, rendered)
    api.kube.add_pod(NAME, NS, "worker", 0, restarts=2)
    api.kube.add_pod(NAME, NS, "master", 0)
    api.kube.add_pod("other-job", NS, "master", 0)
    status = job_status(NAME, NS, target)
    assert status.phase == "Running" and "is running" in (status.message or "")
    assert [(p.name, p.role, p.index, p.state) for p in status.pods] == [
        (f"{NAME}-master-0", "master", 0, "running"),
        (f"{NAME}-worker-0", "worker", 0, "running"),
    ]
    assert status.pods[1].restarts == 2 and status.pending_reasons == ()
    pods_request = next(r for r in api.kube.requests if r.path.endswith("/pods"))
    assert pods_request.query["labelSelector"] == [f"training.kubeflow.org/job-name={NAME}"]


def test_a_finished_job_reports_its_last_condition(api: KubeAPI, target: Target, rendered: Render) -> None:
    running_job(
        api,
        rendered,
        [
            {"type": "Created", "status": "True"},
            {"type": "Running", "status": "False"},
            {"type": "Failed", "status": "True", "message": "Master failed"},
        ],
    )
    api.kube.add_pod(
        NAME, NS, "master", 0, phase="Failed", state={"terminated": {"exitCode": 1, "reason": "Error"}}
    )
    status = job_status(NAME, NS, target)
    assert status.phase == "Failed" and status.pods[0].state == "terminated: exit 1 (Error)"


@pytest.mark.parametrize(
    ("reason", "message", "words"),
    [
        (
            "Unschedulable",
            "NonPreemptibleOverQuota: project nlp-lab quota is 8 GPUs, requested 16",
            "over the project's GPU quota",
        ),
        (
            "FailedScheduling",
            "0/12 nodes are available: 12 node(s) didn't match Pod's node affinity/selector.",
            "no node of the requested node pool",
        ),
        (
            "FailedScheduling",
            "0/12 nodes are available: 12 Insufficient nvidia.com/gpu.",
            "not enough free GPUs on any node",
        ),
        (
            "FailedScheduling",
            "0/3 nodes are available: 3 Insufficient memory.",
            "not enough free memory on any node",
        ),
        ("FailedScheduling", 'persistentvolumeclaim "nlp-lab-ckpt" not found', "a volume claim is missing"),
    ],
)
def test_a_pending_pod_says_why_in_plain_words(
    api: KubeAPI, target: Target, rendered: Render, reason: str, message: str, words: str
) -> None:
    running_job(api, rendered, [{"type": "Created", "status": "True"}])
    api.kube.add_pod(NAME, NS, "master", 0, phase="Pending")
    api.kube.add_event(NS, f"{NAME}-master-0", reason, message)
    api.kube.add_event(NS, "someone-else-0", "FailedScheduling", "unrelated quota message")
    status = job_status(NAME, NS, target)
    assert status.phase == "Created"
    (pod,) = status.pods
    assert pod.phase == "Pending" and pod.reason is not None and pod.reason.startswith(words)
    assert any(words in r for r in status.pending_reasons)
    assert "unrelated" not in " ".join(status.pending_reasons)


def test_a_pending_pod_without_events_uses_its_scheduling_condition(
    api: KubeAPI, target: Target, rendered: Render
) -> None:
    running_job(api, rendered, [])
    api.kube.add_pod(
        NAME,
        NS,
        "master",
        0,
        phase="Pending",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "node pool h200-ib has no free nodes",
            }
        ],
    )
    status = job_status(NAME, NS, target)
    assert status.phase == "Pending"
    assert (status.pods[0].reason or "").startswith("no node of the requested node pool")


def test_an_image_that_cannot_be_pulled_is_named(api: KubeAPI, target: Target, rendered: Render) -> None:
    running_job(api, rendered)
    api.kube.add_pod(
        NAME, NS, "master", 0, phase="Pending", state={"waiting": {"reason": "ImagePullBackOff"}}
    )
    assert "image cannot be pulled" in (job_status(NAME, NS, target).pods[0].reason or "")


def test_job_events_explain_a_job_without_pods(api: KubeAPI, target: Target, rendered: Render) -> None:
    running_job(api, rendered, [])
    api.kube.add_event(NS, NAME, "Unschedulable", "project nlp-lab is over quota", kind="PyTorchJob")
    status = job_status(NAME, NS, target)
    assert status.pods == () and status.pending_reasons[0].startswith("over the project's GPU quota")


def test_status_of_a_missing_job_is_one_line(api: KubeAPI, target: Target) -> None:
    with pytest.raises(ClusterError) as info:
        job_status("nope", NS, target)
    assert info.value.lines()[0] == f"error: cluster: pytorchjobs/{NS}/nope: not found"
    api.kube.crd_installed = False
    with pytest.raises(ClusterError) as info:
        job_status("nope", NS, target)
    assert "does not serve kubeflow.org/v1 pytorchjobs" in info.value.lines()[0]


# --- logs ------------------------------------------------------------------------------


def test_logs_saves_every_rank_in_its_own_file(
    api: KubeAPI, target: Target, rendered: Render, tmp_path: Path
) -> None:
    running_job(api, rendered)
    for role, index in (("master", 0), ("worker", 0)):
        api.kube.add_pod(NAME, NS, role, index)
        api.kube.logs[(NS, f"{NAME}-{role}-{index}", False)] = f"{role} {index} says hi\n" * 5000
    result = save_logs(NAME, NS, tmp_path / "logs", target)
    assert [s.path.name for s in result.saved] == [f"{NAME}-master-0.log", f"{NAME}-worker-0.log"]
    assert (tmp_path / "logs" / f"{NAME}-worker-0.log").read_text() == "worker 0 says hi\n" * 5000
    assert result.saved[0].size == len("master 0 says hi\n") * 5000
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == [s.path.name for s in result.saved]
    log_request = next(r for r in api.kube.requests if r.path.endswith("/log"))
    assert log_request.query["container"] == ["pytorch"] and "previous" not in log_request.query


def test_logs_previous_reads_the_restarted_container_and_skips_pods_without_one(
    api: KubeAPI, target: Target, rendered: Render, tmp_path: Path
) -> None:
    running_job(api, rendered)
    api.kube.add_pod(NAME, NS, "master", 0, restarts=1)
    api.kube.add_pod(NAME, NS, "worker", 0)
    api.kube.logs[(NS, f"{NAME}-master-0", True)] = "CUDA error: out of memory\n"
    result = save_logs(NAME, NS, tmp_path, target, previous=True)
    assert [s.path.name for s in result.saved] == [f"{NAME}-master-0.previous.log"]
    assert (tmp_path / f"{NAME}-master-0.previous.log").read_text() == "CUDA error: out of memory\n"
    assert [pod for pod, _ in result.skipped] == [f"{NAME}-worker-0"]
    assert "previous terminated container" in result.skipped[0][1]


def test_logs_of_a_job_without_pods_is_one_line_and_writes_nothing(
    api: KubeAPI, target: Target, rendered: Render, tmp_path: Path
) -> None:
    with pytest.raises(ClusterError) as info:
        save_logs(NAME, NS, tmp_path / "logs", target)
    assert info.value.lines()[0] == f"error: cluster: pytorchjobs/{NS}/{NAME}: not found"
    running_job(api, rendered)
    with pytest.raises(ClusterError) as info:
        save_logs(NAME, NS, tmp_path / "logs", target)
    assert info.value.lines()[0] == f"error: cluster: pytorchjobs/{NS}/{NAME}: has no pods (yet, or any more)"
    assert info.value.lines()[1].startswith("hint: ")
    assert not (tmp_path / "logs").exists()


def test_a_dropped_log_request_is_retried_and_the_file_is_whole(
    api: KubeAPI, target: Target, rendered: Render, tmp_path: Path
) -> None:
    running_job(api, rendered)
    api.kube.add_pod(NAME, NS, "master", 0)
    api.kube.logs[(NS, f"{NAME}-master-0", False)] = "step 1\nstep 2\n"
    api.kube.inject(path_contains="/log", drop=True)
    save_logs(NAME, NS, tmp_path / "logs", target)
    assert len([r for r in api.kube.sent("GET") if r.path.endswith("/log")]) == 2
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == [f"{NAME}-master-0.log"]
    assert (tmp_path / "logs" / f"{NAME}-master-0.log").read_text() == "step 1\nstep 2\n"


# --- delete ----------------------------------------------------------------------------


def test_delete_removes_the_job_with_a_uid_precondition(
    api: KubeAPI, target: Target, rendered: Render
) -> None:
    job = running_job(api, rendered)
    api.kube.add_pod(NAME, NS, "master", 0)
    result = delete_job([job_ref(NAME, NS)], target)
    assert result.deleted == (f"pytorchjobs/{NS}/{NAME}",)
    assert api.kube.count("pytorchjobs") == 0 and api.kube.count("pods") == 0
    (delete,) = api.kube.sent("DELETE")
    assert job["metadata"]["uid"] in delete.body.decode()


def test_delete_never_touches_a_foreign_object_or_a_missing_one(api: KubeAPI, target: Target) -> None:
    put_foreign_job(api)
    with pytest.raises(ClusterError, match="was not created by runai-spec; not touched"):
        delete_job([job_ref(NAME, NS)], target)
    with pytest.raises(ClusterError, match="not found"):
        delete_job([job_ref("missing", NS)], target)
    assert api.kube.writes() == [] and api.kube.count("pytorchjobs") == 1


def test_a_delete_whose_answer_was_lost_is_read_back(api: KubeAPI, target: Target, rendered: Render) -> None:
    running_job(api, rendered)
    api.kube.inject(method="DELETE", drop=True, commit=True)
    result = delete_job([job_ref(NAME, NS)], target)
    assert result.deleted == (f"pytorchjobs/{NS}/{NAME}",) and api.kube.count("pytorchjobs") == 0
    methods = [r.method for r in api.kube.requests]
    assert methods.count("DELETE") == 1 and methods[methods.index("DELETE") + 1] == "GET"


def test_delete_when_forbidden_is_one_line(api: KubeAPI, target: Target, rendered: Render) -> None:
    running_job(api, rendered)
    api.kube.forbidden.add(("delete", "pytorchjobs"))
    with pytest.raises(ClusterError) as info:
        delete_job([job_ref(NAME, NS)], target)
    assert info.value.lines()[0].startswith(f"error: cluster: pytorchjobs/{NS}/{NAME}: forbidden: ")
    assert api.kube.count("pytorchjobs") == 1


# --- diff --live -----------------------------------------------------------------------


def live_diff(manifests: list[dict[str, Any]], target: Target) -> Any:
    (objects,) = live_objects_all([manifests], target)
    return diff_live("p.yaml", manifests, [(o.live, o.applied) for o in objects])


def test_live_diff_ignores_server_managed_fields(api: KubeAPI, target: Target, rendered: Render) -> None:
    before = live_diff(rendered(), target)
    assert [o.status for o in before.objects] == ["added"]
    running_job(api, rendered)  # adds status, uid, managedFields, resourceVersion
    after = live_diff(rendered(), target)
    assert after.objects == ()
    assert api.kube.writes() == [r for r in api.kube.writes() if r.method == "PATCH"][:1]


def test_live_diff_shows_what_a_changed_render_would_change(
    api: KubeAPI, target: Target, rendered: Render
) -> None:
    running_job(api, rendered)
    manifests = rendered()
    manifests[0]["spec"]["runPolicy"]["backoffLimit"] = 9
    (change,) = live_diff(manifests, target).objects
    assert change.status == "changed"
    assert [ln for ln in change.diff.splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")] == [
        "-    backoffLimit: 5",
        "+    backoffLimit: 9",
    ]
    dry = [r for r in api.kube.requests if r.method == "PATCH" and "dryRun" in r.query]
    assert dry and all(r.query["dryRun"] == ["All"] for r in dry)


# --- secrets ---------------------------------------------------------------------------


def test_debug_output_never_carries_the_token(
    api: KubeAPI, target: Target, rendered: Render, capfd: pytest.CaptureFixture[str]
) -> None:
    cluster.enable_debug()
    try:
        logging.getLogger("urllib3").debug("Authorization: Bearer %s", api.kube.token)
        cluster.submit_manifests(rendered(), target)
        api.kube.forbidden.add(("get", "pytorchjobs"))
        with pytest.raises(ClusterError) as info:
            job_status(NAME, NS, target)
        assert http.client.HTTPConnection.debuglevel == 0
    finally:
        for name in ("runai_spec", "urllib3"):
            logger = logging.getLogger(name)
            logger.handlers.clear()
            logger.setLevel(logging.NOTSET)
    out, err = capfd.readouterr()
    assert "debug: runai_spec.cluster: PATCH /apis/kubeflow.org/v1" in err
    assert api.kube.token not in out + err + str(info.value)


def test_clean_redacts_credentials_but_keeps_field_paths() -> None:
    text = cluster.clean(
        "Bearer abc.def token=s3cr3t eyJhbGciOi.eyJzdWIi.c2lnbmF0dXJl "
        "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].image\x1b[31m"
    )
    assert "abc.def" not in text and "s3cr3t" not in text and "eyJzdWIi" not in text
    assert "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].image" in text
    assert "\x1b" not in text
