"""find_steps end to end on small timelines built in memory: which source of steps wins, what each
step holds (its kernels, launches, tokens, kind) and what it measures (span, busy, graph share).
The same on real traces is tests/test_profile.py's and tests/test_profile_hf.py's; these run in a
second and are part of the mutation check's fast test set (examples/mutation_profile.sh).

Private stages (`F._x`, `K._x`, `S._x`) are called directly, kept so (issue 38 §4): each
boundary sits inside one stage of the step finder, and a whole timeline that places it there
exactly is many launches long; find_steps on real traces covers the road end to end."""

from __future__ import annotations

import pytest

from ncclprobe.evidence.run.profile import forwards as F
from ncclprobe.evidence.run.profile import kinds as K
from ncclprobe.evidence.run.profile import steps as S
from ncclprobe.evidence.run.profile.timeline import Annotation, Kernel, Launch, Timeline
from tests.test_profile_steps_unit import layer, timeline


def _note(ts, dur, kind="decode", label="step[DECODE]", engine="sglang", batch=2, per_seq=None):
    step = {
        "kind": kind,
        "label": label,
        "engine": engine,
        "batch": batch,
        "tokens_per_seq": per_seq,
        "found_by": f"{engine} annotation",
    }
    return Annotation(label, ts, dur, 1, step, None)


def _kernel(ts, corr, name="k", dur=1.0):
    return Kernel(ts, dur, 7, corr, name, None, "kernel")


# ---- annotations --------------------------------------------------------------------------------


def test_the_most_specific_engines_annotations_win_and_carry_their_fields():
    notes = [
        _note(0.0, 50.0, engine="sglang"),
        _note(
            0.0, 100.0, kind="prefill", label="prefill", engine="ncclprobe", batch=4, per_seq=9.0
        ),
        _note(100.0, 100.0, kind="other", label="mixed", engine="ncclprobe"),
        Annotation("cudaLaunchKernel", 5.0, 1.0, 1, None, None),  # not a step
    ]
    steps, how = S.find_steps(Timeline("mem", {}, annotations=notes))
    assert how == "ncclprobe annotation"
    first = steps[0]
    assert (first.kind, first.label, first.t0, first.t1) == ("prefill", "prefill", 0.0, 100.0)
    assert (first.batch, first.tokens_per_seq, first.engine) == (4, 9.0, "ncclprobe")
    assert [s.kept for s in steps] == [1.0, None]  # an annotated prefill keeps one token
    only_vllm = [_note(0.0, 10.0, engine="vllm"), _note(20.0, 10.0, engine="vllm")]
    steps, how = S.find_steps(Timeline("mem", {}, annotations=only_vllm))
    assert len(steps) == 2 and how == "vllm annotation" and steps[0].kept == 1.0


def test_profiler_steps_when_no_engine_annotates():
    notes = [
        Annotation("ProfilerStep#3", 0.0, 10.0, 1, None, 3),
        Annotation("ProfilerStep#4", 10.0, 10.0, 1, None, 4),
        Annotation("other", 0.0, 1.0, 1, None, None),
    ]
    steps, how = S.find_steps(Timeline("mem", {}, annotations=notes))
    assert how == "torch.profiler's ProfilerStep#N annotations"
    assert [(s.label, s.t0, s.t1, s.engine, s.kind) for s in steps] == [
        ("ProfilerStep", 0.0, 10.0, "torch", "other"),
        ("ProfilerStep", 10.0, 20.0, "torch", "other"),
    ]
    assert steps[0].found_by == how
    assert S.find_steps(Timeline("mem", {})) == ([], "")


