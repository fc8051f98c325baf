"""Instrumentation of the engine loop: per-phase timing and the collective trace.

Phase timing adds no synchronisation to the hot loop. On a GPU each phase records a pair of CUDA
events on the current stream (enqueued, not waited for); the elapsed times are read once, after
the run has ended and been synchronised. On the CPU the work is synchronous and
`time.perf_counter` around the phase measures it.

The collective trace listens on the communicator: every collective issued is recorded with its
operation, byte size, dtype, the phase running at the time and the CUDA graph being captured (or
None when eager). A graph replay re-runs the collectives captured into it without Python seeing
them, so the graph runner adds the captured records once per replay (`replayed`).
"""

from __future__ import annotations

import time
from collections import Counter
from contextlib import contextmanager

import torch

from ncclprobe.stats import quantile


def events_needed(new_tokens: int) -> int:
    """CUDA events a run of `new_tokens` can use: at most two per phase span (joined spans share
    one), at most 5 spans per speculative cycle (draft, verify, accept, draft extend, readout) and
    one cycle per token, plus the prefill; the baseline needs fewer (one decode span per token)."""
    return 2 * (5 * new_tokens + 2)


class PhaseTimer:
    def __init__(self, device, *, reserve: int = 0, annotate: bool = False):
        """`reserve`: CUDA events to create before the run (two per phase span expected). The driver
        creates a CUDA event at its first record; doing that inside the loop puts tens of
        microseconds per phase on the speculative cycle's critical path (the host launches the next
        cycle right after the readout sync). What the instrumentation costs: docs/LOG.md."""
        self.cuda = torch.device(device).type == "cuda"
        # `run-engine --profile`: each phase also a profiler annotation the trace reader knows
        self.annotate = annotate
        self.current: str | None = None
        self._spans: dict[str, list] = {}
        self._marks: list[tuple[float, dict[str, int]]] = []
        self._last_end = None
        self._events = [
            torch.cuda.Event(enable_timing=True) for _ in range(reserve if self.cuda else 0)
        ]
        for event in self._events:
            event.record()  # created now; recording again later simply moves it

    @contextmanager
    def phase(self, name: str, joined: bool = False):
        """Time the body as phase `name`. `joined`: the phase starts where the previous one ended
        (the loop runs nothing in between), so on a GPU it reuses that phase's end event as its
        start instead of recording one more: a speculative cycle records 6 events, not 10."""
        if not self.annotate:
            yield from self._timed(name, joined)
            return
        with torch.profiler.record_function(f"ncclprobe::{name}"):
            yield from self._timed(name, joined)

    def _timed(self, name: str, joined: bool):
        """The timing itself, a plain generator `phase` delegates to (no second context manager
        on the hot path)."""
        outer, self.current = self.current, name
        if self.cuda:
            start = self._last_end if joined and self._last_end is not None else self._recorded()
            try:
                yield
            finally:
                self._last_end = self._recorded()
                self._spans.setdefault(name, []).append((start, self._last_end))
                self.current = outer
        else:
            started = time.perf_counter()
            try:
                yield
            finally:
                self._spans.setdefault(name, []).append(time.perf_counter() - started)
                self.current = outer

    def _recorded(self):
        event = self._events.pop() if self._events else torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def mark(self) -> None:
        """A point where the loop has just synchronised with the device (the speculative cycle's
        readout): the wall time between two marks minus the phases recorded between them is the
        host time of that interval. The baseline loop never syncs, so it has no marks."""
        self._marks.append(
            (time.perf_counter(), {name: len(spans) for name, spans in self._spans.items()})
        )

    def current_names(self) -> list[str]:
        return list(self._spans)

    def durations_ms(self) -> dict[str, list[float]]:
        """Every phase's durations in ms; on a GPU call after the run was synchronised."""
        if self.cuda:
            torch.cuda.synchronize()
            return {
                name: [s.elapsed_time(e) for s, e in spans] for name, spans in self._spans.items()
            }
        return {name: [1000.0 * s for s in spans] for name, spans in self._spans.items()}

    def summary(
        self, graphed: dict[str, bool] | None = None, *, wall_s: float | None = None, steps: int = 0
    ) -> dict[str, dict]:
        """Per phase: count, total, median and p90 in ms. With `wall_s`, also `host`: the wall time
        no phase accounts for (see `host_summary`)."""
        graphed = graphed or {}
        durations = self.durations_ms()
        phases = {
            name: distribution(values) | {"graphed": bool(graphed.get(name, False))}
            for name, values in durations.items()
        }
        if wall_s is not None:
            phases["host"] = self.host_summary(durations, wall_s, steps)
        return phases

    def host_summary(self, durations: dict[str, list[float]], wall_s: float, steps: int) -> dict:
        """Host time: the run's wall time minus every timed phase (prefill included), i.e. Python,
        launches and syncs the device phases do not cover. Its per-step distribution comes from
        the marks (one value per speculative cycle); without marks (the baseline, which never
        syncs) only the total is known and the median and p90 are null; `count` is then `steps`."""
        total = max(0.0, 1000.0 * wall_s - sum(sum(values) for values in durations.values()))
        per_interval = []
        for (t0, before), (t1, after) in zip(self._marks, self._marks[1:]):
            inside = sum(sum(durations[name][before.get(name, 0) : n]) for name, n in after.items())
            per_interval.append(max(0.0, 1000.0 * (t1 - t0) - inside))
        summary = (
            distribution(per_interval) if per_interval else {**distribution([]), "count": steps}
        )
        return summary | {"total_ms": total, "graphed": False}


def distribution(values_ms: list[float]) -> dict:
    ordered = sorted(values_ms)
    if not ordered:
        return {"count": 0, "total_ms": 0.0, "median_ms": None, "p90_ms": None}
    return {
        "count": len(ordered),
        "total_ms": sum(ordered),
        "median_ms": quantile(ordered, 0.5),
        "p90_ms": quantile(ordered, 0.9),
    }


class CollectiveTrace:
    """Counts collectives by (op, size, dtype, phase, graph); attach with `attach(comm, timer)`."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.capturing: str | None = None  # name of the graph being captured, set by the runner
        self._timer: PhaseTimer | None = None

    def attach(self, comm, timer: PhaseTimer | None) -> None:
        self._timer = timer
        comm.listener = self.record

    def record(self, op: str, tensor: torch.Tensor) -> None:
        phase = self._timer.current if self._timer else None
        key = (
            op,
            tensor.numel() * tensor.element_size(),
            str(tensor.dtype).removeprefix("torch."),
            phase,
            self.capturing,
        )
        self.counts[key] += 1

    def replayed(self, captured: Counter, phase: str | None) -> None:
        """A replay of a graph whose capture recorded `captured`: count its collectives again."""
        for (op, size, dtype, _phase, graph), count in captured.items():
            self.counts[(op, size, dtype, phase, graph)] += count

    def sizes(self) -> list[dict]:
        return [
            {
                "op": op,
                "size_bytes": size,
                "dtype": dtype,
                "count": count,
                "phase": phase,
                "graph": graph,
            }
            for (op, size, dtype, phase, graph), count in sorted(self.counts.items(), key=str)
        ]

    def totals(self) -> tuple[int, int]:
        return (
            sum(self.counts.values()),
            sum(size * c for (_, size, *_rest), c in self.counts.items()),
        )
