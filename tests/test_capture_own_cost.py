"""`ncclprobe capture --format json` around a real torchrun job of two gloo ranks, rank 1 busy-waiting
on the host before every all-reduce (examples/capture/train_ranks.py --late-spin): one capture run,
several assertions about what the capture itself does to the job and to its own output.
- The capture's profiler (stacks on, a Python busy-wait recorded call by call) stops the rank for
  seconds while it builds and writes the trace: those calls are the capture's, not the job's, and are
  left out of the late-rank rule (the healthy twin, where the profiler pause is absent, is
  tests/test_capture_torchrun.py: its late rank is still named with its own median).
- stdout is the report's alone with --format json: the job's stdout goes to stderr and job.log.
- Only the Flight Recorder spelling the job's torch reads is set: no deprecation warning per rank.
- The header's per-rank "completed" agrees with the findings at a clean exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ncclprobe.capture.environment import job_python, job_torch
from ncclprobe.nccl.recipes import FR_NAMES_FROM, flight_recorder_env, fr_spelling

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "examples" / "capture" / "train_ranks.py"


@pytest.fixture(scope="module")
def spun(tmp_path_factory):
    out = tmp_path_factory.mktemp("own") / "cap"
    command = [
        sys.executable, "-m", "ncclprobe", "capture", "--output", str(out), "--format", "json",
        "--profile", "3-6", "--hang-after", "120", "--",
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(JOB),
        "--late-rank", "1", "--late-spin", "--late-s", "0.06", "--steps", "24",
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=600, env=os.environ)
    return run, out


def _finding(doc: dict, rule: str) -> dict | None:
    found = [f for f in doc["findings"] if f["rule"] == rule]
    return found[0] if found else None


def test_stdout_is_the_report_alone_and_the_job_s_output_goes_to_stderr(spun):
    run, out = spun
    doc = json.loads(run.stdout)  # nothing of the job's in it
    assert doc["findings"]
    # two ranks write to one pipe: a line and its newline may reach it apart ("rank 1 step 1rank 0 ...")
    assert "rank 1 step 1" in run.stderr
    assert "rank 1 step 1" in (out / "job.log").read_text()


def test_the_capture_s_own_profiler_pause_is_not_blamed_on_the_rank(spun):
    run, out = spun
    doc = json.loads(run.stdout)
    spans = [
        p["profiler"]
        for p in json.loads((out / "processes.json").read_text())["processes"]
        if p["rank"] == 1 and p["profiler"]
    ]
    ((span,),) = spans
    assert span["start"] <= span["started"] <= span["stop"] <= span["written"]
    late = _finding(doc, "late-rank")
    assert late is not None and late["evidence"]["rank"] == 1
    # its own lateness: the 60 ms busy-wait, never the seconds the trace took to write
    assert 50 <= late["evidence"]["median_ms"] and late["evidence"]["largest_ms"] < 1000
    assert late["evidence"]["calls_left_out_for_capture_profiler"] >= 1
    assert "the capture's own profiler on rank(s)" in late["detail"]
    # the profile is in the capture: no step asks to profile again
    assert not late.get("next_command")
    # a CPU job profiled with shapes: no GPU idle time or verify step to ask evidence for
    assert not {"host-bound", "decode-or-verify"} & {n["rule"] for n in doc["not_checked"]}


def test_only_the_flight_recorder_names_the_job_s_torch_reads_are_set(spun):
    run, out = spun
    manifest = json.loads((out / "manifest.json").read_text())
    added = manifest["added"]
    assert "TORCH_FR_BUFFER_SIZE" in added and "TORCH_NCCL_TRACE_BUFFER_SIZE" not in added
    assert "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" not in added
    assert "is deprecated" not in (out / "job.log").read_text()
    assert len(manifest["collected"]["flight_recorder"]) == 2


def test_the_header_s_completed_agrees_with_the_findings_at_a_clean_exit(spun):
    run, out = spun
    text = (out / "diagnosis.txt").read_text()
    doc = json.loads(run.stdout)
    assert _finding(doc, "hang-none-pending") is not None
    header = [line for line in text.splitlines() if line.startswith("# default_pg")][0]
    assert "enqueued 48, completed 48" in header


def test_the_flight_recorder_spelling_follows_the_torch_version_at_its_boundary(tmp_path):
    older = (FR_NAMES_FROM[0], FR_NAMES_FROM[1] - 1)
    assert fr_spelling(FR_NAMES_FROM) == "new" and fr_spelling(older) == "old"
    assert set(flight_recorder_env("/x", older)) == {
        "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
        "TORCH_NCCL_DUMP_ON_TIMEOUT",
    }  # fmt: skip
    assert "TORCH_FR_BUFFER_SIZE" in flight_recorder_env("/x") and (
        "TORCH_NCCL_TRACE_BUFFER_SIZE" in flight_recorder_env("/x")
    )  # a command printed for a torch not known: both
    # a console script's `#!` names the job's interpreter, whose torch is read
    script = tmp_path / "launcher"
    script.write_text(f"#!{sys.executable}\nprint('hi')\n")
    script.chmod(0o755)
    assert job_python([str(script)], os.environ) == sys.executable
    import torch

    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    assert job_torch([str(script)], os.environ) == (major, minor)
    assert job_torch(["/bin/true"], os.environ) is None


def test_a_job_whose_torch_was_not_known_gets_the_older_names_where_its_torch_is_older():
    from ncclprobe.capture import injob
    from ncclprobe.capture.environment import fr_respell

    newer = {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_FR_DUMP_TEMP_FILE": "/cap/fr/nccl_trace_rank_"}
    below = ".".join(map(str, (FR_NAMES_FROM[0], FR_NAMES_FROM[1] - 1))) + ".0+cu128"
    older = dict(newer)
    injob._respell({"fr_respell": fr_respell()}, older, below)
    assert older["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"
    assert older["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == "/cap/fr/nccl_trace_rank_"
    at = dict(newer)
    injob._respell({"fr_respell": fr_respell()}, at, ".".join(map(str, FR_NAMES_FROM)) + ".0")
    assert at == newer  # the boundary reads the newer names: nothing added, no warning
    known = dict(newer)
    injob._respell({"fr_respell": None}, known, below)  # the capture knew the job's torch
    assert known == newer


def test_a_call_is_left_out_exactly_where_a_member_s_profiler_span_meets_it():
    from ncclprobe.diagnose.hang.rules_arrival import _outside_profiler

    call = {0: 10_000_000_000, 1: 12_000_000_000}  # issued at 10 s and 12 s
    for spans, left_out in (
        ({1: [(12.0, 20.0)]}, True),  # begins as the last member issues it
        ({0: [(1.0, 10.0)]}, True),  # ends as the first member issues it
        ({1: [(12.001, 20.0)]}, False),
        ({0: [(1.0, 9.999)]}, False),
        ({2: [(0.0, 99.0)]}, False),  # a rank not in the call
        ({}, False),
    ):
        kept, paused = _outside_profiler([call], spans)
        assert (paused.calls == 1) is left_out and (kept == []) is left_out, spans
        assert paused.words().startswith("; 1 call(s) are not counted") is left_out
    _, paused = _outside_profiler([call, call], {0: [(11.0, 11.5)], 1: [(11.0, 11.5)]})
    assert paused.calls == 2 and "rank(s) 0, 1" in paused.words()
