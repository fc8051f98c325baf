"""The real peer-to-peer data check: write a known pattern from each GPU to each other GPU, read it back.

The driver can report peer access that corrupts data or hangs (PCIe ACS, broken BIOS/IOMMU
settings: NVIDIA/nccl#667 hangs over PXB/PIX), so `can_device_access_peer` is not proof. Each
ordered pair is checked twice: a contiguous copy (the copy engine, cudaMemcpy peer) and a
strided copy, which with peer access on is a kernel reading the other GPU's memory, the way
NCCL's P2P transport moves data. The pattern is a multiplicative hash of the index, so a
dropped, repeated or reordered chunk shows as mismatches.

Run as `python -m ncclprobe.probes.p2p_check [--bytes N]` by `ncclprobe.evidence.live.topo_live`,
which enforces the timeout (a hang is killed with its process group). Prints one JSON line per
pair, then a summary line. Without a CUDA GPU, or with one, it reports itself unavailable.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def pattern(count: int):
    import torch

    index = torch.arange(count, dtype=torch.int64)
    return ((index * 2654435761) % 2147483629).to(torch.int32)


def check_pair(src: int, dst: int, nbytes: int) -> dict:
    import torch

    count = max(nbytes // 4 // 2 * 2, 2)
    expected = pattern(count)
    source = expected.to(f"cuda:{src}")
    result: dict[str, object] = {
        "src": src,
        "dst": dst,
        "bytes": count * 4,
        "peer_access": bool(torch.cuda.can_device_access_peer(dst, src)),
    }
    for how, view in (("memcpy", source), ("kernel", source.view(-1, 2).t())):
        target = torch.empty(view.shape, dtype=view.dtype, device=f"cuda:{dst}")
        started = time.perf_counter()
        target.copy_(view)
        torch.cuda.synchronize(dst)
        seconds = time.perf_counter() - started
        back = target.cpu() if how == "memcpy" else target.t().contiguous().view(-1).cpu()
        result[f"{how}_mismatches"] = int((back != expected).sum())
        result[f"{how}_gbps"] = round(count * 4 / seconds / 1e9, 2) if seconds > 0 else None
    result["status"] = (
        "ok" if result["memcpy_mismatches"] == result["kernel_mismatches"] == 0 else "corrupt"
    )
    return result


def run(nbytes: int, out=sys.stdout) -> dict:
    try:
        import torch
    except ImportError:
        return _emit(out, {"status": "unavailable", "reason": "torch is not installed"})
    if not torch.cuda.is_available():
        return _emit(out, {"status": "unavailable", "reason": "no CUDA GPU visible"})
    count = torch.cuda.device_count()
    if count < 2:
        return _emit(
            out, {"status": "unavailable", "reason": f"{count} GPU visible: the check needs a pair"}
        )
    pairs = []
    for src in range(count):
        for dst in range(count):
            if src != dst:
                _emit(out, {"checking": [src, dst]})  # names the pair if this copy never returns
                pairs.append(_emit(out, {"pair": check_pair(src, dst, nbytes)})["pair"])
    bad = [p for p in pairs if p["status"] != "ok"]
    return _emit(
        out,
        {
            "status": "corrupt" if bad else "ok",
            "pairs_checked": len(pairs),
            "reason": f"{len(bad)} pair(s) returned wrong data" if bad else None,
        },
    )


def _emit(out, record: dict) -> dict:
    out.write(json.dumps(record) + "\n")
    out.flush()
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=64 << 20, help="bytes per pair and direction")
    args = parser.parse_args(argv)
    summary = run(max(args.bytes, 8))
    return 0 if summary["status"] in ("ok", "unavailable") else 1


if __name__ == "__main__":
    sys.exit(main())
