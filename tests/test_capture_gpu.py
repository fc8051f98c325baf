"""`ncclprobe capture` around NCCL ranks on the GPU machine (two ranks sharing one GPU, a NCCL_HOSTID
each, NVLS off; examples/capture/nccl_ranks.py): decode replayed from a CUDA graph, verify eager, and
rank 1 staying in host code at step 9. One capture run; the diagnosis must name the eager verify,
the rank that never entered the all-reduce, and what NCCL read, from NCCL's own logs per process.

  python -m pytest -q -m gpu tests/test_capture_gpu.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "examples" / "capture" / "nccl_ranks.py"


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu") / "capture"
    command = [
        *(sys.executable, "-m", "ncclprobe", "capture", "--output", str(out)),
        *("--hang-after", "20", "--profile", "8-11", "--"),
        *(sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(JOB)),
        *("--steps", "12", "--hang-rank", "1", "--hang-at", "9"),
    ]
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "NCCL_SOCKET_IFNAME": "lo"}
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    return run, out, json.loads((out / "diagnosis.json").read_text())


def _rules(doc: dict) -> dict:
    return {f["rule"]: f for f in doc["findings"]}


def test_the_nccl_hang_ends_with_the_job_s_code(captured):
    run, out, _ = captured
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["ended_by"] == "hang", run.stderr[-4000:]
    assert run.returncode == manifest["exit_code"] != 0
    assert len(manifest["collected"]["flight_recorder"]) == 2
    assert len(manifest["collected"]["nccl_logs"]) >= 2  # one per process that loaded NCCL
    assert manifest["collected"]["profiles"]


def test_the_rank_that_never_entered_the_all_reduce_is_named(captured):
    _, _, doc = captured
    hang = next(f for f in doc["findings"] if f["evidence"].get("missing_ranks") == [1])
    assert hang["severity"] == "error"
    assert "nccl_ranks.py" in _rules(doc)["hang-stack"]["title"]


def test_the_eager_verify_is_named_against_the_replayed_decode(captured):
    _, _, doc = captured
    eager = [f for f in doc["findings"] if f["rule"] in ("eager-phase", "eager-launches")]
    assert any("verify" in f["title"] for f in eager), [f["title"] for f in doc["findings"]]


def test_nccl_logs_show_what_each_rank_read_and_the_settings_reached(captured):
    _, out, doc = captured
    processes = json.loads((out / "processes.json").read_text())
    workers = [p for p in processes["processes"] if p["libnccl"]]
    assert processes["nccl_loaded"] and len(workers) >= 2
    assert all(p["nccl_read"].get("NCCL_NVLS_ENABLE") == "0" for p in workers)
    ruled = {r["rule"] for r in doc["ruled_out"]}
    assert "capture-settings" in ruled  # NCCL_NVLS_ENABLE and NCCL_SOCKET_IFNAME reached both


def test_the_host_call_behind_the_idle_gpu_is_named(tmp_path):
    """examples/capture/host_bound.py on the GPU: 4096 `.item()` per step after the forward, each a
    sync; the GPU idles through them and the host-call rule names `postprocess` and the sync."""
    trace = tmp_path / "host_bound_gpu.json.gz"
    script = ROOT / "examples" / "capture" / "host_bound.py"
    run = subprocess.run(
        [sys.executable, str(script), "--device", "cuda", "--output", str(trace)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    from ncclprobe.diagnose import diagnose, load_evidence

    result = diagnose(load_evidence(profiles=[trace]))
    (host,) = [f for f in result.findings if f.rule == "host-call"]
    top = host.evidence["functions"][0]
    assert host.evidence["basis"] == "gpu-idle" and top["function"].endswith("postprocess")
    assert (
        top["call"] in ("aten::item", "aten::_local_scalar_dense") and top["syncs_per_step"] >= 4096
    )
