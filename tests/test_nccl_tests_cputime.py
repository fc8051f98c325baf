"""nccl-tests `-C 1` (report_cputime): the time columns are the host's issue time per call, the
bandwidths still the completion's (src/common.cu: cputimeSec before completeColl, getBw on
deltaSec; src/util.cu prints `cputime` in the header and `cpu_time` in -J). The reader keeps the
issue time as cpu_time_us and recovers the completion time from size / algbw."""

from pathlib import Path

import pytest

from ncclprobe.evidence.nccl.nccl_tests import parse_nccl_tests

TEXT = (
    Path(__file__).parent
    / "fixtures"
    / "nccl_tests"
    / "handwritten_allreduce_2ranks_cputime_C1.txt"
)


def test_cputime_rows_keep_the_issue_time_and_recover_completion():
    run = parse_nccl_tests(TEXT.read_text())
    assert (run.nranks, len(run.rows), run.avg_busbw_gbps) == (2, 2, 10.57)
    big = run.rows[1]
    assert big.out_of_place.cpu_time_us == 8.5 and big.in_place.cpu_time_us == 8.1
    assert big.out_of_place.time_us == pytest.approx(1048576 / (20.97 * 1e3))  # 50.0 us
    assert big.in_place.time_us == pytest.approx(1048576 / (21.10 * 1e3))
    assert big.out_of_place.busbw_gbps == 20.97


def test_a_time_column_is_the_completion_time_without_C():
    plain = parse_nccl_tests(TEXT.read_text().replace("cputime", "   time"))
    m = plain.rows[1].out_of_place
    assert (m.time_us, m.cpu_time_us) == (8.5, None)


def test_json_cpu_time_is_the_same_reading():
    """-J with -C 1 writes `cpu_time` instead of `time` (writeBenchmarkLineBody)."""
    m = _read_row({"cpu_time": 8.5, "alg_bw": 20.97, "bus_bw": 20.97, "nwrong": 0}, 1048576)
    assert m.cpu_time_us == 8.5 and m.time_us == pytest.approx(1048576 / (20.97 * 1e3))
    timed = _read_row({"time": 50.0, "alg_bw": 20.97, "bus_bw": 20.97, "nwrong": 0}, 1048576)
    assert (timed.time_us, timed.cpu_time_us) == (50.0, None)


def _read_row(measured: dict, size: int):
    """One result row of an nccl-tests -J document, read by the public reader."""
    import json

    from ncclprobe.evidence.nccl.nccl_tests_json import parse_nccl_tests_json

    row = {"size": size, "count": 1, "type": "float", "redop": "sum", "out_of_place": measured}
    doc = {"version": 3, "config": {}, "results": [row]}
    return parse_nccl_tests_json(json.dumps(doc)).rows[0].out_of_place
