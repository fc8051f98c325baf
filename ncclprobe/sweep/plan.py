"""The sweep's grid and its plan: which configurations share a pool of worker processes.

NCCL reads some variables at every communicator creation and others once per process
(`ncclprobe.nccl.knobs`, Scope). A pool of worker processes can therefore try every value of the
per-communicator variables by building a fresh communicator per configuration, but a new value
of a once-per-process variable needs new processes. The planner groups configurations by their
once-per-process settings, so a new pool starts only when one of those changes. It plans by
`proof_scope`: a variable NCCL re-reads per communicator but logs only once (NCCL_LAUNCH_MODE)
gets a process per value too, so NCCL's log can prove each one.

NCCL_NO_CACHE (2.29.7+) lifts NCCL's once-per-process cache of the variables it lists. The plan
does not lean on it: a once-per-process variable still gets a pool per value (right with or
without the cache), and NCCL_NO_CACHE itself is read once per process (std::call_once), so each
of its values is a pool of its own.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from ncclprobe.errors import UsageProblem
from ncclprobe.nccl.knob_row import Scope
from ncclprobe.nccl.knobs import proof_scope
from ncclprobe.nccl.recipes import NOT_WITH_SHARED_GPU, PROOF_VARIABLES, check_share_gpu_ranks
from ncclprobe.nccl.values import validate_value
from ncclprobe.probes.collectives import COLLECTIVES
from ncclprobe.probes.collectives.base import DTYPES, OPS, element_size
from ncclprobe.records import config_id
from ncclprobe.sweep import defaults
from ncclprobe.sweep.defaults import CHOICES

DEFAULT = defaults.UNSET  # the grid value meaning "leave the variable unset"
PLACEMENTS = {"both": (True, False), "in": (True,), "out": (False,)}  # --placement: in_place values
MODES = ("eager", "graph")
BUFFERS = ("rotate", "reuse")
PATHS = ("torch", "nccl")


@dataclass(frozen=True, kw_only=True)
class SweepSpec:
    """Everything a sweep measures; stored in the results header so --resume can continue it."""

    grid: dict[str, tuple[str, ...]]  # NCCL variable -> values to try ("default" = unset)
    sizes: tuple[int, ...]  # message sizes, bytes (nccl-tests' size: see Collective.shape)
    collectives: tuple[str, ...] = CHOICES.collectives
    dtypes: tuple[str, ...] = CHOICES.dtypes
    ops: tuple[str, ...] = CHOICES.ops  # reduction ops of the reducing collectives
    in_place: tuple[bool, ...] = PLACEMENTS[CHOICES.placement]
    modes: tuple[str, ...] = ("eager",)  # "eager" and/or "graph" (graph needs CUDA)
    warmup: int = defaults.CPU.warmup  # untimed iterations before the trials, per size
    iters: int = defaults.CPU.iters  # iterations per timed trial (a graph captures them)
    trials: int = defaults.CPU.trials  # timed trials per size; median and p10/p90 over them
    agg: int = CHOICES.agg  # collectives per iteration, in one NCCL group (nccl-tests -m)
    check: bool = CHOICES.check  # the exact correctness pass (nccl-tests -c)
    buffers: str = CHOICES.buffers  # rotate a largest-message buffer (nccl-tests) or reuse one
    path: str = CHOICES.path  # torch.distributed, or NCCL's own calls (ctypes)
    iter_events: bool = CHOICES.iter_events  # a CUDA event per eager iteration
    cost_split: bool = CHOICES.cost_split  # eager NCCL rows also timed through the other path
    nranks: int = 2
    backend: str = "gloo"  # "nccl" (one GPU per rank) or "gloo" (CPU): resolved, never auto
    timeout_s: float = CHOICES.timeout_s  # longest a pool may stay silent before it hangs
    share_gpu: bool = False  # every rank on GPU 0, each with its own NCCL_HOSTID (diagnostic)

    def __post_init__(self):
        _one_of("collective", self.collectives, COLLECTIVES)
        _one_of("dtype", self.dtypes, DTYPES)
        _one_of("op", self.ops, OPS)
        _one_of("mode", self.modes, MODES)
        _one_of("buffers", (self.buffers,), BUFFERS)
        _one_of("path", (self.path,), PATHS)
        for name, value in (
            ("warmup", self.warmup),
            ("iters", self.iters),
            ("trials", self.trials),
            ("agg", self.agg),
        ):
            if value < (0 if name == "warmup" else 1):
                raise UsageProblem(
                    f"--{name} must be {'0 or more' if name == 'warmup' else 'at least 1'}, got {value}"
                )
        if self.nranks < 1:
            raise UsageProblem(f"--nranks must be at least 1, got {self.nranks}")
        if not self.sizes:
            raise UsageProblem("no message sizes to measure")
        if self.path == "nccl" and self.backend != "nccl":
            raise UsageProblem("--path nccl calls NCCL itself on CUDA GPUs; this run uses gloo")
        for dtype in self.dtypes:
            odd = [size for size in self.sizes if size % element_size(dtype)]
            if odd:  # the record's size_bytes must be the bytes moved, which are whole elements
                raise UsageProblem(
                    f"size {odd[0]} bytes is not a whole number of {dtype} elements "
                    f"({element_size(dtype)} bytes each); use multiples of {element_size(dtype)}"
                )
        if not plan_cases(self)[0]:
            raise UsageProblem("nothing to measure: " + "; ".join(plan_cases(self)[1]))
        for name, values in self.grid.items():
            if not name.startswith("NCCL_"):
                raise UsageProblem(f"--set {name}: only NCCL_* variables can be swept")
            if (
                name in PROOF_VARIABLES
            ):  # a swept value would hide the proof and mark every setting ignored
                raise UsageProblem(
                    f"--set {name}: the sweep sets {', '.join(PROOF_VARIABLES)} itself to read "
                    "NCCL's log of what it read and chose; it cannot be swept"
                )
            for value in values:
                if value != DEFAULT:
                    validate_value(name, value)
        if self.share_gpu:
            self._check_share_gpu()

    def _check_share_gpu(self) -> None:
        if self.backend != "nccl":
            raise UsageProblem(
                f"--share-gpu needs the NCCL backend on a CUDA GPU; this run uses {self.backend}"
            )
        check_share_gpu_ranks(self.nranks)
        for name in sorted(set(self.grid) & set(NOT_WITH_SHARED_GPU)):
            if set(self.grid[name]) != {DEFAULT}:
                raise UsageProblem(
                    f"--share-gpu: {name} cannot be swept: {NOT_WITH_SHARED_GPU[name]}"
                )

    def to_json(self) -> dict:
        return {
            "grid": {k: list(v) for k, v in self.grid.items()},
            "sizes": list(self.sizes),
            "collectives": list(self.collectives),
            "dtypes": list(self.dtypes),
            "ops": list(self.ops),
            "in_place": list(self.in_place),
            "modes": list(self.modes),
            "warmup": self.warmup,
            "iters": self.iters,
            "trials": self.trials,
            "agg": self.agg,
            "check": self.check,
            "buffers": self.buffers,
            "path": self.path,
            "iter_events": self.iter_events,
            "cost_split": self.cost_split,
            "nranks": self.nranks,
            "backend": self.backend,
            "timeout_s": self.timeout_s,
            "share_gpu": self.share_gpu,
        }

    @classmethod
    def from_json(cls, doc: dict) -> SweepSpec:
        doc = dict(doc)
        if (
            "collective" in doc
        ):  # results files written before the sweep measured several collectives
            doc["collectives"] = [doc.pop("collective")]
        if "dtype" in doc:
            doc["dtypes"] = [doc.pop("dtype")]
        tuples = {"sizes", "in_place", "modes", "collectives", "dtypes", "ops"}
        fields: dict[str, Any] = {
            k: (tuple(v) if k in tuples else v) for k, v in doc.items() if k != "grid"
        }
        return cls(grid={k: tuple(v) for k, v in doc["grid"].items()}, **fields)


def _one_of(what: str, values, known) -> None:
    if not values:
        raise UsageProblem(f"no {what} given")
    for value in values:
        if value not in known:
            raise UsageProblem(f"{what} {value!r} is not known; use {', '.join(known)}")


def plan_cases(spec: SweepSpec) -> tuple[list[dict], list[str]]:
    """Every (collective, op, dtype) the sweep measures, and one line per combination it cannot,
    with why (a backend without the dtype, a result the dtype cannot hold exactly, ...).

    A collective that reduces nothing runs once per dtype, whatever --op says (redop "none")."""
    cases, skipped = [], []
    for name in spec.collectives:
        coll = COLLECTIVES[name]
        for dtype in spec.dtypes:
            for op in spec.ops if coll.reduces else ("none",):
                why = (
                    coll.unsupported(dtype, op, spec.backend, spec.path)
                    or coll.ranks_problem(spec.nranks, spec.path)
                    or _placement_problem(coll, spec)
                    or _agg_problem(coll, spec)
                    or (coll.exactness_problem(dtype, op, spec.nranks) if spec.check else None)
                )
                if why:
                    skipped.append(f"{name} {op} {dtype}: {why}")
                else:
                    cases.append({"collective": name, "op": op, "dtype": dtype})
    return cases, list(dict.fromkeys(skipped))


def _placement_problem(coll, spec: SweepSpec) -> str | None:
    if not set(spec.in_place) & set(coll.placements):
        return "it has no in-place form (out of place only)"
    return None


def _agg_problem(coll, spec: SweepSpec) -> str | None:
    if spec.agg > 1 and coll.name == "sendrecv" and spec.path == "torch" and spec.backend == "nccl":
        return "torch's batch_isend_irecv opens its own NCCL group, so it cannot be aggregated (use --path nccl)"
    return None


@dataclass(frozen=True)
class Config:
    settings: dict[str, str]  # variables this configuration sets; absent = unset

    @property
    def config_id(self) -> str:
        return config_id(self.settings)

    @property
    def process_settings(self) -> dict[str, str]:
        return {k: v for k, v in self.settings.items() if proof_scope(k) is Scope.PROCESS}

    @property
    def comm_settings(self) -> dict[str, str]:
        return {k: v for k, v in self.settings.items() if proof_scope(k) is Scope.COMMUNICATOR}


@dataclass
class Pool:
    """Configurations that can share worker processes: the same once-per-process settings."""

    process_settings: dict[str, str]
    configs: list[Config] = field(default_factory=list)


@dataclass
class Skip:
    config: Config
    reason: str
    measured_as: str  # config_id of the configuration that stands for it


def build_grid(grid: dict[str, tuple[str, ...]]) -> list[Config]:
    """Every combination of the grid's values, all-default first; `default` leaves a variable unset."""
    names = sorted(grid)
    combos = itertools.product(*(_unique(grid[name]) for name in names))
    configs = [Config({n: v for n, v in zip(names, values) if v != DEFAULT}) for values in combos]
    configs.sort(key=lambda c: (len(c.settings) > 0,))  # stable: keeps the grid order otherwise
    return configs


