"""`evidence.run.profile.host.host_time` on spans laid out by hand, so every figure is known to the
microsecond: the gaps outside the forward and torch.distributed's calls, the GPU's busy time taken
out on a GPU trace, the innermost own function named with the call it was in, the last sync before
a gap on a GPU, the thread that ran the step, a step lengthened by its own kernels. The real
profiles (host-bound `.item()`, generate()'s n-gram lookup, a gloo job) are read in
tests/test_capture_rules.py and tests/test_capture_hf.py; a GPU profile is recorded only on a GPU
(tests/test_capture_gpu.py), hence these.

One step, in microseconds, on thread 1 (a watcher on thread 2 runs its own loop through it):

    0 ........ 3000  forward (nn.Module)
    0 ................................................ 10000  job.py(10): step
              3000 ........................ 9000  job.py(20): postprocess
                   3500-4000 aten::item
                              5000-6000 aten::copy_
                                            9000-9500 torch/distributed all_reduce
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ncclprobe.evidence.run.profile import host as H
from ncclprobe.evidence.run.profile.host import HostCollector, HostSpan, host_time

STEP = "job.py(10): step"
POST = "job.py(20): postprocess"


def _spans(offset: float = 0.0, *, forward: bool = True) -> list[HostSpan]:
    o = offset
    out = [
        HostSpan(o + 0, o + 10000, 1, STEP, "py"),
        HostSpan(o + 3000, o + 9000, 1, POST, "py"),
        HostSpan(o + 3500, o + 4000, 1, "aten::item", "op"),
        HostSpan(o + 5000, o + 6000, 1, "aten::copy_", "op"),
        HostSpan(o + 9000, o + 9500, 1, "torch/distributed/c10d.py(9): all_reduce", "comm"),
        HostSpan(o + 0, o + 10000, 2, "watcher.py(5): loop", "py"),
    ]
    if forward:
        out.append(HostSpan(o + 0, o + 3000, 1, "nn.Module: Model_0", "module"))
    return out


def _step(t0: float, t1: float, kernels=()):
    return SimpleNamespace(t0=t0, t1=t1, kernels=list(kernels))


def _kernel(ts: float, end: float):
    return SimpleNamespace(ts=ts, end=end)


def test_a_cpu_step_is_its_time_outside_the_forward_and_the_collectives():
    report = host_time(_spans(), True, [_step(0, 10000)], [])
    assert report.basis == "outside-forward" and report.steps == 1
    # 10000 - forward 3000 - all_reduce 500
    assert report.gap_ms_per_step == pytest.approx(6.5) and report.step_ms == pytest.approx(10.0)
    assert report.gap_share == pytest.approx(0.65)
    post, step = report.functions
    assert (post.function, post.ms_per_step, post.steps) == (POST, pytest.approx(6.0), 1)
    assert post.share == pytest.approx(6000 / 6500)
    # its own sync names the call, over the op it spent most gap time in (copy_, 1000 us)
    assert post.call == "aten::item" and post.syncs_per_step == 1.0
    assert (step.function, step.call, step.ms_per_step) == (STEP, None, pytest.approx(0.5))
    assert step.syncs_per_step == 0.0


def test_a_gpu_step_takes_the_busy_device_out_and_names_the_last_sync():
    kernels = [_kernel(500, 2500), _kernel(8000, 8500)]
    report = host_time(_spans(), True, [_step(0, 10000)], kernels)
    assert report.basis == "gpu-idle"
    # 3000-8000, 8500-9000, 9500-10000: the forward, the all_reduce and the kernel are no gap
    assert report.gap_ms_per_step == pytest.approx(6.0)
    post, step = report.functions
    assert post.ms_per_step == pytest.approx(5.5) and post.call == "aten::item"
    # after the item the GPU waited on the host until its next kernel: the item drained it
    assert step.ms_per_step == pytest.approx(0.5) and step.call == "aten::item"


def test_without_a_sync_the_gpu_gap_keeps_the_op_it_was_in():
    spans = [s for s in _spans() if s.name != "aten::item"]
    report = host_time(spans, True, [_step(0, 10000)], [_kernel(500, 2500)])
    post = report.functions[0]
    assert post.call == "aten::copy_" and post.syncs_per_step == 0.0
    assert post.ms_per_step == pytest.approx(6.0)


def test_steps_average_and_a_step_without_a_forward_is_not_measured():
    spans = _spans() + _spans(20000, forward=False) + _spans(40000)
    steps = [_step(0, 10000), _step(20000, 30000), _step(40000, 48000)]
    report = host_time(spans, True, steps, [])
    assert report.steps == 2  # the middle step has no forward: nothing tells model from host
    assert report.step_ms == pytest.approx(10.0)  # the median of all three steps' lengths
    # the third step ends at 48000: 5000 of postprocess inside it, no step tail after the collective
    assert report.gap_ms_per_step == pytest.approx((6500 + 5000) / 2 / 1000)
    post = report.functions[0]
    assert post.ms_per_step == pytest.approx((6000 + 5000) / 2 / 1000) and post.steps == 2


def test_a_step_lasts_until_its_own_kernels_end():
    kernels = [_kernel(500, 2500), _kernel(9800, 12000)]
    step = _step(0, 10000, kernels=[_kernel(9800, 12000)])
    report = host_time(_spans(), True, [step], kernels)
    assert report.step_ms == pytest.approx(12.0)
    # 3000-9000 and 9500-9800: the device is busy from 9800 to the step's end
    assert report.gap_ms_per_step == pytest.approx(6.3)


@pytest.mark.parametrize(
    "spans, python, steps",
    [
        (_spans(), True, []),  # no step
        (_spans(), False, [_step(0, 10000)]),  # no Python functions in the trace
        (_spans(forward=False), True, [_step(0, 10000)]),  # no forward in any step
    ],
)
def test_what_cannot_be_measured_is_none(spans, python, steps):
    assert host_time(spans, python, steps, []) is None


def test_the_thread_running_the_forward_is_the_steps_not_the_longest():
    spans = _spans() + [HostSpan(0, 10000, 2, "watcher.py(6): poll", "py")]
    report = host_time(spans, True, [_step(0, 10000)], [])
    assert {f.function for f in report.functions} == {POST, STEP}


def test_the_collector_keeps_long_spans_modules_collectives_and_every_sync():
    kept = HostCollector()
    kept.python_function({"name": "job.py(3): f", "tid": 1}, 0.0, 19.0)  # short: dropped
    kept.python_function({"name": "job.py(4): g", "tid": 1}, 0.0, 20.0)
    kept.python_function({"name": "nn.Module: M_0", "tid": 1}, 0.0, 1.0)
    kept.python_function({"name": "torch/distributed/c10d.py(9): all_reduce", "tid": 1}, 0.0, 1.0)
    kept.python_function(
        {"name": "<built-in method item of Tensor object at 0x7f00>", "tid": 1}, 0.0, 30.0
    )
    kept.cpu_op({"tid": 1}, "aten::add", 0.0, 19.0)  # short: dropped
    kept.cpu_op({"tid": 1}, "aten::mm", 0.0, 20.0)
    kept.cpu_op({"tid": 1}, "aten::item", 0.0, 1.0)  # a sync, however short
    assert kept.python
    assert [(s.name, s.kind) for s in kept.spans] == [
        ("job.py(4): g", "py"),
        ("nn.Module: M_0", "module"),
        ("torch/distributed/c10d.py(9): all_reduce", "comm"),
        ("<built-in method item of Tensor>", "py"),
        ("aten::mm", "op"),
        ("aten::item", "op"),
    ]
    assert HostCollector().python is False


@pytest.mark.parametrize(
    "name, own",
    [
        ("generate_hf.py(29): ngram_lookup", True),  # the job's script
        ("transformers/generation/utils.py(3239): _sample", True),  # the engine's code
        ("/work/app/train.py(8): step", True),  # an absolute path outside sys.path
        ("torch/nn/modules/module.py(1782): _call_impl", False),
        ("typing.py(902): __eq__", False),  # the standard library, one file
        ("json/decoder.py(337): decode", False),  # ... and a package of it
        ("concurrent/futures/thread.py(58): run", False),
        ("threading.py(1012): run", False),
        ("<built-in method item of Tensor>", False),
        ("<frozen importlib._bootstrap>(244): _verbose_message", False),
        ("nn.Module: Linear_0", False),
        ("not a frame", False),
    ],
)
def test_own_code_is_the_jobs_or_the_engines_never_torch_or_the_standard_library(name, own):
    from ncclprobe.evidence.run.profile.host import _own

    assert _own(name) is own


def test_an_idle_host_covers_nothing_and_a_library_frame_gives_its_time_to_its_caller():
    """Host work only from 3500 to 9000 (an idle host before and after covers no function); in it a
    torch helper ending with its caller (its time is the caller's, the helper its call), a function
    starting with its callee (the callee's own time is the callee's), and a gap under library code
    alone (the library frame is named: no own frame is over it)."""
    spans = [
        HostSpan(0, 3000, 1, "nn.Module: Model_0", "module"),
        HostSpan(3500, 9000, 1, POST, "py"),
        HostSpan(3500, 3900, 1, "job.py(30): decode_tokens", "py"),
        HostSpan(8000, 9000, 1, "torch/utils/x.py(5): helper", "py"),
        HostSpan(9200, 9600, 1, "torch/utils/y.py(7): cleanup", "py"),
    ]
    report = host_time(spans, True, [_step(0, 10000)], [])
    assert report.gap_ms_per_step == pytest.approx(7.0)  # 3000-10000: the host's idle time too
    got = {f.function: (f.ms_per_step, f.call) for f in report.functions}
    assert got == {
        POST: (pytest.approx(5.1), "torch/utils/x.py(5): helper"),
        "job.py(30): decode_tokens": (pytest.approx(0.4), None),
        "torch/utils/y.py(7): cleanup": (pytest.approx(0.4), None),
    }


def test_the_call_is_the_sync_made_most_else_the_op_with_most_time():
    spans = [
        HostSpan(0, 3000, 1, "nn.Module: Model_0", "module"),
        HostSpan(3000, 9000, 1, POST, "py"),
        HostSpan(3100, 3200, 1, "aten::is_nonzero", "op"),
        HostSpan(3300, 3400, 1, "aten::is_nonzero", "op"),
        HostSpan(3500, 3600, 1, "aten::item", "op"),
        HostSpan(4000, 4500, 1, "job.py(40): read", "py"),
        HostSpan(4000, 4400, 1, "aten::item", "op"),  # starts with its caller: read made it
    ]
    report = host_time(spans, True, [_step(0, 10000)], [])
    got = {f.function: f for f in report.functions}
    # 2 x is_nonzero against 1 x item: counted, not alphabetical
    assert got[POST].call == "aten::is_nonzero" and got[POST].syncs_per_step == 3.0
    assert got["job.py(40): read"].call == "aten::item"
    assert got["job.py(40): read"].syncs_per_step == 1.0
    without = [s for s in spans if s.kind != "op"] + [
        HostSpan(5000, 5500, 1, "aten::mm", "op"),
        HostSpan(6000, 7000, 1, "aten::copy_", "op"),
    ]
    post = host_time(without, True, [_step(0, 10000)], []).functions[0]
    assert post.call == "aten::copy_"  # 1000 us against mm's 500: time, not the name


@pytest.mark.parametrize(
    "other, runs_the_step",
    [
        # a second thread with a short forward late in the step (a side model): thread 1's is longer
        ([HostSpan(9000, 9100, 2, "nn.Module: Side_0", "module")], 1),
        # the same forward time on both: the one whose Python (and collectives) cover more
        (
            [
                HostSpan(0, 3000, 2, "nn.Module: Model_0", "module"),
                HostSpan(3000, 6000, 2, "torch/distributed/c10d.py(9): wait", "comm"),
            ],
            1,
        ),
    ],
)
def test_the_step_thread_is_told_by_its_forward_then_its_python(other, runs_the_step):
    report = host_time(_spans() + other, True, [_step(0, 10000)], [])
    expected = {POST, STEP} if runs_the_step == 1 else set()
    assert {f.function for f in report.functions} == expected


def test_collectives_break_a_tie_of_forwards_where_python_is_even():
    """Two threads with the same forward and the same Python time: the one in torch.distributed
    runs the step (its wait is the step's, not a watcher's); and the other way round."""
    base = [
        HostSpan(0, 3000, 1, "nn.Module: Model_0", "module"),
        HostSpan(3000, 5000, 1, "job.py(20): postprocess", "py"),
        HostSpan(0, 3000, 2, "nn.Module: Model_0", "module"),
        HostSpan(3000, 5000, 2, "job.py(50): other", "py"),
    ]
    comm = HostSpan(5000, 6000, 2, "torch/distributed/c10d.py(9): wait", "comm")
    report = host_time(base + [comm], True, [_step(0, 10000)], [])
    assert [f.function for f in report.functions] == ["job.py(50): other"]
    more_py = HostSpan(5000, 7000, 1, "job.py(60): more", "py")
    report = host_time(base + [comm, more_py], True, [_step(0, 10000)], [])
    assert {f.function for f in report.functions} == {"job.py(20): postprocess", "job.py(60): more"}


def test_a_step_without_kernels_of_its_own_and_the_report_says_python():
    bare = SimpleNamespace(t0=0, t1=10000)  # steps.Step of a CPU trace: no kernels attribute
    report = host_time(_spans(), True, [bare], [])
    assert report.step_ms == pytest.approx(10.0) and report.python is True
    assert host_time([], True, [bare], []) is None  # no span at all: no thread ran the step


def test_an_unnamed_python_event_is_kept_with_no_name():
    kept = HostCollector()
    kept.python_function({"tid": 1}, 0.0, 30.0)
    assert [(s.name, s.kind) for s in kept.spans] == [("", "py")]


def test_the_top_three_functions_are_named_and_overlapping_spans_are_one():
    """At most H.TOP functions are named, the longest first; overlapping intervals merge into one,
    touching ones too, apart ones stay apart (mutation survivors)."""
    totals = {(f"job.py({n}): f{n}", None): [1000.0 * (10 - n)] * 2 for n in range(5)}
    named = H._ranked(totals, 2, sum(sum(v) for v in totals.values()))
    assert [f.function for f in named] == ["job.py(0): f0", "job.py(1): f1", "job.py(2): f2"]
    assert len(named) == H.TOP == 3
    assert H._union([(3, 8), (0, 5), (8, 9), (10, 12)]) == [(0, 9), (10, 12)]
