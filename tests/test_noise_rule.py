"""The one noise rule (`ncclprobe.stats.compare`, docs/METRICS.md "The noise rule"), at its
boundaries, on both sides, and in every place that says "A is faster/slower than B": diagnose on
engine traces and server logs, recommend, run-engine --tuned's comparison."""

import pytest

from ncclprobe import stats
from ncclprobe.stats import FASTER, NOISE_FLOOR, REPEATS, SLOWER, WITHIN_NOISE, Sample, compare


def one(time: float) -> Sample:
    return Sample(time, time, time, 1)


def spread(median: float, low: float, high: float) -> Sample:
    return Sample(median, low, high, 3)


def test_the_floor_decides_at_its_boundary_the_same_way_round():
    # B takes 100; A saving exactly 5 % of it is faster, 4.9 % is not
    assert compare(one(95.0), one(100.0)).verdict == FASTER
    assert compare(one(95.1), one(100.0)).verdict == WITHIN_NOISE
    # slower is the same test with the sides swapped: A takes 100, B 95 -> A slower
    assert compare(one(100.0), one(95.0)).verdict == SLOWER
    assert compare(one(100.0), one(95.1)).verdict == WITHIN_NOISE
    assert compare(one(100.0), one(100.0)).verdict == WITHIN_NOISE


def test_spreads_must_not_touch():
    b = spread(100.0, 90.0, 110.0)
    assert compare(spread(50.0, 40.0, 89.9), b).verdict == FASTER
    assert compare(spread(50.0, 40.0, 90.0), b).verdict == WITHIN_NOISE  # touching: overlap
    assert compare(spread(150.0, 110.0, 160.0), b).verdict == WITHIN_NOISE
    assert compare(spread(150.0, 110.1, 160.0), b).verdict == SLOWER
    # beyond the spreads but below the floor: no verdict either
    assert compare(spread(96.0, 95.9, 96.1), spread(100.0, 99.9, 100.1)).verdict == WITHIN_NOISE


def test_the_basis_says_which_evidence_decided():
    assert compare(spread(50.0, 40.0, 60.0), spread(100.0, 90.0, 110.0)).basis == REPEATS
    assert compare(one(50.0), spread(100.0, 90.0, 110.0)).basis == NOISE_FLOOR
    assert compare(one(50.0), one(100.0)).basis == NOISE_FLOOR
    assert "p10-p90 spreads" in compare(spread(1, 1, 1), spread(2, 2, 2)).describe()
    assert "noise floor" in compare(one(1.0), one(2.0)).describe()


@pytest.mark.parametrize(
    "single,floor,faster_at,within_at", [("gpu", 0.05, 95.0, 95.1), ("cpu", 0.5, 50.0, 50.1)]
)
def test_one_measurement_takes_its_kinds_noise_floor(single, floor, faster_at, within_at):
    result = compare(one(faster_at), one(100.0), single=single)
    assert (result.verdict, result.floor, result.basis) == (FASTER, floor, NOISE_FLOOR)
    assert compare(one(within_at), one(100.0), single=single).verdict == WITHIN_NOISE
    assert compare(one(100.0), one(within_at), single=single).verdict == WITHIN_NOISE
    assert compare(one(100.0), one(faster_at), single=single).verdict == SLOWER
    # with repeats on both sides the spreads are measured: the kind's floor does not apply
    both = compare(spread(60.0, 59.0, 61.0), spread(100.0, 99.0, 101.0), single=single)
    assert (both.verdict, both.floor) == (FASTER, 0.05)


def test_a_caller_floor_is_kept_for_records_and_never_lowered_for_engine_runs():
    assert compare(one(99.0), one(100.0), min_gain=0.01).verdict == FASTER
    assert compare(one(99.0), one(100.0), min_gain=0.01, single="gpu").verdict == WITHIN_NOISE


