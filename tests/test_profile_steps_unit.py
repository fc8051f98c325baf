"""Every threshold, branch and boundary of the step finder (forwards, kinds, steps) and the
profile step rules, each pinned on both sides. Inputs are built in memory (the reader's own
dataclasses, the view's runs and phases: no file, no mock), so the module runs in about a second;
the same behaviour on real traces is tests/test_profile_hf.py's. Also the fast test set of the
mutation check (docs/LOG.md 2026-12-01, examples/mutation_profile.sh).

Private stages (`F._x`, `K._x`, `S._x`) are called directly, kept so (issue 38 §4): each
boundary sits inside one stage of the step finder, and a whole timeline that places it there
exactly is many launches long; find_steps on real traces covers the road end to end."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from ncclprobe.diagnose.run import profile_costs as C
from ncclprobe.diagnose.run import rules_profile_baseline as RB
from ncclprobe.diagnose.run import rules_profile_eager as RE
from ncclprobe.diagnose.run import rules_profile_steps as RS
from ncclprobe.evidence.bundle import Evidence
from ncclprobe.evidence.run.profile import forwards as F
from ncclprobe.evidence.run.profile import kinds as K
from ncclprobe.evidence.run.profile import names
from ncclprobe.evidence.run.profile import steps as S
from ncclprobe.evidence.run.profile.timeline import Kernel, Launch, Timeline
from ncclprobe.evidence.run.view import Acceptance, EngineRun, Phase

# ---- a timeline from a host-ordered list of launches ---------------------------------------------


# A Llama-3-8B shaped run (k=3, batch 1, TP 1): the model shape the expected verify/decode ratio
# prices; one home for the tests that need it
LLAMA3_8B_RUN = {
    "model": {
        "hidden": 4096,
        "layers": 32,
        "vocab": 128256,
        "heads": 32,
        "kv_heads": 8,
        "intermediate": 14336,
        "head_dim": 128,
    },
    "k": 3,
    "batch": 1,
    "tp": 1,
}


def timeline(spec, embeddings=(), calls=(), cpu_ops=1, gap=10.0):
    """spec: (kind, name[, kernels]) per launch, `gap` µs apart; a graph launch issues `kernels`
    kernels named name#i; every kernel runs 1 µs right after its launch."""
    kernels, launches, ts = [], {}, 0.0
    for corr, item in enumerate(spec, start=1):
        kind, name = item[0], item[1]
        ts += gap
        launches[corr] = Launch(kind, name, ts, 1.0, 1)
        if kind == "sync":
            continue
        count = item[2] if kind == "graph" else 1
        category = "gpu_memcpy" if kind == "memcpy" else "kernel"
        for i in range(count):
            kname = f"{name}#{i}" if kind == "graph" else name
            kernels.append(Kernel(ts + 2 + i, 1.0, 7, corr, kname, None, category, blocks=4))
    return Timeline(
        "mem",
        {},
        kernels=kernels,
        launches=launches,
        embeddings=list(embeddings),
        compiled_calls=list(calls),
        cpu_ops=cpu_ops,
    )


def layer(tag="L"):
    return [("kernel", f"{tag}{i}") for i in range(9)]


# ---- forwards: tandem repeats -------------------------------------------------------------------


def test_a_block_repeated_back_to_back_is_a_tandem_repeat_of_its_period():
    block = list(range(F.MIN_PERIOD))
    runs = F.tandem_repeats(block * 3 + [99] * 10)
    assert runs and {p for _, _, p in runs} == {F.MIN_PERIOD}
    short = list(range(F.MIN_PERIOD - 1))  # a period under MIN_PERIOD is no layer
    assert F.tandem_repeats(short * 6 + [99] * 10) == []


def test_two_copies_are_enough_and_a_too_short_sequence_is_none():
    block = list(range(10))
    ((start, length, period),) = F.tandem_repeats(block * 2 + list(range(50, 70)))
    assert (start, period) == (0, 10) and length >= period - F.KGRAM
    assert F.tandem_repeats(list(range(2 * F.KGRAM + F.MIN_PERIOD - 1))) == []
    assert F.tandem_repeats([1] * (2 * F.KGRAM + F.MIN_PERIOD)) == []  # period 1


def test_a_half_repeated_block_is_not_a_repeat():
    block = list(range(20))
    assert F.tandem_repeats(block + block[:8] + list(range(100, 130))) == []


def test_layer_stacks_are_one_forward_each_cut_after_the_host_sync():
    step = layer() * 3 + [("kernel", "head"), ("memcpy", "DtoH"), ("sync", "s")]
    tl = timeline(step * 4, cpu_ops=0)
    units = F.units_of(tl)
    fws = F.find_forwards(tl, units)
    assert len(fws) == 4 and fws[0].lm is False and "repeated layer kernels" in fws[0].found_by
    assert [f.start for f in fws[1:]] == [len(step), 2 * len(step), 3 * len(step)]


def test_a_repeated_step_with_a_sync_in_its_period_is_cut_every_period():
    step = [("kernel", f"k{i}") for i in range(10)] + [("sync", "s")]
    tl = timeline(step * 5, cpu_ops=0)
    fws = F.find_forwards(tl, F.units_of(tl))
    assert "a repeated step" in fws[0].found_by
    assert [f.start for f in fws] == [11, 22, 33, 44][: len(fws)] and len(fws) >= 3


