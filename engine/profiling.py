"""`run-engine --profile DIR`: a PyTorch profiler trace of each rank's measured loop.

Only the measured generation is profiled: the warm-up, the graph capture and the share
measurement stay outside, so the trace shows the loop the tokens/s figure comes from. Each phase
the engine times is also a `record_function` annotation named `ncclprobe::<phase>` (see
`PhaseTimer(annotate=True)`), which `diagnose --profile` reads as the step boundaries (the
reader's names.step_annotation); `record_shapes` is on, so the token ids' shape of every step
(batch x tokens per sequence) is in the trace too.

One gzipped Chrome-trace file per rank, label and mode: `untuned-speculative-rank1.trace.json.gz`.
Files are never overwritten: `profile_paths` lists them before anything runs, so the CLI can refuse
existing ones, and each file is written to a temporary name and renamed into place.
"""

from __future__ import annotations

import gzip
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import torch


def profile_path(directory: str | Path, *, label: str, mode: str, rank: int) -> Path:
    return Path(directory) / f"{label}-{mode}-rank{rank}.trace.json.gz"


def profile_paths(directory: str | Path, *, labels, modes, tp: int) -> list[Path]:
    return [
        profile_path(directory, label=label, mode=mode, rank=rank)
        for label in labels
        for mode in modes
        for rank in range(tp)
    ]


@contextmanager
def profiled(directory: str | None, *, label: str, mode: str, rank: int, device):
    """Profile the body (CPU, and CUDA on a GPU) and write the rank's trace; a no-op without a directory."""
    if not directory:
        yield
        return
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.device(device).type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, record_shapes=True) as prof:
        yield
        if cuda:
            torch.cuda.synchronize()
    _export(prof, profile_path(directory, label=label, mode=mode, rank=rank))


def _export(prof, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    plain = path.with_name(f".{path.name}.{os.getpid()}.json")
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        prof.export_chrome_trace(str(plain))
        with open(plain, "rb") as src, gzip.open(partial, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        os.replace(partial, path)
    finally:
        for leftover in (plain, partial):
            leftover.unlink(missing_ok=True)
