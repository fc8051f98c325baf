"""Where a forward starts (forwards.py), each rule at its boundary on both sides: host lookups
merged or not, embedding-named kernels, a graph launch's start from its compiled call, the host's
sync or its input copies, never before the previous forward, and layer stacks cut after a sync.
Built in memory like tests/test_profile_steps_unit.py; part of the mutation check's fast test set
(examples/mutation_profile.sh).

Private stages (`F._x`, `K._x`, `S._x`) are called directly, kept so (issue 38 §4): each
boundary sits inside one stage of the step finder, and a whole timeline that places it there
exactly is many launches long; find_steps on real traces covers the road end to end."""

from __future__ import annotations

from ncclprobe.evidence.run.profile import forwards as F
from ncclprobe.evidence.run.profile.timeline import Kernel, Launch, Timeline
from tests.test_profile_steps_unit import layer, timeline


def units(kinds, ts=None, sizes=None):
    """Units from their kinds alone (a graph issues 16 kernels unless sizes say otherwise)."""
    n = len(kinds)
    return F.Units(
        tokens=list(range(n)),
        ts=ts or [10.0 * (i + 1) for i in range(n)],
        corr=list(range(1, n + 1)),
        kind=list(kinds),
        sizes=sizes or [F.MIN_GRAPH_KERNELS if k == "graph" else int(k != "sync") for k in kinds],
    )


# ---- the units ---------------------------------------------------------------------------------


def test_a_graph_launch_is_named_by_its_first_kernel_and_its_size():
    kernels = [
        Kernel(12.0, 1.0, 7, 1, "a", None, "kernel"),
        Kernel(23.0, 1.0, 7, 2, "later", None, "kernel"),  # listed first, runs second
        Kernel(22.0, 1.0, 7, 2, "a", None, "kernel"),
        Kernel(32.0, 1.0, 7, 3, "a", None, "kernel"),
        Kernel(33.0, 1.0, 7, 3, "later", None, "kernel"),
        Kernel(34.0, 1.0, 7, 3, "third", None, "kernel"),
        Kernel(42.0, 1.0, 7, 4, "a", None, "kernel"),
        Kernel(43.0, 1.0, 7, 4, "x", None, "kernel"),
    ]
    launches = {
        1: Launch("kernel", "a", 10.0, 1.0, 1),
        2: Launch("graph", "g", 20.0, 1.0, 1),
        3: Launch("graph", "g", 30.0, 1.0, 1),
        4: Launch("graph", "g", 40.0, 1.0, 1),
        5: Launch("sync", "s", 50.0, 1.0, 1),
        6: Launch("kernel", "nothing ran", 60.0, 1.0, 1),  # no kernel: no unit
    }
    u = F.units_of(Timeline("mem", {}, kernels=kernels, launches=launches))
    assert u.kind == ["kernel", "graph", "graph", "graph", "sync"]
    assert u.sizes == [1, 2, 3, 2, 0]
    # the kernel "a", a 2-kernel graph from "a", a 3-kernel one, the same 2-kernel shape again
    assert u.tokens == [0, 1, 2, 1, 3]


# ---- the host's lookups and the named kernels ----------------------------------------------------


def test_a_lookup_starts_at_its_first_launch_up_to_its_end():
    tl = timeline([("kernel", f"k{i}") for i in range(30)])  # launches at 10, 20, ...
    at_end = [(15.0, 5.0, None)]  # the launch at 20 is at the lookup's very end: inside
    tl.embeddings = at_end
    assert F._lookup_starts(tl, F.units_of(tl))[0] == [1]
    tl.embeddings = [(15.0, 4.9, None)]
    assert F._lookup_starts(tl, F.units_of(tl))[0] == []


def test_an_empty_lookup_is_skipped_not_the_end_and_merging_counts_from_the_last_start():
    tl = timeline([("kernel", f"k{i}") for i in range(40)])
    tl.embeddings = [(1.0, 1.0, None), (45.0, 10.0, None), (125.0, 10.0, None), (205.0, 10.0, None)]
    # launches 4 (at 50), 12 (at 130: 8 after) and 20 (at 210): each a forward
    assert F._lookup_starts(tl, F.units_of(tl))[0] == [4, 12, 20]
    tl.embeddings = [(95.0, 10.0, None), (135.0, 10.0, None)]  # launches 9 and 13: 4 apart
    assert F._lookup_starts(tl, F.units_of(tl))[0] == [9]


def test_host_lookups_start_forwards_and_say_so():
    spec = ([("kernel", "k")] * 9 + [("sync", "s")]) * 2
    tl = timeline(spec, embeddings=[(5.0, 10.0, None), (105.0, 10.0, None)])
    fws = F.find_forwards(tl, F.units_of(tl))
    assert [(f.start, f.end, f.lm) for f in fws] == [(0, 10, True), (10, 20, True)]
    assert fws[0].found_by == "the host's embedding lookups (aten::embedding), one per forward"


def test_kernel_names_start_forwards_where_no_host_lookup_does():
    """With or without other host ops: a compiled model's fused embedding kernel has no
    aten::embedding op on the host (the inductor traces of the unseen-data check)."""
    one = [("kernel", "indexSelectSmallIndex")] + [("kernel", f"k{i}") for i in range(8)]
    with_ops = timeline(one * 3, cpu_ops=1)  # the host's ops are there and hold no lookup
    bare = timeline(one * 3, cpu_ops=0)
    for tl in (with_ops, bare):
        forwards = F.find_forwards(tl, F.units_of(tl))
        assert [f.start for f in forwards] == [0, 9, 18]
        assert forwards[0].found_by == "kernels named for an embedding lookup"


