"""The diagnosis over a finished capture directory: the same call as `ncclprobe diagnose --capture
DIR` (every file of the directory as evidence, plus what the capture saw of the processes), written
into the directory as JSON beside the manifest."""

from __future__ import annotations

from pathlib import Path

from ncclprobe.diagnose import diagnose, load_evidence
from ncclprobe.diagnose.report import Report
from ncclprobe.evidence.bundle import Evidence
from ncclprobe.evidence.live import capture_dir as D
from ncclprobe.safe_output import write_json


def diagnose_capture(directory: Path) -> tuple[Report, Evidence]:
    ev = load_evidence(capture=directory)
    result = diagnose(ev)
    write_json(directory / D.DIAGNOSIS_JSON, result.to_json())
    return result, ev
