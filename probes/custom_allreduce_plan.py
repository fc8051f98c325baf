"""What the custom all-reduce probe will measure, decided before any process starts.

Pure functions of the spec and of facts about the machine (which GPUs reach which by P2P, which
links are NVLink, whether Triton imports), so everything here is tested on CPU:
  - `CustomAllReduceSpec`: the request, validated (bad values are a UsageProblem, exit 2);
  - `steps`: the ordered (dtype, size, method, mode) list every rank walks in lockstep;
  - `unavailable_before_launch`: methods that cannot run here and why, known without trying;
  - `engine_notes`: what vLLM and SGLang would do on this topology (they switch their own custom
    all-reduce off on more than two PCIe-only GPUs), so a user can map our figures to their engine.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ncclprobe.dtypes import ELEMENT_BYTES
from ncclprobe.errors import UsageProblem
from ncclprobe.nccl.recipes import check_share_gpu_ranks
from ncclprobe.sizes import format_size

METHODS = ("nccl", "ipc-oneshot", "ipc-twoshot", "symm-oneshot", "symm-twoshot")
IPC_METHODS, SYMM_METHODS = ("ipc-oneshot", "ipc-twoshot"), ("symm-oneshot", "symm-twoshot")
MODES = ("eager", "graph")
DTYPES = {
    name: ELEMENT_BYTES[name] for name in ("bfloat16", "float32")
}  # every method handles both (torch's symm-mem ops: these two)
DEFAULT_SIZES = tuple(4096 << i for i in range(9))  # 4K..1M: decode-step all-reduces
MAX_SIZE = 64 << 20
MAX_IPC_RANKS = 8  # custom_allreduce_kernel.MAX_RANKS
VLLM_WORLD_SIZES = (2, 4, 6, 8)  # vllm custom_all_reduce.py _SUPPORTED_WORLD_SIZES


@dataclass(frozen=True, kw_only=True)
class CustomAllReduceSpec:
    sizes: tuple[int, ...] = DEFAULT_SIZES
    dtypes: tuple[str, ...] = ("bfloat16",)
    methods: tuple[str, ...] = METHODS
    modes: tuple[str, ...] = MODES
    nranks: int = 0  # one GPU per rank; 0: every visible GPU
    share_gpu: int = 0  # >= 2: that many ranks on GPU 0 (correctness only); 0: off
    iters: int = 50  # eager calls per trial
    trials: int = 5
    warmup: int = 5  # untimed calls before the trials
    graph_ops: int = 20  # all-reduces captured in the timed graph
    replays: int = 5  # replays of that graph per trial
    checks: int = 3  # correctness calls (fresh inputs each) per step
    max_spins: int = 1 << 25  # polls a barrier waits for one peer before it gives up
    max_blocks: int = 0  # blocks per custom kernel; 0: the GPU's SM count (at most 32)
    timeout_s: float = 300.0  # the pool's longest silence

    def __post_init__(self):
        _check_choices("dtype", self.dtypes, DTYPES)
        _check_choices("method", self.methods, METHODS)
        _check_choices("mode", self.modes, MODES)
        self._check_sizes()
        counts = {
            "iters": self.iters,
            "trials": self.trials,
            "graph-ops": self.graph_ops,
            "replays": self.replays,
            "checks": self.checks,
            "max-spins": self.max_spins,
        }
        low = [f"--{name} {value}" for name, value in counts.items() if value < 1]
        if low or self.warmup < 0 or self.max_blocks < 0:
            raise UsageProblem(
                f"counts must be at least 1 (warmup and max-blocks at least 0): {', '.join(low)}"
            )
        if self.share_gpu:
            check_share_gpu_ranks(self.share_gpu)
        if self.share_gpu and self.nranks:
            raise UsageProblem(
                f"--share-gpu {self.share_gpu} sets the number of ranks (all on GPU 0); "
                f"drop --nranks {self.nranks}"
            )
        if self.nranks == 1 or self.nranks < 0:
            raise UsageProblem(f"--nranks needs at least 2 (one GPU each), got {self.nranks}")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise UsageProblem(
                f"--timeout must be a positive number of seconds, got {self.timeout_s}"
            )

    def _check_sizes(self) -> None:
        if not self.sizes:
            raise UsageProblem("no sizes given")
        for size in self.sizes:
            if size > MAX_SIZE:
                raise UsageProblem(
                    f"size {format_size(size)} is above the probe's limit of {format_size(MAX_SIZE)} "
                    "(custom all-reduce is for small messages)"
                )
            for dtype in self.dtypes:
                if size % DTYPES[dtype]:
                    raise UsageProblem(
                        f"size {size} bytes is not a whole number of {dtype} elements "
                        f"({DTYPES[dtype]} bytes each)"
                    )

    def world_size(self, gpus: int) -> int:
        return self.share_gpu or self.nranks or gpus

    def to_json(self) -> dict:
        return {
            **asdict(self),
            "sizes": list(self.sizes),
            "dtypes": list(self.dtypes),
            "methods": list(self.methods),
            "modes": list(self.modes),
        }


def _check_choices(what: str, given: tuple[str, ...], allowed) -> None:
    if not given:
        raise UsageProblem(f"no {what} given; choose from {', '.join(allowed)}")
    unknown = [g for g in given if g not in allowed]
    if unknown:
        raise UsageProblem(f"unknown {what} {unknown[0]!r}; choose from {', '.join(allowed)}")
    if len(set(given)) != len(given):
        raise UsageProblem(f"a {what} is given twice: {', '.join(given)}")


def steps(spec: CustomAllReduceSpec, skip: dict[str, str]) -> list[dict]:
    """Every measurement in the order the ranks walk them: dtype, size, method, mode."""
    methods = [m for m in spec.methods if m not in skip]
    return [
        {"dtype": dtype, "size_bytes": size, "method": method, "mode": mode}
        for dtype in spec.dtypes
        for size in spec.sizes
        for method in methods
        for mode in spec.modes
    ]


def unavailable_before_launch(
    spec: CustomAllReduceSpec,
    world: int,
    *,
    triton_error: str | None,
    no_peer_access: list[tuple[int, int]],
) -> dict[str, str]:
    """{method: why} for the methods that cannot work here, from facts known before launch."""
    out: dict[str, str] = {}
    if no_peer_access:
        pairs = ", ".join(f"{a}-{b}" for a, b in no_peer_access)
        why = (
            f"needs P2P access between every pair of GPUs, and GPU pair(s) {pairs} have none "
            "(torch.cuda.can_device_access_peer is False)"
        )
        out.update({m: why for m in IPC_METHODS + SYMM_METHODS})
    for method in IPC_METHODS:
        if world > MAX_IPC_RANKS:
            out.setdefault(
                method,
                f"our IPC kernels handle at most {MAX_IPC_RANKS} ranks, this run has {world}",
            )
        if triton_error:
            out.setdefault(method, f"needs Triton, which does not import here ({triton_error})")
    return {m: why for m, why in out.items() if m in spec.methods}


SYMM_NOTE = (
    "symm-* are torch's peer-to-peer one-shot/two-shot kernels; vLLM's symmetric-memory "
    "all-reduce uses them only on compute capability 9.0 and 10.x and only where NVLink multicast "
    "exists (it stays off when the rendezvous has no multicast address), and this probe never creates "
    "multicast objects"
)


def engine_notes(
    world: int, share_gpu: bool, all_nvlink: bool | None, methods=METHODS
) -> list[str]:
    """What vLLM/SGLang do with their own custom all-reduce on this topology."""
    notes = [SYMM_NOTE] if set(methods) & set(SYMM_METHODS) else []
    if share_gpu:
        return notes
    if world > 2 and all_nvlink is False:
        notes.append(
            f"{world} GPUs without NVLink between every pair: vLLM and SGLang switch their custom "
            'all-reduce off here ("not supported on more than two PCIe-only GPUs"), so their '
            "engines use NCCL; it is measured here anyway"
        )
    elif world > 2 and all_nvlink is None:
        notes.append(
            "link types unknown: vLLM and SGLang use their custom all-reduce on more than two GPUs "
            "only when every pair is NVLink-connected"
        )
    if world not in VLLM_WORLD_SIZES:
        notes.append(
            f"vLLM's custom all-reduce supports {', '.join(map(str, VLLM_WORLD_SIZES))} ranks only; "
            f"with {world} it uses NCCL"
        )
    return notes


def no_peer_access_pairs(
    peer_access: list[list[bool]] | None, gpus: list[int]
) -> list[tuple[int, int]]:
    """GPU pairs among `gpus` without peer access (both directions must work)."""
    if peer_access is None:
        return []
    return [
        (a, b)
        for i, a in enumerate(gpus)
        for b in gpus[i + 1 :]
        if not (peer_access[a][b] and peer_access[b][a])
    ]


def physical_gpus(gpus: list[int], visible: str | None) -> list[int] | None:
    """nvidia-smi's indices of torch's devices `gpus`, through CUDA_VISIBLE_DEVICES; None when it
    names devices by UUID (or names too few), so the link matrix cannot be matched to the ranks."""
    if not visible:
        return list(gpus)
    names = [name.strip() for name in visible.split(",")]
    if not all(name.isascii() and name.isdigit() for name in names) or max(gpus, default=0) >= len(
        names
    ):
        return None
    return [int(names[g]) for g in gpus]


def all_nvlink(links: list[list[str | None]] | None, gpus: list[int] | None) -> bool | None:
    """True when every pair among `gpus` (nvidia-smi's indices) is NVLink (NV# codes); None when a
    link is unknown."""
    if links is None or gpus is None or max(gpus, default=0) >= len(links):
        return None
    codes = [links[a][b] for i, a in enumerate(gpus) for b in gpus[i + 1 :]]
    known = [code for code in codes if code is not None]
    if len(known) < len(codes):
        return None
    return all(code.startswith("NV") for code in known)
