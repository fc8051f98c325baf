"""How `topo --check` (`p2p_bandwidth`) issues, times and checks one batch of GPU copies: the CUDA
runtime reached through ctypes, and the bench that times a batch and verifies what arrived.

Why ctypes: torch enables peer access by itself on the first cross-device copy and never turns it
off, so the peer-disabled copies go through the CUDA runtime directly (`cudaMemcpyPeerAsync` on
buffers torch allocated, before anything enables peer access), as p2pBandwidthLatencyTest does. The
runtime is the libcudart torch loaded (found in /proc/self/maps), so both share one context.
Copy-engine copies are timed by CUDA events on the issuing stream; concurrent copies (bidirectional,
all-to-one) by the host clock around a synchronised batch. The pattern is `p2p_check.pattern`, so a
dropped or reordered chunk is counted.

Kept apart from the measurement's plan (which pairs, which modes, the matrices it prints) because
these are the instruments every stage shares, and the only code here that touches the runtime.
"""

from __future__ import annotations

import ctypes
import statistics
import time
from pathlib import Path

from ncclprobe.probes.p2p_check import pattern
from ncclprobe.stats import median_and_range


def load_cudart():
    """The CUDA runtime torch loaded, or None (then peer-disabled copies are not measured)."""
    try:
        for line in Path("/proc/self/maps").read_text().splitlines():
            if "libcudart" in line and line.split()[-1].startswith("/"):
                return ctypes.CDLL(line.split()[-1])
    except OSError:
        pass
    for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


class Runtime:
    def __init__(self, lib):
        self.lib = lib
        lib.cudaMemcpyPeerAsync.argtypes = [
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_size_t,
            ctypes.c_void_p,
        ]
        lib.cudaGetErrorString.restype = ctypes.c_char_p

    def check(self, code: int, what: str) -> None:
        if code:
            raise RuntimeError(f"{what}: {self.lib.cudaGetErrorString(code).decode()}")

    def peer_copy(self, dst, src, nbytes: int, stream) -> None:
        self.check(
            self.lib.cudaMemcpyPeerAsync(
                ctypes.c_void_p(dst.data_ptr()),
                dst.device.index,
                ctypes.c_void_p(src.data_ptr()),
                src.device.index,
                ctypes.c_size_t(nbytes),
                ctypes.c_void_p(stream.cuda_stream),
            ),
            "cudaMemcpyPeerAsync",
        )

    def enable_peer(self, device: int, peer: int) -> str:
        self.check(self.lib.cudaSetDevice(device), "cudaSetDevice")
        code = self.lib.cudaDeviceEnablePeerAccess(peer, 0)
        if code == 704:  # cudaErrorPeerAccessAlreadyEnabled
            self.lib.cudaGetLastError()
            return "already enabled"
        self.check(code, "cudaDeviceEnablePeerAccess")
        return "enabled"


class Bench:
    def __init__(self, torch, nbytes: int, repeat: int, trials: int, runtime: Runtime | None):
        self.torch, self.nbytes, self.repeat, self.trials, self.rt = (
            torch,
            nbytes,
            repeat,
            trials,
            runtime,
        )
        self.count = nbytes // 4
        self.expected = pattern(self.count)
        self.bad: list[dict] = []

    def buffers(self, device: int):
        t = self.torch
        return self.expected.to(f"cuda:{device}"), t.empty(
            self.count, dtype=t.int32, device=f"cuda:{device}"
        )

    def verify(self, what: str, src: int, dst: int, tensor) -> None:
        got = tensor.contiguous().view(-1)
        wrong = int((got != self.expected.to(got.device)).sum())
        if wrong:
            self.bad.append({"what": what, "src": src, "dst": dst, "mismatches": wrong})
        tensor.zero_()  # on this device's current stream: wait for it, or the next
        self.torch.cuda.synchronize(
            tensor.device
        )  # copy (on another stream) could be overwritten by it

    def timed(self, stream, issue) -> tuple[float, float]:
        """Median and spread of GB/s over trials of `repeat` copies issued by `issue()` on `stream`."""
        t = self.torch
        rates = []
        for _ in range(self.trials):
            start, stop = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            start.record(stream)
            for _ in range(self.repeat):
                issue()
            stop.record(stream)
            stop.synchronize()
            rates.append(self.nbytes * self.repeat / (start.elapsed_time(stop) / 1e3) / 1e9)
        return median_and_range(rates)

    def wall(self, devices, issue_all) -> tuple[float, float]:
        """Concurrent copies on several devices: total GB/s by the host clock around each batch."""
        rates = []
        for _ in range(self.trials):
            for d in devices:
                self.torch.cuda.synchronize(d)
            began = time.perf_counter()
            moved = issue_all()
            for d in devices:
                self.torch.cuda.synchronize(d)
            rates.append(moved / (time.perf_counter() - began) / 1e9)
        return median_and_range(rates)

    def latency(self, stream, issue, copies: int = 100) -> float:
        t = self.torch
        values = []
        for _ in range(self.trials):
            start, stop = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            start.record(stream)
            for _ in range(copies):
                issue()
            stop.record(stream)
            stop.synchronize()
            values.append(start.elapsed_time(stop) * 1e3 / copies)
        return statistics.median(values)