def test_nothing_that_repeats_is_no_forward():
    tl = timeline([("kernel", f"k{i}") for i in range(30)], cpu_ops=0)
    assert F.find_forwards(tl, F.units_of(tl)) == []
    one = timeline([("kernel", "k")])
    assert F.find_forwards(one, F.units_of(one)) == []


# ---- forwards: lookups and replays --------------------------------------------------------------


def test_embedding_lookups_start_forwards_and_close_ones_merge():
    spec = [("kernel", f"k{i}") for i in range(40)]
    tl = timeline(
        spec, embeddings=[(10.0, 1.0, None), (10.0 + 7 * 10, 1.0, None), (10.0 + 8 * 10, 1.0, None)]
    )
    starts, how = F._lookup_starts(tl, F.units_of(tl))
    assert starts == [0, 8] and "aten::embedding" in how  # 7 launches apart: the same forward
    far = timeline(spec, embeddings=[(10.0, 1.0, None), (10.0 + 8 * 10, 1.0, None)])
    assert F._lookup_starts(far, F.units_of(far))[0] == [0, 8]
    nothing = timeline(spec, embeddings=[(5.0, 1.0, None), (405.0, 0.5, None)])  # launched nothing
    assert F._lookup_starts(nothing, F.units_of(nothing))[0] == []


def test_without_host_ops_an_embedding_kernel_starts_the_forward():
    spec = ([("kernel", "indexSelectSmallIndex")] + [("kernel", f"k{i}") for i in range(8)]) * 3
    tl = timeline(spec, cpu_ops=0)
    fws = F.find_forwards(tl, F.units_of(tl))
    assert [f.start for f in fws] == [0, 9, 18] and "embedding lookup" in fws[0].found_by
    assert names.embedding_kernel("triton_poi_fused_embedding_0") and not names.embedding_kernel(
        "gemm"
    )


def test_a_graph_launch_of_a_whole_forward_is_a_forward():
    whole = [
        ("memcpy", "DtoD"),
        ("graph", "g", F.MIN_GRAPH_KERNELS),
        ("kernel", "argmax"),
        ("sync", "s"),
    ]
    tl = timeline(whole * 3)
    assert [f.start for f in F.find_forwards(tl, F.units_of(tl))] == [0, 4, 8]
    piece = [
        ("memcpy", "DtoD"),
        ("graph", "g", F.MIN_GRAPH_KERNELS - 1),
        ("kernel", "argmax"),
        ("sync", "s"),
    ]
    small = timeline(piece * 3)
    assert F._graph_starts(F.units_of(small), [], []) == []


def test_a_replay_starts_at_its_compiled_call_else_after_the_sync_else_at_its_copies():
    spec = [
        ("kernel", "a"),
        ("sync", "s"),
        ("kernel", "prep"),
        ("memcpy", "in"),
        ("graph", "g", 20),
    ]
    tl = timeline(spec)
    units = F.units_of(tl)
    assert F._graph_starts(units, [], []) == [2]  # after the sync
    called = timeline(spec, calls=[(15.0, 100.0)])  # a compiled call from the sync on
    assert F._graph_starts(F.units_of(called), [], called.compiled_calls) == [1]
    late = timeline(spec, calls=[(45.0, 4.9)])  # a call that ends before the launch holds nothing
    assert F._graph_starts(F.units_of(late), [], late.compiled_calls) == [2]
    bare = timeline([("kernel", "a"), ("kernel", "prep"), ("memcpy", "in"), ("graph", "g", 20)])
    assert F._graph_starts(F.units_of(bare), [], []) == [2]  # at its input copy


def test_a_replay_right_after_an_eager_lookup_is_that_forward():
    spec = [("kernel", f"k{i}") for i in range(F.NEAR_LOOKUP)] + [("graph", "g", 20)]
    tl = timeline(spec)
    units = F.units_of(tl)
    assert F._graph_starts(units, [0], []) == []  # the lookup 16 launches before it
    assert F._graph_starts(units, [-1], []) == [F.NEAR_LOOKUP]  # 17 launches: its own forward


# ---- kinds ----------------------------------------------------------------------------------------


def test_relative_tokens_from_the_grids():
    ref = {"a": 2, "b": 4, "c": 8, "w": 100}
    five = {"a": 10, "b": 20, "c": 40, "w": 100}
    assert K.relative_tokens(five, ref) == 5.0
    assert K.relative_tokens({"a": 10, "b": 20, "w": 100}, ref) == 1.0  # two changed: too few
    assert K.relative_tokens({"x": 3}, ref) is None
    assert K.relative_tokens({"a": 1}, {"a": 1}) is None  # one-block grids say nothing
    ten = {"a": 2.2, "b": 4.4, "c": 8.8}  # 10% apart: unchanged
    assert K.relative_tokens(ten, {"a": 2, "b": 4, "c": 8}) == 1.0
    more = {"a": 2.3, "b": 4.6, "c": 9.2}
    assert K.relative_tokens(more, {"a": 2, "b": 4, "c": 8}) == pytest.approx(1.15)


