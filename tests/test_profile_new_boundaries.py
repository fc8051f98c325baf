"""Boundaries of the unseen-trace step finder code that the mutation check found unpinned
(docs/LOG.md, 2026-12-02 "mutation check of the unseen-trace code"): which of several kernels named
for an embedding are the lookups (a host sync before most of their launches), when other gathers
join them (two named lookups agreeing on the launches after them), where a host lookup and a named
kernel are one forward, and when ProfilerStep#N windows hold several forwards. Built in memory.

Private stages (`F._x`, `K._x`, `S._x`) are called directly, kept so (issue 38 §4): each
boundary sits inside one stage of the step finder, and a whole timeline that places it there
exactly is many launches long; find_steps on real traces covers the road end to end."""

from __future__ import annotations

from ncclprobe.evidence.run.profile import forwards as F
from ncclprobe.evidence.run.profile import steps as S


def units(tokens, kinds=None):
    """Units with these kernel ids ("s" in tokens: a host synchronisation)."""
    kinds = kinds or ["sync" if t == "s" else "kernel" for t in tokens]
    ids = [-1 if t == "s" else t for t in tokens]
    n = len(tokens)
    return F.Units(ids, [float(i) for i in range(n)], list(range(n)), kinds, [1] * n)


def named_in(u, *tokens):
    return [i for i, t in enumerate(u.tokens) if t in tokens]


# ---- several names match: the lookups are those after a host sync ---------------------------------

LOOKUP, FUSED = 100, 200  # the embedding's kernel; a fused norm inductor named after it too


def test_the_lookups_are_the_named_kernels_after_a_sync_not_the_first_name():
    # the trace starts inside a forward: the first named kernel is the fused norm, not a lookup
    u = units([FUSED, 1, "s", LOOKUP, 1, FUSED, 2, "s", LOOKUP, 1, FUSED, 2, "s", LOOKUP, 1, FUSED])
    got = F._lookups_among(u, named_in(u, LOOKUP, FUSED))
    assert got == named_in(u, LOOKUP)


def test_a_sync_before_exactly_half_of_a_names_launches_is_not_enough():
    # LOOKUP after a sync in 2 of its 4 launches (2 * 2 > 4 fails): no name qualifies, and the
    # first name's launches are taken; with a sync before 3 of 4 it is chosen
    half = units([FUSED, 1, "s", LOOKUP, 1, "s", LOOKUP, 1, LOOKUP, 2, LOOKUP, 3, FUSED, 4, FUSED])
    assert F._lookups_among(half, named_in(half, LOOKUP, FUSED)) == named_in(half, FUSED)
    most = units(
        [FUSED, 1, "s", LOOKUP, 1, "s", LOOKUP, 1, "s", LOOKUP, 2, LOOKUP, 3, FUSED, FUSED]
    )
    assert F._lookups_among(most, named_in(most, LOOKUP, FUSED)) == named_in(most, LOOKUP)
    odd = units([FUSED, 1, "s", LOOKUP, 1, "s", LOOKUP, 1, LOOKUP, 2, FUSED, 3, FUSED])  # 2 of 3
    assert F._lookups_among(odd, named_in(odd, LOOKUP, FUSED)) == named_in(odd, LOOKUP)


def test_every_name_mostly_after_a_sync_is_a_lookup():
    # the first named launch (index 0) counts as after a sync: without it LOOKUP would be 1 of 2
    u = units([LOOKUP, 1, "s", LOOKUP, 1, "s", FUSED, 1])
    assert F._lookups_among(u, named_in(u, LOOKUP, FUSED)) == named_in(u, LOOKUP, FUSED)


def test_every_sync_counts_not_only_the_first():
    # one sync per forward: a count that stopped at one would leave the later lookups unsynced
    u = units(["s", LOOKUP, 1, FUSED, 2, "s", LOOKUP, 1, FUSED, 2, "s", LOOKUP, 1, FUSED, 2, FUSED])
    assert F._lookups_among(u, named_in(u, LOOKUP, FUSED)) == named_in(u, LOOKUP)


