"""What `rehearse` shows: the table on stdout or JSON, a status line on a terminal only, and a
crashed pod's last error lines in its row (fake results and short processes: no torch)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from conftest import ROOT
from runai_spec import rehearse as rehearse_module
from runai_spec.cli import app
from runai_spec.cli import rehearse as rehearse_cli
from runai_spec.rehearse import CheckResult, PodOutcome, PodPlan, RehearseResult, aggregate
from runai_spec.rehearse.processes import progress_line, run_attempt

PROFILE = str(ROOT / "examples/multi-node/profile.yaml")


def fake_result(logs: Path) -> RehearseResult:
    checks = (
        CheckResult("ranks", "pass", "4 of 4 ranks reported"),
        CheckResult("pods", "pass", "2 pod(s) exited 0"),
    )
    pods = (PodOutcome("master-0", 0, 0, False, False, logs / "master-0" / "pod.log", 0),)
    return RehearseResult(True, checks, pods, logs, 4, "gloo", False)


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """rehearse_manifests replaced by a fake that records its keywords and reports progress
    when given a callback; the rehearsal record lands in tmp_path."""
    seen: list[dict[str, Any]] = []

    def rehearse_manifests(manifests: list[Any], spec: Any) -> RehearseResult:
        kw = vars(spec)
        seen.append(kw)
        if kw.get("progress") is not None:
            kw["progress"]("pods up 2/2 | r0:ranks | 1/300 s")
        return fake_result(tmp_path / "logs")

    monkeypatch.setattr(rehearse_module, "rehearse_manifests", rehearse_manifests)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "200")
    return seen


def test_the_table_goes_to_stdout_and_the_logs_paths_to_stderr(
    calls: list[dict[str, Any]], tmp_path: Path
) -> None:
    result = CliRunner().invoke(app, ["rehearse", PROFILE])
    assert result.exit_code == 0, result.output
    assert "│ ranks " in result.stdout and "│ pods " in result.stdout
    assert "│" not in result.stderr
    assert f"logs: {tmp_path / 'logs'}" in result.stderr and "logs:" not in result.stdout
    assert calls[0]["progress"] is None  # CliRunner's stderr is no terminal


def test_format_json_prints_the_result_on_stdout(calls: list[dict[str, Any]]) -> None:
    result = CliRunner().invoke(app, ["rehearse", PROFILE, "--format", "json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["ok"] is True and shown["world_size"] == 4
    assert [c["check"] for c in shown["checks"]] == ["ranks", "pods"]
    assert shown["pods"][0]["pod"] == "master-0"
    assert "│" not in result.output


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_status_line_is_shown_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    show, clear = rehearse_cli._status_line()
    assert show is None
    clear()
    assert pipe.getvalue() == ""

    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    show, clear = rehearse_cli._status_line()
    assert show is not None
    show("pods up 1/2 | 0/60 s")
    show("pods up 2/2 | r0:ranks | 1/60 s")
    clear()
    # rewritten in place, and gone before the table comes
    assert terminal.getvalue() == (
        "\r\x1b[Kpods up 1/2 | 0/60 s\r\x1b[Kpods up 2/2 | r0:ranks | 1/60 s\r\x1b[K"
    )


def _plan(tmp_path: Path, name: str, rank: int, code: str) -> PodPlan:
    log_dir = tmp_path / name
    log_dir.mkdir(parents=True)
    return PodPlan(name, "Worker", rank, rank, (sys.executable, "-c", code), {}, tmp_path, log_dir)


def test_run_attempt_reports_pods_up_each_ranks_last_check_and_the_time(tmp_path: Path) -> None:
    say = (
        "import json, time\n"
        "for check in ('ranks', 'world-size'):\n"
        "    print('PREFLIGHT ' + json.dumps({'check': check, 'status': 'pass', "
        "'rank': {rank}}), flush=True)\n"
        "time.sleep({sleep})\n"
    )
    plans = [
        _plan(tmp_path, "master-0", 0, say.replace("{rank}", "0").replace("{sleep}", "2.5")),
        _plan(tmp_path, "worker-0", 1, say.replace("{rank}", "1").replace("{sleep}", "0")),
    ]
    lines: list[str] = []
    run_attempt(plans, 0, 30, progress=lines.append)
    assert 2 <= len(lines) <= 4, lines  # about once a second
    assert lines[0].startswith("pods up ") and lines[0].endswith("/30 s")
    assert lines[-1].startswith("pods up 1/2 | r0:world-size r1:world-size | "), lines
    assert run_attempt(plans[1:], 1, 30).outcomes[0].exit_code == 0  # no callback: none needed


def test_progress_line_without_records_says_pods_and_time_only(tmp_path: Path) -> None:
    assert progress_line([], 2, 3.4, 60) == "pods up 0/2 | 3/60 s"


def test_a_crashed_pods_row_ends_with_its_ranks_last_error_lines(tmp_path: Path) -> None:
    rank_logs = tmp_path / "ranks" / "run"
    (rank_logs / "attempt_0" / "0").mkdir(parents=True)
    (rank_logs / "attempt_0" / "0" / "stderr.log").write_text("")  # a rank that said nothing
    (rank_logs / "attempt_0" / "1").mkdir(parents=True)
    (rank_logs / "attempt_0" / "1" / "stderr.log").write_text(
        'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n'
        '    main()\n\n  File "train.py", line 2, in main\n'
        "ValueError: bad \x1b[31mbatch\tsize\n\n"
    )
    pod_log = tmp_path / "pod.log"
    pod_log.write_text("# argv: []\n")
    crashed = PodOutcome("worker-0", 1, 1, False, False, pod_log, 0, rank_logs)
    fine = PodOutcome("master-0", 0, 0, False, False, tmp_path / "m.log", 0)
    row = next(c for c in aggregate([], 2, [fine, crashed], 60, True) if c.check == "pods")
    assert row.status == "fail"
    assert row.message.startswith("worker-0: crashed with exit 1: see ")
    assert (
        '; last lines:     main() |   File "train.py", line 2, in main | '
        "ValueError: bad \\x1b[31mbatch\\tsize; master-0:"
    ) in row.message
    assert "\n" not in row.message and "\x1b" not in row.message


def test_a_crashed_pod_without_rank_logs_shows_the_end_of_its_pod_log(tmp_path: Path) -> None:
    pod_log = tmp_path / "pod.log"
    pod_log.write_text("# argv: []\n# cwd: /x\nstarting\nRuntimeError: no GPU\n")
    crashed = PodOutcome("master-0", 0, 1, False, False, pod_log, 0)
    row = next(c for c in aggregate([], 1, [crashed], 60, True) if c.check == "pods")
    assert row.message.endswith("; last lines: starting | RuntimeError: no GPU")


def test_a_pod_that_raises_shows_its_traceback_end_in_the_pods_row(tmp_path: Path) -> None:
    plans = [_plan(tmp_path, "master-0", 0, "def main():\n    raise ValueError('boom')\nmain()\n")]
    run = run_attempt(plans, 0, 30)
    row = next(c for c in aggregate(run.lines, 1, run.outcomes, 30, True) if c.check == "pods")
    assert row.status == "fail" and row.message.startswith("master-0: crashed with exit 1: see ")
    assert row.message.endswith(
        '; last lines:   File "<string>", line 3, in <module> |   File '
        '"<string>", line 2, in main | ValueError: boom'
    ), row.message


def test_a_profile_with_error_findings_is_refused_before_anything_runs(
    calls: list[dict[str, Any]], tmp_path: Path
) -> None:
    # issue 23, item 3: `env: {LD_PRELOAD: ./x.so}` is refused by validate, and rehearse loaded
    # the library on this machine
    text = (ROOT / "examples/multi-node/profile.yaml").read_text(encoding="utf-8")
    assert "\nenv:\n" in text
    profile = tmp_path / "profile.yaml"
    profile.write_text(text.replace("\nenv:\n", "\nenv:\n  LD_PRELOAD: ./x.so\n"), encoding="utf-8")
    result = CliRunner().invoke(app, ["rehearse", str(profile)])
    assert result.exit_code == 1, result.output
    assert calls == []  # nothing rehearsed
    assert "env.LD_PRELOAD: LD_PRELOAD configures" in result.stderr
    assert f"{profile}: 1 error finding(s): nothing was run" in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "cache" / "runai-spec" / "rehearsals").exists()  # no record either
