"""The engine trace's vocabulary, written once: what a run is (`Mode`), which settings it ran
with (`Label`), and what ran inside CUDA graphs (`GraphMode`). `engine/` builds runs with these
names and every reader of a trace compares against them; members are their text (`TextEnum`), so
traces read and write the same strings as before."""

from __future__ import annotations

from ncclprobe.textenum import TextEnum


class Mode(TextEnum):
    BASELINE = "baseline"  # the target alone, one token per step
    SPECULATIVE = "speculative"  # the draft proposes, the target verifies


class Label(TextEnum):
    UNTUNED = "untuned"  # the settings the run was given (--env)
    TUNED = "tuned"  # the same, with --tuned's recommendation on top


class GraphMode(TextEnum):
    NONE = "none"  # every step eager
    DECODE = "decode"  # the baseline decode step captured; verify and draft eager
    ALL = "all"  # every step captured, prefill included