def test_named_lookups_eight_launches_apart_are_two_forwards_seven_are_one():
    def starts(positions, n=30):
        spec = [("kernel", "embedding_gather" if i in positions else f"k{i}") for i in range(n)]
        tl = timeline(spec, cpu_ops=0)
        return F._named_starts(tl, F.units_of(tl))[0]

    assert starts({2, 10}) == [2, 10]
    assert starts({2, 9}) == [2]
    assert starts({9, 12, 17}) == [9, 17]  # 12 is 3 after 9: the same forward


# ---- graph launches ------------------------------------------------------------------------------


def test_two_launches_can_be_two_forwards():
    tl = timeline([("graph", "g", F.MIN_GRAPH_KERNELS)] * 2)
    fws = F.find_forwards(tl, F.units_of(tl))
    assert [(f.start, f.end) for f in fws] == [(0, 1), (1, 2)]
    assert fws[0].found_by == "graph launches of a whole forward (replays)"


def test_lookups_and_replays_together_say_both():
    spec = [("kernel", "embed")] + [("kernel", f"k{i}") for i in range(20)] + [("sync", "s")]
    spec += [("graph", "g", 20), ("sync", "s")] * 2
    tl = timeline(spec, embeddings=[(5.0, 10.0, None)])
    fws = F.find_forwards(tl, F.units_of(tl))
    assert [f.start for f in fws] == [0, 22, 24]
    assert fws[0].found_by == (
        "the host's embedding lookups (aten::embedding), one per forward; "
        "graph launches of a whole forward (replays)"
    )


def test_a_replay_near_a_lookup_is_skipped_and_the_next_one_is_not():
    u = units(["kernel"] * 5 + ["graph"] + ["kernel"] * 20 + ["graph"])
    assert F._graph_starts(u, [0], []) == [26]


def test_the_sync_search_stops_at_the_lookup_and_at_the_previous_replay():
    # a sync before the lookup is the previous forward's: the replay starts at itself
    u = units(["sync"] + ["kernel"] * 18 + ["graph"])
    assert F._graph_starts(u, [1], []) == [19]
    # the second replay finds no sync after the first one's start: its input copy starts it
    u = units(["sync", "memcpy", "graph", "kernel", "memcpy", "graph"])
    assert F._graph_starts(u, [], []) == [1, 4]
    # with nothing before it, the first replay never wraps round to the last unit
    assert F._graph_starts(units(["kernel", "graph", "sync"]), [], []) == [1]


def test_the_last_sync_before_a_replay_starts_it():
    assert F._graph_starts(units(["sync", "kernel", "sync", "graph"]), [], []) == [3]
    assert F._graph_starts(units(["kernel", "kernel", "sync", "kernel", "graph"]), [], []) == [3]


def test_input_copies_are_walked_back_to_but_not_onto_the_lookup():
    u = units(["memcpy"] * 20 + ["graph"])
    assert F._graph_starts(u, [0], []) == [1]


def test_a_compiled_call_holds_a_launch_up_to_its_end():
    u = units(["kernel", "kernel", "kernel", "graph"], ts=[10.0, 20.0, 30.0, 40.0])
    ends_at_launch = [(20.0, 20.0)]  # from 20 to exactly the launch at 40
    assert F._call_start(u, 3, ends_at_launch, [20.0], -1) == 1
    assert F._call_start(u, 3, [(20.0, 19.9)], [20.0], -1) is None
    at_launch = [(40.0, 5.0)]  # a call that begins with the launch: the launch starts it
    assert F._call_start(u, 3, at_launch, [40.0], -1) == 3
    early = [(5.0, 100.0)]  # from before the floor: not this forward's call
    assert F._call_start(u, 3, early, [5.0], 0) is None
    assert F._call_start(u, 3, early, [5.0], -1) == 0


def test_the_earliest_of_eight_open_calls_is_found():
    calls = [(10.0, 100.0)] + [(11.0 + i, 0.5) for i in range(7)]  # 7 short ones after it
    u = units(["kernel"] * 4 + ["graph"], ts=[10.0, 20.0, 30.0, 40.0, 50.0])
    assert F._call_start(u, 4, calls, [c[0] for c in calls], -1) == 0


# ---- layer stacks and repeated steps --------------------------------------------------------------


def test_a_sync_at_the_very_start_cuts_the_first_stack():
    one = layer() * 3 + [("kernel", "head"), ("memcpy", "DtoH")]
    spec = [("sync", "s"), ("kernel", "setup"), ("kernel", "setup2")] + one * 3
    starts, how = F._repeat_starts(F.units_of(timeline(spec, cpu_ops=0)))
    assert starts[0] == 1
    assert (
        how == "repeated layer kernels (one stack of layers per forward, cut after the host sync)"
    )


def test_a_stack_is_cut_after_the_nearest_sync_before_it():
    one = layer() * 3 + [("kernel", "head"), ("memcpy", "DtoH")]
    spec = [("kernel", "a"), ("sync", "s"), ("kernel", "b")] + one * 3
    assert F._repeat_starts(F.units_of(timeline(spec, cpu_ops=0)))[0][0] == 2


def test_a_repeated_step_says_so():
    step = [("kernel", f"k{i}") for i in range(10)] + [("sync", "s")]
    starts, how = F._repeat_starts(F.units_of(timeline(step * 5, cpu_ops=0)))
    assert how == "the period of the launch sequence (a repeated step, cut after its host sync)"
    assert starts == [11, 22, 33, 44]


def test_a_run_of_steps_takes_the_period_of_the_covers_inside_it_only():
    sync = [False] * 40
    sync[3] = sync[24] = True
    # two runs of steps, the second starting where the first ends: periods 5 and 10
    assert F._step_starts([((0, 20), 5), ((20, 40), 10)], sync) == [4, 9, 14, 19, 25, 35]
