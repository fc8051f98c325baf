"""The host work the device waited for, per step: which Python function ran while the GPU idled,
and which call drained it first (a `.item()`, a `cudaStreamSynchronize`, a device-to-host copy).

What is kept while streaming (`HostCollector`, fed by `timeline.read_timeline`): Python functions
(`python_function`, only in traces recorded with `with_stack=True`) and CPU ops of at least
HOST_MIN_US (shorter ones cannot cover an idle gap worth naming; their time stays with the
function that called them), every module call (`nn.Module: ...`), and the ops that make the host
wait for the device whatever their length (`SYNC_OPS`).

What is measured (`host_time`), per step on the thread that ran the step:
- the gaps: the step's time outside the model's top-level forward (its outermost `nn.Module` calls,
  which a trace holds only with Python functions) and, on a GPU trace, with no kernel or copy
  running on the GPU: host work the device waits for (idle time inside the forward is the kernel
  launches', which the eager-step rules weigh). On a CPU-only trace there is no device to idle and
  the model runs on the host, so the gaps are the step's time outside the forward, said so in
  `basis`;
- calls into torch.distributed count as the collective's time (waiting for the peers included),
  which the collective rules weigh: they are no gap either;
- each gap's time is given to the innermost Python function running then (exclusive time, so a
  caller is not counted for its callee), then to that function's nearest frame of the job's or the
  engine's own code (not torch, the standard library or a builtin): the function named;
- the call: the builtin or op that function was in (`<built-in method item ...>`), or, on a GPU,
  the last synchronising call before the gap (what ran the GPU's queue dry).
A trace without Python functions (recorded without with_stack) has no forward to set the gaps
by: nothing is measured (`host_time` is None), and the rule says what is missing.
"""

from __future__ import annotations

import bisect
import re
import statistics
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

HOST_MIN_US = 20.0
# aten ops that wait for the device's result on the host (a scalar or a shape read back)
SYNC_OPS = frozenset(
    {
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::is_nonzero",
        "aten::nonzero",
        "aten::equal",
        "aten::allclose",
        "aten::masked_select",
        "aten::unique",
        "aten::_unique2",
        "aten::repeat_interleave",
    }
)
_ADDRESS = re.compile(r" (?:at|object at) 0x[0-9a-fA-F]+| of pybind11_builtins\.[A-Za-z0-9_]+")
_PY_NAME = re.compile(r"^(?P<path>[^()]+)\((?P<line>\d+)\): (?P<func>.+)$")
LIBRARIES = ("torch/", "torch\\", "<", "nn.Module:", "threading.py", "contextlib.py")
COLLECTIVE_CODE = ("torch/distributed/", "torch\\distributed\\")
TOP = 3  # functions named
MIN_NAMED_SHARE = 0.01  # a function after the first is named only from this share of the gaps


@dataclass(slots=True)
class HostSpan:
    ts: float
    end: float
    tid: object
    name: str
    kind: str  # py | module | op


@dataclass
class HostCollector:
    spans: list[HostSpan] = field(default_factory=list)
    python: bool = False  # the trace holds Python functions (with_stack=True)

    def python_function(self, ev: dict, ts: float, dur: float) -> None:
        self.python = True
        name = str(ev.get("name", ""))
        kind = "module" if name.startswith("nn.Module:") else "comm" if _collective(name) else "py"
        if kind != "py" or dur >= HOST_MIN_US:
            self.spans.append(HostSpan(ts, ts + dur, ev.get("tid"), _ADDRESS.sub("", name), kind))

    def cpu_op(self, ev: dict, name: str, ts: float, dur: float) -> None:
        if dur >= HOST_MIN_US or name in SYNC_OPS:
            self.spans.append(HostSpan(ts, ts + dur, ev.get("tid"), name, "op"))


def _collective(name: str) -> bool:
    """A call into torch.distributed: its time is the collective's (waiting for the peers
    included), which the collective rules weigh, not host work."""
    return name.startswith(COLLECTIVE_CODE)


@dataclass(frozen=True)
class HostFunction:
    function: str  # `generate.py(33): ngram_lookup`, or an op where the trace has no Python
    call: str | None  # the builtin, op or synchronising call it was in
    ms_per_step: float  # gap time it covered, per step (mean over the steps)
    share: float  # of all the steps' gap time
    steps: int  # steps it covered gap time in
    syncs_per_step: float = 0.0  # the host syncs (SYNC_OPS) it made per step


@dataclass(frozen=True)
class HostReport:
    basis: str  # gpu-idle | outside-forward
    steps: int
    gap_ms_per_step: float
    step_ms: float  # median step
    functions: tuple[HostFunction, ...]
    python: bool  # the trace holds Python functions
    notes: tuple[str, ...] = ()

    @property
    def gap_share(self) -> float:
        return self.gap_ms_per_step / self.step_ms if self.step_ms else 0.0


