"""Which levers act on a run's communication: named only where the mechanism they act on ran.

What moved the data is read from the evidence, never assumed: a profile's communication kernels by
what they are (`evidence.run.profile.comm_names.communication_kernel`: NCCL's, RCCL's, DeepEP's, an
engine's custom all-reduce, symmetric memory, a peer copy) or its host ops (`gloo:all_reduce`),
an engine trace's backend, the ranks' NCCL logs. NCCL settings are a lever only where NCCL or RCCL
ran; for anything else the lever that acts on it is named, or none is known and that is said.
"""

from __future__ import annotations

from ncclprobe.evidence.bundle import Evidence
from ncclprobe.evidence.run.profile.comm_names import NCCL_LIBRARIES

# the lever that acts on each kind of communication, in words (where known)
LEVERS = {
    "NCCL": "NCCL settings (protocol, algorithm, channels; a sweep of the job's sizes measures them)",
    "RCCL": "RCCL's settings (NCCL_* variables; a sweep of the job's sizes measures them)",
    "gloo": "the host network interface its TCP connections use (GLOO_SOCKET_IFNAME), or a GPU "
    "backend (NCCL) for GPU tensors",
    "DeepEP": "DeepEP's own settings (the SMs its kernels take, Buffer.set_num_sms; its NVLink and "
    "RDMA buffer sizes; its low-latency mode for decoding)",
    "custom all-reduce": "the engine's custom all-reduce (vLLM: --disable-custom-all-reduce "
    "compares it with NCCL; the sizes it takes are its own threshold)",
    "quick all-reduce": "the engine's quick all-reduce (vLLM on ROCm: its quantization level and "
    "size threshold)",
    "copy engine": "the peer-to-peer path (peer access enabled, the PCIe or NVLink route between "
    "the GPUs: ncclprobe topo --check)",
}


def libraries(ev: Evidence) -> set[str]:
    """What moved the data in the runs under diagnosis: the profiles' communication, an engine
    trace's backend, NCCL itself where the ranks' NCCL logs are given."""
    found = {c.library for _, run in ev.all_runs() for c in run.collectives if c.library}
    if ev.kind == "engine-trace" and ev.config.get("backend"):
        backend = str(ev.config["backend"])
        found.add("NCCL" if backend == "nccl" else backend)
    if getattr(ev, "nccl_logs", None):
        found.add("NCCL")
    return found


def nccl_ran(ev: Evidence) -> bool:
    return bool(libraries(ev) & NCCL_LIBRARIES)


def lever_words(libs: set[str]) -> str:
    """The levers that act on `libs`, each named with what it acts on; NCCL settings only where
    NCCL or RCCL ran."""
    if not libs:
        return "what moved the data is not in this evidence, so no lever on it is named"
    parts = []
    for lib in sorted(libs):
        lever = LEVERS.get(lib)
        parts.append(f"{lib}: {lever}" if lever else f"{lib}: no lever on it is known to ncclprobe")
    tail = "" if libs & NCCL_LIBRARIES else "; NCCL settings act on none of it (NCCL did not run)"
    return "; ".join(parts) + tail


def moving_part_words(libs: set[str], at_most_ms: float, per_unit_ms: float, unit: str) -> str:
    """What acts on the collectives' time moving data, in sentences: fewer or larger collectives
    always, the levers of what moved the data where it is known (each named with its library,
    none invented where ncclprobe knows none), and NCCL settings only where NCCL or RCCL ran."""
    head = (
        f"The moving part is at most {at_most_ms:.3f} ms of the {per_unit_ms:.3f} ms per {unit}. "
        "Fewer or larger collectives act on it"
    )
    if not libs:
        return head + (
            "; what moved the data is not in this evidence, so no lever of its own is named."
        )
    own = "; ".join(
        f"for {lib}, {LEVERS.get(lib) or 'none that ncclprobe knows'}" for lib in sorted(libs)
    )
    tail = "" if libs & NCCL_LIBRARIES else " NCCL settings act on none of it: NCCL did not run."
    return f"{head}, and so do the levers of what moved the data: {own}.{tail}"
