"""Steps from the kernel stream when nothing annotates them: one step per forward pass.

A profile of `generate()`, of a custom serving loop or of a training job without a profiler
schedule names no step, and GPU-idle gaps do not mark them either: a host-bound eager run has gaps
everywhere and none between steps. What marks a step is the unit of work that repeats, the
model's forward pass, and where that unit restarts. The work is read as the host-ordered sequence
of launches (`Units`): one kernel, memcpy or memset launch each, one graph launch for everything a
graph replay issues, and the host's synchronisations. A forward's start is, in this order, what
the trace can show:

1. the host's token-embedding lookup (`aten::embedding`; every decoder forward starts with one,
   the draft's too): the first launch inside it. Lookups a few launches apart (learned position
   embeddings after the token embedding) belong to one forward;
2. where no host lookup launched anything (a profile without host ops, or a compiled model whose
   embedding inductor fused into a Triton kernel, `triton_poi_fused_embedding_0`, with no
   `aten::embedding` on the host): a kernel named for an embedding gather (`names.embedding_kernel`),
   and any other gather followed by the same launches as those (a prompt's lookup that aten ran
   with another kernel);
3. a graph launch that issues at least MIN_GRAPH_KERNELS kernels and that no eager lookup just
   preceded: a captured forward replayed (transformers' static cache, a graphed decode); it starts
   where the host call that launched it began (the enclosing `Torch-Compiled Region`, when
   torch.compile made the graph), else after the host's last synchronisation before it (the
   previous token reached the host), else at the input copies right before it;
4. else the period of the launch sequence itself: a kernel sequence repeated back to back (a tandem
   repeat of the sequence's K-grams, found in one backward pass over a hash of each K-gram) is a
   stack of layers when its period holds no host synchronisation (a layer never waits for the
   host), and a whole step when it does. A layer stack is one forward, starting after the last
   host synchronisation before it (the previous step's result reaching the host); a repeated step
   starts after its last synchronisation, and is longer than a layer (shorter repeats with a sync
   are a host loop: a candidate search, stopping checks). Where no run of equal nearest recurrence
   is found, the runs are read again by comparing launches a period apart (a layer holding a
   shorter repeat of its own, rotary embeddings on the query and the key, breaks the first reading).

Step i runs from its start to step i+1's: the host's work between forwards (sampling, stopping
checks, the next inputs) belongs to the forward before it, and the steps tile the run. Fewer than
two forwards is no repeating unit: the caller falls back to the GPU's gaps. Linear in the launches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ncclprobe.evidence.run.profile import names
from ncclprobe.evidence.run.profile.timeline import Kernel, Timeline

KGRAM = 6  # launches per K-gram: long enough that a layer's K-grams are distinct within it
MIN_PERIOD = 8  # a layer launches at least this many kernels (norm, projections, attention, MLP)
MERGE_LOOKUPS = 8  # lookups closer than this many launches are one forward's
MIN_GRAPH_KERNELS = 16  # a graph replay issuing fewer is a piece of a step, not a forward
NEAR_LOOKUP = 16  # a lookup this few launches before a graph launch: the replay is that forward
RUN_BUDGET = 8  # comparisons per launch that tandem_repeats may spend reading its runs
CHUNK = 64  # launches compared at once while a run goes on


@dataclass
class Units:
    """The host-ordered launches: parallel lists (token, host time, correlation id, kind)."""

    tokens: list[int] = field(default_factory=list)
    ts: list[float] = field(default_factory=list)
    corr: list[int] = field(default_factory=list)
    kind: list[str] = field(default_factory=list)  # kernel | graph | memcpy | sync
    sizes: list[int] = field(default_factory=list)  # kernels each launch issued (0 for a sync)

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass
class Forward:
    """One forward's launches: units [start, end) of `Units`, and how its start was found."""

    start: int
    end: int
    found_by: str
    lm: bool = True  # started by a token lookup or a replayed forward: a language model's step


def units_of(tl: Timeline) -> Units:
    """Every launch with GPU work (and every host synchronisation), in host order; each gets the
    id of its kernel's name (a graph launch: of its first kernel and kernel count)."""
    by_corr: dict[int, list[Kernel]] = {}
    for k in tl.kernels:
        if k.corr is not None:
            by_corr.setdefault(k.corr, []).append(k)
    rows = sorted(
        (launch.ts, corr, launch.kind)
        for corr, launch in tl.launches.items()
        if launch.kind == "sync" or corr in by_corr
    )
    ids: dict = {}
    units = Units()
    for ts, corr, kind in rows:
        issued = by_corr.get(corr, [])
        if kind == "sync":
            key: object = "sync"
        elif kind == "graph":
            key = ("graph", min(issued, key=lambda k: k.ts).name, len(issued))
        else:
            key = issued[0].name
        units.tokens.append(ids.setdefault(key, len(ids)))
        units.ts.append(ts)
        units.corr.append(corr)
        units.kind.append(kind)
        units.sizes.append(len(issued))
    return units


