"""Which target a draft was trained for, recorded in the draft file and checked where it is used.

A draft learns one target's hidden states: trained for `tiny` seed 0 it accepts almost nothing on
`tiny` seed 1 (1.0 against 2.99, docs/LOG.md), yet the shapes match, so loading it raises nothing.
`train-draft` therefore records the target's identity in the draft's metadata: its shape (the
model summary), and its preset and seed, or its checkpoint's fingerprint (a hash of each weight
file's name, size, first and last MiB: cheap on a 16 GB checkpoint, and different for any other
file). `run-engine` warns before it runs a draft on another target; diagnose says it again from
the trace (`config.draft_target`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK = 1 << 20
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")


def target_identity(
    model_summary: dict, *, preset: str | None, seed: int, checkpoint: str | None
) -> dict:
    """What makes a target this target: a checkpoint's fingerprint, else its preset and seed."""
    shape = {k: model_summary.get(k) for k in ("hidden", "layers", "vocab", "heads", "kv_heads")}
    if checkpoint:
        return {
            "shape": shape,
            "checkpoint": Path(checkpoint).name,
            "fingerprint": checkpoint_fingerprint(checkpoint),
        }
    return {"shape": shape, "preset": preset, "seed": seed}


def checkpoint_fingerprint(path: str | Path) -> str:
    """sha256 (16 hex digits) over each weight file's name, size, first and last MiB."""
    path = Path(path)
    files = (
        sorted(p for p in path.iterdir() if p.suffix in WEIGHT_SUFFIXES)
        if path.is_dir()
        else [path]
    )
    digest = hashlib.sha256()
    for file in files:
        size = file.stat().st_size
        digest.update(f"{file.name}:{size}".encode())
        with file.open("rb") as handle:
            digest.update(handle.read(CHUNK))
            handle.seek(max(0, size - CHUNK))
            digest.update(handle.read(CHUNK))
    return digest.hexdigest()[:16]


def mismatch(trained_for: dict | None, running: dict) -> str | None:
    """How the target a draft was trained for differs from the one it is about to serve; None when
    they agree or the draft records no target (saved before train-draft recorded it)."""
    if not trained_for:
        return None
    differences = [
        f"{key} {trained_for.get(key)!r} (now {running.get(key)!r})"
        for key in ("preset", "seed", "checkpoint", "fingerprint", "shape")
        if key in trained_for or key in running
        if trained_for.get(key) != running.get(key)
    ]
    return "; ".join(differences) or None