class _S:
    def __init__(self, launches, replay=False):
        self.launch_count, self.replay = launches, replay


def test_a_draft_is_the_model_with_fewer_kernels_by_the_ratio():
    target, draft = [_S(160), _S(161)], [_S(100)]
    assert K._drafts(target + draft) == draft
    assert K._drafts([_S(159), _S(100)]) == []  # 1.59x: one model
    assert K._drafts([_S(100), _S(100)]) == []


def _steps(tokens, model="target", replay=False):
    out = []
    for t in tokens:
        s = S.Step(kind="other", label="forward", t0=0, t1=0, model=model, replay=replay)
        s.tokens_per_seq = t
        out.append(s)
    return out


def test_prefill_decode_verify_from_the_tokens():
    plain = _steps([16.0, 1.0, 1.0])
    K._kinds(plain, "target")
    assert [s.label for s in plain] == ["prefill", "decode", "decode"]
    lookup = _steps([20.0, 1.0, 5.0])
    K._kinds(lookup, "target")
    assert [s.label for s in lookup] == ["prefill", "decode", "verify"]
    verify16 = _steps([1.0, 16.0, 1.0])
    K._kinds(verify16, "target")
    assert verify16[1].kind == "verify"
    prompt17 = _steps([1.0, 17.0, 1.0])
    K._kinds(prompt17, "target")
    assert prompt17[1].kind == "prefill"
    same = _steps([5.0, 5.0])  # the first is no prompt when a later one is as large
    K._kinds(same, "target")
    assert [s.kind for s in same] == ["verify", "verify"]
    drafts = _steps([16.0, 1.0], model="draft")
    K._kinds(drafts, "draft")
    assert [s.label for s in drafts] == ["draft prefill", "draft"]


def test_one_eager_forward_before_replays_is_the_prefill():
    steps = _steps([None]) + _steps([None, None], replay=True)
    K._kinds(steps, "target")
    assert [s.kind for s in steps] == ["prefill", "decode", "decode"]
    alone = _steps([None, None])
    K._kinds(alone, "target")
    assert [s.kind for s in alone] == ["decode", "decode"]


def test_the_target_beside_a_draft_counts_the_drafts_per_cycle():
    steps = _steps([None], "target") + _steps([None] * 4, "draft") + _steps([None], "target")
    assert K._smallest_tokens(steps[:1], steps, "target") == 5
    assert K._smallest_tokens(steps, steps, "draft") == 1
    assert K._smallest_tokens(steps[:1], steps[:1], "target") == 1


def test_kept_tokens_from_the_kv_cache_else_one_per_decode():
    steps = []
    for _i, (t0, kind) in enumerate(
        [(0, "prefill"), (100, "verify"), (200, "verify"), (300, "verify")]
    ):
        s = S.Step(kind=kind, label=kind, t0=t0, t1=t0 + 90)
        steps.append(s)
    tl = Timeline("mem", {}, attention=[(10, 20, 20), (110, 5, 21), (210, 5, 23), (310, 5, 24)])
    K._kept(tl, steps)
    assert [s.kept for s in steps] == [1.0, 2.0, 1.0, 1.5]  # the last: the mean of the others
    flat = Timeline("mem", {}, attention=[(10, 20, 64), (110, 5, 64), (210, 5, 64), (310, 5, 64)])
    K._kept(flat, steps)  # a static cache's keys do not grow: no reading
    assert [s.kept for s in steps] == [1.0, None, None, None]
    steps[1].kind = "decode"
    K._kept(Timeline("mem", {}), steps)
    assert steps[1].kept == 1.0


def test_grids_and_attention_shapes_are_read_strictly(tmp_path):
    """A kernel's thread blocks and an attention call's lengths, as read_timeline reads a trace:
    only a grid of 1-3 whole positive numbers counts, only two [batch, heads, tokens, dim] inputs."""
    from ncclprobe.evidence.run.profile.timeline import read_timeline

    grids = [[2, 3, 1], [2, 0, 1], [True, 1, 1], "x", [1, 1, 1, 1], []]
    dims = [[[1, 16, 5, 64], [1, 4, 30, 64]], [[1, 16, 5], [1, 4, 30, 64]], [[1, 16, 5, 64]]]
    events = [
        {"ph": "X", "cat": "kernel", "name": f"k{i}", "ts": i, "dur": 1, "args": {"grid": grid}}
        for i, grid in enumerate(grids)
    ] + [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::scaled_dot_product_attention",
            "ts": 10 + i,
            "dur": 1,
            "args": {"Input Dims": d},
        }
        for i, d in enumerate(dims)
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    read = read_timeline(str(path))
    assert [k.blocks for k in read.kernels] == [6, 0, 0, 0, 0, 0]
    assert [(q, k) for _, q, k in read.attention] == [(5, 30)]  # the two malformed: no reading


# ---- steps: the last forward cut off ------------------------------------------------------------


def _with_kernels(signature, counts):
    s = S.Step(kind="other", label="f", t0=0, t1=0, signature=signature)
    for name, n in counts.items():
        s.kernels += [Kernel(0, 1, 7, None, name, None, "kernel") for _ in range(n)]
    return s


