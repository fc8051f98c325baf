"""A rank's own Flight Recorder status behind a collective its peer completed, at a clean exit
(tests/fixtures/flight_recorder/gloo-exit-lag, truth in its README): the header counts the call as
finished, as the findings do, and says why the rank's status read less. Its twin: gloo/healthy, where
no member finished the last call, keeps it unfinished in the header and the finding."""

from __future__ import annotations

from pathlib import Path

from ncclprobe.diagnose.hang import hang as H
from ncclprobe.diagnose.hang.hang_words import group_lines
from ncclprobe.evidence.hang.flight_recorder import read_flight_recorder

FR = Path(__file__).resolve().parent / "fixtures" / "flight_recorder"


def _summary(folder: Path) -> dict:
    (group,) = H.groups_summary(read_flight_recorder([folder]))
    return group


def test_a_lagging_status_is_reconciled_and_said():
    group = _summary(FR / "gloo-exit-lag" / "dumps")
    assert group["ranks"] == {
        "0": {"enqueued": 120, "completed": 120},
        "1": {"enqueued": 120, "completed": 120, "status_completed": 119},
    }
    (line,) = group_lines([group])
    assert "ranks 0, 1 enqueued 120, completed 120" in line
    assert "rank 1: its own status said 119 completed" in line


def test_no_member_finished_it_stays_unfinished():
    group = _summary(FR / "gloo" / "healthy" / "dumps")
    assert group["ranks"] == {
        "0": {"enqueued": 6, "completed": 5},
        "1": {"enqueued": 6, "completed": 5},
    }
    assert group["stuck_at"] == 6
    assert "its own status" not in group_lines([group])[0]
