"""env-check on a real one-rank NCCL job (GPU only): libnccl mapped, the GPU from NVML, and NCCL's
own log showing what the worker changed at runtime, which /proc can't show."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from click.testing import CliRunner

from ncclprobe.cli import cli

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

JOB = textwrap.dedent("""
    import os, sys, time, torch, torch.distributed as dist
    os.environ["NCCL_P2P_LEVEL"] = "PHB"                          # after exec: /proc keeps SYS
    os.environ["NCCL_TOPO_DUMP_FILE"] = sys.argv[1] + "/topo.xml"  # never in /proc at all
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    t = torch.ones(1, device="cuda"); dist.all_reduce(t); torch.cuda.synchronize()
    open(sys.argv[1] + "/ready", "w").write(str(os.getpid()))
    time.sleep(120)
""")


@pytest.fixture
def nccl_job(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env.update(
        NCCL_P2P_LEVEL="SYS",
        NCCL_DEBUG="INFO",
        NCCL_DEBUG_SUBSYS="INIT,ENV",
        NCCL_DEBUG_FILE=str(tmp_path / "nccl.%h.%p.log"),
    )
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)], env=env, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "ready").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the NCCL job did not start"
            time.sleep(0.2)
        yield proc.pid, next(tmp_path.glob(f"nccl.*.{proc.pid}.log"))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_nccl_job_seen_from_outside(nccl_job):
    pid, log = nccl_job
    result = CliRunner().invoke(
        cli,
        [
            "env-check",
            "--pid",
            str(pid),
            "--log",
            str(log),
            "--format",
            "json",
            "--expect",
            "NCCL_P2P_LEVEL=PHB",
        ],
    )
    doc = json.loads(result.stdout)
    proc = doc["processes"][0]
    assert proc["libnccl"] and "libnccl" in proc["libnccl"]
    assert proc["gpus"] in (None, [0])  # None only where nvidia-ml-py is not installed
    assert proc["env"]["NCCL_P2P_LEVEL"] == "SYS"
    kinds = {d["variable"]: d["kind"] for d in doc["log_checks"]}
    assert kinds["NCCL_P2P_LEVEL"] == "read, other value"
    assert kinds["NCCL_TOPO_DUMP_FILE"] == "read, not in /proc"
    assert proc["checks"][0]["source"] == "NCCL log" and proc["checks"][0]["status"] == "ok"
    assert result.exit_code == 0
