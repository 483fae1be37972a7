"""Issue 12: status never prints a server's terminal escapes, nor crashes on odd counts."""

from __future__ import annotations

from runai_spec.cluster.status import _pod_state


def test_a_waiting_reason_with_terminal_escapes_is_cleaned() -> None:
    pod = {"status": {"containerStatuses": [
        {"name": "pytorch", "restartCount": 1,
         "state": {"waiting": {"reason": "Bad\x1b]0;pwned\x07\x1b[2JReason"}}}]}}
    state, restarts = _pod_state(pod)
    assert "\x1b" not in state and "\x07" not in state and restarts == 1


def test_a_restart_count_that_is_not_a_number_does_not_crash() -> None:
    pod = {"status": {"containerStatuses": [
        {"name": "pytorch", "restartCount": "many", "state": {"running": {}}}]}}
    assert _pod_state(pod) == ("running", 0)
