"""nccl-tests output -> rows and result records, against the real outputs (facts read by eye)."""

from pathlib import Path

import pytest

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.nccl.nccl_tests import parse_nccl_tests
from ncclprobe.evidence.nccl.nccl_tests_records import to_records
from ncclprobe.records import read_results
from ncclprobe.records_writer import ResultWriter

FIXTURES = Path(__file__).parent / "fixtures"
TESTS = FIXTURES / "nccl_tests"
LOGS = FIXTURES / "nccl_logs"

# file -> (nranks, rows, avg busbw, (size, oop time, oop busbw, ip algbw) of one row, nccl version, settings)
FACTS = {
    "allreduce_2node_16x_h100_gcp_a3mega.txt": (
        16,
        31,
        70.742,
        (2147483648, 12646.0, 318.40, 169.88),
        None,
        {},
    ),
    "allreduce_2node_16x_h100_oci_roce_nccl2.21.5.txt": (
        16,
        5,
        458.452,
        (17179869184, 69338.0, 464.57, 247.89),
        None,
        {
            "NCCL_CUMEM_ENABLE": "0",
            "NCCL_IB_GID_INDEX": "3",
            "NCCL_SOCKET_IFNAME": "eth0",
            "NCCL_IB_HCA": "=mlx5_0,mlx5_1,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7,mlx5_8,mlx5_9,mlx5_10,mlx5_12,"
            "mlx5_13,mlx5_14,mlx5_15,mlx5_16,mlx5_17",
        },
    ),
    "allreduce_2node_1x_l40s_each_socket_nccl2.27.3.txt": (
        2,
        31,
        3.98762,
        (8589934592, 1059765.0, 8.11, 8.12),
        "2.27.3",
        {"NCCL_IB_DISABLE": "1", "NCCL_ALGO": "ring"},
    ),
    "allreduce_2node_2x_l40s_each_nccl2.27.3.txt": (
        4,
        31,
        4.74277,
        (1048576, 334.5, 4.70, 3.15),
        "2.27.3",
        {"NCCL_IB_DISABLE": "0"},
    ),
    "allreduce_2x_rtx2080ti_pcie_pix_no_p2p_autodl.txt": (
        2,
        28,
        2.05774,
        (1073741824, 268588.0, 4.00, 4.00),
        None,
        {},
    ),
    "allreduce_4x_rtx5090_pcie_genoa.txt": (
        4,
        25,
        9.09703,
        (134217728, 7384.4, 27.26, 18.19),
        None,
        {},
    ),
    "allreduce_8x_v100_sxm2_oci_bm_gpu3_8_single_size.txt": (
        8,
        1,
        135.455,
        (1073741824, 13867.0, 135.50, 77.38),
        None,
        {},
    ),
}


# covered by tests/test_nccl_tests_runs.py: several runs, interleaved processes, -J JSON
OTHER = {
    "allgather_6runs_2ranks_1x_rtx5090_socket_nccltests2.18_eunomia.txt",
    "interleaved_2proc_1rank_v100_old_format_nccltests107.txt",
    "interleaved_2proc_8gpu_h800_nccltests213.txt",
    "allreduce_1x_h200_1rank_nccltests2.19.6_eager_J.json",
}
# covered by tests/test_nccl_tests_shapes.py: every header shape nccl-tests has printed
OTHER |= {
    "broadcast_2node_v100_pcie_old_format_root_no_redop_c0_nccl2.9.6_issue82.txt",
    "alltoall_8node_v100_old_format_empty_redop_cell_issue78.txt",
    "sendrecv_2x_gtx1080_old_format_no_redop_no_root_issue104.txt",
    "sendrecv_2node_a40_root_minus1_inplace_wrong_na_issue214.txt",
    "allgather_4node_mi250x_rccl_srun_label_issue1490.txt",
}
# hand-written -C 1 output: tests/test_nccl_tests_cputime.py
OTHER.add("handwritten_allreduce_2ranks_cputime_C1.txt")
# text and -J of one H200 run each: test_nccl_tests_runs compares the two imports row by row
OTHER |= {
    f"allreduce_1x_h200_1rank_nccltests2.19.6_{kind}_same_run.{ext}"
    for kind in ("eager", "eager_I")
    for ext in ("txt", "json")
}


