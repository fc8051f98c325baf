"""NCCL releases with a known failure on some GPUs or hosts, each row with where it was established.

Only rows a source states: an NVIDIA engineer's word on the issue, the release that fixed it, or a
reporter's bisection of released builds. A row holds the first bad release, the first good one
(`fixed_in`, where the source names it; `works_in` where only a later release was shown to work),
the GPUs it applies to (compute capability, major*10+minor as `nccl.node.NodeFacts` counts it; None:
any GPU), the host's architecture where it matters, the failure in words, the line NCCL prints for
it where it prints one (`signature`: seen in a log, it is the failure itself, whatever the GPU is
said to be), the workaround, and the sources.

Consulted wherever an NCCL version meets a GPU (`matching`): NCCL's own logs (`nccl-log`, diagnose
`--nccl-log`, the capture's logs), a collect-env text (`GPU 0: NVIDIA GeForce RTX 5090` and the
NCCL version it lists), env-check's logs, and the sweep's own run (the GPUs' facts and NCCL
version it lints with). GPU names map to compute capabilities through `capability_of`, from
NVIDIA's table (developer.nvidia.com/cuda-gpus), for the architectures the rows name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ncclprobe.nccl.version import Version, parse_version


@dataclass(frozen=True)
class KnownBad:
    key: str
    first_bad: str  # the first release with the failure
    fixed_in: str | None  # the first release without it, as the source names it
    works_in: str | None  # a later release shown to work, where no fix release is named
    capabilities: tuple[int, ...] | None  # GPUs it applies to; None: any
    host_arch: str | None  # "aarch64" where only such hosts fail; None: any host
    failure: str
    signature: str | None  # a regular expression for NCCL's own line of it, where it prints one
    workaround: str
    sources: tuple[str, ...]
    condition: str = ""  # when it bites, beyond the version and the GPU
    off_when: tuple[tuple[str, str], ...] = ()  # (variable, value) NCCL read that avoids it
    conditional: bool = False  # bites only under `condition`, which a version and a GPU do not show

    def covers(self, version: Version) -> bool:
        first = parse_version(self.first_bad)
        last = parse_version(self.fixed_in) if self.fixed_in else None
        return first is not None and version >= first and (last is None or version < last)

    def remedy(self) -> str:
        if self.fixed_in:
            return f"fixed in NCCL {self.fixed_in}"
        if self.works_in:
            return f"no fixed release named; NCCL {self.works_in} was shown to work"
        return "no fixed release named"


ROWS = (
    KnownBad(
        key="sm120-shared-memory",
        first_bad="2.25.1",
        fixed_in="2.26.2",
        works_in=None,
        capabilities=(120,),
        host_arch=None,
        failure="NCCL's kernels ask for more shared memory than a compute-capability-12.0 GPU "
        "(GeForce RTX 50 series, RTX PRO Blackwell) gives a kernel: collectives fail "
        "(all_reduce_perf across several GPUs, alltoall_perf even on one)",
        signature=r"ncclMaxSharedMem \d+ exceeds device/fn maxSharedMem \d+",
        workaround="use NCCL 2.26.2 or later (pip install -U nvidia-nccl-cu12)",
        sources=(
            "NVIDIA/nccl-tests#287 (kiskra-nvidia, 2025-03-13: NCCL 2.26.2 released for it; "
            "RCS1, 2025-03-14: all_reduce_perf works on 5090s with it)",
            "NVIDIA/nccl#1637 (kiskra-nvidia, 2025-03-13: the `ncclMaxSharedMem 82240 exceeds "
            "device/fn maxSharedMem 79856` line; no chance to work with 2.25.1 unpatched)",
        ),
    ),
    KnownBad(
        key="sm120-illegal-access-2.26.2",
        first_bad="2.26.2",
        fixed_in=None,
        works_in="2.31.2",
        capabilities=(120,),
        host_arch=None,
        failure="collectives of 512 KiB and more end in an illegal memory access on two RTX PRO "
        "6000 Blackwell GPUs joined by PCIe (smaller ones pass)",
        signature=None,
        workaround="use a newer NCCL (2.31.2 worked for the reporter)",
        sources=(
            "NVIDIA/nccl#2418 (AlbertLee98, 2026-09-17: reproducible with NCCL 2.26.2+cuda12.2 from "
            "524288 bytes in all_reduce_perf, not with 2.31.2+cuda12.9; closed)",
        ),
        condition="reported for 2.26.2 only; releases between 2.26.2 and 2.31.2 were not tested",
    ),
    KnownBad(
        key="cumem-graph-memory",
        first_bad="2.19.0",
        fixed_in="2.22.3",
        works_in=None,
        capabilities=None,
        host_arch=None,
        failure="with NCCL_CUMEM_ENABLE on (its default from 2.19), each CUDA graph capture of "
        "collectives costs extra GPU memory: engines that capture many graphs (vLLM) ran out of "
        "memory",
        signature=None,
        workaround="NCCL_CUMEM_ENABLE=0, or NCCL 2.22.3 or later",
        sources=(
            "NVIDIA/nccl#1234 (youkaichao, 2024-03-24: OOM with NCCL 2.19.3 where 2.18.3 fits)",
            "vllm-project/vllm#24141 (youkaichao, 2025-09-03: confirmed in NVIDIA/nccl#1234 that "
            "NCCL 2.22.3 resolved the memory overhead)",
        ),
        condition="only with CUDA graphs that capture collectives, and cuMem on",
        off_when=(("NCCL_CUMEM_ENABLE", "0"),),
        conditional=True,
    ),
    KnownBad(
        key="aarch64-proxy-deadlock",
        first_bad="2.28.9",
        fixed_in="2.29.3",
        works_in=None,
        capabilities=None,
        host_arch="aarch64",
        failure="a deadlock between ncclLocalOpAppend and the proxy progress thread once the proxy "
        "op pool is exhausted: the job hangs",
        signature=None,
        workaround="NCCL 2.29.3 or later",
        sources=(
            "NVIDIA/nccl#2353 (thomasgillis: fixes in commits dbc86fd and 25368a7; Cryspia, "
            "2026-08-27: released aarch64 wheels bisected, 2.28.9 and 2.29.2 deadlock, 2.29.3 and "
            "2.30.7 do not)",
        ),
    ),
)

# NVIDIA's compute capabilities (developer.nvidia.com/cuda-gpus) of the GPUs the rows name
CAPABILITY_NAMES = (
    (re.compile(r"RTX PRO \d+ Blackwell|GeForce RTX 50\d0", re.IGNORECASE), 120),
    (re.compile(r"\bGB10\b"), 121),
    (re.compile(r"\bG?B300\b"), 103),
    (re.compile(r"\bG?B200\b"), 100),
    (re.compile(r"\bH100\b|\bH200\b|\bGH200\b"), 90),
)


def capability_of(gpu_name: str) -> int | None:
    """The compute capability of a GPU by its name, for the architectures the rows name."""
    for pattern, capability in CAPABILITY_NAMES:
        if pattern.search(gpu_name):
            return capability
    return None


@dataclass(frozen=True)
class Match:
    row: KnownBad
    version: str
    seen: bool  # NCCL's own line for it is in the evidence: the failure happened
    why: str  # what of the evidence matched, in words

    @property
    def severity(self) -> str:
        """error: NCCL printed the failure; warning: the release and the GPUs fall in the row; info:
        they do, but the row's condition (CUDA graphs, cuMem on) is not shown by the evidence."""
        if self.seen:
            return "error"
        return "info" if self.row.conditional else "warning"