def host_time(
    spans: list[HostSpan], python: bool, steps: list[Any], kernels: list[Any]
) -> HostReport | None:
    """The report over `steps` (steps.Step: t0, t1 on the host clock), or None when it cannot be
    measured: no step, or a CPU-only trace without the model's forward to set the gaps by."""
    if not steps or not python:
        return None  # without Python functions there is no forward to set the gaps by
    gpu = bool(kernels)
    busy = _union((k.ts, k.end) for k in kernels) if gpu else None
    by_tid: dict = {}
    for span in spans:
        by_tid.setdefault(span.tid, []).append(span)
    totals: dict[tuple[str, str | None], list[float]] = {}
    syncs: dict[str, dict[str, int]] = {}
    gap_total, measured = 0.0, 0
    for step in steps:
        window = _Window(step.t0, _step_end(step))
        tid = _step_thread(by_tid, window)
        mine = by_tid.get(tid, [])
        inside = [s for s in mine if s.end > window.t0 and s.ts < window.t1]
        gaps = _gaps(window, busy, inside)
        if gaps is None:
            continue
        measured += 1
        gap_total += sum(b - a for a, b in gaps)
        for key, us in _attribute(inside, gaps, gpu).items():
            totals.setdefault(key, []).append(us)
        for function, op in _syncs(inside):
            counts = syncs.setdefault(function, {})
            counts[op] = counts.get(op, 0) + 1
    if not measured:
        return None
    functions = _ranked(totals, measured, gap_total, syncs)
    step_ms = statistics.median((_step_end(s) - s.t0) / 1000.0 for s in steps)
    return HostReport(
        basis="gpu-idle" if gpu else "outside-forward",
        steps=measured,
        gap_ms_per_step=gap_total / measured / 1000.0,
        step_ms=step_ms,
        functions=functions,
        python=python,
    )


@dataclass(frozen=True)
class _Window:
    t0: float
    t1: float


def _step_end(step: Any) -> float:
    """A step lasts until its host window ends or its own kernels end, whichever is later: a GPU
    running behind the host is not waiting for it."""
    return float(max([step.t1] + [k.end for k in getattr(step, "kernels", None) or ()]))


def _step_thread(by_tid: dict[Any, list[HostSpan]], step: Any) -> Any:
    """The thread that ran the step: the one running the model's forward in it (another thread's
    long spans, a watcher's loop, cover the step without running it), else the one whose spans
    cover most of it."""

    def covered(spans: list[HostSpan], kinds: tuple[str, ...]) -> float:
        return sum(
            float(min(s.end, step.t1) - max(s.ts, step.t0))
            for s in spans
            if s.kind in kinds and s.end > step.t0 and s.ts < step.t1
        )

    return max(
        by_tid,
        key=lambda tid: (covered(by_tid[tid], ("module",)), covered(by_tid[tid], ("py", "comm"))),
        default=None,
    )


def _gaps(
    step: Any, busy: list[tuple[float, float]] | None, inside: list[HostSpan]
) -> list[tuple[float, float]] | None:
    """The step's time outside the model's forward (its outermost module calls) and, on a GPU
    trace, with no kernel running: host work the device waits for. Idle time inside the forward is
    the launches' (the eager-step rules weigh it). None without a forward in the step: nothing
    tells the model's time from the host's there."""
    forwards = _outermost([s for s in inside if s.kind == "module"])
    if not forwards:
        return None
    collectives = [(s.ts, s.end) for s in inside if s.kind == "comm"]
    return _complement(_union(list(busy or []) + forwards + collectives), step.t0, step.t1)


def _attribute(
    inside: list[HostSpan], gaps: list[tuple[float, float]], gpu: bool
) -> dict[tuple[str, str | None], float]:
    """Gap time per (function named, call), each gap piece given to the innermost span over it."""
    tree = sorted((s for s in inside if s.kind in ("py", "op")), key=lambda s: (s.ts, -s.end))
    parents = _parents(tree)
    syncs = sorted((s.end, s.name) for s in inside if s.name in SYNC_OPS) if gpu else []
    out: dict[tuple[str, str | None], float] = {}
    for (a, b), index in _pieces(tree, parents, gaps):
        if index is None:
            continue  # the host ran nothing either: the device waited for no host work
        chain = _chain(tree, parents, index)
        named = next((s for s in chain if s.kind == "py" and _own(s.name)), None)
        leaf = chain[0]  # index is a span's: the chain holds it
        call = leaf.name if named is not None and leaf is not named else None  # else: leaf named
        if syncs:
            before = bisect.bisect_right(syncs, (a, chr(0x10FFFF))) - 1
            if before >= 0:
                call = syncs[before][1]  # what ran the GPU's queue dry before this gap
        function = named.name if named else leaf.name
        out[(function, call)] = out.get((function, call), 0.0) + (b - a)
    return out