def _unique(values) -> list[str]:
    return list(dict.fromkeys(values)) or [DEFAULT]


def plan_pools(configs: list[Config]) -> list[Pool]:
    """Group configurations by their once-per-process settings, in first-seen order."""
    pools: dict[tuple, Pool] = {}
    for config in configs:
        key = tuple(sorted(config.process_settings.items()))
        pools.setdefault(key, Pool(process_settings=dict(key))).configs.append(config)
    return list(pools.values())


def skip_equivalent_levels(
    configs: list[Config], groups: list[list[str]]
) -> tuple[list[Config], list[Skip]]:
    """Keep one P2P level of each group that connects the same GPU pairs on this topology.

    `groups` comes from `ncclprobe.evidence.node.topo.equivalent_levels`: levels in one group make NCCL
    connect exactly the same pairs peer-to-peer, so measuring more than one of them measures the
    same thing twice. `default` is never skipped (it is the baseline).
    """
    keep: list[Config] = []
    skips: list[Skip] = []
    seen: dict[tuple, Config] = {}
    group_of = {level: tuple(group) for group in groups if len(group) > 1 for level in group}
    for config in configs:
        level = config.settings.get("NCCL_P2P_LEVEL")
        if level not in group_of:
            keep.append(config)
            continue
        rest = {k: v for k, v in config.settings.items() if k != "NCCL_P2P_LEVEL"}
        key = (group_of[level], tuple(sorted(rest.items())))
        if key in seen:
            first = seen[key]
            skips.append(
                Skip(
                    config,
                    f"NCCL_P2P_LEVEL={level} connects the same GPU pairs as "
                    f"{first.settings['NCCL_P2P_LEVEL']} on this topology; measured once as "
                    f"{first.config_id}",
                    first.config_id,
                )
            )
        else:
            seen[key] = config
            keep.append(config)
    return keep, skips