def matching(
    version: str | None,
    capabilities: Iterable[int] | None = None,
    *,
    host_arch: str | None = None,
    lines: Iterable[str] = (),
    read: dict[str, str] | None = None,
) -> list[Match]:
    """The rows `version` falls in, where the evidence says the GPU (or host) is one they name, or
    shows NCCL's own line of the failure. Unknown GPUs match only rows for any GPU; a row whose
    workaround NCCL read (`read`: what its log says it read) does not match."""
    parsed = parse_version(version)
    if parsed is None:
        return []
    caps = set(capabilities or ())
    text = list(lines)
    out = []
    for row in ROWS:
        if not row.covers(parsed) or any((read or {}).get(k) == v for k, v in row.off_when):
            continue
        signature = row.signature
        seen = bool(signature and any(re.search(signature, line) for line in text))
        gpu_ok = row.capabilities is None or bool(caps & set(row.capabilities))
        host_ok = row.host_arch is None or host_arch == row.host_arch
        if seen or (gpu_ok and host_ok):
            why = "NCCL printed its line of this failure" if seen else _why(row, caps, host_arch)
            out.append(Match(row, str(version), seen, why))
    return out


def _why(row: KnownBad, caps: set[int], host_arch: str | None) -> str:
    parts = []
    if row.capabilities is not None:
        parts.append(
            f"GPU compute capability {', '.join(f'{c // 10}.{c % 10}' for c in sorted(caps))}"
        )
    if row.host_arch is not None:
        parts.append(f"an {host_arch} host")
    return "NCCL " + ("with " + " and ".join(parts) if parts else "version alone")


def describe(match: Match) -> str:
    """One sentence for a finding or a note: the failure, the range, the remedy, the sources."""
    row = match.row
    last = row.fixed_in or (f"at least {row.works_in}" if row.works_in else "?")
    return (
        f"NCCL {match.version} is a known-bad release here ({match.why}): {row.failure}"
        + (f" ({row.condition})" if row.condition else "")
        + f". Affected: {row.first_bad} up to {last}; {row.remedy()}. Workaround: {row.workaround}."
        f" Sources: {'; '.join(row.sources)}."
    )