def test_a_last_forward_short_of_its_layers_was_cut_off():
    whole = {"layer": 20, "head": 1}
    assert not S._cut_off([_with_kernels((1,), whole), _with_kernels((1,), {"layer": 17})])
    assert S._cut_off([_with_kernels((1,), whole), _with_kernels((1,), {"layer": 16})])
    assert not S._cut_off([_with_kernels((1,), whole), _with_kernels((2,), {"layer": 1})])
    assert not S._cut_off([_with_kernels((1,), {"head": 1}), _with_kernels((1,), {})])
    last = _with_kernels((1,), {})
    last.replay = True
    assert not S._cut_off([_with_kernels((1,), whole), last])


# ---- the rules ----------------------------------------------------------------------------------


def phase(name, kind, count=10, median=10.0, busy=1.0, idle=None, graphed=False, spread=None, **kw):
    idle = median - busy if idle is None else idle
    share = idle / median if median else 0.0
    return Phase(
        name=name,
        kind=kind,
        count=count,
        total_ms=median * count,
        median_ms=median,
        graphed=graphed,
        device_ms=busy,
        idle_ms=idle,
        graph_share=1.0 if graphed else 0.0,
        idle_share_range=spread or (share, share),
        **kw,
    )


def profile_run(*phases, mode="baseline", tokens=None, label="profile", acceptance=None):
    return EngineRun(
        label=label,
        mode=mode,
        source="profile",
        engine="unknown",
        phases={p.name: p for p in phases},
        new_tokens=tokens,
        acceptance=acceptance,
    )


def ev(run, baseline=None, config=None):
    return Evidence(
        runs=[run], baseline=[baseline] if baseline else [], kind="profile", config=config or {}
    )


def by_rule(items, rule):
    return [i for i in items if i.rule == rule]


def test_host_bound_from_the_steps_spread_at_its_boundaries():
    def outcome(low, high, idle=5.0):
        run = profile_run(
            phase("decode", "decode", median=10.0, idle=idle, spread=(low, high)), tokens=10
        )
        return RS.host_bound(ev(run))[0]

    every = outcome(RS.HOST_BOUND_IDLE, 0.6)
    assert every.severity == "warning" and every.confidence == "medium"  # 50% of the run: capped
    some = outcome(RS.HOST_BOUND_IDLE - 0.01, 0.6)
    assert (some.severity, some.confidence) == ("info", "low")
    assert outcome(0.1, RS.HOST_BOUND_IDLE).severity == "info"
    assert type(outcome(0.1, RS.HOST_BOUND_IDLE - 0.001)).__name__ == "RuledOut"
    assert type(outcome(0.5, 0.6, idle=RS.HOST_BOUND_MIN_MS - 0.001)).__name__ == "RuledOut"
    assert type(outcome(0.5, 0.6, idle=RS.HOST_BOUND_MIN_MS)).__name__ == "Finding"


def test_host_bound_severity_follows_the_share_of_the_run():
    small = phase("decode", "decode", count=1, median=10.0, idle=5.0, spread=(0.5, 0.5))
    big = phase("other", "other", count=100, median=10.0, idle=1.0, busy=9.0, spread=(0.1, 0.1))
    found = RS.host_bound(ev(profile_run(small, big, tokens=101)))
    decode = next(f for f in found if getattr(f, "evidence", {}).get("phase") == "decode")
    assert decode.severity == "info"
    assert decode.evidence["share_of_run_time"] == round(5 / 1010, 4)
    four = phase("decode", "decode", count=4, median=10.0, idle=5.0, spread=(0.5, 0.5))
    rest = phase("other", "other", count=1, median=960.0, idle=0.0, busy=960.0)
    assert RS.host_bound(ev(profile_run(four, rest, tokens=5)))[0].severity == "warning"  # 2%
    three = phase("decode", "decode", count=3, median=10.0, idle=5.0, spread=(0.5, 0.5))
    rest = phase("other", "other", count=1, median=970.0, idle=0.0, busy=970.0)
    assert RS.host_bound(ev(profile_run(three, rest, tokens=4)))[0].severity == "info"  # 1.5%


def test_host_bound_leaves_replays_and_referenced_eager_steps_to_the_other_rules():
    replayed = phase("decode", "decode", graphed=True, idle=5.0, spread=(0.5, 0.5))
    assert RS.host_bound(ev(profile_run(replayed, tokens=10))) == []
    busy = phase("decode", "decode", graphed=True, idle=0.5, busy=9.5, spread=(0.05, 0.05))
    assert by_rule(RS.host_bound(ev(profile_run(busy, tokens=10))), "host-bound")[0].reason
    prefill = phase("prefill", "prefill", count=1, idle=9.0)
    assert by_rule(RS.host_bound(ev(profile_run(prefill, tokens=1))), "host-bound")[0].missing