def find_forwards(tl: Timeline, units: Units) -> list[Forward]:
    """The forwards of the profile (see the module docstring), in host order; [] below two."""
    if len(units) < 2:
        return []
    starts, how = _lookup_starts(tl, units)
    if len(starts) < 2:  # none, or the eager prefill's only: compiled forwards run no aten op
        named, named_how = _named_starts(tl, units)
        if len(named) >= 2:
            starts = _union(starts, named)
            how = f"{how}; {named_how}" if starts != named else named_how
    graph_starts = _graph_starts(units, starts, tl.compiled_calls)
    if graph_starts:
        how = "; ".join(
            filter(None, [how if starts else "", "graph launches of a whole forward (replays)"])
        )
        starts = sorted(set(starts) | set(graph_starts))
    lm = True
    if len(starts) < 2:
        (starts, how), lm = _repeat_starts(units), False
    if len(starts) < 2:
        return []
    ends = starts[1:] + [len(units)]
    return [Forward(s, e, how, lm) for s, e in zip(starts, ends)]


def _lookup_starts(tl: Timeline, units: Units) -> tuple[list[int], str]:
    """The first launch inside each host embedding lookup, lookups a few launches apart merged."""
    import bisect

    starts: list[int] = []
    for ts, dur, _ in tl.embeddings:
        at = bisect.bisect_left(units.ts, ts)
        if at >= len(units) or units.ts[at] > ts + dur:
            continue  # a lookup that launched nothing (on the CPU, or cut off by the trace)
        if starts and at - starts[-1] < MERGE_LOOKUPS:
            continue
        starts.append(at)
    return starts, "the host's embedding lookups (aten::embedding), one per forward"


def _union(lookups: list[int], named: list[int]) -> list[int]:
    """Host lookups and named kernels together, a named kernel inside a host lookup's forward
    (within MERGE_LOOKUPS of it) being that lookup's own."""
    out: list[int] = []
    for i in sorted(set(lookups) | set(named)):
        if not out or i - out[-1] >= MERGE_LOOKUPS:
            out.append(i)
    return out


def _named_starts(tl: Timeline, units: Units) -> tuple[list[int], str]:
    """Each kernel named for an embedding lookup, and each other gather followed by the same
    kernels as the named lookups (`_gathers_like_lookups`); lookups a few launches apart merged."""
    names_by_corr = {k.corr: k.name for k in tl.kernels if k.corr is not None}
    unit_names = [
        names_by_corr.get(corr, "") if kind == "kernel" else ""
        for corr, kind in zip(units.corr, units.kind)
    ]
    named = _lookups_among(
        units, [i for i, name in enumerate(unit_names) if names.embedding_kernel(name)]
    )
    how = "kernels named for an embedding lookup"
    extra = _gathers_like_lookups(units, named, unit_names)
    if extra:
        how += f" ({len(extra)} more by the kernels that follow a lookup)"
    starts: list[int] = []
    for i in sorted(set(named) | set(extra)):
        if not starts or i - starts[-1] >= MERGE_LOOKUPS:
            starts.append(i)
    return starts, how


def _lookups_among(units: Units, named: list[int]) -> list[int]:
    """The named kernels that are lookups. inductor names a fused kernel after every op it fused,
    and the residual stream starts at the embedding's output, so several kernels of one forward
    carry `embedding` (`triton_per_fused__to_copy_add_embedding_mean_mul_pow_rsqrt_0`, `..._8`,
    `..._10`, `..._11` in every torch.compile'd Llama forward here). Where several names match, the
    lookups are the names that a host synchronisation (the previous token read back) separates from
    the named kernel before them in most of their launches, else the first name's only."""
    kinds = {units.tokens[i] for i in named}
    if len(kinds) < 2:
        return named
    seen: dict[int, int] = {}
    after_sync: dict[int, int] = {}
    prev, synced = -1, 0
    syncs_before = []  # host synchronisations before each named launch, read in one pass
    for kind in units.kind:
        if kind == "sync":
            synced += 1
        syncs_before.append(synced)
    for i in named:
        token = units.tokens[i]
        seen[token] = seen.get(token, 0) + 1
        if prev < 0 or syncs_before[i] > syncs_before[prev]:
            after_sync[token] = after_sync.get(token, 0) + 1
        prev = i
    chosen = {t for t, n in seen.items() if 2 * after_sync.get(t, 0) > n}
    if not chosen:
        chosen = {units.tokens[named[0]]}
    return [i for i in named if units.tokens[i] in chosen]


