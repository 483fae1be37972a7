"""plan PROFILE: next to the GPUs it asks for, the ticket shows what the latest rehearsal measured
of the script's steps (the bottleneck and scaling rows, issue 24), or that nothing was measured."""

from __future__ import annotations

from pathlib import Path

from conftest import ROOT, run
from runai_spec.pipeline.workload import prepare_workload
from runai_spec.rehearse.bottleneck import ScalingPoint, bottleneck_row, measures, scaling_row
from runai_spec.rehearse.records import RehearsalRecord, read_record, write_record

MULTI = ROOT / "examples" / "multi-node" / "profile.yaml"
HEADING = "## Measured before scaling (16 processes asked for)\n\n"


def _section(md: str) -> str:
    return md.split(HEADING, 1)[1].split("\n## ", 1)[0]


def _record(tmp_path: Path, measured: dict[str, object]) -> None:
    workload = prepare_workload(MULTI)
    write_record(
        RehearsalRecord(
            project=workload.plan.project,
            name=workload.plan.name,
            profile=str(MULTI),
            profile_sha256=workload.loaded.sha256,
            ok=True,
            world_size=2,
            backend="gloo",
            options=("--own-script", "--scaling 1,2"),
            checks=(("ranks", "pass", "2 ranks"),),
            logs_dir=str(tmp_path),
            measures=measured,
        )
    )


def test_without_a_measurement_the_ticket_says_how_to_measure() -> None:
    md = run("plan", str(MULTI)).stdout
    assert md.index(HEADING) < md.index("## Batch arithmetic")  # beside the topology asked for
    assert _section(md).startswith(
        "**not measured**: `runai-spec rehearse PROFILE --own-script --scaling 1,2,4`"
    )


def test_the_ticket_shows_the_verdict_and_the_scaling_efficiency(tmp_path: Path) -> None:
    steps = [[0.1, 0.041, 0.0, 0.0]] * 8
    rows = [
        bottleneck_row([{"event": "steps", "rank": 0, "pid": 1, "first": 0, "times": steps}], gpus=1),
        scaling_row(
            [
                ScalingPoint(1, 2, {"steps_per_s_per_process": 10.0, "verdict": "input"}, "/l"),
                ScalingPoint(2, 4, {"steps_per_s_per_process": 6.0, "verdict": "input"}, "/l/scaling-2"),
            ],
            "2 CPU cores",
        ),
    ]
    _record(tmp_path, measures(rows))
    record = read_record("nlp-lab", "llm-7b-fsdp", str(MULTI))
    assert isinstance(record, RehearsalRecord) and record.measures["bottleneck"]["verdict"] == "input"
    section = _section(run("plan", str(MULTI)).stdout)
    assert "- bottleneck: **input**: input-bound: 41 % of each step waits for data; more GPUs" in section
    assert "- scaling: scaling efficiency on this machine (2 CPU cores)" in section
    assert "| 2 | 4 | 6.00 | 60 % | input |" in section


def test_the_ticket_never_copies_a_figure_the_scaling_row_refused(tmp_path: Path) -> None:
    """Issue 42 item 2: a script that divides the global batch by the world size once reached
    the ticket as "460 %"; now its row refuses the efficiency and the table says why."""

    def point(steps_per_s: float, per_step: float) -> dict[str, object]:
        return {
            "steps_per_s_per_process": steps_per_s,
            "samples_per_step_per_process": per_step,
            "samples_per_s_per_process": steps_per_s * per_step,
            "verdict": "input",
        }

    measured, halved = point(10.0, 32.0), point(46.0, 8.0)
    row = scaling_row(
        [ScalingPoint(1, 2, measured, "/l"), ScalingPoint(2, 4, halved, "/l/scaling-2")], "2 CPU cores"
    )
    _record(tmp_path, measures([row]))
    section = _section(run("plan", str(MULTI)).stdout)
    assert "| processes per pod | world | samples/s per process | efficiency | bottleneck |" in section
    assert "| 1 | 2 | 320.00 | 100 % | input |" in section
    assert (
        "| 2 | 4 | 368.00 | 115 % of the baseline, not an efficiency: the per-process batch changed"
        in section
    )
    assert "460" not in section
    # a record written before the row refused such figures: never shown bare
    old = {
        "status": "note",
        "message": "scaling efficiency ...",
        "runs": [
            {
                "procs_per_pod": 1,
                "world": 2,
                "steps_per_s_per_process": 10.0,
                "efficiency": 1.0,
                "verdict": "input",
            },
            {
                "procs_per_pod": 2,
                "world": 4,
                "steps_per_s_per_process": 46.0,
                "efficiency": 4.6,
                "verdict": "input",
            },
        ],
    }
    _record(tmp_path, {"scaling": old})
    section = _section(run("plan", str(MULTI)).stdout)
    assert "| 2 | 4 | 46.00 | 460 % of the baseline, not an efficiency: above 100 % | input |" in section
    assert "| 460 % |" not in section


def test_profiles_of_one_name_keep_their_own_record_and_a_scaling_series_outlives_later_rehearsals(
    tmp_path: Path,
) -> None:
    """Issue 42 item 8: the record was keyed by project and name: three profiles of one name
    overwrote each other, and a later rehearsal without --scaling dropped the scaling table."""
    copy = tmp_path / "other" / "profile.yaml"
    copy.parent.mkdir()
    copy.write_text(MULTI.read_text())
    measured = {"steps_per_s_per_process": 10.0, "verdict": "input"}
    row = scaling_row([ScalingPoint(1, 2, measured, "/l"), ScalingPoint(2, 4, measured, "/l/scaling-2")], "x")
    _record(tmp_path, measures([row]))  # the example's own profile, with --scaling
    assert "not measured" in _section(run("plan", str(copy)).stdout)  # the other profile's: none
    assert "| 2 | 4 | 10.00 | 100 % | input |" in _section(run("plan", str(MULTI)).stdout)
    # a later rehearsal of the same profile without --scaling keeps the series, said as earlier
    _record(tmp_path / "later", {})
    section = _section(run("plan", str(MULTI)).stdout)
    assert "| 2 | 4 | 10.00 | 100 % | input |" in section
    assert "(measured by an earlier rehearsal, at " in section and str(tmp_path) in section
