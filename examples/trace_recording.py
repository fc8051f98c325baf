"""What the fixture recorders (record_hf_traces.py, record_rank_traces.py) share: writing a profiler
trace gzipped under a size cap (trimmed by time span only, never by event kind), the trace's clock
base, timing statistics, versions, and writing files whole (temporary file, then rename).

The clock: Kineto writes `baseTimeNanoseconds` in the header and each event's `ts` in microseconds
after it, on the Unix clock; so a host timestamp taken with `time.time_ns()` lies at
`(t_ns - baseTimeNanoseconds) / 1000` in the trace (checked on torch 2.13 CPU: an `aten::add` issued
right after `time.time_ns()` sat 0.96 ms later in the trace). Both recorders keep `time.time_ns()`
for every host timestamp and convert it with `trace_us`.
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

MAX_TRACE_BYTES = 2_000_000  # each committed fixture stays under 2 MB gzipped


def say(message: str) -> None:
    """Progress goes to stderr, stamped, so a 5-minute device call shows where it is."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def write_atomic(path: Path, data: bytes) -> None:
    """Write `path` whole or not at all: a temporary file beside it, then a rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, doc: dict) -> None:
    write_atomic(path, (json.dumps(doc, indent=1, sort_keys=False) + "\n").encode())


def export_trace(prof, path: Path, max_bytes: int = MAX_TRACE_BYTES) -> dict:
    """Export `prof` as gzipped Chrome JSON at `path`; returns what the truth file says about it:
    the clock base, size, event counts, and the trim (None when the whole trace fits). A trace over
    `max_bytes` keeps every event that starts in the first part of its time span (metadata events,
    which have no time, always stay): the cut is searched so the file fits."""
    fd, tmp = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        doc = json.loads(Path(tmp).read_text())
    finally:
        Path(tmp).unlink(missing_ok=True)
    events = doc.get("traceEvents", [])
    timed = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    first, last = (min(timed), max(timed)) if timed else (0.0, 0.0)
    data, trim = _gzip(doc), None
    if len(data) > max_bytes:
        data, trim = _trim_to_fit(doc, events, first, last, max_bytes, len(data))
    write_atomic(path, data)
    return {
        "file": path.name,
        "bytes": len(data),
        "baseTimeNanoseconds": doc.get("baseTimeNanoseconds"),
        "span_us": [first, last],
        "events": len(events),
        "counts": _counts(doc["traceEvents"]),  # of the events written (after a trim)
        "trim": trim,
    }


def _gzip(doc: dict) -> bytes:
    return gzip.compress(json.dumps(doc).encode(), compresslevel=6, mtime=0)


def _trim_to_fit(doc: dict, events: list, first: float, last: float, max_bytes: int, full: int):
    """Search the cut (a share of the span) so the gzipped trace fits and fills at least 90 % of
    the cap: the compressed size grows about linearly with the span kept, so a few secant steps."""
    share, best, size = 1.0, None, None
    for _ in range(8):
        share = min(1.0, share * 0.97 * max_bytes / size) if size else 0.97 * max_bytes / full
        cut = first + share * (last - first)
        kept = [e for e in events if not isinstance(e.get("ts"), (int, float)) or e["ts"] <= cut]
        data = _gzip({**doc, "traceEvents": kept})
        size = len(data)
        if size <= max_bytes and (best is None or size > len(best[0])):
            best = (data, cut, kept, share)
        if best and len(best[0]) >= 0.9 * max_bytes:
            break
    if best is None:
        raise RuntimeError(f"no cut of the trace's span fits in {max_bytes} bytes")
    data, cut, kept, share = best
    doc["traceEvents"] = kept
    say(f"  trimmed to {share:.0%} of its span ({len(kept)} of {len(events)} events) to fit")
    return data, {
        "kept_until_us": cut,
        "kept_share_of_span": round(share, 4),
        "events_kept": len(kept),
        "events_total": len(events),
        "how": "every event with ts after kept_until_us dropped; no event kind dropped",
    }


def _counts(events: list) -> dict:
    """Events per category, and the launches that tell a graph replay from eager work."""
    counts: dict[str, int] = {}
    for event in events:
        if event.get("ph") == "X":
            counts[event.get("cat", "?")] = counts.get(event.get("cat", "?"), 0) + 1
    names = [e.get("name", "") for e in events if e.get("cat") == "cuda_runtime"]
    counts["cudaGraphLaunch"] = sum(1 for n in names if n.startswith("cudaGraphLaunch"))
    counts["nccl_kernels"] = sum(
        1 for e in events if e.get("cat") == "kernel" and e.get("name", "").startswith("nccl")
    )
    return counts


def trace_us(t_ns: int, base_ns: int | None) -> float | None:
    """A `time.time_ns()` host timestamp on the trace's `ts` axis (microseconds)."""
    return None if base_ns is None else (t_ns - base_ns) / 1000.0


def spread(values: list[float]) -> dict:
    """median, min, max and n: a figure without its spread is no verdict."""
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
        "all": values,
    }


def versions() -> dict:
    import torch

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "host": platform.node(),
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        try:
            info["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception as exc:  # noqa: BLE001 - a version is nice to have, never fatal
            info["nccl"] = f"unknown ({type(exc).__name__})"
    return info