def test_eager_steps_cost_the_idle_above_the_replays():
    eager = phase("decode", "decode", count=10, median=18.0, busy=1.0, idle=17.0)
    graphed = phase("decode", "decode", count=10, median=3.0, busy=0.5, idle=2.5, graphed=True)
    run, base = profile_run(eager, tokens=10), profile_run(graphed, tokens=10, label="base")
    (found,) = [f for f in RE.eager_steps(ev(run, base)) if hasattr(f, "severity")]
    assert found.rule == "eager-launches" and found.confidence == "medium"
    assert found.cost.high == pytest.approx(14.5) and found.cost.high == pytest.approx(14.5)
    assert found.severity == "error"  # 145 of 180 ms
    alone = profile_run(
        eager, phase("other", "other", count=1, graphed=True, median=1.0, idle=0.1), tokens=10
    )
    own = [f for f in RE.eager_steps(ev(alone)) if hasattr(f, "severity")][0]
    assert own.confidence == "low"  # against another phase of the run, not a like-for-like baseline


def test_eager_steps_severity_at_the_share_boundaries():
    def severity(count):
        eager = phase("verify", "verify", count=count, median=2.0, busy=1.0, idle=1.0)
        rest = phase(
            "decode", "decode", count=1, median=100.0 - 2.0 * count, graphed=True, idle=0.0
        )
        run = profile_run(eager, rest, mode="speculative", tokens=10)
        return [f for f in RE.eager_steps(ev(run)) if hasattr(f, "severity")][0].severity

    assert severity(10) == "error"  # 10 ms of 100: 10%
    assert severity(9) == "warning"
    assert severity(2) == "warning"  # 2%
    assert severity(1) == "info"


def test_an_eager_step_no_idler_than_the_replay_is_ruled_out():
    eager = phase("accept", "other", median=0.02, busy=0.01, idle=0.01)
    graphed = phase("decode", "decode", median=1.4, busy=1.2, idle=0.2, graphed=True)
    out = RE.eager_steps(ev(profile_run(eager, graphed, tokens=10)))
    assert [o.rule for o in out] == ["eager-launches"] and "save nothing" in out[0].reason


def test_eager_phase_against_a_captured_decode_and_what_no_baseline_leaves_open():
    verify = phase("verify", "verify", count=5, median=20.0, idle=19.0)
    decode = phase("decode", "decode", median=2.0, idle=0.2, graphed=True)
    spec = profile_run(verify, mode="speculative", tokens=5)
    found = RE.eager_steps(ev(spec, profile_run(decode, tokens=10)))[0]
    assert found.rule == "eager-phase" and found.evidence["reference_phase"] == "decode"
    assert by_rule(RE.eager_steps(ev(spec)), "eager-phase")[0].missing.startswith("a baseline")
    eager_base = profile_run(phase("decode", "decode", graphed=False), tokens=10)
    assert "like for like" in by_rule(RE.eager_steps(ev(spec, eager_base)), "eager-phase")[0].reason
    cpu_base = profile_run(phase("decode", "decode", graphed=None), tokens=10)
    assert "CPU-only" in by_rule(RE.eager_steps(ev(spec, cpu_base)), "eager-phase")[0].missing
    unknown = profile_run(phase("ProfilerStep", "other", graphed=False), tokens=None)
    missing = by_rule(RE.eager_steps(ev(spec, unknown)), "eager-phase")[0].missing
    assert "baseline given" in missing


def test_every_step_replayed_is_ruled_out_for_both_rules():
    graphed = phase("verify", "verify", graphed=True, idle=0.1)
    decode = phase("decode", "decode", graphed=True, idle=0.1)
    out = RE.eager_steps(
        ev(profile_run(graphed, mode="speculative", tokens=10), profile_run(decode, tokens=10))
    )
    assert {o.rule for o in out} == {"eager-launches", "eager-phase"}


def test_the_model_shape_prices_a_verify_against_the_decode():
    verify = phase("verify", "verify", count=5, median=20.0, idle=19.0)
    decode = phase("decode", "decode", median=2.0, idle=0.2, graphed=True)
    config = dict(LLAMA3_8B_RUN)
    found = RE.eager_steps(
        ev(
            profile_run(verify, mode="speculative", tokens=5),
            profile_run(decode, tokens=10),
            config,
        )
    )[0]
    ratio = found.evidence["expected_ratio"]
    assert found.cost.high == pytest.approx(20.0 - 2.0 * ratio, rel=1e-3) and ratio > 1.0


def test_glue_between_replays_is_at_most_a_warning_and_never_for_the_prefill():
    def glue(count, rest_ms, kind="decode"):
        p = phase(
            "decode",
            kind,
            count=count,
            median=3.0,
            busy=0.5,
            graphed=True,
            graph_ms=0.5,
            launches={"kernel": 30},
            tokens_kept=float(count),
        )
        other = phase("x", "other", count=1, median=rest_ms, busy=rest_ms, idle=0.0)
        return RS.graph_glue(ev(profile_run(p, other, tokens=count)))

    (warn,) = glue(4, 88.0)  # 10 ms of glue in 100 ms
    assert warn.severity == "warning" and warn.cost.high == pytest.approx(2.5)
    assert warn.title.startswith("the host runs 30 small eager kernels per token")
    assert glue(4, 89.0)[0].severity == "info"
    assert glue(100, 0.0)[0].severity == "warning"  # 83% of the run: still a warning
    assert glue(4, 88.0, kind="prefill") == []
    per_step = phase(
        "verify", "verify", count=4, median=3.0, graphed=True, graph_ms=0.5, launches={"kernel": 3}
    )
    (step,) = RS.graph_glue(ev(profile_run(per_step)))
    # no tokens: the cost is per verify step, never per token
    assert "per verify step" in step.title and (step.cost.unit, step.cost.high) == ("step", 2.5)


