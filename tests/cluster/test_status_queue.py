"""status shows the queue time apart (issue 40 item 2): from the operator's status.startTime,
set while the pods are Pending, to the last pod's PodScheduled condition."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kube_helpers import NAME, NS, Render, live_job
from kubeapi import KubeAPI
from runai_spec import cluster
from runai_spec.cluster import Target, job_status
from runai_spec.cluster.status import queue_time
from runai_spec.outputs.report import status_lines

pytest_plugins = ("kube_fixtures",)

START = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)


def _at(seconds: float) -> str:
    return (START + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def _scheduled(seconds: float) -> list[dict[str, str]]:
    return [{"type": "PodScheduled", "status": "True", "lastTransitionTime": _at(seconds)}]


def test_status_shows_the_queue_time_to_the_last_pod_placed(
    api: KubeAPI, target: Target, rendered: Render
) -> None:
    cluster.submit_manifests(rendered(), Target(kubeconfig=None, sleep=lambda s: None))
    job = live_job(api)
    job["status"] = {"startTime": _at(0), "conditions": [{"type": "Running", "status": "True"}]}
    api.kube.add_pod(NAME, NS, "master", 0, conditions=_scheduled(120))
    api.kube.add_pod(NAME, NS, "worker", 0, conditions=_scheduled(2460))
    status = job_status(NAME, NS, target)
    assert status.queue is not None and status.queue.seconds == 2460 and status.queue.waiting == 0
    assert "  queued 41 min 0 s before its last pod was placed" in status_lines(status)


def test_a_pod_still_pending_makes_the_queue_time_so_far() -> None:
    job = {"status": {"startTime": _at(0)}}
    pods = [
        {"status": {"conditions": _scheduled(60)}},
        {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}},
    ]
    q = queue_time(job, pods, START + timedelta(seconds=3000))
    assert q is not None and q.seconds == 3000 and q.waiting == 1
    # no start time from the operator yet, or a wrong type: no queue time, never a traceback
    assert queue_time({"status": {}}, pods, START) is None
    assert queue_time({"status": {"startTime": 7}}, pods, START) is None
