"""The single-GPU parts of `topo --check` on a real GPU, in one run (issue 20): host<->device bandwidth and
latency, link state under load, ACS/IOMMU as far as readable, the driver's P2P status, NCCL's topology and
graph dumps with one rank per GPU, and the GPU-pair code path exercised on GPU0->GPU0.

    python examples/pcie_check_gpu.py OUTDIR

Writes OUTDIR/topo-check/{topo-check.json,nccl-topo.xml,nccl-graph.xml} and OUTDIR/self-pair.jsonl, and prints
a short table last. Expect about a minute (the NCCL job and the CUDA contexts dominate).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tabulate import tabulate

from ncclprobe.diagnose.p2p.check import run_check, save


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    doc = run_check(timeout_s=240, nbytes=64 << 20)
    for path in save(doc, out / "topo-check"):
        print(f"wrote {path}", file=sys.stderr)
    checked = time.monotonic() - began
    pair = subprocess.run(
        [
            sys.executable,
            "-m",
            "ncclprobe.probes.p2p_bandwidth",
            "--self-pair",
            "--bytes",
            str(64 << 20),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    (out / "self-pair.jsonl").write_text(pair.stdout)
    rows = []
    for m in doc["matrices"]:
        for label, values in zip(m["rows"], m["values"]):
            rows.append(
                {
                    "what": m["source"].replace("topo --check: ", ""),
                    "from": label,
                    "unit": m["unit"],
                    **{c: v for c, v in zip(m["cols"], values)},
                }
            )
    rows += [
        {"what": f"check {c['check']}", "from": c["status"], "unit": "", "GPU0": c["summary"][:70]}
        for c in doc["platform"]
    ]
    nccl = doc["nccl"]
    rows.append(
        {
            "what": "NCCL dump job",
            "from": nccl.get("status"),
            "unit": "",
            "GPU0": f"ranks {nccl.get('ranks')}, NCCL {nccl.get('nccl_version')}, written {nccl.get('written')}",
        }
    )
    rows.append(
        {
            "what": "self-pair probe",
            "from": pair.stdout.strip().splitlines()[-1][:70]
            if pair.stdout
            else pair.stderr[-200:],
            "unit": "",
            "GPU0": "",
        }
    )
    rows.append(
        {"what": "topo --check wall time", "from": f"{checked:.1f} s", "unit": "", "GPU0": ""}
    )
    print(tabulate(rows, headers="keys", floatfmt=".2f", missingval="-"))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python examples/pcie_check_gpu.py OUTDIR")
    sys.exit(main(Path(sys.argv[1])))
