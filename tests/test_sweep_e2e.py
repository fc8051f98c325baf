"""End-to-end 2-rank gloo sweeps through real worker pools: exact sums, schema, formulas, the
environment each pool saw, and the faults a sweep must survive (hang, crash, wrong results)."""

import json

import pytest

from ncclprobe.probes.sweep_worker import CRASH_HOOK, HANG_HOOK, WRONG_HOOK
from ncclprobe.records import RESULT_STATUSES, SCHEMA_VERSION
from ncclprobe.sweep import session
from ncclprobe.sweep.plan import SweepSpec
from ncclprobe.sweep.table import annotate, summary_note

SIZES = (8, 4096, 65536)


def _run(tmp_path, grid, name="r.jsonl", **kw):
    spec = SweepSpec(
        grid=grid, sizes=SIZES, iters=2, trials=2, warmup=1, nranks=2, backend="gloo", **kw
    )
    job = session.new_job(spec, {}, str(tmp_path / name), ["ncclprobe", "sweep", "(test)"])
    return session.run_job(job), tmp_path / name


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """PROTO x P2P_LEVEL: two pools; NCCL_PROTO=LL gets a perturbed input on rank 1 (test hook)."""
    mp = pytest.MonkeyPatch()
    mp.setenv(WRONG_HOOK, "NCCL_P2P_LEVEL=SYS,NCCL_PROTO=LL")
    mp.setenv("NCCL_PROTO", "Simple")  # an inherited value must not leak into `default`
    try:
        yield _run(
            tmp_path_factory.mktemp("sweep"),
            {"NCCL_PROTO": ("default", "LL"), "NCCL_P2P_LEVEL": ("default", "SYS")},
        )
    finally:
        mp.undo()


def test_header_and_every_line_follow_the_schema(sweep):
    results, path = sweep
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    head = lines[0]
    assert (
        head["record"] == "header"
        and head["schema_version"] == SCHEMA_VERSION
        and head["kind"] == "sweep"
    )
    assert head["backend"] == "gloo" and head["nranks"] == 2 and head["topology"] is None
    for key in ("argv", "versions", "hostname", "env", "gpus", "spec"):
        assert key in head
    assert any("do not affect gloo" in note for note in head["notes"])
    assert [r["record"] for r in lines[1:]].count("summary") == 1
    assert {r.status for r in results.results} <= set(RESULT_STATUSES)
    assert len(results.results) == 4 * len(SIZES) * 2  # configs x sizes x (in, out of place)


def test_every_result_line_is_its_typed_record_written_back(sweep):
    """The sweep writes `ResultRecord`s: each line read back and written again is the same bytes."""
    from ncclprobe.safe_output import dumps_json

    results, path = sweep
    lines = [line for line in path.read_text().splitlines() if '"record": "result"' in line]
    assert len(lines) == len(results.results)
    for line, record in zip(lines, results.results, strict=True):
        assert dumps_json(record.to_record(), sort_keys=False, default=str) == line


def test_a_gloo_sweep_records_no_cost_split(sweep):
    """The eager cost split (tests/test_sweep_cost_split.py) is on by default, and gloo has no NCCL
    path to time: nothing is measured, so no record carries one."""
    results, path = sweep
    header = json.loads(path.read_text().splitlines()[0])
    assert header["spec"]["cost_split"] is True and SweepSpec(grid={}, sizes=(8,)).cost_split
    assert results.results and all(r.cost_split is None for r in results.results)


def test_sums_are_exact_except_where_the_input_was_perturbed(sweep):
    results, _ = sweep
    for r in results.results:
        if r.config_id == "NCCL_P2P_LEVEL=SYS,NCCL_PROTO=LL":
            assert r.wrong >= 1 and r.status == "wrong"
        else:
            assert r.wrong == 0 and r.status == "ok", r


def test_wrong_results_are_flagged_never_best_and_exit_1(sweep):
    results, _ = sweep
    config = {c["config_id"]: c for c in results.configs}["NCCL_P2P_LEVEL=SYS,NCCL_PROTO=LL"]
    assert config["status"] == "wrong" and "wrong elements" in config["reason"]
    assert not any(r.best for r in annotate(results.results) if r.record.status == "wrong")
    assert session.verdict(results).exit_code == 1