def test_kernels_belong_to_the_step_that_launched_them_and_the_innermost_wins():
    notes = [_note(0.0, 100.0), _note(40.0, 20.0, label="inner"), _note(100.0, 100.0)]
    launches = {
        1: Launch("kernel", "a", 0.0, 1.0, 1),  # at the outer step's start
        2: Launch("kernel", "b", 50.0, 1.0, 1),  # inside the nested step
        3: Launch("kernel", "c", 70.0, 1.0, 1),  # after it, in the outer one again
        4: Launch("sync", "s", 100.0, 1.0, 1),  # at the boundary: the later step (the innermost)
        5: Launch("kernel", "d", 250.0, 1.0, 1),  # after every step
    }
    kernels = [
        _kernel(500.0, 1),  # runs late, counts for the step that launched it
        _kernel(501.0, 2),
        _kernel(502.0, 3),
        _kernel(503.0, 5),
        _kernel(150.0, None),  # no launch: placed by its own time
        _kernel(150.5, 99),  # a launch not in the trace: placed by its own time
    ]
    tl = Timeline("mem", {}, kernels=kernels, launches=launches, annotations=notes)
    outer, inner, last = S.find_steps(tl)[0]
    assert [k.corr for k in outer.kernels] == [1, 3] and outer.launches == {"kernel": 2}
    assert [k.corr for k in inner.kernels] == [2] and inner.launches == {"kernel": 1}
    assert [k.corr for k in last.kernels] == [None, 99] and last.launches == {"sync": 1}


def test_a_launch_after_three_nested_steps_is_still_the_outer_steps():
    notes = [_note(0.0, 100.0)] + [_note(10.0 + i, 80.0 - 2 * i, label=f"n{i}") for i in range(3)]
    launches = {1: Launch("kernel", "a", 95.0, 1.0, 1)}  # after every nested one has ended
    tl = Timeline("mem", {}, kernels=[_kernel(96.0, 1)], launches=launches, annotations=notes)
    steps, _ = S.find_steps(tl)
    assert [len(s.kernels) for s in steps] == [1, 0, 0, 0]


# ---- tokens from the recorded shapes of annotated steps -----------------------------------------


def test_the_largest_lookup_inside_a_step_gives_its_tokens_and_kind():
    notes = [
        _note(0.0, 100.0, kind="other", label="step", batch=None),
        _note(100.0, 100.0, batch=2),  # a decode that looked up 3 tokens a sequence
        _note(200.0, 100.0, batch=2),  # a decode that looked up 1
        _note(300.0, 100.0, batch=2, per_seq=1.0),  # its tokens known already
        _note(400.0, 100.0, kind="other", label="step", batch=None),  # no lookup inside
    ]
    embeddings = [
        (10.0, 1.0, [2, 1]),
        (20.0, 1.0, [2, 20]),  # the largest wins: a prompt
        (30.0, 1.0, None),  # without shapes
        (110.0, 1.0, [6]),  # flat: 6 tokens over the step's batch of 2
        (210.0, 1.0, [2, 1]),
        (310.0, 1.0, [2, 5]),
    ]
    tl = Timeline("mem", {}, annotations=notes, embeddings=embeddings)
    steps, _ = S.find_steps(tl)
    assert [(s.kind, s.batch, s.tokens_per_seq) for s in steps] == [
        ("prefill", 2, 20.0),
        ("verify", 2, 3.0),
        ("decode", 2, 1.0),
        ("decode", 2, 1.0),
        ("other", None, None),
    ]
    assert [s.label for s in steps] == [
        "prefill",
        "step[DECODE] (3 tokens/seq: speculative)",
        "step[DECODE]",
        "step[DECODE]",
        "step",
    ]
    assert steps[1].found_by.endswith("; decode or verify from the recorded input shapes")
    assert steps[2].found_by == "sglang annotation"
    assert [s.kept for s in steps] == [1.0, None, 1.0, 1.0, None]


@pytest.mark.parametrize(
    "tokens, kind",
    [(0.5, "decode"), (1.0, "decode"), (1.5, "verify"), (16.0, "verify"), (17.0, "prefill")],
)
def test_kind_from_tokens_at_its_boundaries(tokens, kind):
    assert S.kind_from_tokens(tokens) == kind


def test_lookup_shapes_are_read_strictly():
    assert K.lookup_tokens([2, 5], None) == (2, 5.0)
    assert K.lookup_tokens([0, 5], None) is None  # no sequence
    assert K.lookup_tokens([2, 5.0], None) is None
    assert K.lookup_tokens([8], 2) == (2, 4.0) and K.lookup_tokens([8], None) is None
    assert K.lookup_tokens([8.0], 2) is None and K.lookup_tokens([1, 2, 3], 2) is None


# ---- what a step measures -----------------------------------------------------------------------


