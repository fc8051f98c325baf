"""The step finder's and the step rules' remaining boundaries and branches, each pinned on both
sides: the run length of a tandem repeat, the gap threshold of bursts, each step's bounds, tokens
from the launch grids of replays, the tokens a run's costs divide by, and which graphed phase an
eager phase is weighed against. Built in memory like tests/test_profile_steps_unit.py (whose
helpers these use); part of the mutation check's fast test set (examples/mutation_profile.sh).

Private stages (`F._x`, `K._x`, `S._x`) are called directly, kept so (issue 38 §4): each
boundary sits inside one stage of the step finder, and a whole timeline that places it there
exactly is many launches long; find_steps on real traces covers the road end to end."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ncclprobe.diagnose.run import profile_costs as C
from ncclprobe.diagnose.run import rules_profile_baseline as RB
from ncclprobe.diagnose.run import rules_profile_eager as RE
from ncclprobe.diagnose.run import rules_profile_steps as RS
from ncclprobe.evidence.bundle import Evidence
from ncclprobe.evidence.run.profile import forwards as F
from ncclprobe.evidence.run.profile import kinds as K
from ncclprobe.evidence.run.profile import steps as S
from ncclprobe.evidence.run.profile.timeline import Kernel, Launch, Timeline
from ncclprobe.evidence.run.view import Acceptance
from tests.test_profile_steps_unit import LLAMA3_8B_RUN, _steps, phase, profile_run

# ---- tandem repeats: how long a run must be, how long the sequence ------------------------------


def test_a_repeat_must_cover_its_period_less_one_kgram():
    block, tail = list(range(10)), list(range(100, 120))
    # a block and all but its last launch again: the K-grams of 10 - KGRAM positions recur
    assert F.tandem_repeats(block + block[:9] + tail) == [(0, 10 - F.KGRAM, 10)]
    assert F.tandem_repeats(block + block[:8] + tail) == []  # one position short


def test_a_sequence_shorter_than_two_kgrams_and_a_layer_is_not_read():
    block = list(range(F.MIN_PERIOD))
    enough = block * 2 + [90, 91, 92, 93]  # 2 * KGRAM + MIN_PERIOD launches
    assert len(enough) == 2 * F.KGRAM + F.MIN_PERIOD
    assert F.tandem_repeats(enough) == [(0, F.MIN_PERIOD - F.KGRAM + 1, F.MIN_PERIOD)]
    assert F.tandem_repeats(enough[:-1]) == []


def test_every_run_of_a_longer_sequence_is_reported_with_its_start():
    block, other = list(range(10)), list(range(20, 32))
    tokens = list(range(50, 55)) + block * 3 + list(range(60, 70)) + other * 2 + [99] * 3
    assert F.tandem_repeats(tokens) == [(5, 20 - F.KGRAM + 1, 10), (45, 12 - F.KGRAM + 1, 12)]


# ---- bursts between GPU gaps --------------------------------------------------------------------


def _kernels(starts, dur=1.0):
    return [Kernel(ts, dur, 7, None, f"k{i}", None, "kernel") for i, ts in enumerate(starts)]


def _burst_ends(kernels, launches=None):
    tl = Timeline("mem", {}, kernels=kernels, launches=launches or {})
    return [(s.t0, s.t1) for s in S._from_gaps(tl)]


def test_a_gap_over_the_floor_ends_a_burst():
    # kernels 1 µs long, 1 µs apart: 20 x the median gap is under MIN_STEP_GAP_US, the floor rules
    inside = [0.0, 2.0, 4.0, 6.0]
    at = 7.0 + S.MIN_STEP_GAP_US  # a gap of exactly the floor: one burst
    assert _burst_ends(_kernels(inside + [at, at + 2])) == [(0.0, at + 3)]
    later = at + 0.5
    assert _burst_ends(_kernels(inside + [later, later + 2])) == [(0.0, 7.0), (later, later + 3)]


def test_a_gap_over_gap_factor_times_the_median_ends_a_burst():
    # kernels 10 µs apart: the threshold is 20 x 10 = 200 µs, above the floor
    inside = [0.0, 11.0, 22.0, 33.0, 44.0]
    at = 45.0 + S.GAP_FACTOR * 10.0
    assert len(_burst_ends(_kernels(inside + [at, at + 11, at + 22]))) == 1
    split = _burst_ends(_kernels(inside + [at + 1, at + 12, at + 23]))
    assert split == [(0.0, 45.0), (at + 1, at + 24)]


def test_overlapping_kernels_do_not_lower_the_typical_gap():
    # four overlapping pairs (gaps <= 0) and five 10 µs gaps: the median gap is 10, not 0
    starts, t = [], 0.0
    for _ in range(5):
        starts += [t, t + 0.5]  # the second starts inside the first
        t += 1.5 + 10.0
    starts[-1] = starts[-2]  # and one gap of exactly 0
    tail = starts[-2] + 1.0 + 150.0  # 150 µs: over the floor, under 20 x 10
    assert len(_burst_ends(_kernels(starts + [tail]))) == 1


def test_no_gap_is_no_burst_and_launches_bound_a_burst():
    assert _burst_ends(_kernels([0.0, 1.0, 2.0])) == []  # back to back: nothing separates
    assert _burst_ends(_kernels([0.0])) == []
    kernels = [
        Kernel(100.0, 5.0, 7, 1, "a", None, "kernel"),
        Kernel(106.0, 5.0, 7, 2, "b", None, "kernel"),
        Kernel(112.0, 5.0, 7, 9, "c", None, "kernel"),  # its launch is not in the trace
        Kernel(500.0, 5.0, 7, None, "d", None, "kernel"),
    ]
    launches = {1: Launch("kernel", "a", 40.0, 1.0, 1), 2: Launch("kernel", "b", 60.0, 1.0, 1)}
    steps = S._from_gaps(Timeline("mem", {}, kernels=kernels, launches=launches))
    assert [(s.t0, s.t1) for s in steps] == [(40.0, 60.0), (500.0, 505.0)]
    assert {(s.kind, s.label, s.engine) for s in steps} == {("other", "burst", "unknown")}
    assert steps[0].found_by.startswith("gaps between bursts of GPU work")


def test_bursts_are_the_steps_when_nothing_else_marks_them():
    kernels = _kernels([0.0, 2.0, 4.0, 500.0, 502.0, 504.0])
    steps, how = S.find_steps(Timeline("mem", {}, kernels=kernels))
    assert [len(s.kernels) for s in steps] == [3, 3] and how.startswith("gaps between bursts")
    assert [s.kept for s in steps] == [None, None]  # a burst is of unknown kind: keeps nothing


# ---- each step's bounds: what a cross-rank analysis aligns -----------------------------------------


def test_bounds_give_the_host_window_the_last_launch_and_the_gpu_span():
    launches = {1: Launch("kernel", "a", 90.0, 1.0, 1), 2: Launch("kernel", "b", 95.0, 1.0, 1)}
    step = S.Step(kind="decode", label="decode", t0=80.0, t1=99.0)
    step.kernels = [
        Kernel(100.0, 5.0, 7, 1, "a", None, "kernel"),
        Kernel(120.0, 10.0, 7, 2, "b", None, "kernel"),
        Kernel(110.0, 1.0, 7, None, "c", None, "kernel"),  # no launch: no last launch from it
    ]
    tiled = S.Step(kind="decode", label="decode", t0=99.0, t1=150.0, gpu_end=400.0)
    tiled.kernels = [Kernel(300.0, 10.0, 7, 3, "a", None, "kernel")]
    empty = S.Step(kind="other", label="burst", t0=150.0, t1=160.0)
    tl = Timeline("mem", {}, launches=launches)
    assert S.bounds(tl, [step, tiled, empty]) == [
        {
            "label": "decode",
            "kind": "decode",
            "host_us": (80.0, 99.0),
            "last_launch_us": 95.0,
            "gpu_us": (100.0, 130.0),
        },
        {
            "label": "decode",
            "kind": "decode",
            "host_us": (99.0, 150.0),
            "last_launch_us": None,
            "gpu_us": (300.0, 400.0),  # runs on to the next step's first kernel
        },
        {
            "label": "burst",
            "kind": "other",
            "host_us": (150.0, 160.0),
            "last_launch_us": None,
            "gpu_us": None,
        },
    ]


# ---- kinds: tokens from the launch grids of replays --------------------------------------------------


def _grid_step(blocks, replay=False, t0=0.0, model="target"):
    s = S.Step(kind="other", label="forward", t0=t0, t1=t0 + 5.0, model=model, replay=replay)
    s.blocks = dict(blocks)
    return s


ONE = {"a": 2, "b": 4, "c": 8}
FIVE = {"a": 10, "b": 20, "c": 40}


def test_replays_are_compared_with_replays_and_one_of_a_kind_with_nothing():
    eager = _grid_step(FIVE, t0=0.0)
    replays = [_grid_step(FIVE, True, 10.0), _grid_step(ONE, True, 20.0)]
    group = [eager, *replays]
    K._tokens(Timeline("mem", {}), group, group, "target")
    assert eager.tokens_per_seq is None and eager.tokens_from == ""  # no other eager forward
    assert [s.tokens_per_seq for s in replays] == [5.0, 1.0]
    assert replays[0].tokens_from == (
        "the launch grids of the replayed kernels, against its smallest forward taken as 1 token(s)"
    )
    pair = [_grid_step(FIVE, t0=0.0), _grid_step(ONE, t0=10.0)]
    K._tokens(Timeline("mem", {}), pair, pair, "target")
    assert [s.tokens_per_seq for s in pair] == [5.0, 1.0]
    assert pair[0].tokens_from.startswith("the launch grids, against its smallest forward")


def test_beside_a_draft_the_smallest_target_forward_is_the_drafts_per_cycle_plus_one():
    target = [_grid_step(ONE, t0=0.0), _grid_step(FIVE, t0=100.0)]
    drafts = [_grid_step({"x": 2}, t0=10.0 + i, model="draft") for i in range(3)]
    steps = [target[0], *drafts, target[1]]
    K._tokens(Timeline("mem", {}), target, steps, "target")
    assert [s.tokens_per_seq for s in target] == [4.0, 20.0]
    assert target[0].tokens_from.endswith("taken as 4 token(s) (the drafts per cycle + 1)")


def test_grid_tokens_are_at_least_one_and_unreadable_grids_stay_unknown():
    ref = {"a": 10, "b": 20, "c": 40}  # the smallest forward by its blocks
    fewer = {"a": 2, "b": 4, "c": 8, "w": 100}  # a fifth of its grids: still one token
    tiny = {"a": 100 / 7, "b": 200 / 7, "c": 400 / 7}  # 1.43x: rounds to 1, not 2
    group = [
        _grid_step(ref),
        _grid_step({"z": 90}, t0=10.0),  # no kernel in common: unknown, and the next ones read
        _grid_step(fewer, t0=20.0),
        _grid_step(tiny, t0=30.0),
    ]
    K._tokens(Timeline("mem", {}), group, group, "target")
    assert [s.tokens_per_seq for s in group] == [1.0, None, 1.0, 1.0]
    assert group[1].tokens_from == ""


def test_recorded_shapes_win_over_the_grids():
    shaped = _grid_step(FIVE, t0=0.0)
    other = _grid_step(ONE, t0=10.0)
    tl = Timeline("mem", {}, embeddings=[(1.0, 1.0, [2, 7])])
    K._tokens(tl, [shaped, other], [shaped, other], "target")
    assert (shaped.batch, shaped.tokens_per_seq) == (2, 7.0)
    assert shaped.tokens_from == "the recorded input shapes"
    assert other.tokens_per_seq == 1.0


# ---- the tokens a run's costs divide by -------------------------------------------------------------


def test_tokens_say_where_they_come_from():
    kept = C.tokens(profile_run(phase("decode", "decode"), tokens=12))
    assert kept == C.Tokens(12.0, True, "kept: the KV cache's growth, one per decode")
    steps = C.tokens(profile_run(phase("prefill", "prefill", count=1), phase("decode", "decode")))
    assert steps == C.Tokens(11.0, True, "one token per step")
    log = C.tokens(
        profile_run(
            phase("decode", "decode", count=3),
            phase("verify", "verify", count=4),
            acceptance=Acceptance(mean_length=None, histogram=(1, 1)),  # 1.5 tokens per cycle
        )
    )
    assert log == C.Tokens(3 + 4 * 1.5, True, "the server log's acceptance")
    # a verify whose kept tokens the trace does not hold: the run's tokens are unknown, never a
    # forward counted as a token (a verify keeps 1 to k+1), whatever the order of the phases
    for order in (("verify", "decode"), ("decode", "verify")):
        run = profile_run(*(phase(k, k, count=4) for k in order))
        assert C.tokens(run) == C.Tokens(None, False, "", C.UNKNOWN_VERIFY)
    unknown = C.Tokens(None, False, "", "the steps' kinds are unknown")
    assert C.tokens(profile_run(phase("burst", "other"))) == unknown


def test_a_phase_without_steps_adds_no_tokens_and_ends_nothing():
    run = profile_run(
        phase("verify", "verify", count=0, tokens_kept=9.0),
        phase("decode", "decode", count=3),
        phase("draft", "draft", count=8),  # a draft's tokens are the target's to keep
    )
    assert C.tokens(run) == C.Tokens(3.0, True, "one token per step")
    kept = profile_run(phase("decode", "decode", count=3, tokens_kept=2.5))
    assert C.tokens(kept).count == 2.5


# ---- which graphed phase an eager phase is weighed against --------------------------------------


def _two(*baselines):
    return Evidence(runs=[], baseline=list(baselines), kind="profile")


def test_the_baselines_phase_of_the_same_kind_else_its_decode():
    verify = phase("verify", "verify", count=3, graphed=True)
    decode = phase("decode", "decode", count=30, graphed=True)
    base = profile_run(verify, decode)
    assert C.baseline_reference(_two(base), "verify") == (base, verify)
    assert C.baseline_reference(_two(base), "draft") == (base, decode)
    only = profile_run(decode)
    assert C.baseline_reference(_two(only), "verify") == (only, decode)
    busier = phase("replay", "other", count=90, graphed=True)  # more steps, but not a decode
    base = profile_run(verify, decode, busier)
    assert C.baseline_reference(_two(base), "draft") == (base, decode)


def test_else_the_baselines_most_frequent_graphed_phase_but_its_prefill():
    eager_decode = phase("decode", "decode", count=40, graphed=False)
    few = phase("replay-a", "other", count=3, graphed=True)
    many = phase("replay-b", "other", count=9, graphed=True)
    prefill = phase("prefill", "prefill", count=50, graphed=True)
    none = phase("replay-c", "other", count=0, graphed=True)
    base = profile_run(eager_decode, few, many, prefill, none)
    assert C.baseline_reference(_two(base), "decode") == (base, many)
    assert C.baseline_reference(_two(profile_run(eager_decode, prefill, none)), "decode") is None


def test_the_first_baseline_with_a_graphed_phase_wins():
    eager = profile_run(phase("decode", "decode", count=40, graphed=False))
    first = profile_run(phase("decode", "decode", count=5, graphed=True), label="first")
    second = profile_run(phase("decode", "decode", count=50, graphed=True), label="second")
    found = C.baseline_reference(_two(eager, first, second), "decode")
    assert found is not None and found[0] is first
    assert C.baseline_reference(_two(), "decode") is None


def test_graphed_reference_says_where_the_reference_comes_from():
    eager = phase("verify", "verify", count=5)
    base = profile_run(phase("decode", "decode", count=30, graphed=True))
    run = profile_run(eager)
    both = profile_run(phase("verify", "verify", count=3, graphed=True), *base.phases.values())
    assert C.graphed_reference(_two(both), run, eager)[0].name == "verify"  # its own kind
    ref, where, from_base = C.graphed_reference(_two(base), run, eager)
    assert (ref.name, from_base) == ("decode", True)
    assert where == "the baseline (baseline) replays its decode steps from a graph"
    base.path = "base.json.gz"
    where = C.graphed_reference(_two(base), run, eager)[1]
    assert where == "the baseline (base.json.gz) replays its decode steps from a graph"


def test_without_a_baseline_the_runs_own_most_frequent_other_replay():
    eager = phase("verify", "verify", count=5, graphed=True)  # never the phase itself
    few = phase("draft", "draft", count=4, graphed=True)
    many = phase("decode", "decode", count=6, graphed=True)
    unused = phase("x", "other", count=0, graphed=True)
    flat = phase("y", "other", count=99, graphed=False)
    run = profile_run(eager, few, many, unused, flat)
    assert C.graphed_reference(_two(), run, eager) == (
        many,
        "this run replays its decode steps from a graph",
        False,
    )
    assert C.graphed_reference(_two(), profile_run(eager, unused, flat), eager) == (
        None,
        "",
        False,
    )


def test_a_phases_typical_time_is_its_median_times_its_steps():
    assert C.phase_ms(phase("d", "decode", count=3, median=2.0)) == 6.0
    assert C.phase_ms(replace(phase("d", "decode", count=3), median_ms=None)) == 0.0
    assert C.phase_ms(phase("d", "decode", count=0, median=2.0)) == 0.0


def test_a_cost_per_token_needs_tokens_and_forwards_need_steps():
    assert C.per_token(6.0, C.Tokens(3.0, True, "")) == 2.0
    assert C.per_token(6.0, C.Tokens(None, False, "")) is None
    prefill_only = profile_run(phase("prefill", "prefill", count=1))
    assert C.forwards_per_token(prefill_only, C.Tokens(5.0, True, "")) is None
    run = profile_run(phase("prefill", "prefill", count=1), phase("decode", "decode", count=8))
    assert C.forwards_per_token(run, C.Tokens(4.0, True, "")) == 2.0
    assert C.forwards_per_token(run, C.Tokens(None, False, "")) is None


# ---- kinds: two models, the drafts per cycle, decode or verify ---------------------------------


class _Sized:
    def __init__(self, launches):
        self.launch_count = launches


def test_two_sizes_apart_by_the_ratio_are_a_draft_and_its_target():
    target, draft, again = _Sized(160), _Sized(100), _Sized(160)
    assert K._drafts([target, draft, again]) == [draft]
    assert K._drafts([_Sized(159), draft, _Sized(159)]) == []  # below the ratio: one model
    assert K._drafts([target]) == []
    # one larger forward first, then only smaller ones: an eager prompt before compiled forwards
    assert K._drafts([target, draft, _Sized(100)]) == []


def _models(pattern):
    out = []
    for m in pattern:
        s = S.Step(
            kind="other", label="forward", t0=0, t1=0, model="draft" if m == "d" else "target"
        )
        out.append(s)
    return out


def test_the_drafts_per_cycle_are_the_median_run_of_drafts_between_targets():
    steps = _models("tddddtddddtddddt")
    assert K._smallest_tokens(steps, steps, "target") == 5
    steps = _models("tddt" + "ddddt" * 2)  # runs of 2, 4, 4: the median 4
    assert K._smallest_tokens(steps, steps, "target") == 5
    trailing = _models("tdd")  # drafts with no target after them: no whole cycle
    assert K._smallest_tokens(trailing, trailing, "target") == 1


def test_one_eager_forward_then_one_replay_is_a_prefill_and_a_decode():
    steps = _steps([None]) + _steps([None], replay=True)
    K._kinds(steps, "target")
    assert [s.kind for s in steps] == ["prefill", "decode"]


def test_draft_forwards_are_of_kind_draft_and_two_tokens_are_a_verify():
    drafts = _steps([16.0, 1.0, 1.0], model="draft")
    K._kinds(drafts, "draft")
    assert [(s.kind, s.label) for s in drafts] == [
        ("prefill", "draft prefill"),
        ("draft", "draft"),
        ("draft", "draft"),
    ]
    two = _steps([20.0, 1.0, 2.0])
    K._kinds(two, "target")
    assert [s.kind for s in two] == ["prefill", "decode", "verify"]
    flat = _steps([20.0, 1.0, 1.5])  # 3 tokens over a batch of 2
    K._kinds(flat, "target")
    assert [s.kind for s in flat] == ["prefill", "decode", "verify"]


def _windows(n):
    return [
        S.Step(kind="verify", label="verify", t0=100.0 * i, t1=100.0 * i + 90) for i in range(n)
    ]


def test_kept_tokens_need_a_reading_in_every_forward():
    steps = _windows(3)
    steps[0].kind = "prefill"
    partial = Timeline("mem", {}, attention=[(10, 20, 20), (110, 5, 21)])  # none in the third
    K._kept(partial, steps)
    assert [s.kept for s in steps] == [1.0, None, None]


def test_an_attention_call_at_the_steps_end_is_the_steps():
    step = S.Step(kind="decode", label="decode", t0=100.0, t1=190.0)
    assert K._cache_before(Timeline("mem", {}, attention=[(190.0, 1, 30)]), step) == 29
    assert K._cache_before(Timeline("mem", {}, attention=[(190.5, 1, 30)]), step) is None


# ---- steps: the last forward cut off, at its boundaries ------------------------------------------


def _forward(counts, signature=(1,)):
    s = S.Step(kind="other", label="f", t0=0, t1=0, signature=signature)
    for name, n in counts.items():
        s.kernels += [Kernel(0, 1, 7, None, name, None, "kernel") for _ in range(n)]
    return s


def test_only_forwards_that_start_alike_decide_the_last_ones_cut():
    prefill = _forward({"big": 40}, signature=(9,))
    decode = _forward({"layer": 20})
    assert S._cut_off([prefill, decode, decode, _forward({"layer": 10})])
    assert not S._cut_off([prefill, decode, decode, _forward({"layer": 20})])
    assert S._cut_off([decode, prefill, _forward({"layer": 10})])  # the first alike, not first


def test_a_kernel_twice_in_every_forward_recurs_and_a_missing_one_counts_nothing():
    assert S._cut_off([_forward({"layer": 2}), _forward({"layer": 1})])
    uneven = [_forward({"layer": 20, "norm": 4}), _forward({"layer": 20}), _forward({"layer": 20})]
    assert not S._cut_off(uneven)  # norm is not in every forward: only the layers count
    assert S._cut_off([_forward({"layer": 20}), _forward({"other": 30})])
    assert S._cut_off([_forward({"a": 2, "b": 6}), _forward({"b": 6})])  # 6 of 8 kept: under 85%


# ---- the rules at their remaining edges ----------------------------------------------------------


def test_a_share_is_capped_at_the_whole_run_and_unknown_without_steps():
    run = profile_run(phase("decode", "decode", count=10, median=10.0))
    assert C.share(50.0, run) == 0.5 and C.share(200.0, run) == 1.0
    assert C.share(5.0, profile_run()) is None


def test_host_bound_reads_every_phase_and_leaves_cpu_only_ones_unchecked():
    busy = phase("accept", "other", count=5, median=1.0, busy=0.95, spread=(0.05, 0.05))
    idle = phase("decode", "decode", median=10.0, busy=2.0, spread=(0.7, 0.9))
    out = RS.host_bound(Evidence(runs=[profile_run(busy, idle, tokens=10)], kind="profile"))
    assert [type(o).__name__ for o in out] == ["RuledOut", "Finding"]
    cpu = replace(phase("decode", "decode"), idle_ms=None, device_ms=None, graphed=None)
    (unchecked,) = RS.host_bound(Evidence(runs=[profile_run(cpu, tokens=10)], kind="profile"))
    assert unchecked.missing.startswith("GPU activity in the profile")


def test_every_runs_eager_steps_are_weighed():
    graphed = phase("decode", "decode", count=10, median=3.0, busy=0.5, graphed=True)
    eager = phase("burst", "other", count=10, median=18.0, busy=1.0)
    runs = [profile_run(eager, graphed, tokens=10, label=f"rank{i}") for i in range(2)]
    out = RE.eager_steps(Evidence(runs=runs, kind="profile"))
    assert [o.rule for o in out] == ["eager-launches", "eager-launches"]


def test_a_saving_under_a_millisecond_is_still_a_saving():
    graphed = phase("decode", "decode", count=10, median=3.0, busy=0.5, graphed=True)  # 2.5 idle
    eager = phase("verify", "verify", count=10, median=4.0, busy=1.0)  # 3.0 idle: 0.5 more
    (found,) = RE.eager_steps(
        Evidence(runs=[profile_run(eager, graphed, tokens=10)], kind="profile")
    )
    assert found.cost.high == pytest.approx(0.5)


def test_the_model_shape_prices_only_a_verify_against_a_decode():
    config = dict(LLAMA3_8B_RUN)
    graphed = phase("decode", "decode", count=10, median=2.0, busy=1.8, graphed=True)
    draft = phase("draft", "draft", count=10, median=20.0, busy=1.0)
    run = profile_run(draft, graphed, mode="speculative", tokens=10)
    found = RE.eager_steps(Evidence(runs=[run], kind="profile", config=config))[0]
    assert found.cost.high == pytest.approx(19.0 - 0.2)  # the idle difference
    assert "expected_ratio" not in found.evidence
    verify = phase("verify", "verify", count=10, median=20.0, busy=1.0)
    run = profile_run(verify, graphed, mode="speculative", tokens=10)
    found = RE.eager_steps(Evidence(runs=[run], kind="profile", config=config))[0]
    ratio = found.evidence["expected_ratio"]
    assert ratio > 1.0 and found.cost.high == pytest.approx(20.0 - 2.0 * ratio, rel=1e-3)
    near = phase("verify", "verify", count=10, median=2.0 * ratio + 0.5, busy=1.0)  # 0.5 above
    run = profile_run(near, graphed, mode="speculative", tokens=10)
    found = RE.eager_steps(Evidence(runs=[run], kind="profile", config=config))[0]
    assert found.cost.high == pytest.approx(0.5, abs=0.01)


def test_only_the_traces_profiles_are_weighed_against_the_baseline():
    base = profile_run(phase("decode", "decode", count=47, median=3.0, graphed=True), tokens=48)
    run = profile_run(phase("decode", "decode", count=35, median=18.0), tokens=36)
    engine = replace(run, source="engine-trace", label="engine", phases={})  # not a profile
    alone = RB.against_baseline(Evidence(runs=[run], baseline=[base], kind="profile"))
    first = RB.against_baseline(Evidence(runs=[engine, run], baseline=[base], kind="profile"))
    assert [o.to_json() for o in first] == [o.to_json() for o in alone]