def test_rates_are_compared_as_times():
    sample = Sample.of_rates([100.0, 200.0, 400.0])
    assert sample.median == pytest.approx(1 / 200.0)
    assert sample.low == pytest.approx(1 / stats.quantile([100, 200, 400], 90, of=100))
    assert sample.high == pytest.approx(1 / stats.quantile([100, 200, 400], 10, of=100))
    # 200 tok/s against 100 tok/s: half the time per token, a gain of 0.5
    assert compare(Sample.of_rates([200.0]), Sample.of_rates([100.0])).gain == pytest.approx(0.5)
    with pytest.raises(ValueError):
        Sample.of_rates([0.0, 1.0])


def test_recommend_keeps_its_rule_exactly():
    """`significant` is the noise rule on trial records: p90 below the other's p10 and the floor."""
    from ncclprobe.stats import Point, significant, significant_totals

    default = Point(1024, 100.0, 98.0, 102.0, trials=5)
    assert significant(Point(1024, 90.0, 89.0, 97.9, trials=5), default)
    assert not significant(Point(1024, 90.0, 89.0, 98.0, trials=5), default)
    assert not significant(Point(1024, 95.1, 95.0, 95.2, trials=5), default)
    assert significant(Point(1024, 95.0, 95.0, 95.0), Point(1024, 100.0, 100.0, 100.0))
    assert significant_totals((90.0, 89.0, 97.9), (100.0, 98.0, 102.0))
    assert not significant_totals((90.0, 89.0, 98.0), (100.0, 98.0, 102.0))


# ---- every comparison goes through it -----------------------------------------------------------


def _sglang_log(tmp_path, name: str, rates: list[float], accept: float | None = None) -> str:
    """A hand-written SGLang log in the format of its scheduler's decode lines (a warm-up interval
    first, which counts for nothing), one line per logging interval at batch 4."""
    accept_field = f"accept len: {accept:.2f}, " if accept else ""
    lines = [
        f"[2026-01-01 00:00:{i:02d} TP0] Decode batch. #running-req: 4, #token: 900, token usage: 0.01, "
        f"{accept_field}cuda graph: True, gen throughput (token/s): {rate:.2f}, #queue-req: 0"
        for i, rate in enumerate([1.0] + rates)
    ]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize(
    "spec,base,outcome",
    [
        ([99.5, 99.4, 99.6], [100.0, 100.1, 99.9], "not checked"),  # 0.5 % slower: noise
        ([100.1, 100.2, 100.0], [100.0, 99.9, 99.8], "not checked"),  # 0.1 % faster: noise
        ([120.0, 121.0, 119.0], [100.0, 101.0, 99.0], "ruled out"),
        ([80.0, 81.0, 79.0], [100.0, 101.0, 99.0], "finding"),
        ([120.0, 60.0, 180.0], [100.0, 101.0, 99.0], "not checked"),  # the spreads overlap
    ],
)
def test_server_logs_are_judged_by_their_intervals(tmp_path, spec, base, outcome):
    from ncclprobe.diagnose import diagnose, load_evidence

    result = diagnose(
        load_evidence(
            server_logs=[_sglang_log(tmp_path, "spec.log", spec, accept=2.5)],
            baseline_server_logs=[_sglang_log(tmp_path, "base.log", base)],
        )
    )
    found = [f for f in result.findings if f.rule == "speculative-slower"]
    ruled = [r for r in result.ruled_out if r.rule == "speculative-slower"]
    missing = [n for n in result.not_checked if n.rule == "speculative-slower"]
    assert (bool(found), bool(ruled), bool(missing)) == (
        outcome == "finding",
        outcome == "ruled out",
        outcome == "not checked",
    )
    if found:
        assert found[0].severity == "warning" and "beyond the noise" in found[0].title
        assert found[0].evidence["noise_rule"]["basis"] == REPEATS
        assert found[0].evidence["noise_rule"]["intervals"] == [3, 3]  # the warm-up left out
    if ruled:
        assert "p10-p90 spreads" in ruled[0].reason


