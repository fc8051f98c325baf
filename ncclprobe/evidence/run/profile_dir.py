"""`diagnose --profile DIR`: the profiler traces in a directory, as the files diagnose reads.

Engines write a directory, not a file: `run-engine --profile DIR` one trace per label, mode and
rank (`LABEL-MODE-rankN.trace.json.gz`), SGLang one per TP rank into SGLANG_TORCH_PROFILER_DIR,
vLLM one per worker into its profiler directory. Every `.json`/`.json.gz` trace directly inside
is a rank of the run. Where the names are run-engine's, the speculative traces are the run and the
baseline traces the run to compare against (unless baseline profiles were given), told apart by the
names alone; a directory with the runs of several labels (`--tuned`) is refused, naming the files
to give, since its ranks would otherwise mix two runs.
"""

from __future__ import annotations

import re
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.run.modes import Label, Mode

TRACE_SUFFIXES = (".json", ".json.gz")
ENGINE_NAME = re.compile(
    r"^(?P<label>.+)-(?P<mode>baseline|speculative)-rank(?P<rank>[0-9]{1,19})\.trace\.json(\.gz)?$"
)


def traces_in(directory: Path) -> list[Path]:
    """The traces directly inside `directory`, sorted by name."""
    found = sorted(
        p for p in directory.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES)
    )
    if not found:
        raise UsageProblem(f"--profile {directory}: the directory holds no .json or .json.gz trace")
    return found


def expand(profiles, baseline_profiles) -> tuple[list[str], list[str]]:
    """(profiles, baseline profiles) with every directory replaced by the traces in it."""
    runs, baselines = [], []
    for given in profiles:
        path = Path(given)
        if not path.is_dir():
            runs.append(given)
            continue
        speculative, baseline = _split(path, traces_in(path))
        runs += speculative
        if not baseline_profiles:
            baselines += baseline
    for given in baseline_profiles:
        path = Path(given)
        baselines += [str(p) for p in traces_in(path)] if path.is_dir() else [given]
    return runs, baselines


def _split(directory: Path, traces: list[Path]) -> tuple[list[str], list[str]]:
    """run-engine's names: (speculative, baseline) traces of its one label; other names: all ranks
    of one run."""
    named = {p: ENGINE_NAME.match(p.name) for p in traces}
    if not all(named.values()):
        return [str(p) for p in traces], []
    labels = sorted({m["label"] for m in named.values()})
    if len(labels) > 1:
        raise UsageProblem(
            f"--profile {directory} holds the runs of {len(labels)} labels ({', '.join(labels)}); "
            f"give one label's files: {diagnose_command(traces, labels[-1])}"
        )
    by_mode = {
        mode: [str(p) for p, m in named.items() if m["mode"] == mode]
        for mode in (Mode.SPECULATIVE, Mode.BASELINE)
    }
    if not by_mode[Mode.SPECULATIVE]:  # a baseline-only run is the run itself
        return by_mode[Mode.BASELINE], []
    return by_mode[Mode.SPECULATIVE], by_mode[Mode.BASELINE]


def diagnose_command(traces: list[Path], label: str | None = None) -> str:
    """`ncclprobe diagnose` of run-engine's traces of one label, each file named (speculative as
    --profile, baseline as --baseline-profile)."""
    import shlex

    words = ["ncclprobe", "diagnose"]
    for p in traces:
        m = ENGINE_NAME.match(Path(p).name)
        if m and (label is None or m["label"] == label):
            flag = "--profile" if m["mode"] == Mode.SPECULATIVE else "--baseline-profile"
            words += [flag, str(p)]
    return shlex.join(words)


def next_command(profiles: list[str], directory: str) -> str:
    """The diagnose command of the profiles run-engine just wrote: the directory, or with --tuned
    (two labels in it) the tuned run's files."""
    import shlex

    names = [ENGINE_NAME.match(Path(p).name) for p in profiles]
    if len({m["label"] for m in names if m}) > 1:
        return diagnose_command(profiles, Label.TUNED.value)
    return shlex.join(["ncclprobe", "diagnose", "--profile", directory])