def test_the_first_named_launch_counts_as_after_a_sync_and_only_the_first():
    # at index 0 nothing precedes it (a sync before the trace began); the one right after it, with
    # no sync between, does not: FUSED once, unsynced, is no lookup
    u = units([LOOKUP, FUSED, 1, 2, "s", LOOKUP, 1, 2, 3, "s", LOOKUP, 1])
    assert F._lookups_among(u, named_in(u, LOOKUP, FUSED)) == named_in(u, LOOKUP)


def test_two_names_are_sorted_out_but_one_name_is_kept_whole():
    one = units([LOOKUP, 1, LOOKUP, 2, LOOKUP])  # no sync at all: one name is every lookup
    assert F._lookups_among(one, named_in(one, LOOKUP)) == named_in(one, LOOKUP)
    two = units([FUSED, 1, "s", LOOKUP, 1, FUSED, "s", LOOKUP, 1, FUSED])
    assert F._lookups_among(two, named_in(two, LOOKUP, FUSED)) == named_in(two, LOOKUP)


# ---- other gathers, by the launches after the named lookups ----------------------------------------

FIRST_LAYER = [1, 2, 3, 4, 5]  # KGRAM - 1 launches after a lookup
OTHER = [6, 7, 8, 9, 10]
GATHER = 50


def gathers(blocks):
    tokens, names = [], []
    for head, tail in blocks:
        tokens += [head] + tail
        names += [{LOOKUP: "embedding_kernel", GATHER: "vectorized_gather_kernel"}.get(head, "")]
        names += [""] * len(tail)
    u = units(tokens)
    return F._gathers_like_lookups(u, named_in(u, LOOKUP), names), u


def test_two_named_lookups_that_agree_are_enough_to_take_a_gather():
    got, u = gathers([(LOOKUP, FIRST_LAYER), (LOOKUP, FIRST_LAYER), (GATHER, FIRST_LAYER)])
    assert got == named_in(u, GATHER)


def test_one_named_lookup_is_not_enough():
    got, _ = gathers([(LOOKUP, FIRST_LAYER), (GATHER, FIRST_LAYER)])
    assert got == []


def test_named_lookups_that_disagree_take_no_gather():
    got, _ = gathers([(LOOKUP, FIRST_LAYER), (LOOKUP, OTHER), (GATHER, FIRST_LAYER)])
    assert got == []


def test_the_signature_is_the_first_lookups_when_a_later_one_differs():
    # lookups 1 and 3 agree, lookup 2 differs: the gather followed by the agreed launches is taken,
    # the one followed by lookup 2's is not
    got, u = gathers(
        [
            (LOOKUP, FIRST_LAYER),
            (LOOKUP, OTHER),
            (LOOKUP, FIRST_LAYER),
            (GATHER, OTHER),
            (GATHER, FIRST_LAYER),
        ]
    )
    assert got == [named_in(u, GATHER)[1]]


# ---- a host lookup and a named kernel: one forward within MERGE_LOOKUPS ----------------------------


def test_a_named_kernel_merge_lookups_after_a_host_lookup_starts_its_own_forward():
    m = F.MERGE_LOOKUPS
    assert F._union([10], [10 + m - 1]) == [10]
    assert F._union([10], [10 + m]) == [10, 10 + m]
    assert F._union([10, 40], [10 + m - 1, 40 + m]) == [10, 40, 40 + m]


# ---- ProfilerStep#N windows holding several forwards -----------------------------------------------


def step(t0, t1, model="target"):
    return S.Step(kind="other", label="x", t0=t0, t1=t1, model=model)


