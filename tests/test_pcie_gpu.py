"""topo --check on a real GPU: host<->device figures, the pair code path on GPU0->GPU0, NCCL's dump.
Run by the lead on the device (`-m gpu`); skipped cleanly without a GPU."""

import json
import subprocess
import sys

import pytest
import torch

from ncclprobe.evidence.node.matrix import Matrix

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_bandwidth_probe_on_one_gpu_runs_every_code_path():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ncclprobe.probes.p2p_bandwidth",
            "--self-pair",
            "--bytes",
            str(8 << 20),
            "--trials",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    records = [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]
    assert records[-1]["status"] == "ok", out.stderr[-2000:]
    matrices = [Matrix(**r["matrix"]) for r in records if "matrix" in r]
    h2d = next(m for m in matrices if m.rows == ["CPU"] and m.metric == "bandwidth")
    assert all(v and v > 1.0 for v in h2d.values[0])  # GB/s: any real PCIe link does this
    kinds = {m.label for m in matrices}
    assert {
        "bandwidth uni P2P=enabled ce write",
        "bandwidth uni P2P=enabled sm",
        "bandwidth bidi P2P=enabled ce write",
        "latency uni P2P=enabled ce write gpu timer",
    } <= kinds
    assert next(r for r in records if "copy_checks" in r)["copy_checks"] == []


def test_topo_check_on_gpu_dumps_nccl_topology():
    from ncclprobe.diagnose.p2p.check import check_report
    from ncclprobe.evidence.bundle import Evidence
    from ncclprobe.gather.p2p import gather_p2p

    doc = check_report(Evidence(p2p=gather_p2p(timeout_s=240, nbytes=16 << 20))).to_json()
    assert (
        doc["measurement"]["status"] == "ok"
        and len(doc["measurement"]["devices"]) == torch.cuda.device_count()
    )
    assert doc["nccl"]["status"] == "ok", doc["nccl"]
    assert len(doc["nccl"]["topology"]["gpus"]) == torch.cuda.device_count()
    assert all(c["source"] for c in doc["platform"])