def test_no_step_at_all_is_a_finding_and_unknown_kinds_are_said():
    (none,) = RS.profile_limits(ev(profile_run()))
    assert (none.rule, none.severity) == ("profile-steps", "warning")
    (kinds,) = RS.profile_limits(ev(profile_run(phase("burst", "other"))))
    assert kinds.rule == "decode-or-verify"
    assert RS.profile_limits(ev(profile_run(phase("decode", "decode")))) == []


# ---- tokens and the baseline split --------------------------------------------------------------


def test_tokens_exact_bound_or_from_the_log():
    assert C.tokens(profile_run(phase("decode", "decode"), tokens=12)).count == 12
    bound = C.tokens(
        profile_run(
            phase("prefill", "prefill", count=1),
            phase("verify", "verify", count=4),
            phase("draft", "draft", count=16, tokens_kept=0.0),
        )
    )
    # a verify's kept tokens unknown: the run's tokens are unknown, not one per forward
    assert (bound.count, bound.exact) == (None, False) and bound.why == C.UNKNOWN_VERIFY
    log = C.tokens(
        profile_run(phase("verify", "verify", count=4), acceptance=Acceptance(mean_length=2.5))
    )
    assert (log.count, log.exact) == (10.0, True)
    kept = C.tokens(profile_run(phase("decode", "decode", count=4, tokens_kept=4.0)))
    assert (kept.count, kept.exact) == (4.0, True)
    assert C.tokens(profile_run(phase("burst", "other"))).count is None
    assert (
        C.per_token_words(None, bound)
        == "per token unknown (the tokens each verify kept are not in the trace)"
    )
    assert C.per_token_words(2.0, log) == "about 2.000 ms per token"


def test_the_parts_of_the_difference_add_up_and_speculation_is_weighed_only_when_known():
    base = profile_run(
        phase("prefill", "prefill", count=1, median=20.0),
        phase("decode", "decode", count=47, median=3.0, idle=2.5, graphed=True),
        tokens=48,
    )
    spec = profile_run(
        phase("prefill", "prefill", count=1, median=20.0),
        phase("verify", "verify", count=10, median=20.0, idle=19.0, tokens_kept=10.0),
        phase("draft", "draft", count=40, median=5.0, idle=4.5, tokens_kept=0.0),
        mode="speculative",
        tokens=11,
    )
    out = RB.against_baseline(ev(spec, base))
    spend = by_rule(out, "speculation-forwards")[0]
    account = by_rule(out, "against-baseline")[0].evidence
    parts = (
        account["eager_ms_per_token"]
        + account["forwards_ms_per_token"]
        + account["prefill_ms_per_token"]
    )
    assert parts == pytest.approx(account["difference_ms_per_token"], abs=1e-3)
    assert spend.severity == "error" and spend.evidence["forwards_per_token"] == pytest.approx(
        50 / 11, abs=1e-3
    )
    gain = profile_run(
        phase("verify", "verify", count=10, median=3.0, idle=2.0, graphed=True, tokens_kept=30.0),
        mode="speculative",
        tokens=30,
    )
    assert "saves" in by_rule(RB.against_baseline(ev(gain, base)), "speculation-forwards")[0].reason
    unknown = profile_run(phase("verify", "verify", count=10), mode="speculative")
    (unknown_out,) = RB.against_baseline(ev(unknown, base))
    assert unknown_out.rule == "against-baseline" and "1 to k+1" in unknown_out.missing
    # the difference is the pool of the run's time ledger: a profiled cost covering the whole
    whole = by_rule(out, "against-baseline")[0].cost
    assert whole.covers == ("whole",) and whole.kind == "profiled"
    assert whole.high == pytest.approx(account["difference_ms_per_token"], abs=1e-3)
    assert RB.against_baseline(ev(spec)) == []
    nothing = profile_run(phase("burst", "other"))
    assert by_rule(RB.against_baseline(ev(nothing, base)), "against-baseline")[0].missing


# ---- the words: every rule's full output on ten cases, against the reviewed record -------------

GOLDEN = Path(__file__).parent / "data" / "profile_step_rules.golden.json"