def _gathers_like_lookups(units: Units, named: list[int], unit_names: list[str]) -> list[int]:
    """Gathers that begin a forward though their name is no embedding's, found by what follows.

    aten picks the gather kernel by the lookup's size (torch 2.11: `indexSelectSmallIndex` for a
    decode's token, `vectorized_gather_kernel` for a prompt's 16 or a verify's 20), and the second
    name also gathers elsewhere (an engine's acceptance step), so it marks no forward by itself.
    The kernels right after a lookup (the first layer's norm) are the same in every forward: where
    the named lookups agree on their KGRAM - 1 launches after them, a gather (`names.gather_kernel`)
    followed by those same launches is a lookup too. Linear in the launches."""
    after = [tuple(units.tokens[i + 1 : i + KGRAM]) for i in named]
    if len(after) < 2 or len(after[0]) < KGRAM - 1 or after.count(after[0]) < 2:
        return []
    sig, taken = after[0], set(named)
    return [
        i
        for i, name in enumerate(unit_names)
        if i not in taken
        and names.gather_kernel(name)
        and tuple(units.tokens[i + 1 : i + KGRAM]) == sig
    ]


def _graph_starts(units: Units, lookups: list[int], calls) -> list[int]:
    """Each graph launch of a whole forward, from where the host began it (module docstring, 3).
    None for a replay that a lookup just preceded (the embedding ran eagerly: that lookup starts it)."""
    import bisect

    call_starts = [ts for ts, _ in calls]
    out: list[int] = []
    for i, kind in enumerate(units.kind):
        if kind != "graph" or units.sizes[i] < MIN_GRAPH_KERNELS:
            continue
        before = bisect.bisect_left(lookups, i) - 1
        if before >= 0 and i - lookups[before] <= NEAR_LOOKUP:
            continue
        floor = max(lookups[before] if before >= 0 else -1, out[-1] if out else -1)
        start = _call_start(units, i, calls, call_starts, floor)
        if start is None:
            start = next((j + 1 for j in range(i - 1, floor, -1) if units.kind[j] == "sync"), None)
        if start is None:
            start = i
            while start - 1 > floor and units.kind[start - 1] == "memcpy":
                start -= 1
        out.append(start)
    return out


def _call_start(units: Units, i: int, calls, call_starts, floor: int) -> int | None:
    """The first launch of the earliest compiled call that holds launch i, after `floor`."""
    import bisect

    at = bisect.bisect_right(call_starts, units.ts[i])
    holding = [ts for ts, dur in calls[max(0, at - 8) : at] if ts + dur >= units.ts[i]]
    if not holding:
        return None
    first = bisect.bisect_left(units.ts, min(holding))
    return first if floor < first <= i else None


def _repeat_starts(units: Units) -> tuple[list[int], str]:
    """Forward starts from the period of the launch sequence (module docstring, 4): runs of equal
    nearest recurrence first, else runs read by direct comparison (tandem_repeats). A repeated
    step is longer than the longest layer repeat either reading finds: a host loop's short repeats
    with a synchronisation in each (prompt lookup's candidate search, stopping checks) are no step."""
    sync = [kind == "sync" for kind in units.kind]
    distance = _recurrences(units.tokens)  # read once, by both readings
    exact = _runs(_equal_distance_runs(distance), sync)
    direct = _runs(_direct_runs(units.tokens, distance), sync)
    layer = max((p for _, p in exact[0] + direct[0]), default=0)
    starts, how = _repeat_starts_of(*exact, sync, layer, max)
    if len(starts) < 2:
        starts, how = _repeat_starts_of(*direct, sync, layer, min)
    return starts, how


def _runs(repeats, sync: list[bool]) -> tuple[list, list]:
    """The tandem repeats as (cover, period), split into layer stacks (no sync in the period) and
    repeated steps."""
    stacks: list[tuple[tuple[int, int], int]] = []
    steps: list[tuple[tuple[int, int], int]] = []
    for start, length, period in repeats:
        cover = ((start, start + length + period + KGRAM - 1), period)
        (steps if any(sync[start : start + period]) else stacks).append(cover)
    return stacks, steps


