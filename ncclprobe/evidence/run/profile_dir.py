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
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.run.modes import Label, Mode

if TYPE_CHECKING:
    from ncclprobe.evidence.run.profile.timeline import Timeline

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


def expand(
    profiles: Sequence[str], baseline_profiles: Sequence[str]
) -> tuple[list[str], list[str]]:
    """(profiles, baseline profiles) with every directory replaced by the traces in it."""
    runs: list[str] = []
    baselines: list[str] = []
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
    named = {p: m for p in traces if (m := ENGINE_NAME.match(p.name))}
    if len(named) < len(traces):
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


def diagnose_command(traces: Sequence[str | Path], label: str | None = None) -> str:
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


# ---- many ranks: each trace read in a worker and reduced there ---------------------------------

POOL_FROM = 8  # ranks from which traces are read in reader workers (fewer: here, whole)
ALIGN_ALL_UP_TO = 256  # ranks aligned call by call; above, a sample (see `sample`)
OUTLIERS = 4  # the slowest and fastest ranks by step time kept in a sample, each
TRACE_MEMORY = 1536 << 20  # a reader worker's budget over the trace's own size (streamed)


def read_ranks(paths: list[str]) -> list[dict]:
    """Each rank's trace read in a reader worker (`evidence.read_pool`) and reduced there to what a
    run of many ranks needs: its rank view (steps, phases, collectives; `profile.rank_view`), its
    `arrivals.Track` (its collective kernels, or a CPU-only profile's host collective ops, which
    the slim Timeline no longer holds), and a Timeline that keeps only its header, counts and first
    and last kernel (what the checks of one job and the notes read). The parent then holds per rank
    a few hundred kB, never the traces."""
    from ncclprobe.evidence.read_pool import Failed, Limits, Read, map_files

    def limits(path: str) -> Limits:
        size = Path(path).stat().st_size
        return Limits(memory_bytes=TRACE_MEMORY + 8 * size, cpu_s=120 + size // (1 << 20))

    outcomes = map_files(_read_rank, list(paths), limits)
    bad = [(p, o.problem) for p, o in zip(paths, outcomes) if isinstance(o, Failed)]
    if bad:
        path, why = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise UsageProblem(f"profile {path}: {why}{more}")
    return [o.value for o in outcomes if isinstance(o, Read)]  # all of them: none failed


def _read_rank(path: str) -> dict:
    from ncclprobe.evidence.run.profile.arrivals import track_of
    from ncclprobe.evidence.run.profile.rank_view import rank_view
    from ncclprobe.evidence.run.profile.timeline import read_timeline

    tl = read_timeline(path)
    view = rank_view(tl)
    view["track"] = track_of(tl)
    view["timeline"] = _slim(tl)
    for step in view["steps"]:  # the span is all a run's tokens and time read of a step now
        if step.kernels:
            first = min(step.kernels, key=lambda k: k.ts)
            last = max(step.kernels, key=lambda k: k.end)
            step.kernels = [first, last]
        step.launches = {}
    return view


def _slim(tl: Timeline) -> Timeline:
    """The Timeline with its event lists cut to what its properties read after the rank view: the
    first and last kernel (gpu, time_range), the first launches (rocm), the earliest and latest
    annotations (time_range)."""
    import dataclasses

    annotations = tl.annotations
    ends = (
        [min(annotations, key=lambda a: a.ts), max(annotations, key=lambda a: a.ts + a.dur)]
        if annotations
        else []
    )
    return dataclasses.replace(
        tl,
        kernels=tl.kernels[:1] + tl.kernels[-1:],
        launches=dict(list(tl.launches.items())[:50]),
        annotations=ends,
        comm_ops=[],
        backend_ops=[],
        embeddings=[],
        attention=[],
        compiled_calls=[],
    )


def sample(per_rank: list[dict]) -> tuple[list[int], str | None]:
    """Which ranks to align call by call: all up to ALIGN_ALL_UP_TO; above, one rank per host
    (from the trace names, where they name one) and the OUTLIERS slowest and fastest ranks by
    their summed median step times, the cheap first pass every rank gets. Positions, and the
    words saying it sampled (None: every rank)."""
    count = len(per_rank)
    if count <= ALIGN_ALL_UP_TO:
        return list(range(count)), None
    from ncclprobe.evidence.run.profile.clocks import hosts_of

    pace = [sum(p.median_ms or 0.0 for p in rv["phases"].values()) for rv in per_rank]
    order = sorted(range(count), key=lambda i: pace[i])
    chosen = set(order[:OUTLIERS]) | set(order[-OUTLIERS:])
    hosts = hosts_of([rv["track"] for rv in per_rank])
    if hosts:
        first: dict[str, int] = {}
        for pos, host in enumerate(hosts):
            first.setdefault(host, pos)
        chosen |= set(first.values())
    picked = sorted(chosen)
    how = (
        f"sampled: {len(picked)} of {count} ranks aligned call by call ("
        + (f"one per host of {len(set(hosts))}, " if hosts else "hosts not named in the traces, ")
        + f"the {OUTLIERS} slowest and {OUTLIERS} fastest by step time); every rank's steps were read"
    )
    return picked, how
