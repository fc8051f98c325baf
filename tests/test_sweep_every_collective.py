"""Every collective through real 2-rank gloo worker pools: exact results (and a planted error each
check catches), nccl-tests' bandwidth formulas per collective, per-iteration statistics, host issue
time, aggregated groups, pass/fail thresholds, and the export read back by import.

One pool runs all seven collectives for two configurations (the second perturbs one rank's input
through the test hook), so the whole file costs one pool start plus a small -m pool."""

import pytest

from ncclprobe.evidence.nccl.nccl_tests_split import parse_runs
from ncclprobe.export import nccl_tests_text
from ncclprobe.probes.collectives import COLLECTIVES
from ncclprobe.probes.sweep_worker import REFUSE_HOOK, WRONG_HOOK
from ncclprobe.sweep import session, thresholds
from ncclprobe.sweep.plan import SweepSpec

SIZES = (64, 4096)
PERTURBED = "NCCL_PROTO=LL"


def _run(path, **kw):
    kw = {"iters": 3, **kw}
    spec = SweepSpec(sizes=SIZES, trials=2, warmup=1, nranks=2, backend="gloo", **kw)
    return session.run_job(session.new_job(spec, {}, str(path), ["ncclprobe", "sweep", "(test)"]))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv(WRONG_HOOK, PERTURBED)
    try:
        yield _run(
            tmp_path_factory.mktemp("every") / "s.jsonl",
            grid={"NCCL_PROTO": ("default", "LL")},
            collectives=tuple(COLLECTIVES),
            ops=("sum", "max"),
            iters=2,
        )
    finally:
        mp.undo()


def _ok(sweep):
    return [r for r in sweep.results if r.config_id == "default"]


def test_every_collective_runs_on_gloo_in_each_placement_it_has(sweep):
    measured = {(r.collective, r.op, r.in_place) for r in _ok(sweep)}
    for name, coll in COLLECTIVES.items():
        for op in ("sum", "max") if coll.reduces else ("none",):
            assert {p for c, o, p in measured if (c, o) == (name, op)} == set(coll.placements), (
                name,
                op,
            )
    assert len(_ok(sweep)) == (3 * 2 * 2 + 2 * 2 + 2 * 1) * len(SIZES)


def test_results_are_exact_and_the_check_catches_a_planted_error_in_each_collective(sweep):
    assert all(r.wrong == 0 and r.status == "ok" and r.checked for r in _ok(sweep))
    planted = [r for r in sweep.results if r.config_id == PERTURBED]
    caught = {r.collective for r in planted if r.wrong > 0 and r.status == "wrong"}
    assert caught == set(COLLECTIVES)
    assert {c["config_id"]: c["status"] for c in sweep.configs}[PERTURBED] == "wrong"


@pytest.mark.parametrize("name", list(COLLECTIVES))
def test_bandwidths_follow_each_collectives_formula(sweep, name):
    factor = COLLECTIVES[name].busbw_factor(2)
    for r in (r for r in _ok(sweep) if r.collective == name):
        assert r.algbw_gbps == pytest.approx(r.size_bytes / (r.time_us * 1e3))
        assert r.busbw_gbps == pytest.approx(r.algbw_gbps * factor)


def test_per_iteration_statistics_and_issue_time(sweep):
    for r in _ok(sweep):
        it = r.iter
        assert it.samples == 2 * 2 and it.clock == "perf_counter per iteration"
        assert 0 < it.min_us <= it.p50_us <= it.p95_us <= it.p99_us <= it.max_us
        assert it.min_us <= it.mean_us <= it.max_us and it.cv_pct >= 0
        assert r.cpu_issue_us > 0 and r.time_us_p10 <= r.time_us <= r.time_us_p90


def test_thresholds_name_what_falls_short(sweep):
    assert thresholds.check(sweep.results, thresholds.parse("1e-9", "1e9")) == []
    short = thresholds.check(sweep.results, thresholds.parse("1e9", None))
    assert len(short) == sum(1 for r in sweep.results if r.size_bytes == 4096 and r.status == "ok")
    assert all("busbw >= 1e+09 GB/s at the largest size missed" in line for line in short)
    late = thresholds.check(sweep.results, thresholds.parse(None, "0.001@64"))
    assert {line.split(" missed: ")[1].split()[0] for line in late} == set(COLLECTIVES)
    assert (
        "not measured at 1K" in thresholds.check(sweep.results, thresholds.parse("1@1K", None))[0]
    )


def test_export_reads_back_through_import(sweep):
    text = nccl_tests_text([sweep]).text
    runs, _ = parse_runs(text)
    groups = {(r.collective, r.config_id, r.op) for r in sweep.results}
    assert len(runs) == len(groups)
    by_key = {(r.collective, r.config_id, r.op, r.size_bytes, r.in_place): r for r in sweep.results}
    for run in runs:
        meta = run.exported
        assert run.collective == meta["collective"] and run.nranks == 2
        assert run.settings == meta["settings"]
        for row in run.rows:
            for in_place, m in row.measurements():
                original = by_key.get(
                    (meta["collective"], meta["config_id"], meta["op"], row.size_bytes, in_place)
                )
                if original is None:
                    assert m is None  # alltoall, sendrecv: out of place only
                    continue
                assert m.time_us == pytest.approx(original.time_us, rel=0.01, abs=0.01)
                assert m.wrong == original.wrong


def test_aggregated_groups_unchecked_runs_and_a_refused_measurement(tmp_path, monkeypatch):
    monkeypatch.setenv(REFUSE_HOOK, "broadcast")
    done = _run(
        tmp_path / "agg.jsonl",
        grid={},
        collectives=("all_reduce", "broadcast"),
        agg=3,
        check=False,
        in_place=(True,),
    )
    ok = [r for r in done.results if r.collective == "all_reduce"]
    assert ok and {r.agg for r in ok} == {3} and all(r.wrong is None and not r.checked for r in ok)
    assert all(r.status == "ok" and r.time_us > 0 for r in ok)
    refused = [r for r in done.results if r.collective == "broadcast"]
    assert refused and all(r.status == "error" and "planted refusal" in r.reason for r in refused)
    assert session.verdict(done).exit_code == 1
    assert any("gloo has no grouped launch" in note for note in done.header["notes"])
    assert any("--check 0" in note for note in done.header["notes"])
