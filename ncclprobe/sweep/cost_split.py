"""What part of an eager call is NCCL's own and what is the path's: measured, per row.

Each eager NCCL row is timed four ways in the same pool, on the same buffers, right after the
row's own measurement (which is one of the four): the raw NCCL path and the torch path, each with
and without a CUDA event per iteration (`VARIANTS`). The record's `cost_split` is built from
them (docs/METRICS.md "cost_split"):

  nccl_us            the raw path without per-iteration events: NCCL's own cost per call, the
                     call nccl-tests makes, issued back to back from prepared calls (by the
                     C loop where it is built: `issue_notes`)
  path_us            time_us - nccl_us: what this row's path and event setting add to it
  events_us          this row's path with per-iteration events minus without
  torch_dispatch_us  the torch path minus the raw path, both without events: torch's dispatch,
                     and out of place the copy torch adds where it has no out-of-place form

Every variant is aggregated as time_us is (the slowest rank per trial, the median over trials)
and kept with its p10/p90 in `variants`, so a difference inside the spread reads as one.
Differences are taken as measured: a negative one is noise, and is shown as it is.
"""

from __future__ import annotations

from collections.abc import Iterable

from ncclprobe.probes.issue_loop import C_LOOP, CTYPES
from ncclprobe.records import COST_SPLIT_VARIANTS as VARIANTS
from ncclprobe.records import CostSplit, ResultRecord
from ncclprobe.records import cost_split_variant as variant_name
from ncclprobe.stats import aggregate_trials

DIGITS = 4


def cost_split(by_rank: dict[int, dict], path: str, time_us: float | None) -> CostSplit | None:
    """The record's `cost_split` from every rank's `split` lists; None where none was measured."""
    if not by_rank or not all("split" in m for m in by_rank.values()):
        return None
    variants: dict[str, dict[str, float]] = {}
    for variant in (variant_name(*v) for v in VARIANTS):
        lists = {rank: m["split"].get(variant) for rank, m in by_rank.items()}
        if all(lists.values()):
            timing = aggregate_trials(lists)
            variants[variant] = {
                "time_us": round(timing.time_us, DIGITS),
                "time_us_p10": round(timing.time_us_p10, DIGITS),
                "time_us_p90": round(timing.time_us_p90, DIGITS),
            }
    refused: dict[str, str] = {}
    for rank, message in sorted(by_rank.items()):
        for variant, why in (message.get("split_refused") or {}).items():
            refused.setdefault(variant, f"rank {rank}: {why}")

    def median(variant: str) -> float | None:
        return (variants.get(variant) or {}).get("time_us")

    nccl = median("nccl")
    return CostSplit(
        nccl_us=nccl,
        path_us=_minus(time_us, nccl),
        events_us=_minus(median(variant_name(path, True)), median(path)),
        torch_dispatch_us=_minus(median("torch"), nccl),
        variants=variants,
        refused=refused,
    )


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, DIGITS)


def notes(results: list[ResultRecord]) -> list[str]:
    """One line per (collective, path, placement) with eager cost splits: the range over sizes of
    NCCL's own time, the path's share and what each part costs."""
    groups: dict[tuple[str | None, str, bool | None], list[CostSplit]] = {}
    for r in results:
        split = r.cost_split
        if r.mode == "eager" and split and split.nccl_us is not None:
            key = (r.collective, r.path or "torch", r.in_place)
            groups.setdefault(key, []).append(split)
    lines = []
    for (collective, path, in_place), splits in groups.items():
        parts = [
            f"NCCL's own {_span((s.nccl_us for s in splits), sign='')} µs per call "
            "(raw path, no events)",
            f"this path adds {_span(s.path_us for s in splits)}",
            f"torch dispatch {_span(s.torch_dispatch_us for s in splits)}",
            f"per-iteration events {_span(s.events_us for s in splits)}",
        ]
        lines.append(
            f"eager cost split, {collective} {'in' if in_place else 'out of'} place, path {path}, "
            f"{len(splits)} size(s): "
            + "; ".join(parts)
            + " (measured beside each row; cost_split)"
        )
    return lines


ISSUERS = {
    C_LOOP: "the C loop (c-loop), back to back from C as nccl-tests issues them",
    CTYPES: "ctypes, a Python loop that adds its own host time to each call (about 0.6 µs on the "
    "GPU machines, docs/METRICS.md)",
}


def issue_notes(results: list[ResultRecord]) -> list[str]:
    """What issued the raw path's eager calls (`issued_by`), and why not the C loop where it did
    not (`issued_by_why`): a note per kind. A value this version does not name (an older file's
    sentence) is shown as it is."""
    seen: dict[tuple[str, str], int] = {}
    for r in results:
        if r.mode == "eager" and r.issued_by:
            key = (r.issued_by, r.issued_by_why or "")
            seen[key] = seen.get(key, 0) + 1
    return [
        f"raw path, {count} eager row(s): calls issued by {ISSUERS.get(issued_by, issued_by)}"
        + (f" ({why})" if why else "")
        for (issued_by, why), count in seen.items()
    ]


def _span(values: Iterable[float | None], sign: str = "+") -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "not measured"
    low, high = min(known), max(known)
    return f"{low:{sign}.2f}" if low == high else f"{low:{sign}.2f} to {high:{sign}.2f}"
