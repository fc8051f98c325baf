"""nccl-tests output that measured nothing, or only part of a run: read, and said exactly so.

The texts are written from the formats' sources: nccl-tests' common.cu of 2017-2019 (`nThread`
without `#`, `# NCCL Tests compiled with NCCL 1.0`, `#   Rank  0 on host device ...` without
Pid, the `bytes N type op time algbw busbw res` table in ms, the footer without `#`), its util.cu
(µs with at most two decimals, `#wrong`), rccl-tests' `rccl-tests: Version ...` banner, Open
MPI's and Slurm's own messages, and the shape of real pastes (NVIDIA/nccl-tests#5, #119,
NVIDIA/nccl#257, #473).
"""

from __future__ import annotations

import pytest

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.nccl.nccl_tests import parse_nccl_tests
from ncclprobe.evidence.nccl.nccl_tests_layout import layout_of_row
from ncclprobe.importing import ImportOptions, import_text
from ncclprobe.verdict import Verdict

CURRENT_ROWS = """\
   127926280      31981570     float     sum      -1   2560.7   49.96   95.75      0   2556.2   50.05   95.92      0
   133169160      33292290     float     sum      -1   2666.0   49.95   95.74      0   2660.4   50.06   95.94      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 84.8558
"""
# NCCL 2.4-era all_reduce (before v2.13): no root column, the max error `%5.0le`, µs
OLD_ROWS = """\
    33554432       8388608     float     sum    2875.5   11.67   17.51  0e+00    2880.1   11.65   17.47  0e+00
    67108864      16777216     float     sum    5701.2   11.77   17.66  0e+00    5706.0   11.76   17.64  0e+00
"""
# nccl-tests 1.x: `%7.3f` ms
MS_ROWS = """\
    33554432       8388608     float     sum    2.875  11.67  17.51    0e+00    2.880  11.65  17.47    0e+00
"""
NCCL_1X = """\
nThread 1 nGpus 2 minBytes 8 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
# NCCL Tests compiled with NCCL 1.0
# Using devices
#   Rank  0 on     node03 device  0 [0x00] Tesla P100-PCIE-16GB
#   Rank  1 on     node03 device  1 [0x00] Tesla P100-PCIE-16GB

#                                                 out-of-place                    in-place
#      bytes             N    type      op     time  algbw  busbw      res     time  algbw  busbw      res
           8             2   float     sum    0.031   0.00   0.00    0e+00    0.030   0.00   0.00    0e+00
     1048576        262144   float     sum    0.094  11.16  11.16    0e+00    0.093  11.28  11.28    0e+00
 Out of bounds values : 0 OK
 Avg bus bandwidth    : 5.6
"""
OPEN_MPI = """\
$ mpirun -np 16 -H node1:8,node2:8 ./build/all_reduce_perf -b 8 -e 8G -f 2 -g 1
./build/all_reduce_perf: error while loading shared libraries: libnccl.so.2: cannot open shared object file: No such file or directory
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
"""
SLURM = """\
srun: error: gpu-node-03: task 5: Segmentation fault (core dumped)
srun: Job step aborted: Waiting up to 32 seconds for job step to finish.
"""


def test_rows_without_their_header_are_read_in_the_layout_they_fit():
    run = parse_nccl_tests(CURRENT_ROWS)
    assert [r.out_of_place.busbw_gbps for r in run.rows] == [95.75, 95.74]
    assert run.format == "current" and run.header == ("redop", "root")
    assert run.rows[0].out_of_place.wrong == 0 and run.avg_busbw_gbps == 84.8558
    assert run.notes[0].startswith(
        "no table header in the file: its rows read as `size count type redop root time algbw "
        "busbw #wrong`"
    )
    old = parse_nccl_tests(OLD_ROWS)
    assert old.format == "old" and old.header == ("redop",)
    assert old.rows[0].out_of_place.time_us == 2875.5 and old.rows[0].out_of_place.max_error == 0
    ms = parse_nccl_tests(MS_ROWS)  # three decimals: nccl-tests 1.x, milliseconds
    assert ms.rows[0].out_of_place.time_us == 2875.0 and "time(ms, nccl-tests 1.x)" in ms.notes[0]


@pytest.mark.parametrize(
    "row, fits",
    [
        ("8 2 float sum -1 27.97 0.00 0.00 0 25.35 0.00 0.00 0", True),
        ("8 2 float sum 27.97 0.00 0.00 0e+00 25.35 0.00 0.00 0e+00", True),
        ("8 2 float 27.97 0.00 0.00 0e+00 25.35 0.00 0.00 0e+00", True),  # all_gather, before 2.13
        ("8 2 float sum -1 27.97 0.00 0.00 0 25.35 0.00 0.00", False),  # one cell short
        ("8 2 float sum -1 27.97 0.00 0.00 0 25.35 0.00 0.00 0 7", False),  # one cell more
        ("8 2 floaty sum -1 27.97 0.00 0.00 0 25.35 0.00 0.00 0", False),  # no nccl-tests type
        ("8 2 float sum -1 27.97 0.00 0.00 0 25.35 0.00 0.00 0e+00", False),  # checks of two kinds
    ],
)
def test_a_row_fits_a_layout_only_exactly(row, fits):
    assert (layout_of_row(row.split()) is not None) is fits


def test_wrong_without_a_root_column_is_no_layout():
    """v2.13 brought `#wrong` and the root column together: integer checks without a root are not
    a table nccl-tests printed, and a text of only such lines is refused."""
    row = "8 2 float sum 27.97 0.00 0.00 0 25.35 0.00 0.00 0\n"
    assert layout_of_row(row.split()).check == "#wrong"
    with pytest.raises(UsageProblem, match="no nccl-tests line"):
        parse_nccl_tests(row)