def _single_runs(trace: dict, baseline: float, speculative: float) -> dict:
    for run in trace["runs"]:
        run.pop("repeats", None)
        run["tokens_per_s"] = baseline if run["mode"] == "baseline" else speculative
    return trace


@pytest.mark.parametrize(
    "speculative,gpu,outcome",
    [
        (94.9, True, "finding"),  # 5.1 % more time per token: beyond the GPU's 5 % floor
        (95.1, True, "not checked"),  # 4.9 %
        (105.4, True, "ruled out"),  # saves 5.1 %: the same floor the other way round
        (105.2, True, "not checked"),  # 4.9 %
        (94.9, False, "not checked"),  # one run each on a shared CPU: 2x is its noise
        (49.9, False, "finding"),
        (50.1, False, "not checked"),
        (200.5, False, "ruled out"),
        (199.5, False, "not checked"),
    ],
)
def test_engine_traces_with_one_run_each_use_the_devices_noise_floor(speculative, gpu, outcome):
    from ncclprobe.diagnose import Evidence, diagnose
    from tests import diagnose_scenarios as S

    trace = S.as_gpu_run(S.healthy_trace()) if gpu else S.healthy_trace()
    result = diagnose(Evidence.from_trace(_single_runs(trace, 100.0, speculative), "t.json"))
    found = [f for f in result.findings if f.rule == "speculative-slower"]
    ruled = [r for r in result.ruled_out if r.rule == "speculative-slower"]
    missing = [n for n in result.not_checked if n.rule == "speculative-slower"]
    assert (bool(found), bool(ruled), bool(missing)) == (
        outcome == "finding",
        outcome == "ruled out",
        outcome == "not checked",
    )
    if found:
        assert (found[0].severity, found[0].confidence) == ("warning", "medium")
        assert found[0].evidence["noise_rule"]["basis"] == NOISE_FLOOR
    if missing:
        assert (
            "one measurement each" in missing[0].missing and "--repeats" in missing[0].next_command
        )


def test_run_engine_tuned_comparison_carries_the_verdict():
    from ncclprobe.evidence.run.trace_checks import compare_tuned

    def run(label, rates):
        return {
            "label": label,
            "mode": "baseline",
            "tokens_per_s": rates[len(rates) // 2],
            "repeats": {"n": len(rates), "tokens_per_s": rates},
            "phases": {},
        }

    rows = compare_tuned(
        [run("untuned", [100.0, 101.0, 102.0]), run("tuned", [120.0, 121.0, 122.0])]
    )
    assert rows[0]["noise_rule"]["verdict"] == FASTER and rows[0]["noise_rule"]["basis"] == REPEATS
    rows = compare_tuned([run("untuned", [100.0]), run("tuned", [103.0])], device="cuda")
    assert rows[0]["noise_rule"]["verdict"] == WITHIN_NOISE
    assert rows[0]["noise_rule"]["basis"] == NOISE_FLOOR


def test_interpolation_is_log_log_and_linear_where_a_time_is_zero():
    from ncclprobe.stats import Point, interpolate

    points = {1024: Point(1024, 10.0, 9.0, 11.0), 4096: Point(4096, 40.0, 36.0, 44.0)}
    median, p10, p90 = interpolate(points, 2048)
    assert (
        median == pytest.approx(20.0) and p10 == pytest.approx(18.0) and p90 == pytest.approx(22.0)
    )
    assert interpolate(points, 512) == (10.0, 9.0, 11.0) and interpolate(points, 8192) == (
        40.0,
        36.0,
        44.0,
    )
    zero = {1024: Point(1024, 0.0, 0.0, 0.0), 4096: Point(4096, 8.0, 8.0, 8.0)}
    assert interpolate(zero, 2048) == pytest.approx(
        (4.0, 4.0, 4.0)
    )  # halfway on the log axis, linear
    assert interpolate({}, 2048) is None