def test_every_fixture_is_covered():
    assert sorted(p.name for p in TESTS.iterdir()) == sorted(set(FACTS) | OTHER)


@pytest.mark.parametrize("name", sorted(FACTS))
def test_facts_of_each_real_output(name):
    nranks, nrows, avg, (size, time_us, busbw, ip_algbw), version, settings = FACTS[name]
    run = parse_nccl_tests((TESTS / name).read_text())
    assert (run.nranks, len(run.rows), run.avg_busbw_gbps, run.out_of_bounds) == (
        nranks,
        nrows,
        avg,
        0,
    )
    row = next(r for r in run.rows if r.size_bytes == size)
    assert (row.out_of_place.time_us, row.out_of_place.busbw_gbps, row.in_place.algbw_gbps) == (
        time_us,
        busbw,
        ip_algbw,
    )
    assert (
        row.out_of_place.wrong == 0
        and row.dtype == "float"
        and row.redop == "sum"
        and row.root == -1
    )
    assert run.collective == "all_reduce" and run.nccl_version == version
    assert {k: run.settings.get(k) for k in settings} == settings


def test_algbw_is_size_over_time_in_every_row():
    """nccl-tests' own definition (1 GB = 1e9 B, time in us); a wrong column mapping breaks it."""
    for name in FACTS:
        for row in parse_nccl_tests((TESTS / name).read_text()).rows:
            if row.out_of_place.algbw_gbps >= 1:
                expected = row.size_bytes / row.out_of_place.time_us / 1e3
                assert row.out_of_place.algbw_gbps == pytest.approx(expected, rel=0.01, abs=0.01)


def test_old_format_with_error_column_and_mpirun_tags():
    run = parse_nccl_tests(
        (LOGS / "nccl_2.8.3_2node_16x_a100_p4d_efa_mpirun_tagged_old_tests_format.log").read_text()
    )
    assert run.format == "old" and run.nranks == 16 and len(run.rows) == 28
    first = run.rows[0]
    assert (
        first.root is None
        and first.out_of_place.wrong is None
        and first.out_of_place.max_error == 2e-07
    )
    assert run.collective == "all_reduce" and run.collective_inferred  # 2(n-1)/n with n = 16
    assert run.avg_busbw_gbps == 7.80081 and run.nccl_version == "2.8.3"


def test_sendrecv_with_two_ranks_is_not_guessed_and_na_checks_stay_none():
    run = parse_nccl_tests(
        (LOGS / "nccl_2.22.3_2x_a100_sxm64_nvlink_sendrecv_leonardo.log").read_text()
    )
    assert run.collective is None  # busbw/algbw = 1 fits sendrecv, broadcast and 2-rank all_reduce
    assert run.rows[0].in_place.wrong is None and run.rows[0].out_of_place.wrong == 0
    assert run.settings == {"NCCL_P2P_LEVEL": "NVL", "NCCL_BUFFSIZE": "4194304"}


def test_missing_footer_is_tolerated():
    text = (TESTS / "allreduce_4x_rtx5090_pcie_genoa.txt").read_text()
    cut = text[: text.index("# Out of bounds")]
    run = parse_nccl_tests(cut)
    assert (
        run.avg_busbw_gbps is None and len(run.rows) == 25 and any("footer" in n for n in run.notes)
    )


def test_an_overflowing_cell_drops_its_row_instead_of_crashing():
    text = (TESTS / "allreduce_4x_rtx5090_pcie_genoa.txt").read_text()
    row = next(line for line in text.splitlines() if line.split()[:1] == ["8"])
    mangled = text.replace(row, row.rsplit(" ", 1)[0] + " 1e999")  # the in-place #wrong column
    run = parse_nccl_tests(mangled)
    assert len(run.rows) == 24 and run.rows[0].size_bytes == 16


@pytest.mark.parametrize("value", ["1.2.3", "nan", "e", "9.09703 GB/s"])
def test_a_mangled_average_is_unknown_not_a_crash(value):
    text = (TESTS / "allreduce_4x_rtx5090_pcie_genoa.txt").read_text()
    run = parse_nccl_tests(
        text.replace("Avg bus bandwidth    : 9.09703", f"Avg bus bandwidth    : {value}")
    )
    assert run.avg_busbw_gbps is None and len(run.rows) == 25
    assert parse_nccl_tests(text).avg_busbw_gbps == 9.09703  # the real footer still reads
    with_min_bw = text.replace(
        "Avg bus bandwidth    : 9.09703", "Avg bus bandwidth    : 9.09703 FAILED"
    )
    assert parse_nccl_tests(with_min_bw).avg_busbw_gbps == 9.09703  # NCCL_TESTS_MIN_BW's verdict