def test_busbw_and_algbw_follow_nccl_tests_formulas(sweep):
    results, _ = sweep
    for r in results.results:
        assert r.algbw_gbps == pytest.approx(r.count * 4 / (r.time_us * 1e3))
        assert r.busbw_gbps == pytest.approx(r.algbw_gbps * 2 * (2 - 1) / 2)
        assert r.time_us_p10 <= r.time_us <= r.time_us_p90


def test_pools_split_on_the_process_scoped_variable_and_workers_saw_exactly_their_config(sweep):
    results, _ = sweep
    pools = {c["config_id"]: c["pool"] for c in results.configs}
    assert pools["default"] == pools["NCCL_PROTO=LL"]
    assert (
        pools["NCCL_P2P_LEVEL=SYS"] == pools["NCCL_P2P_LEVEL=SYS,NCCL_PROTO=LL"] != pools["default"]
    )
    for config in results.configs:
        proof = config["proof"]
        assert proof["env_matches"], proof["env_mismatches"]
        for rank in ("0", "1"):
            seen = proof["seen_env"][rank]
            assert {k: seen.get(k) for k in ("NCCL_PROTO", "NCCL_P2P_LEVEL")} == {
                k: config["settings"].get(k) for k in ("NCCL_PROTO", "NCCL_P2P_LEVEL")
            }
        assert all("do not affect" in v for v in proof["verdicts"].values())


def test_gloo_tables_rank_nothing_and_say_why(sweep):
    from ncclprobe.sweep import table

    results, _ = sweep
    doc = table.document(results)
    assert len(doc["results"]) == len(results.results)
    assert not any(r["best"] or r["speedup_vs_default"] is not None for r in doc["results"])
    rows = table.rows_by_size(
        table.ranked_rows(results), ranked=table.can_rank(doc["backend"], doc["share_gpu"])
    )
    assert all(
        "best" not in row and "speedup" not in row for block in rows.values() for row in block
    )
    assert any("differences between configurations are noise" in note for note in doc["notes"])
    ranked = table.annotate(results.results)  # what NCCL would get: the same rows, ranked
    assert any(r.best for r in ranked)


def test_summary_reports_pool_reuse(sweep):
    results, _ = sweep
    summary = results.summaries[-1]
    assert (
        summary["configs_run"] == 4 and summary["pools_run"] == 2 and summary["pools_avoided"] == 2
    )
    assert 0 < summary["pool_start_s_mean"] < summary["pool_overhead_s_mean"]
    # against what was measured around it: an avoided pool saves at least a Python + torch start (over
    # 0.1 s anywhere) and at most what a whole pool took here, start, configurations and exit
    per_avoided = summary["pool_reuse_saved_s_est"] / summary["pools_avoided"]
    assert 0.1 < per_avoided < summary["wall_s"] / summary["pools_run"]
    assert summary["pool_reuse_saved_basis"].startswith("estimate")
    assert "an estimated" in summary_note(summary) and "not measured" in summary_note(summary)


def test_a_hang_and_a_crash_are_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv(HANG_HOOK, "NCCL_PROTO=LL")
    monkeypatch.setenv(CRASH_HOOK, "NCCL_PROTO=LL128")
    # 3 s of silence is a hang; a slow start on a busy machine is not (the launcher counts its CPU time)
    results, _ = _run(tmp_path, {"NCCL_PROTO": ("default", "LL", "LL128", "Simple")}, timeout_s=3.0)
    by_id = {c["config_id"]: c for c in results.configs}
    assert (
        by_id["NCCL_PROTO=LL"]["status"] == "hang"
        and "no progress" in by_id["NCCL_PROTO=LL"]["reason"]
    )
    crash = by_id["NCCL_PROTO=LL128"]
    assert (
        crash["status"] == "error"
        and "exit code 3" in crash["reason"]
        and "planted crash" in crash["reason"]
    )
    assert by_id["default"]["status"] == by_id["NCCL_PROTO=Simple"]["status"] == "ok"
    assert {r.config_id for r in results.results} == {"default", "NCCL_PROTO=Simple"}
    assert (
        results.summaries[-1]["pools_run"] == 3
    )  # a fresh pool after the hang and after the crash
    assert session.verdict(results).exit_code == 1
