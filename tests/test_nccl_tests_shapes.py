"""nccl-tests tables of every header shape its versions printed, from real published outputs.

Before v2.13 each test printed its own header (src/<test>.cu at v2.0.0-v2.11.0): `type redop`
(all_reduce, reduce_scatter, alltoall), `type redop root` (reduce), `type root` (broadcast, scatter,
gather), `type` alone (all_gather, sendrecv); a test without a reduction printed its redop cell
empty (alltoall before v2.17, all_gather and broadcast v2.13-v2.16). Facts read by eye from the files.
"""

from pathlib import Path

import pytest

from ncclprobe.evidence.nccl.nccl_tests import Columns, data_row, parse_nccl_tests
from ncclprobe.importing import ImportOptions, import_text

TESTS = Path(__file__).parent / "fixtures" / "nccl_tests"


def _run(name):
    return parse_nccl_tests((TESTS / name).read_text())


def test_old_broadcast_header_has_root_but_no_redop():
    run = _run("broadcast_2node_v100_pcie_old_format_root_no_redop_c0_nccl2.9.6_issue82.txt")
    (row,) = run.rows
    assert (run.format, run.collective, run.nranks, run.nccl_version) == (
        "old",
        "broadcast",
        2,
        "2.9.6",
    )
    assert (row.size_bytes, row.count, row.dtype, row.redop, row.root) == (8, 2, "float", "none", 0)
    assert (row.out_of_place.time_us, row.in_place.time_us) == (45.82, 38.17)
    assert row.out_of_place.max_error is None and row.out_of_place.wrong is None  # -c 0: N/A
    assert run.settings["NCCL_ALGO"] == "Ring" and run.settings["NCCL_PROTO"] == "Simple"


def test_old_alltoall_row_with_an_empty_redop_cell():
    run = _run("alltoall_8node_v100_old_format_empty_redop_cell_issue78.txt")
    assert [r.size_bytes for r in run.rows] == [
        268435456,
        536870912,
    ] and run.avg_busbw_gbps == 0.507636
    first = run.rows[0]
    assert (first.count, first.redop, first.root) == (1048576, "none", None)
    assert (
        first.out_of_place.time_us,
        first.out_of_place.algbw_gbps,
        first.out_of_place.busbw_gbps,
    ) == (520935, 0.52, 0.51)
    assert (first.out_of_place.max_error, first.in_place.max_error, first.in_place.time_us) == (
        0.0,
        1.0,
        519562,
    )


def test_old_sendrecv_header_has_neither_redop_nor_root():
    run = _run("sendrecv_2x_gtx1080_old_format_no_redop_no_root_issue104.txt")
    (row,) = run.rows
    assert (run.nranks, row.size_bytes, row.dtype, row.redop, row.root) == (
        2,
        37748736,
        "uint8",
        "none",
        None,
    )
    assert (row.out_of_place.time_us, row.out_of_place.busbw_gbps, row.in_place.max_error) == (
        6485.7,
        5.82,
        300.0,
    )
    assert run.collective is None  # all_gather printed the same header: nothing to infer from


def test_current_sendrecv_root_minus_one_and_unchecked_in_place():
    run = _run("sendrecv_2node_a40_root_minus1_inplace_wrong_na_issue214.txt")
    assert run.format == "current" and run.nranks == 2 and len(run.rows) == 5
    assert all(r.root == -1 and r.redop == "sum" for r in run.rows)
    assert all(r.out_of_place.wrong == 0 and r.in_place.wrong is None for r in run.rows)
    assert run.rows[-1].out_of_place.time_us == 30.74 and run.rows[-1].in_place.algbw_gbps == 0.13


def test_srun_task_labels_are_stripped():
    run = _run("allgather_4node_mi250x_rccl_srun_label_issue1490.txt")
    assert run.collective == "all_gather" and [r.size_bytes for r in run.rows] == [65536, 131072]
    assert run.rows[1].out_of_place.time_us == 210.0 and run.rows[1].redop == "none"