@pytest.mark.parametrize("text", ["", "hello", "1 2 3\n4 5 6\n", "size count type\n"])
def test_no_table_is_a_usage_problem(text):
    with pytest.raises(UsageProblem, match="no nccl-tests line"):
        parse_nccl_tests(text)


def test_a_failed_run_is_read_as_a_failed_run_not_refused():
    """Issue 36 §3: nccl-tests output that stopped before its table is nccl-tests output that
    failed; its failure is named (the test's reason and its meaning, NCCL's WARN lines)."""
    run = parse_nccl_tests((LOGS / "nccl_2.25.1_2x_rtx5090_pcie_shm_genoa.log").read_text())
    assert run.rows == [] and run.failed
    [failure] = run.failures
    assert failure["kind"] == "test-failure" and "ncclUnhandledCudaError" in failure["message"]
    assert "Cuda failure 1 'invalid argument'" in run.warn_lines


HEADER_ONLY = (
    "# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 "
    "agg iters: 1 validation: 1 graph: 0\n"
    "#       size         count      type   redop    root     time   algbw"
    "   busbw #wrong     time   algbw   busbw #wrong\n"
)


@pytest.mark.parametrize("text", [HEADER_ONLY, HEADER_ONLY.split("\n", 1)[1]])
def test_a_header_without_rows_and_without_a_failure_measured_nothing(text):
    """nccl-tests output that ends before its first row with no failure line (a hang, a paste cut
    there: NVIDIA/nccl#257) is read: it measured nothing, and no line says why (not "it failed")."""
    run = parse_nccl_tests(text)
    assert run.rows == [] and not run.failures and not run.warn_lines
    assert run.notes[0] == (
        "measured nothing: the run stopped before its first result row and no line says why "
        "(it hung, was stopped, or the output was cut there)"
    )


def test_records_round_trip_through_the_results_reader(tmp_path):
    run = parse_nccl_tests(
        (TESTS / "allreduce_2node_1x_l40s_each_socket_nccl2.27.3.txt").read_text()
    )
    header, config, *results = to_records(run, source_file="x.txt", argv=["ncclprobe", "import"])
    assert (
        header["kind"] == "nccl-tests"
        and header["nranks"] == 2
        and header["versions"]["nccl"] == "2.27.3"
    )
    assert config["config_id"] == (
        "NCCL_ALGO=ring,NCCL_IB_DISABLE=1,NCCL_IB_HCA=mlx5_1,mlx5_3,"
        "NCCL_NET_GDR_READ=1,NCCL_SOCKET_IFNAME=net1"
    )
    assert len(results) == 2 * 31
    big = [r for r in results if r["size_bytes"] == 8589934592]
    assert [r["in_place"] for r in big] == [False, True]
    assert big[0]["time_us"] == 1059765.0 and big[1]["busbw_gbps"] == 8.12
    assert all(
        r["source"] == "nccl-tests" and r["dtype"] == "float32" and r["mode"] == "eager"
        for r in results
    )
    path = tmp_path / "imported.jsonl"
    with ResultWriter(
        path, {k: v for k, v in header.items() if k not in ("record", "schema_version")}
    ) as writer:
        for record in [config, *results]:
            writer.write(record)
    back = read_results(path)
    assert (
        back.header["kind"] == "nccl-tests" and len(back.results) == 62 and len(back.configs) == 1
    )


def test_wrong_values_become_wrong_records():
    text = (
        (TESTS / "allreduce_4x_rtx5090_pcie_genoa.txt")
        .read_text()
        .replace("27.26      0   7380.5", "27.26      3   7380.5")
    )
    run = parse_nccl_tests(text)
    records = to_records(run, source_file="x")
    wrong = [r for r in records if r.get("record") == "result" and r["status"] == "wrong"]
    assert len(wrong) == 1 and wrong[0]["wrong"] == 3 and wrong[0]["size_bytes"] == 134217728
