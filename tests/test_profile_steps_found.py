"""find_steps end to end on small timelines built in memory: which source of steps wins, what each
step holds (its kernels, launches, tokens, kind) and what it measures (span, busy, graph share).
The same on real traces is tests/test_profile.py's and tests/test_profile_hf.py's; these run in a
second and are part of the mutation check's fast test set (examples/mutation_profile.sh)."""

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
    assert [(s.label, s.kind, s.model, s.kept) for s in steps] == [("step", "other", "", None)] * 4
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