def _golden_cases() -> dict:
    """Runs that reach every outcome of the step rules and every branch of their words
    (constructed as above)."""
    graphed = phase(
        "decode",
        "decode",
        count=47,
        median=3.0,
        busy=0.5,
        graphed=True,
        graph_ms=0.5,
        launches={"kernel": 30, "memcpy": 7},
        tokens_kept=47.0,
    )
    base = profile_run(
        phase("prefill", "prefill", count=1, median=20.0), graphed, tokens=48, label="base"
    )
    base.path = "base.json.gz"
    eager = profile_run(
        phase("prefill", "prefill", count=1, median=20.0),
        phase(
            "decode",
            "decode",
            count=35,
            median=18.0,
            busy=0.8,
            spread=(0.9, 0.96),
            launches={"kernel": 368, "sync": 2},
            tokens_kept=35.0,
        ),
        tokens=36,
    )
    spec = profile_run(
        phase("prefill", "prefill", count=1, median=20.0),
        phase(
            "verify",
            "verify",
            count=10,
            median=20.0,
            idle=19.0,
            launches={"kernel": 480},
            tokens_kept=10.0,
        ),
        phase(
            "draft",
            "draft",
            count=40,
            median=5.0,
            idle=4.5,
            launches={"kernel": 120},
            tokens_kept=0.0,
        ),
        phase("accept", "other", count=10, median=0.02, busy=0.01, idle=0.01),
        mode="speculative",
        tokens=11,
    )
    unknown = profile_run(
        phase("verify", "verify", count=10, median=20.0, idle=19.0), mode="speculative"
    )
    glue = profile_run(
        phase(
            "prefill",
            "prefill",
            count=1,
            median=20.0,
            graphed=True,
            graph_ms=5.0,
            launches={"kernel": 3},
        ),  # replayed too, before the decode: no glue cost
        phase(
            "decode",
            "decode",
            count=20,
            median=3.123456,
            busy=0.5,
            graphed=True,
            graph_ms=0.5,
            launches={"kernel": 30},
            tokens_kept=40.0,
        ),  # two tokens a step
        phase(
            "verify",
            "verify",
            count=5,
            median=0.8,
            busy=0.5,
            graphed=True,
            graph_ms=0.5,
            launches={"kernel": 4, "memcpy": 2},
        ),  # kept tokens unknown: per step
        phase(
            "late",
            "other",
            count=2,
            median=0.4,
            busy=0.35,
            graphed=True,
            graph_ms=0.5,
            launches={"kernel": 1},
        ),  # the replay outlasts the step: no glue
        phase("copies", "other", count=3, graphed=True, graph_ms=0.5, launches={"memcpy": 2}),
        phase("unmeasured", "other", count=3, graphed=True, launches={"kernel": 5}),
        phase("eager", "other", count=3, graph_ms=0.5, launches={"kernel": 5}),
        tokens=45,
    )
    kinds_unknown = profile_run(phase("burst", "other", count=12, launches={"kernel": 40}))
    drafts_only = profile_run(
        phase("draft", "draft", count=12, median=2.0, launches={"kernel": 90, "sync": 1})
    )
    vllm = {"engine": "vllm"}
    unseen = profile_run(  # a CPU-only verify: whether it replays is unknown
        phase("verify", "verify", count=10, median=20.0, graphed=None, tokens_kept=10.0),
        phase("draft", "draft", count=40, median=5.0, graphed=None, tokens_kept=0.0),
        mode="speculative",
        tokens=10,
    )
    unseen.engine = "sglang"
    gains = profile_run(  # graphed verifies that keep three tokens each
        phase("prefill", "prefill", count=1, median=20.0),
        phase("verify", "verify", count=16, median=3.5, busy=3.0, graphed=True, tokens_kept=48.0),
        mode="speculative",
        tokens=48,
    )
    same = profile_run(*base.phases.values(), mode="speculative", tokens=48)  # costs exactly 0
    dearer = profile_run(  # 0.5 ms a token dearer: under 1 ms, still a cost
        phase("prefill", "prefill", count=1, median=20.0),
        replace(graphed, median_ms=3.0 + 0.5 * 48 / 47),
        mode="speculative",
        tokens=48,
    )
    mixed = profile_run(  # two eager phases: the larger in total leads, not per step
        phase("prefill", "prefill", count=1, median=20.0, busy=2.0, idle=18.0, spread=(0.1, 0.2)),
        phase(
            "decode",
            "decode",
            count=30,
            median=8.0,
            busy=2.0,
            spread=(0.12345, 0.98765),
            launches={},
        ),
        phase("draft", "draft", count=2, median=20.0, busy=1.0),
        tokens=31,
    )
    some = profile_run(  # the prefill first: skipped, the decode after it still weighed
        phase("prefill", "prefill", count=1, median=20.0, busy=2.0, idle=18.0),
        phase("decode", "decode", median=10.0, busy=5.0, spread=(0.12345, 0.56789), launches={}),
        tokens=11,
    )
    model = dict(LLAMA3_8B_RUN)
    two_refs = profile_run(  # a verify priced against the decode, a draft against the draft
        phase("draft", "draft", count=30, median=2.2, busy=2.0, graphed=True),
        graphed,
    )
    two_refs.path = "two.json.gz"
    eager_spec = profile_run(  # eager verify and draft; a speculative run that replays nothing
        phase("verify", "verify", count=10, median=22.0, idle=21.0, tokens_kept=10.0),
        phase("draft", "draft", count=40, median=5.0, idle=4.5, tokens_kept=0.0),
        mode="speculative",
        tokens=10,
    )
    eager_spec.engine = "sglang"
    replayed_spec = profile_run(
        phase("verify", "verify", count=10, median=4.0, busy=3.5, graphed=True, tokens_kept=30.0),
        mode="speculative",
        tokens=30,
    )
    eager_base = profile_run(phase("decode", "decode", count=47, median=18.0, busy=0.8), tokens=48)
    cpu_base = profile_run(
        phase("decode", "decode", count=47, median=18.0, graphed=None), tokens=48
    )
    no_path = profile_run(phase("burst", "other", count=9, graphed=False), tokens=None)
    unknown_sglang = profile_run(
        phase("verify", "verify", count=10, median=20.0, idle=19.0), mode="speculative"
    )
    unknown_sglang.engine = "sglang"
    verify_only = profile_run(
        phase("verify", "verify", count=10, median=22.0, idle=21.0, tokens_kept=10.0),
        mode="speculative",
        tokens=10,
    )
    return {
        "eager against replays, SGLang": ev(eager, base, {"engine": "sglang"}),
        "a verify alone priced by the model shape": ev(verify_only, base, model),
        "speculative, acceptance unknown, an SGLang run": ev(unknown_sglang, base),
        "verify priced by the model shape, two references": ev(eager_spec, two_refs, model),
        "speculative, no baseline, SGLang": ev(eager_spec, config={"engine": "sglang"}),
        "speculative against a baseline without a decode": ev(eager_spec, no_path),
        "replayed speculation against an eager baseline": ev(replayed_spec, eager_base),
        "speculation against a CPU-only baseline": ev(eager_spec, cpu_base),
        "host-bound in some steps, vLLM": ev(some, config=vllm),
        "verify replays unknown (CPU-only), SGLang": ev(unseen, base, {"engine": "sglang"}),
        "speculation saves": ev(gains, base),
        "speculation costs exactly nothing": ev(same, base),
        "speculation costs under 1 ms a token": ev(dearer, base),
        "two eager phases, some steps host-bound": ev(mixed, base),
        "graph glue per token and per step": ev(glue),
        "steps of unknown kind, vLLM": ev(kinds_unknown, base, vllm),
        "drafts only": ev(drafts_only),
        "nothing found, vLLM": ev(profile_run(), config=vllm),
        "eager against replays": ev(eager, base),
        "eager alone": ev(eager),
        "speculative against replays": ev(spec, base),
        "speculative, acceptance unknown": ev(unknown, base),
        "replayed": ev(base),
        "nothing found": ev(profile_run()),
    }