def test_span_busy_and_graph_share():
    launches = {1: Launch("graph", "g", 0.0, 1.0, 1), 2: Launch("kernel", "k", 1.0, 1.0, 1)}
    step = S.Step(kind="decode", label="decode", t0=0.0, t1=3000.0)
    assert step.span_ms() == 3.0 and step.busy_ms() is None and step.graph_share(launches) is None
    step.kernels = [
        _kernel(1000.0, 1, dur=3000.0),  # graph-launched
        _kernel(2000.0, 2, dur=500.0),  # overlaps it
        _kernel(5000.0, None, dur=1000.0),  # no launch known
        _kernel(5000.0, 2, dur=0.0),
    ]
    assert step.span_ms() == 5.0 and step.busy_ms() == 4.0
    assert step.graph_share(launches) == pytest.approx(3000.0 / 4500.0)
    step.gpu_end = 9000.0
    assert step.span_ms() == 8.0  # a forward runs on to the next one's first kernel
    step.gpu_end = 4000.0
    assert step.span_ms() == 5.0  # never shorter than its own kernels


def test_overlapping_kernels_are_counted_once():
    ks = [_kernel(0.0, 1, dur=10.0), _kernel(5.0, 2, dur=10.0), _kernel(6.0, 3, dur=2.0)]
    assert S.union_us(ks + [_kernel(20.0, 4, dur=5.0)]) == 20.0
    assert S.union_us(list(reversed(ks))) == 15.0 and S.union_us([]) == 0.0


# ---- forwards from the kernel stream, through find_steps ----------------------------------------


def _embedding_forwards(n=3):
    one = [("kernel", "indexSelectSmallIndex")] + [("kernel", f"k{i}") for i in range(8)]
    return timeline((one + [("sync", "s")]) * n, cpu_ops=0)


def test_forwards_tile_the_run_and_are_classified():
    tl = _embedding_forwards()
    steps, how = S.find_steps(tl)
    assert how == "the kernel stream: kernels named for an embedding lookup"
    assert [(s.t0, s.t1) for s in steps] == [(10.0, 110.0), (110.0, 210.0), (210.0, 300.0)]
    assert [s.gpu_end for s in steps] == [112.0, 212.0, None]
    assert [s.span_ms() for s in steps] == pytest.approx([0.1, 0.1, 0.081])
    assert {(s.kind, s.model, s.replay, s.launch_count, s.kept) for s in steps} == {
        ("decode", "target", False, 9, 1.0)
    }
    assert steps[0].signature == (0, 1, 2, 3, 4, 5) and steps[0].launches == {
        "kernel": 9,
        "sync": 1,
    }
    assert steps[0].blocks == {f"k{i}": 4 for i in range(8)} | {"indexSelectSmallIndex": 4}


def test_a_repeated_unit_without_a_lookup_is_a_step_of_no_model():
    one = layer() * 3 + [("kernel", "head"), ("memcpy", "DtoH"), ("sync", "s")]
    steps, how = S.find_steps(timeline(one * 4, cpu_ops=0))
    assert how.startswith("the kernel stream: repeated layer kernels")
    assert [(s.label, s.kind, s.model, s.kept) for s in steps] == [
        ("repeated", "other", "", None)
    ] * 4  # labelled "repeated": "step steps" read badly
    assert [s.launch_count for s in steps] == [29] * 4 and steps[0].blocks == {}


def test_replayed_forwards_count_the_replays_kernels():
    whole = [
        ("memcpy", "DtoD"),
        ("graph", "g", F.MIN_GRAPH_KERNELS),
        ("kernel", "argmax"),
        ("sync", "s"),
    ]
    tl = timeline([("kernel", "e")] * 3 + whole * 3)
    steps, how = S.find_steps(tl)
    assert how == "the kernel stream: graph launches of a whole forward (replays)"
    assert [s.t0 for s in steps] == [40.0, 80.0, 120.0]
    assert {(s.replay, s.launch_count, s.kind) for s in steps} == {
        (True, F.MIN_GRAPH_KERNELS, "decode")
    }
    assert steps[0].graph_share(tl.launches) == pytest.approx(16 / 18)
    assert steps[0].blocks == {f"g#{i}": 4 for i in range(16)}  # the glue's kernels aside
    # a graph under MIN_GRAPH_KERNELS is glue: every kernel launched counts, syncs none
    assert S._forward_kernels(["graph", "kernel", "sync"], [15, 1, 0]) == 16
    assert S._forward_kernels(["graph", "kernel", "graph"], [16, 1, 16]) == 32