def _repeat_starts_of(stacks, steps, sync: list[bool], layer: int, pick) -> tuple[list[int], str]:
    steps = [s for s in steps if s[1] > layer]
    if steps:
        return _step_starts(steps, sync, pick), (
            "the period of the launch sequence (a repeated step, cut after its host sync)"
        )
    starts: list[int] = []
    previous_end = 0
    for begin, end in _merged(stacks):
        cut = next((i + 1 for i in range(begin - 1, previous_end - 1, -1) if sync[i]), None)
        starts.append(cut if cut is not None else (previous_end if starts else begin))
        previous_end = end
    return (
        starts,
        "repeated layer kernels (one stack of layers per forward, cut after the host sync)",
    )


def _step_starts(steps, sync: list[bool], pick=max) -> list[int]:
    """A run of repeated steps cut every period, after the last host sync of its first period.
    Runs read by direct comparison repeat at every multiple of the step's period too: the
    smallest is the step's (`pick=min`)."""
    starts: list[int] = []
    for begin, end in _merged(steps):
        period = pick((p for (b, _), p in steps if begin <= b < end), default=0)
        window = [i for i in range(begin, begin + period) if sync[i]]
        starts += range(window[-1] + 1, end, period)
    return starts


def _merged(stacks) -> list[tuple[int, int]]:
    """Overlapping covers joined: one stack of layers (or run of steps) each."""
    out: list[list[int]] = []
    for (begin, end), _ in sorted(stacks):
        if out and begin < out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([begin, end])
    return [(b, e) for b, e in out]


def tandem_repeats(tokens: list[int], direct: bool = False) -> list[tuple[int, int, int]]:
    """(start, length, period) of every run of positions whose K-gram recurs exactly `period`
    launches later, long enough to cover (almost) a whole period: the sequence repeats itself
    back to back there. One backward pass: each K-gram's nearest recurrence, then runs of equal
    distance. With `direct`, the nearest recurrence only proposes a period and the run is read by
    comparing the launches `period` apart, so a shorter repeat inside the period (rotary embeddings
    applied to the query and then the key by the same kernels, in every layer) does not break it;
    still linear: each period's comparisons start where its previous run ended, at most RUN_BUDGET
    comparisons per launch in all."""
    distance = _recurrences(tokens)
    return _direct_runs(tokens, distance) if direct else _equal_distance_runs(distance)


def _recurrences(tokens: list[int]) -> list[int]:
    """Per position, how many launches later its K-gram next recurs (0: never); [] for a sequence
    too short to hold a repeat. One backward pass."""
    n = len(tokens)
    if n < 2 * KGRAM + MIN_PERIOD:
        return []
    distance = [0] * (n - KGRAM + 1)
    last: dict[tuple, int] = {}
    for i in range(n - KGRAM, -1, -1):
        key = tuple(tokens[i : i + KGRAM])
        j = last.get(key)
        distance[i] = j - i if j is not None else 0
        last[key] = i
    return distance


def _equal_distance_runs(distance: list[int]) -> list[tuple[int, int, int]]:
    out, i = [], 0
    while i < len(distance):
        d, j = distance[i], i
        while j + 1 < len(distance) and distance[j + 1] == d:
            j += 1
        if d >= MIN_PERIOD and j - i + 1 >= d - KGRAM:
            out.append((i, j - i + 1, d))
        i = j + 1
    return out


def _direct_runs(tokens: list[int], distance: list[int]) -> list[tuple[int, int, int]]:
    n = len(tokens)
    out: list[tuple[int, int, int]] = []
    reach: dict[int, int] = {}
    budget = RUN_BUDGET * n
    for i, d in enumerate(distance):
        if d < MIN_PERIOD or reach.get(d, -1) > i or budget <= 0:
            continue
        j = i
        while (
            budget > 0
            and j + d + CHUNK <= n
            and tokens[j : j + CHUNK] == tokens[j + d : j + d + CHUNK]
        ):
            j += CHUNK  # long runs compared a block at a time (list comparison, in C)
            budget -= CHUNK
        while j + d < n and tokens[j] == tokens[j + d] and budget > 0:
            j += 1
            budget -= 1
        reach[d] = j
        length = j - i - KGRAM + 1  # K-gram positions whose K-gram recurs `d` later
        if length >= d - KGRAM:
            out.append((i, length, d))
    return out