def test_v2_13_to_v2_16_empty_redop_before_the_root():
    """writeBenchmarkLinePreamble at v2.13.0 prints `%6s  %6i` of ("", -1) for all_gather/alltoall."""
    columns = Columns(redop=True, root=True, check="#wrong", cputime=False, per_iter=False)
    line = "     1048576        262144     float              -1    35.57   29.48   25.80      0    34.11   30.74   26.90      0"
    row = data_row(line.split(), columns)
    assert (row.redop, row.root, row.out_of_place.time_us, row.in_place.wrong) == (
        "none",
        -1,
        35.57,
        0,
    )
    assert (
        data_row(line.replace("   -1 ", "  abc ").split(), columns) is None
    )  # a root must be an integer


@pytest.mark.parametrize("name", ["alltoall_8node_v100_old_format_empty_redop_cell_issue78.txt"])
def test_old_format_table_shows_the_max_error_not_a_count(name):
    imported = import_text((TESTS / name).read_text(), ImportOptions(source=name))
    (block,) = imported.sections
    assert "ranks not shown" in block.title
    assert [r["ip_error"] for r in block.rows] == [1.0, 1.0] and "ip_wrong" not in block.rows[0]


def test_a_pasted_run_that_starts_at_its_table_header_is_a_run_of_its_own():
    """Users paste runs one after another, the second often trimmed to its table: before, its rows
    joined the first run's (an all_reduce of 27 sizes, and the old format's columns for all of them)."""
    from ncclprobe.evidence.nccl.nccl_tests_split import parse_runs

    text = (TESTS / "allreduce_4x_rtx5090_pcie_genoa.txt").read_text() + (
        TESTS / "alltoall_8node_v100_old_format_empty_redop_cell_issue78.txt"
    ).read_text()
    runs, notes = parse_runs(text)
    assert [(len(r.rows), r.format, r.collective) for r in runs] == [
        (25, "current", "all_reduce"),
        (2, "old", None),
    ]
    assert notes == []


def test_the_nccl_version_from_nccl_tests_own_version_line():
    """nccl-tests 2.18+ prints `nccl-library=22907` (ncclGetVersion) even where NCCL prints no banner."""
    from ncclprobe.evidence.nccl.nccl_tests_run import nccl_version_of_code
    from ncclprobe.evidence.nccl.nccl_tests_split import parse_runs

    runs, _ = parse_runs(
        (TESTS / "allgather_6runs_2ranks_1x_rtx5090_socket_nccltests2.18_eunomia.txt").read_text()
    )
    assert {(r.nccl_tests_version, r.nccl_version) for r in runs} == {("2.18.0", "2.29.7")}
    assert (nccl_version_of_code(21905), nccl_version_of_code(2803), nccl_version_of_code(7)) == (
        "2.19.5",
        "2.8.3",
        None,
    )


def test_json_of_every_format_version_reads_the_same_rows():
    """JSON_FILE_VERSION 1 (nccl-tests 2.17.3-2.19.1; `average_bus_bandwidith` up to 2.18) and 2
    (2.19.3-2.19.5) differ from 3 only in the keys src/util.cu wrote at those tags: the recorded
    2.19.6 file rewritten to each of them reads the same. Before, versions 1 and 2 were refused."""
    import json

    from ncclprobe.evidence.nccl.nccl_tests_json import parse_nccl_tests_json

    doc = json.loads((TESTS / "allreduce_1x_h200_1rank_nccltests2.19.6_eager_J.json").read_text())
    current = parse_nccl_tests_json(json.dumps(doc))
    v2 = dict(doc, version=2)
    v2["config"] = {k: v for k, v in doc["config"].items() if k != "per_iter_skip"}
    v1 = dict(v2, version=1)
    v1["config"] = {k: v for k, v in v2["config"].items() if k != "per_iter_timing"}
    v1["average_bus_bandwidith"] = {"bandwidith": v1.pop("average_bus_bandwidth")["bandwidth"]}
    for old in (v1, v2):
        run = parse_nccl_tests_json(json.dumps(old))
        assert [r.to_json() for r in run.rows] == [r.to_json() for r in current.rows]
        assert run.avg_busbw_gbps == current.avg_busbw_gbps is not None
