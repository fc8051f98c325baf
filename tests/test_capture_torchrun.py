"""`ncclprobe capture` around a real torchrun job of gloo ranks on the CPU machine, the user's code
unchanged (examples/capture/train_ranks.py): rank 1 late to every all-reduce, rank 2 restarted by a
launcher step whose allow-list drops NCCL_* (NCCL_SOCKET_IFNAME=lo reached its parent, not it), rank 0
staying in host code at step 12 while the others wait. One capture run, several assertions; a healthy
run of the same job (no fault) is the twin: it exits with the diagnosis's code, nothing above info."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "examples" / "capture" / "train_ranks.py"
HANG_AFTER_S = "15"


def _capture(out: Path, *job_args: str, nproc: int, profile: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "ncclprobe",
        "capture",
        "--output",
        str(out),
        "--hang-after",
        HANG_AFTER_S,
        "--profile",
        profile,
        "--",
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        str(JOB),
        *job_args,
    ]
    env = {**os.environ, "NCCL_SOCKET_IFNAME": "lo"}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    out = tmp_path_factory.mktemp("torchrun") / "faults"
    run = _capture(
        out,
        *(
            "--late-rank",
            "1",
            "--filtered-rank",
            "2",
            "--hang-rank",
            "0",
            "--hang-at",
            "12",
            "--steps",
            "14",
        ),
        nproc=3,
        profile="2-5",
    )
    return run, out, json.loads((out / "diagnosis.json").read_text())


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    out = tmp_path_factory.mktemp("torchrun") / "healthy"
    run = _capture(out, "--steps", "4", nproc=2, profile="off")
    return run, out, json.loads((out / "diagnosis.json").read_text())


def _finding(doc: dict, rule: str) -> dict:
    (found,) = [f for f in doc["findings"] if f["rule"] == rule]
    return found


def test_the_hung_job_ends_with_torchrun_s_own_code_and_the_directory_named(faults):
    run, out, doc = faults
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["ended_by"] == "hang"
    assert run.returncode == manifest["exit_code"] != 0, run.stderr[-3000:]
    assert f"ncclprobe: capture: {out}/" in run.stderr
    report = run.stdout[run.stdout.index("# diagnosis of") :]  # after the job's own output
    assert f"capture {out}" in report.replace("\n#   ", " ")
    assert "rank 1 step 1" in run.stdout  # the job's own output passed through
    assert (out / "diagnosis.txt").read_text().startswith("# diagnosis of")
    # torchrun's SignalException at the capture's SIGTERM is said for what it is, not "not explained"
    assert _finding(doc, "failure-launcher-signalled")["severity"] == "info"
    assert not [f for f in doc["findings"] if f["rule"] == "not-explained"]


def test_the_rank_in_host_code_is_named_at_its_collective_and_its_line(faults):
    _, _, doc = faults
    hang = next(f for f in doc["findings"] if f["evidence"].get("missing_ranks") == [0])
    assert hang["severity"] == "error" and "rank 0 never entered collective 23" in hang["title"]
    stack = _finding(doc, "hang-stack")
    sleep = JOB.read_text().splitlines().index("            time.sleep(3600)") + 1
    assert f"train_ranks.py:{sleep} in train" in stack["title"]  # its time.sleep at step 12


def test_the_late_rank_is_named_from_the_flight_recorder_and_its_host_work(faults):
    _, _, doc = faults
    late = _finding(doc, "late-rank")
    assert late["evidence"]["rank"] == 1 and late["evidence"]["median_ms"] >= 250
    assert late["confidence"] == "high"
    # its profile names what it did before each all-reduce: the sleep in train()
    host = _finding(doc, "host-call")
    assert host["evidence"]["rank"] == 1 and "sleep" in host["evidence"]["functions"][0]["call"]


def test_the_setting_that_never_reached_rank_2_is_named_with_its_command(faults):
    _, out, doc = faults
    lost = _finding(doc, "capture-settings")
    (worker,) = lost["evidence"]["lost"]
    assert lost["severity"] == "warning" and worker["rank"] == 2
    assert worker["command"].endswith("--filtered") and worker["parent_has"] is True
    assert "NCCL is not loaded in this run" in lost["detail"]
    processes = json.loads((out / "processes.json").read_text())["processes"]
    child = next(p for p in processes if p["pid"] == worker["pid"])
    assert child["missing"] == ["NCCL_SOCKET_IFNAME"] and child["injob"]


def test_the_manifest_lists_what_was_collected_and_why_not(faults):
    _, out, _ = faults
    manifest = json.loads((out / "manifest.json").read_text())
    collected, missing = manifest["collected"], manifest["missing"]
    assert sorted(Path(p).name for p in collected["flight_recorder"]) == [
        f"nccl_trace_rank_{r}" for r in range(3)
    ]
    assert len(collected["profiles"]) == 3 and len(collected["stacks"]) >= 3
    assert "no process of the job loaded NCCL" in missing["nccl_logs"]
    assert manifest["settings"] == {"NCCL_SOCKET_IFNAME": "lo"}
    assert manifest["added"]["NCCL_DEBUG_FILE"] == f"{out.resolve()}/nccl/nccl.%h.%p.log"
    assert not (out / ".capture").exists() and not (out / "control").exists()


def test_the_healthy_twin_exits_with_the_diagnosis_code(healthy):
    run, out, doc = healthy
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["ended_by"] == "exit" and manifest["exit_code"] == 0
    assert run.returncode == 0, run.stdout[-3000:]
    assert not [f for f in doc["findings"] if f["severity"] != "info"]
    ruled = {r["rule"] for r in doc["ruled_out"]}
    assert {"late-rank", "capture-settings"} <= ruled
    # the ranks dumped their Flight Recorder at exit: the late-rank rule had both to compare
    assert len(manifest["collected"]["flight_recorder"]) == 2
