"""The one sweep spec builder: what a user asks for -> a validated `SweepSpec`.

`SweepRequest` holds typed choices; a field left None takes the default of where the sweep runs
(`ncclprobe.sweep.defaults`: CPU, GPU, a shared GPU, or the quick sweep of `run-engine --tuned`).
`sweep`, `run-engine --tuned` and tests build their specs here, so a default is written once and
every check runs for every caller. Everything is checked before anything is created.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ncclprobe.errors import UsageProblem
from ncclprobe.nccl.recipes import DEFAULT_GRID, check_share_gpu_ranks
from ncclprobe.probes.collectives import COLLECTIVES
from ncclprobe.probes.collectives.base import DTYPES, OPS
from ncclprobe.probes.issue_loop import check as check_issue_loop
from ncclprobe.secrets import refuse_credential
from ncclprobe.sizes import parse_sizes
from ncclprobe.sweep import defaults, setup
from ncclprobe.sweep.defaults import CHOICES
from ncclprobe.sweep.plan import DEFAULT, PLACEMENTS, SweepSpec

OWN_OPTIONS = {"NCCL_PROTO": "--proto", "NCCL_ALGO": "--algo", "NCCL_P2P_LEVEL": "--p2p-level"}


@dataclass(frozen=True, kw_only=True)
class SweepRequest:
    """A sweep as asked for. None: the default of where it runs (`effort`)."""

    sizes: tuple[int, ...] | None = None
    collectives: tuple[str, ...] = CHOICES.collectives  # ("all",): every collective
    dtypes: tuple[str, ...] = CHOICES.dtypes
    ops: tuple[str, ...] = CHOICES.ops
    placement: str = CHOICES.placement  # both | in | out
    modes: tuple[str, ...] | None = None
    warmup: int | None = None
    iters: int | None = None
    trials: int | None = None
    agg: int = CHOICES.agg
    check: bool = CHOICES.check
    buffers: str = CHOICES.buffers
    path: str = CHOICES.path
    iter_events: bool = CHOICES.iter_events
    cost_split: bool = CHOICES.cost_split
    protocols: tuple[str, ...] | None = (
        None  # None: DEFAULT_GRID's, dropped where NCCL tunes nothing
    )
    algorithms: tuple[str, ...] | None = None
    p2p_levels: tuple[str, ...] = CHOICES.p2p_levels
    settings: dict[str, tuple[str, ...]] = field(
        default_factory=dict
    )  # any other NCCL variable -> values
    nranks: int | None = None
    backend: str = CHOICES.backend  # auto | nccl | gloo
    timeout_s: float = CHOICES.timeout_s
    share_gpu: int | None = None  # N ranks on GPU 0 (diagnostic)

    def grid(self, *, tuning_dropped: bool) -> dict[str, tuple[str, ...]]:
        """NCCL variable -> values, without the variables left at `default` only."""
        clash = sorted(set(self.settings) & set(OWN_OPTIONS))
        if clash:
            raise UsageProblem(f"--set {clash[0]}: use its own option ({OWN_OPTIONS[clash[0]]})")
        tuning = (
            {}
            if tuning_dropped
            else {
                "NCCL_PROTO": self.protocols or DEFAULT_GRID["NCCL_PROTO"],
                "NCCL_ALGO": self.algorithms or DEFAULT_GRID["NCCL_ALGO"],
            }
        )
        grid = {**tuning, "NCCL_P2P_LEVEL": self.p2p_levels, **self.settings}
        return {name: tuple(values) for name, values in grid.items() if tuple(values) != (DEFAULT,)}


def effort_for(request: SweepRequest) -> defaults.Effort:
    """The defaults of where the sweep runs: a shared GPU, GPUs, or the CPU."""
    if request.share_gpu is not None:
        return defaults.SHARED_GPU
    on_gpu = request.backend != "gloo" and setup.gpu_count() > 0
    return defaults.GPU if on_gpu else defaults.CPU


def _check_libnccl() -> None:
    """--path nccl calls the libnccl torch ships: say so before any worker starts without one."""
    from ncclprobe.probes.nccl_ctypes import NcclError, library_path

    try:
        library_path()
    except NcclError as exc:
        raise UsageProblem(f"--path nccl: {exc}") from None


def build_spec(
    request: SweepRequest, *, effort: defaults.Effort | None = None, local: bool = True
) -> tuple[SweepSpec, dict[str, str]]:
    """A validated spec and the modes skipped here (mode -> why).

    With one NCCL rank NCCL never runs its tuner (no `NCCL_PROTO set by environment` line, real
    2.28.9 log in the fixtures), so the default protocol/algorithm axes are dropped there; given
    explicitly they are measured and reported as ignored. `local=False` plans for torchrun on other
    hosts: this host's GPU count says nothing about theirs.
    """
    check_issue_loop()  # the raw path's loop, asked for by variable: first, before torch loads
    effort = effort or effort_for(request)
    backend = setup.resolve_backend(request.backend)
    nranks = _ranks(request, backend, local)
    one_rank = (
        backend == "nccl"
        and nranks == 1
        and request.protocols is None
        and request.algorithms is None
    )
    modes, skipped = setup.usable_modes(request.modes or effort.modes, backend)
    if request.placement not in PLACEMENTS:
        raise UsageProblem(
            f"placement {request.placement!r} is not known; use {', '.join(PLACEMENTS)}"
        )
    if request.path == "nccl" and local:
        _check_libnccl()
    if not request.timeout_s > 0:
        raise UsageProblem(f"--timeout must be positive, got {request.timeout_s:g}")
    sizes = request.sizes or (tuple(parse_sizes(effort.sizes)) if effort.sizes else ())
    spec = SweepSpec(
        grid=request.grid(tuning_dropped=one_rank),
        sizes=tuple(sizes),
        collectives=names(request.collectives, COLLECTIVES),
        dtypes=names(request.dtypes, DTYPES),
        ops=names(request.ops, OPS),
        in_place=PLACEMENTS[request.placement],
        modes=modes,
        warmup=_given(request.warmup, effort.warmup),
        iters=_given(request.iters, effort.iters),
        trials=_given(request.trials, effort.trials),
        agg=request.agg,
        check=request.check,
        buffers=request.buffers,
        path=request.path,
        iter_events=request.iter_events,
        cost_split=request.cost_split,
        nranks=nranks,
        backend=backend,
        timeout_s=request.timeout_s,
        share_gpu=request.share_gpu is not None,
    )
    return spec, skipped


def _ranks(request: SweepRequest, backend: str, local: bool) -> int:
    share = request.share_gpu
    if share is not None:
        check_share_gpu_ranks(share)
        if request.nranks and request.nranks != share:
            raise UsageProblem(
                f"--nranks {request.nranks} contradicts --share-gpu {share}, which sets the rank count"
            )
        if not local:
            raise UsageProblem(
                "--share-gpu runs every rank on this host's GPU 0; it cannot be planned for torchrun"
            )
    nranks = share if share is not None else request.nranks
    if nranks is None:
        nranks = setup.gpu_count() if backend == "nccl" else 2
    if local:
        setup.check_ranks(backend, nranks, share_gpu=share is not None)
    return nranks


def _given(value: int | None, default: int) -> int:
    return default if value is None else value


def names(given: tuple[str, ...], universe) -> tuple[str, ...]:
    """The names in the order given, each once; ("all",) -> every name of `universe`."""
    given = tuple(dict.fromkeys(given))
    return tuple(universe) if given == ("all",) else given


def split_list(text: str) -> tuple[str, ...]:
    """`a, b,c` -> ("a", "b", "c"): the comma lists of the command line."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def parse_settings(items) -> dict[str, tuple[str, ...]]:
    """`--set NCCL_VAR=v1,v2` items -> {NCCL_VAR: (v1, v2)}; later items of one variable win."""
    settings = {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or not name.strip() or not split_list(values):
            raise UsageProblem(f"--set {item!r}: expected NCCL_VAR=value1,value2")
        settings[name.strip()] = split_list(values)
        for value in settings[name.strip()]:
            refuse_credential("--set", name.strip(), value)
    return settings