def test_a_last_forward_cut_off_by_the_trace_is_dropped():
    one = [("kernel", "indexSelectSmallIndex")] + [("kernel", "layer")] * 20 + [("sync", "s")]
    cut = [("kernel", "indexSelectSmallIndex")] + [("kernel", "layer")] * 10
    steps, _ = S.find_steps(timeline(one * 3 + cut, cpu_ops=0))
    assert len(steps) == 3 and steps[-1].gpu_end is None
    whole, _ = S.find_steps(timeline(one * 4, cpu_ops=0))
    assert len(whole) == 4


def test_blocks_by_name_takes_eager_launches_or_the_replays_own():
    launches = {1: Launch("graph", "g", 0.0, 1.0, 1), 2: Launch("kernel", "k", 1.0, 1.0, 1)}
    ks = [
        Kernel(0.0, 1.0, 7, 1, "a", None, "kernel", blocks=8),
        Kernel(1.0, 1.0, 7, 2, "a", None, "kernel", blocks=2),
        Kernel(2.0, 1.0, 7, 2, "a", None, "kernel", blocks=4),
        Kernel(3.0, 1.0, 7, 2, "a", None, "kernel", blocks=0),  # no grid recorded
        Kernel(4.0, 1.0, 7, 2, "m", None, "gpu_memcpy", blocks=9),
        Kernel(5.0, 1.0, 7, None, "b", None, "kernel", blocks=5),
    ]
    assert K.blocks_by_name(ks, launches) == {"a": 3.0, "b": 5}
    assert K.blocks_by_name(ks, launches, replayed=True) == {"a": 8}


# ---- edges of the step sources ------------------------------------------------------------------


def test_one_annotated_step_is_a_step():
    steps, how = S.find_steps(Timeline("mem", {}, annotations=[_note(0.0, 10.0)]))
    assert len(steps) == 1 and how == "sglang annotation"


def test_kernels_without_gaps_are_no_steps_and_no_words():
    kernels = [_kernel(float(i), i + 1) for i in range(5)]  # back to back
    assert S.find_steps(Timeline("mem", {}, kernels=kernels)) == ([], "")


def test_bursts_say_how_they_were_found():
    kernels = [_kernel(t, None) for t in (0.0, 2.0, 4.0, 500.0, 502.0)]
    _, how = S.find_steps(Timeline("mem", {}, kernels=kernels))
    assert how == "gaps between bursts of GPU work (the profile has no step annotations)"


def test_the_typical_gap_is_the_middle_one():
    # gaps 1, 1, 1, 10, 10, 10 and one of 150: the median 10 puts the threshold at 200 µs
    starts, t = [], 0.0
    for gap in (1.0, 1.0, 1.0, 10.0, 10.0, 10.0, 150.0):
        starts.append(t)
        t += 1.0 + gap
    starts.append(t)
    steps = S._from_gaps(Timeline("mem", {}, kernels=[_kernel(x, None) for x in starts]))
    assert len(steps) == 1


def test_two_forwards_the_last_cut_off_leave_one_step():
    one = [("kernel", "indexSelectSmallIndex")] + [("kernel", "layer")] * 20 + [("sync", "s")]
    cut = [("kernel", "indexSelectSmallIndex")] + [("kernel", "layer")] * 10
    steps, _ = S.find_steps(timeline(one + cut, cpu_ops=0))
    assert len(steps) == 1 and steps[0].engine == "unknown" and steps[0].kind == "decode"


def test_annotations_out_of_order_and_a_launch_at_the_last_steps_end():
    notes = [_note(200.0, 100.0), _note(100.0, 100.0), _note(0.0, 100.0)]  # latest first
    launches = {
        1: Launch("kernel", "a", 50.0, 1.0, 1),
        2: Launch("kernel", "b", 150.0, 1.0, 1),
        3: Launch("kernel", "c", 300.0, 1.0, 1),  # at the last step's very end
    }
    kernels = [_kernel(60.0, 1), _kernel(160.0, 2), _kernel(310.0, 3)]
    tl = Timeline("mem", {}, kernels=kernels, launches=launches, annotations=notes)
    third, second, first = S.find_steps(tl)[0]
    assert [[k.corr for k in s.kernels] for s in (first, second, third)] == [[1], [2], [3]]


