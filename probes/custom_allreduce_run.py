"""The custom all-reduce probe, parent side: read the machine, decide what can run, start the
ranks, and hand their messages to the report. The measurements are in `custom_allreduce`.

Every worker environment keeps NVLink multicast off (NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1): the probe compares point-to-point
paths, and multicast objects are not to be created on shared machines. Under --share-gpu every
rank runs on GPU 0 with ncclprobe's NCCL_HOSTID recipe (ncclprobe.nccl.recipes: NCCL refuses two
ranks on one GPU otherwise) and torch's symmetric memory is told that ranks may share a device.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import asdict, dataclass

from ncclprobe.errors import Unsupported
from ncclprobe.launch import PoolSpec, run_pool
from ncclprobe.nccl.recipes import NO_NVLS, SHARE_GPU_RANK_ENV
from ncclprobe.probes.custom_allreduce_plan import (
    CustomAllReduceSpec,
    all_nvlink,
    no_peer_access_pairs,
    physical_gpus,
    steps,
    unavailable_before_launch,
)
from ncclprobe.probes.custom_allreduce_report import build_document

ENTRY = "ncclprobe.probes.custom_allreduce:run"
NO_MULTICAST_ENV = {**NO_NVLS, "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
SHARED_DEVICE_ENV = {"TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES": "1"}


@dataclass
class Machine:
    """What is known before launch: where each rank runs and what the links allow."""

    gpus: list[int]  # the GPU of each rank
    gpu_count: int
    triton_error: str | None  # why Triton does not import; None when it does
    no_peer_access: list[tuple[int, int]]  # GPU pairs (among `gpus`) without P2P
    all_nvlink: bool | None  # every pair NVLink; None when a link is unknown
    links: list[list[str | None]] | None  # nvidia-smi codes, GPU x GPU

    @property
    def world(self) -> int:
        return len(self.gpus)


def read_machine(spec: CustomAllReduceSpec) -> Machine:
    """Raise Unsupported (exit 3) with the reason when this machine cannot run the probe."""
    import torch
    import torch.distributed as dist

    mode = (
        f" (--share-gpu {spec.share_gpu} too: its ranks share one CUDA GPU)"
        if spec.share_gpu
        else ""
    )
    if not torch.cuda.is_available():
        raise Unsupported(
            f"custom-allreduce needs CUDA GPUs{mode}: torch.cuda.is_available() is False on this machine"
        )
    if not dist.is_nccl_available():
        raise Unsupported(
            "custom-allreduce needs torch built with NCCL: "
            "torch.distributed.is_nccl_available() is False"
        )
    count = torch.cuda.device_count()
    world = spec.world_size(count)
    if not spec.share_gpu and world < 2:
        raise Unsupported(
            f"custom-allreduce needs two ranks and this machine has {count} GPU; --share-gpu 2 runs "
            "two ranks on it (correctness only: their times are not link times)"
        )
    if not spec.share_gpu and world > count:
        raise Unsupported(
            f"--nranks {world} needs {world} GPUs (one per rank); this machine has {count}"
        )
    gpus = [0] * world if spec.share_gpu else list(range(world))
    links, peer = _topology()
    return Machine(
        gpus=gpus,
        gpu_count=count,
        triton_error=_triton_error(),
        no_peer_access=[] if spec.share_gpu else no_peer_access_pairs(peer, gpus),
        all_nvlink=None
        if spec.share_gpu
        else all_nvlink(links, physical_gpus(gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))),
        links=links,
    )


def _triton_error() -> str | None:
    try:
        importlib.import_module("triton")
    except Exception as exc:  # noqa: BLE001  (ImportError, or a broken install)
        return f"{type(exc).__name__}: {exc}"
    return None


def _topology() -> tuple[list[list[str | None]] | None, list[list[bool]] | None]:
    """(nvidia-smi link codes, torch's peer-access matrix); None for what cannot be read (then the
    notes say the links are unknown, and a missing peer access shows when the ranks try)."""
    try:
        from ncclprobe.evidence.live.topo_live import read_live_topology

        topo = read_live_topology()
    except Exception:  # noqa: BLE001  (no nvidia-smi, no NVML, no torch view)
        return None, None
    return topo.gpu_links, topo.peer_access


def pool_spec(spec: CustomAllReduceSpec, machine: Machine, skip: dict[str, str]) -> PoolSpec:
    payload = {
        **spec.to_json(),
        "skip": sorted(skip),
        "steps": steps(spec, skip),
        "max_bytes": max(spec.sizes),
    }
    env = dict(NO_MULTICAST_ENV)
    if spec.share_gpu:
        env.update(SHARED_DEVICE_ENV)
    return PoolSpec(
        nranks=machine.world,
        backend="nccl",
        entry=ENTRY,
        payload=payload,
        env=env,
        timeout_s=spec.timeout_s,
        rank_env=dict(SHARE_GPU_RANK_ENV) if spec.share_gpu else {},
        gpu=0 if spec.share_gpu else None,
    )


def run_custom_allreduce(spec: CustomAllReduceSpec, on_step=None) -> dict:
    """Measure and return the probe's document (see custom_allreduce_report.build_document).
    `on_step(step, total)` is called as rank 0 finishes each step (progress)."""
    machine = read_machine(spec)
    skip = unavailable_before_launch(
        spec,
        machine.world,
        triton_error=machine.triton_error,
        no_peer_access=machine.no_peer_access,
    )
    pool_request = pool_spec(spec, machine, skip)
    total = len(pool_request.payload["steps"])

    def on_message(message: dict) -> None:
        if on_step and message.get("rank") == 0 and message.get("kind") in ("result", "dropped"):
            on_step(message, total)

    outcome = run_pool(pool_request, on_message=on_message)
    pool = {"status": outcome.status, "reason": outcome.reason, "wall_s": round(outcome.wall_s, 3)}
    return build_document(spec, asdict(machine), skip, outcome.messages, pool)