def test_a_window_holding_two_forwards_wraps_several_and_one_does_not():
    windows = [step(0.0, 100.0), step(200.0, 300.0)]
    assert S._wrap_several(windows, [step(10.0, 20.0), step(50.0, 60.0)])  # the first window
    assert not S._wrap_several(windows, [step(10.0, 20.0), step(210.0, 220.0)])
    assert S._wrap_several(windows, [step(210.0, 220.0), step(250.0, 260.0)])


def test_a_forward_starting_at_a_windows_end_is_in_it_and_one_after_is_not():
    windows = [step(0.0, 100.0), step(200.0, 300.0)]
    assert S._wrap_several(windows, [step(10.0, 20.0), step(100.0, 110.0)])
    assert not S._wrap_several(windows, [step(10.0, 20.0), step(100.5, 110.0)])


def test_forwards_before_the_first_window_are_in_none():
    windows = [step(200.0, 300.0), step(400.0, 500.0)]
    assert not S._wrap_several(windows, [step(10.0, 20.0), step(50.0, 60.0), step(210.0, 220.0)])


def test_forwards_found_by_repetition_alone_never_wrap():
    windows = [step(0.0, 100.0)]
    assert not S._wrap_several(windows, [step(10.0, 20.0, ""), step(50.0, 60.0, "")])


def test_a_single_forward_wraps_nothing():
    assert not S._wrap_several([step(0.0, 100.0)], [step(10.0, 20.0)])


# ---- the period search: repeated steps against layer stacks ----------------------------------------


def test_a_repeat_with_a_sync_as_long_as_a_layer_is_no_step():
    sync = [i % 8 == 3 for i in range(48)]
    stack, repeat = [((20, 48), 8)], [((0, 48), 8)]
    assert F._repeat_starts_of(stack, repeat, sync, 8, max)[0] == [20]  # the stack's, cut at 19+1
    assert F._repeat_starts_of(stack, repeat, sync, 7, max)[0] == list(range(4, 48, 8))


def test_the_direct_reading_takes_the_smallest_period_of_a_run():
    sync = [i % 8 == 3 for i in range(48)]
    steps = [((0, 48), 8), ((0, 48), 16)]  # a period of 8 repeats at 16 too
    assert F._repeat_starts_of([], steps, sync, 0, min)[0] == list(range(4, 48, 8))
    assert F._repeat_starts_of([], steps, sync, 0, max)[0] == [12, 28, 44]


def test_a_first_stack_with_no_sync_before_it_starts_at_its_first_launch():
    # a sync at the trace's very end is after every stack, never before the first
    sync = [False] * 49 + [True]
    assert F._repeat_starts_of([((5, 20), 8), ((30, 45), 8)], [], sync, 8, max)[0] == [5, 20]


# ---- the direct reading of runs (a period search that survives a shorter repeat inside a layer) ----


def direct(tokens):
    return F._direct_runs(tokens, F._recurrences(tokens))


def test_a_run_read_directly_covers_every_k_gram_that_recurs_a_period_later():
    # [0..7] five times, then launches seen once: tokens j and j + 8 agree for j = 0..31, so the
    # K-grams at 0..26 (their last token j + 5 <= 31) recur 8 later: 27 positions
    tokens = list(range(8)) * 5 + list(range(100, 120))
    assert direct(tokens) == [(0, 27, 8)]


def test_a_run_is_kept_from_period_minus_k_positions_on_and_not_below():
    tail = list(range(100, 120))
    kept = list(range(8)) + list(range(7)) + tail  # 7 launches agree: 2 K-gram positions
    assert direct(kept) == [(0, 2, 8)]
    short = list(range(8)) + list(range(6)) + tail  # 6 agree: 1 position, under 8 - 6
    assert direct(short) == []


def test_a_period_under_min_period_is_no_layer():
    assert direct(list(range(8)) * 5 + list(range(100, 120)))[0][2] == F.MIN_PERIOD
    assert direct(list(range(7)) * 6 + list(range(100, 120))) == []