def test_recorded_shapes_skip_known_and_lookup_free_steps_and_keep_the_most_tokens():
    notes = [
        _note(0.0, 100.0, kind="other", label="step", batch=None),  # no lookup inside
        _note(100.0, 100.0, batch=2, per_seq=1.0),  # its tokens known already
        _note(200.0, 100.0, batch=None),  # two lookups: 20 tokens of 2 beat 2 tokens of 4
        _note(300.0, 100.0, batch=2),  # a decode of 2 tokens a sequence: a verify
    ]
    embeddings = [
        (110.0, 1.0, [2, 7]),
        (210.0, 1.0, [4, 2]),
        (220.0, 1.0, [2, 20]),
        (310.0, 1.0, [2, 2]),
    ]
    steps, _ = S.find_steps(Timeline("mem", {}, annotations=notes, embeddings=embeddings))
    assert [(s.kind, s.batch, s.tokens_per_seq) for s in steps] == [
        ("other", None, None),
        ("decode", 2, 1.0),
        ("prefill", 2, 20.0),
        ("verify", 2, 2.0),
    ]
    assert steps[3].found_by == "sglang annotation; decode or verify from the recorded input shapes"


# ---- a draft and its target, classified ---------------------------------------------------------


def _fwd(t0, launches, blocks, replay=False):
    s = S.Step(kind="other", label="forward", t0=t0, t1=t0 + 9.0, model="target", replay=replay)
    s.launch_count, s.blocks = launches, dict(blocks)
    return s


def test_a_draft_and_its_target_get_their_kinds_tokens_and_kept_tokens():
    one, five = {"a": 2, "b": 4, "c": 8}, {"a": 10, "b": 20, "c": 40}
    pattern = "TdddTdddT"
    steps = []
    for i, m in enumerate(pattern):
        target = m == "T"
        blocks = (five if i == 0 else one) if target else {"x": 2}
        steps.append(_fwd(10.0 * i, 160 if target else 100, blocks))
    steps.append(_fwd(100.0, 40, {"g": 2}, replay=True))  # a replay: never the eager ones' draft
    K.classify(Timeline("mem", {}), steps)
    assert "".join("T" if s.model == "target" else "d" for s in steps) == pattern + "T"
    assert [s.kind for s in steps[:5]] == ["prefill", "draft", "draft", "draft", "verify"]
    assert [s.tokens_per_seq for s in steps if s.model == "target" and not s.replay] == [
        20.0,
        4.0,
        4.0,
    ]
    assert {s.kept for s in steps if s.model == "draft"} == {0.0}
    assert steps[4].tokens_from.endswith("taken as 4 token(s) (the drafts per cycle + 1)")


def test_one_draft_per_cycle_makes_two_tokens_and_says_so():
    one, three = {"a": 2, "b": 4, "c": 8}, {"a": 6, "b": 12, "c": 24}
    steps = [_fwd(0.0, 160, three), _fwd(10.0, 100, {}), _fwd(20.0, 160, one)]
    steps[1].model = "draft"
    target = [steps[0], steps[2]]
    K._tokens(Timeline("mem", {}), target, steps, "target")
    assert [s.tokens_per_seq for s in target] == [6.0, 2.0]
    assert steps[2].tokens_from.endswith("taken as 2 token(s) (the drafts per cycle + 1)")


def test_a_lookup_is_read_from_the_one_open_at_the_steps_start_up_to_its_end():
    step = S.Step(kind="other", label="f", t0=100.0, t1=190.0)

    def read(embeddings, batch=None):
        step.batch = batch
        return K._looked_up(Timeline("mem", {}, embeddings=embeddings), step)

    assert read([(40.0, 100.0, [2, 9]), (60.0, 50.0, [2, 3])]) == (2, 3.0)  # the later open one
    assert read([(50.0, 50.0, [2, 3])]) == (2, 3.0)  # ends exactly at the start
    assert read([(50.0, 49.0, [2, 3])]) is None
    assert read([(50.0, 10.0, [2, 9]), (120.0, 1.0, None), (150.0, 1.0, [2, 4])]) == (2, 4.0)
    assert read([(190.0, 1.0, [2, 5])]) == (2, 5.0)  # starts exactly at the end
    assert read([(150.0, 1.0, [8])], batch=2) == (2, 4.0)
    assert K.lookup_tokens([1, 5], None) == (1, 5.0)
