"""--min-busbw and --max-latency (sweep/thresholds.py) on typed records: each limit on its boundary
(a value equal to it passes), the default sizes, a size not measured, records that do not count."""

import pytest

from ncclprobe.errors import UsageProblem
from ncclprobe.records import ResultRecord, Status
from ncclprobe.sweep.thresholds import Criterion, Metric, check, parse


def _r(size, time_us=10.0, busbw=50.0, *, status=Status.OK, collective="all_reduce", **kw):
    fields = dict(mode="eager", in_place=True, op="sum", dtype="float32")
    fields.update(kw)
    return ResultRecord(
        config_id="default",
        size_bytes=size,
        collective=collective,
        status=status,
        time_us=time_us,
        busbw_gbps=busbw,
        **fields,
    )


def test_parse_reads_a_limit_and_an_optional_size():
    assert parse("100@1G", "5") == [
        Criterion(Metric.BUSBW, 100.0, 1 << 30),
        Criterion(Metric.TIME, 5.0, None),
    ]
    assert parse(None, None) == []


@pytest.mark.parametrize("text", ["0", "-1", "abc", "1e999", "nan", "5@", "@1K"])
def test_a_limit_that_is_not_a_positive_finite_number_is_refused(text):
    with pytest.raises(UsageProblem, match="expected a positive finite number") as busbw:
        parse(text, None)
    assert str(busbw.value).startswith(f"--min-busbw {text!r}: ")
    with pytest.raises(UsageProblem) as latency:
        parse(None, text)
    assert str(latency.value).startswith(f"--max-latency {text!r}: ")


def test_busbw_at_least_the_limit_passes_on_its_boundary():
    at_limit, below = [_r(1024, busbw=100.0)], [_r(1024, busbw=99.999)]
    assert check(at_limit, parse("100", None)) == []
    (line,) = check(below, parse("100", None))
    assert line == (
        "threshold busbw >= 100 GB/s at the largest size missed: all_reduce sum float32 default "
        "eager in place 1K: 100 GB/s"
    )


def test_latency_at_most_the_limit_passes_on_its_boundary():
    assert check([_r(8, time_us=5.0)], parse(None, "5")) == []
    (line,) = check([_r(8, time_us=5.001, in_place=False)], parse(None, "5"))
    assert line.endswith("default eager out of place 8B: 5.001 us")
    assert line.startswith("threshold time <= 5 us at the smallest size missed: all_reduce")


def test_without_a_size_busbw_is_judged_at_the_largest_and_latency_at_the_smallest():
    results = [_r(8, time_us=1.0, busbw=1.0), _r(1 << 20, time_us=900.0, busbw=200.0)]
    assert check(results, parse("100", "2")) == []  # 8B's busbw and 1M's time are not judged
    assert len(check(results, parse("300", "0.5"))) == 2


def test_a_size_given_and_not_measured_is_a_shortfall():
    (line,) = check([_r(8)], parse("1@1K", None))
    assert line == "threshold busbw >= 1 GB/s at 1K: all_reduce was not measured at 1K"


def test_only_timed_ok_results_count_and_each_collective_has_its_own_sizes():
    results = [
        _r(1 << 20, busbw=0.0, status=Status.WRONG),  # the largest size, but not ok
        _r(1 << 20, time_us=None),
        _r(4096, busbw=5.0, collective="all_gather"),
        _r(64, busbw=500.0),
    ]
    (line,) = check(results, parse("10", None))  # all_reduce judged at 64B, all_gather at 4K
    assert "all_gather" in line and line.endswith("4K: 5 GB/s")


def test_a_collective_not_measured_at_the_size_leaves_the_others_judged():
    results = [_r(64, collective="all_gather"), _r(1024, busbw=1.0)]
    assert check(results, parse("10@1K", None)) == [
        "threshold busbw >= 10 GB/s at 1K: all_gather was not measured at 1K",
        "threshold busbw >= 10 GB/s at 1K missed: all_reduce sum float32 default eager in place "
        "1K: 1 GB/s",
    ]


def test_a_timed_result_without_a_bandwidth_misses_with_na():
    (line,) = check([_r(8, busbw=None)], parse("1", None))
    assert line.endswith("8B: n/a GB/s")