def test_the_oldest_format_reads_its_rows_in_ms_its_footer_and_the_version_it_was_built_with():
    run = parse_nccl_tests(NCCL_1X)
    assert [r.out_of_place.time_us for r in run.rows] == [31.0, 94.0]
    assert run.format == "old" and run.nranks == 2 and run.devices[0]["pid"] is None
    assert run.avg_busbw_gbps == 5.6 and run.out_of_bounds == 0
    assert run.nccl_compiled_with == "1.0" and run.nccl_version is None
    assert (
        "nccl-tests compiled with NCCL 1.0 (the NCCL that ran printed no version line)" in run.notes
    )


def test_a_failed_run_says_it_measured_nothing_and_names_its_failure():
    text = (
        NCCL_1X.split("           8 ")[0] + "NCCL failure all_reduce.cu:95 'unhandled cuda error'\n"
    )
    run = parse_nccl_tests(text)
    assert run.rows == [] and run.failures[0]["kind"] == "test-failure"
    assert run.notes[0] == (
        "measured nothing: the run failed before its first result row (the failure lines say where)"
    )
    report = import_text(text, ImportOptions("f"))
    assert report.verdict() is Verdict.FINDINGS
    assert {f.rule for f in report.findings} == {"nccl-tests-failed", "nccl-tests-nothing-measured"}
    healthy = import_text(NCCL_1X, ImportOptions("f"))  # the twin with rows: nothing of the kind
    assert healthy.verdict() is Verdict.FINE and healthy.findings == []


def test_rccl_tests_banner_is_read_without_its_hash():
    text = (
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0\nrccl-tests: Version develop:83d38d9\n"
        "RCCL version 2.18.3+hip6.0 develop:6ecf771+\n"
        "node1: Test HIP failure common.cu:1020 'invalid device ordinal'\n"
    )
    run = parse_nccl_tests(text)
    assert run.nccl_tests_version == "rccl-tests develop:83d38d9" and run.nccl_version == "2.18.3"
    assert run.rows == [] and "invalid device ordinal" in run.failures[0]["message"]


@pytest.mark.parametrize("text, named", [(OPEN_MPI, "libnccl.so.2"), (SLURM, "Segmentation")])
def test_a_launcher_failure_alone_is_read_as_a_launch_that_measured_nothing(text, named):
    run = parse_nccl_tests(text)
    [failure] = run.failures
    assert failure["kind"] == "launch-failure" and named in failure["message"]
    assert run.notes[0].startswith("measured nothing: no nccl-tests line in the file")
    assert not run.not_explained  # the launcher's lines are explained, not repeated
    # the healthy twin: a launcher's healthy lines alone are no nccl-tests output: refused
    with pytest.raises(UsageProblem, match="no launcher failure found"):
        parse_nccl_tests(
            "srun: job 8812 queued and waiting for resources\n"
            "srun: job 8812 has been allocated resources\n"
        )


def test_a_table_cut_inside_a_row_says_where_it_ends():
    head = NCCL_1X.split(" Out of bounds")[0]
    cut = head + "     2097152        524288   float     sum    0.17"
    run = parse_nccl_tests(cut)
    assert len(run.rows) == 2  # the cut row is not read
    assert (
        "no footer: the output ends after the 1M row, before `# Avg bus bandwidth` (the run "
        "stopped there, or the paste is cut)"
    ) in run.notes
    assert "the last line is a result row cut short, not read: `2097152" in run.notes[-1]
    assert not any("cut short" in n for n in parse_nccl_tests(head).notes)  # whole rows: no note


@pytest.mark.parametrize(
    "line, failure",
    [
        ("  Exit code:    127", True),
        ("  Exit code:    0", False),
        ("=   EXIT CODE: 139", True),
        ("=   EXIT CODE: 0", False),
        ("Application 1234 exit codes: 139", True),
        ("Application 1234 exit codes: 0", False),
        ("bash: ./build/all_reduce_perf: No such file or directory", True),
        ("bash: ./train.sh: No such file or directory", False),  # not an nccl-tests binary
        ("./build/sendrecv_perf_mpi: command not found", True),
        ("srun: error: node1: task 0: Exited with exit code 1", True),
        ("srun: job 8812 queued and waiting for resources", False),
        (
            "mpirun noticed that process rank 3 with PID 0 on node gpu7 exited on signal 9 (Killed).",
            True,
        ),
    ],
)
def test_launcher_lines_are_failures_only_where_they_say_one(line, failure):
    from ncclprobe.evidence.launcher import launcher_failures

    assert bool(launcher_failures([line])) is failure


def test_a_header_that_lost_its_hash_is_still_the_header():
    """A paste whose `#` fell off the header and footer (NVIDIA/nccl-tests#37's shape, 2.4/2.5): the
    header's `error` column is no failure line, the binary at the line's start names the test."""
    text = (
        "all_gather_perf -g 8 -b 4294967296 -e 4294967296 -n 100\n"
        "       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error\n"
        "  4294967296     134217728   float    29122  129.05  129.05  1e+00    29169  128.84  128.84  1e+00\n"
        " Out of bounds values : 2 FAILED\n"
        " Avg bus bandwidth    : 128.942\n"
    )
    run = parse_nccl_tests(text)
    assert run.collective == "all_gather" and run.format == "old" and run.out_of_bounds == 2
    assert run.rows[0].out_of_place.max_error == 1.0 and not run.not_explained
    assert not any(n.startswith("no table header") for n in run.notes)