def _outputs() -> dict:
    rules = RE.RULES + RS.RULES + RB.RULES
    return {
        name: [o.to_json() for rule in rules for o in rule(e)]
        for name, e in _golden_cases().items()
    }


def test_every_rules_words_are_the_reviewed_ones():
    """Titles, details, evidence, next commands: a change of wording is a reviewed change of this
    record (NCCLPROBE_UPDATE_GOLDEN=1 rewrites it; read its diff before committing it)."""
    got = json.loads(json.dumps(_outputs()))
    if os.environ.get("NCCLPROBE_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert got == json.loads(GOLDEN.read_text())


def test_overlapping_repeats_are_one_stack_and_the_first_stack_needs_no_sync():
    assert F._merged([((0, 10), 5), ((9, 20), 5), ((20, 30), 5)]) == [(0, 20), (20, 30)]
    assert F._merged([((5, 8), 5), ((0, 10), 5)]) == [(0, 10)]
    step = layer() * 3 + [("kernel", "head"), ("memcpy", "DtoH")]
    tl = timeline([("kernel", "setup")] + step * 3, cpu_ops=0)
    starts, _ = F._repeat_starts(F.units_of(tl))
    # no sync: the first stack starts where it begins, the next ones where the previous one's
    # repeats ended (one step of 29 launches each, cut near, not at, the head)
    assert starts == [1, 28, 57]


@pytest.mark.parametrize(
    "count,words",
    [
        (1, "in the one decode step"),
        (9, "in the 9 decode steps (their 90th percentile)"),
        (10, "in 9 of 10 decode steps"),
    ],
)
def test_host_bounds_ruled_out_says_which_steps_its_percentile_speaks_for(count, words):
    """'9 of 10 steps' was printed for a profile of one step (vLLM's, SGLang's traces)."""
    busy = phase("decode", "decode", count=count, idle=0.5, busy=9.5, spread=(0.05, 0.05))
    [ruled] = RS.host_bound(ev(profile_run(busy, tokens=count)))
    assert ruled.reason.startswith(f"{words} the GPU is busy at least 95% of the step")


def glue_share_shown(share: float) -> str:
    """The share of a replayed step outside its graph, as graph_glue's finding writes it."""
    glued = phase("decode", "decode", median=1000.0, graphed=True, launches={"kernel": 2})
    glued = replace(glued, graph_ms=1000.0 - 1000.0 * share)
    [found] = RS.graph_glue(ev(profile_run(glued)))
    return found.title.split("ms/decode step, ")[1].split(" of the")[0]


def busy_share_shown(busy: float) -> str:
    """The busy share of a step ruled out as host-bound, as the reason writes it."""
    idle = 1.0 - busy
    step = phase("decode", "decode", median=10.0, busy=10.0 * busy, spread=(idle, idle))
    [ruled] = RS.host_bound(ev(profile_run(step, tokens=10)))
    return ruled.reason.split("busy at least ")[1].split(" of the")[0]


@pytest.mark.parametrize(
    "value,shown",
    [(0.9977, "99.8%"), (0.995, "99.5%"), (0.9949, "99%"), (1.0, "100%"), (0.8, "80%")],
)
def test_a_busy_share_short_of_the_whole_is_never_shown_as_100_percent(value, shown):
    assert busy_share_shown(value) == shown
