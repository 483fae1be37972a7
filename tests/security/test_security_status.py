"""Issue 12: status never prints a server's terminal escapes, nor crashes on odd counts."""

from __future__ import annotations

from runai_spec.cluster.status import _pod_state


def test_a_waiting_reason_with_terminal_escapes_is_cleaned() -> None:
    pod = {
        "status": {
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "restartCount": 1,
                    "state": {"waiting": {"reason": "Bad\x1b]0;pwned\x07\x1b[2JReason"}},
                }
            ]
        }
    }
    state, restarts = _pod_state(pod)
    assert "\x1b" not in state and "\x07" not in state and restarts == 1


def test_a_restart_count_that_is_not_a_number_does_not_crash() -> None:
    pod = {
        "status": {
            "containerStatuses": [{"name": "pytorch", "restartCount": "many", "state": {"running": {}}}]
        }
    }
    assert _pod_state(pod) == ("running", 0)


def test_the_job_phase_from_a_condition_type_is_cleaned() -> None:
    from runai_spec.cluster.status import _phase

    job = {
        "status": {
            "conditions": [
                {"type": "Running\x1b]8;;http://evil\x07\x1b[2J", "status": "True", "message": "ok\x1b[31m"}
            ]
        }
    }
    phase, message = _phase(job)
    assert "\x1b" not in phase + (message or "") and "\x07" not in phase
    assert phase.startswith("Running")