def _parents(tree: list[HostSpan]) -> list[int | None]:
    """Per span the index of the innermost span enclosing it (spans of one thread nest)."""
    parents: list[int | None] = []
    stack: list[int] = []
    for i, span in enumerate(tree):
        while stack and tree[stack[-1]].end < span.end:
            stack.pop()
        parents.append(stack[-1] if stack else None)
        stack.append(i)
    return parents


def _pieces(
    tree: list[HostSpan], parents: list[int | None], gaps: list[tuple[float, float]]
) -> list[tuple[tuple[float, float], int | None]]:
    """The gaps cut at every span boundary, each piece with the index of the innermost span over
    it, or None."""
    bounds = sorted({t for g in gaps for t in g} | {t for s in tree for t in (s.ts, s.end)})
    starts = [s.ts for s in tree]
    gap_starts = [g[0] for g in gaps]
    out = []
    for a, b in zip(bounds, bounds[1:]):
        g = bisect.bisect_right(gap_starts, a) - 1
        if b <= a or g < 0 or b > gaps[g][1]:
            continue
        mid = (a + b) / 2
        i: int | None = bisect.bisect_right(starts, mid) - 1
        while i is not None and i >= 0 and tree[i].end < mid:
            i = parents[i]
        out.append(((a, b), i if i is not None and i >= 0 else None))
    return out


def _chain(tree: list[HostSpan], parents: list[int | None], index: int | None) -> list[HostSpan]:
    """tree[index] and the spans over it, innermost first."""
    chain = []
    while index is not None:
        chain.append(tree[index])
        index = parents[index]
    return chain


def _own(name: str) -> bool:
    """A frame of the job's or the engine's own code: not torch, the standard library, a builtin."""
    if name.startswith(LIBRARIES):
        return False
    match = _PY_NAME.match(name)
    if not match:
        return False
    # torch's profiler names a frame by its file relative to the sys.path entry it came from:
    # `typing.py(902)`, `json/decoder.py(337)`, `transformers/generation/utils.py(3239)`; the
    # standard library is told by its top-level name, whatever the depth
    top = match["path"].replace("\\", "/").split("/", 1)[0].removesuffix(".py")
    return top not in sys.stdlib_module_names


def _syncs(inside: list[HostSpan]) -> list[tuple[str, str]]:
    """(function named, op) per host sync in the step: the syncs each function made."""
    tree = sorted((s for s in inside if s.kind in ("py", "op")), key=lambda s: (s.ts, -s.end))
    parents = _parents(tree)
    out = []
    for i, span in enumerate(tree):
        parent = parents[i]
        if span.name in SYNC_OPS and (parent is None or tree[parent].name not in SYNC_OPS):
            chain = _chain(tree, parents, i)
            named = next((s for s in chain if s.kind == "py" and _own(s.name)), None)
            if named is not None:
                out.append((named.name, span.name))
    return out


def _ranked(
    totals: dict[tuple[str, str | None], list[float]],
    steps: int,
    gap_total: float,
    syncs: dict[str, dict[str, int]] | None = None,
) -> tuple[HostFunction, ...]:
    """Per function named: its gap time per step, the call most of it was in (a named call over
    none), and its host syncs per step."""
    by_function: dict[str, dict[str | None, list[float]]] = {}
    for (function, call), values in totals.items():
        by_function.setdefault(function, {})[call] = values
    rows = []
    for function, calls in by_function.items():
        total = sum(sum(v) for v in calls.values())
        named = [c for c in calls if c is not None]
        made = (syncs or {}).get(function, {})
        call = (
            max(made, key=lambda op: made[op])
            if made
            else max(named, key=lambda c: sum(calls[c]))
            if named
            else None
        )
        rows.append(
            HostFunction(
                function=function,
                call=call,
                ms_per_step=total / steps / 1000.0,
                share=total / gap_total if gap_total else 0.0,
                steps=max(len(v) for v in calls.values()),
                syncs_per_step=sum(made.values()) / steps,
            )
        )
    rows.sort(key=lambda r: -r.ms_per_step)
    return tuple(r for r in rows[:TOP] if r is rows[0] or r.share >= MIN_NAMED_SHARE)


def _union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _outermost(spans: list[HostSpan]) -> list[tuple[float, float]]:
    return _union((s.ts, s.end) for s in spans)


def _complement(busy: list[tuple[float, float]], t0: float, t1: float) -> list[tuple[float, float]]:
    out, cursor = [], t0
    for a, b in busy:
        if b <= t0 or a >= t1:
            continue
        if a > cursor:
            out.append((cursor, min(a, t1)))
        cursor = max(cursor, b)
    if cursor < t1:
        out.append((cursor, t1))
    return out
