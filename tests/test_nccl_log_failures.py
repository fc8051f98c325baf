"""RCCL's and vLLM's version lines, and NCCL failure lines explained (issue 31), on real public logs
(tests/fixtures/nccl_logs, each with its source): RCCL's banners are versions and the tool says RCCL;
a full /dev/shm is one finding with the segment size and the fixes, set apart from the harmless
`Failed to open libibverbs.so` lines; the last `Test NCCL failure ... 'unhandled cuda error'` line of
a test run is shown."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.evidence.nccl.nccl_failures import explain, verdict
from ncclprobe.evidence.nccl.nccl_log import parse_nccl_log, parse_nccl_log_file
from ncclprobe.verdict import Verdict

LOGS = Path(__file__).parent / "fixtures" / "nccl_logs"

# file -> (version, full version, library, version source, explained kinds, unexplained WARN lines,
# verdict)
FACTS = {
    "rccl_2.21.5_4x_mi50_socket_rccltests163.log": (
        "2.21.5",
        "2.21.5-HEAD:9a0e6a1",
        "RCCL",
        "banner",
        [],
        0,
        Verdict.FINE,
    ),
    "rccl_2.20.5_hip6.2_4x_mi300x_vf_quoted_rccl1728.log": (
        "2.20.5",
        "2.20.5+hip6.2",
        "RCCL",
        "banner",
        [],
        0,
        Verdict.FINE,
    ),
    "vllm_is_using_nccl_2.20.5_lines_run_together_vllm12292.log": (
        "2.20.5",
        "2.20.5",
        None,
        "vLLM's log line",
        [],
        0,
        Verdict.FINE,
    ),
    "nccl_2.7.3_2ranks_docker_shm_full_libibverbs_pytorch40622.log": (
        "2.7.3",
        "2.7.3+cuda10.2",
        "NCCL",
        "banner",
        ["shm-full", "no-ibverbs"],
        0,
        Verdict.FINDINGS,
    ),
    "nccl_version_not_logged_4x_t4_ci_pod_shm_full_ciinfra490.log": (
        None,
        None,
        None,
        None,
        ["shm-full"],
        0,
        Verdict.FINDINGS,
    ),
    "nccl_tests_unhandled_cuda_error_256ranks_mpirun_nccltests322.log": (
        None,
        None,
        None,
        None,
        ["test-failure"],
        0,
        Verdict.FINDINGS,
    ),
}


@pytest.mark.parametrize("name", sorted(FACTS))
def test_versions_and_failures_of_each_real_log(name):
    version, full, library, source, kinds, unexplained, expected = FACTS[name]
    log = parse_nccl_log_file(LOGS / name)
    assert (log.nccl_version, log.nccl_version_full, log.library) == (version, full, library)
    assert log.version_source == source
    explained, rest = explain(log)
    assert [e.kind for e in explained] == kinds
    assert len(rest) == unexplained
    assert verdict(log) is expected


def test_shm_full_says_the_segment_size_and_both_fixes():
    log = parse_nccl_log_file(LOGS / "nccl_version_not_logged_4x_t4_ci_pod_shm_full_ciinfra490.log")
    (shm,) = explain(log)[0]
    assert "9637888 bytes (9.2 MiB)" in shm.message and shm.lines == 2
    assert "--shm-size" in shm.fix and "NCCL_SHM_DISABLE=1" in shm.fix


def test_a_shm_failure_of_another_cause_is_shown_as_it_is():
    """Its healthy twin: a segment error without "No space left on device" is not called a full /dev/shm."""
    text = (
        "h:1:2 [0] include/shm.h:48 NCCL WARN Error while creating shared memory segment "
        "nccl-shm-recv-1-0-1 (size 9637888)"
    )
    explained, rest = explain(parse_nccl_log(text))
    assert explained == [] and len(rest) == 1


def test_libibverbs_alone_is_harmless():
    text = "h:1:1 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]\nNCCL version 2.7.3+cuda10.2"
    log = parse_nccl_log(text)
    assert [e.kind for e in explain(log)[0]] == ["no-ibverbs"]
    assert verdict(log) is Verdict.FINE  # before: any WARN line was a finding (exit 1)


def test_the_last_test_failure_line_is_shown_in_the_cli():
    result = CliRunner().invoke(
        cli,
        [
            "nccl-log",
            str(LOGS / "nccl_tests_unhandled_cuda_error_256ranks_mpirun_nccltests322.log"),
        ],
        env={"COLUMNS": "100"},
    )
    assert result.exit_code == 1, result.output
    assert "HCA-19: Test NCCL failure common.cu:1204 'unhandled cuda error" in " ".join(
        line.lstrip("# ") for line in result.stdout.splitlines()
    )
    assert "(the last of 6 such lines, every one the same reason)" in result.stdout.replace(
        "\n#   ", " "
    )


def test_rccl_is_named_in_the_title():
    result = CliRunner().invoke(
        cli,
        ["nccl-log", str(LOGS / "rccl_2.21.5_4x_mi50_socket_rccltests163.log")],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("# RCCL 2.21.5-HEAD:9a0e6a1 (ROCm's NCCL")
    assert "version not logged" not in result.stdout
