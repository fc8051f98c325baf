"""The one failure-line mechanism (issue 36 §3): what looks like a failure is shown verbatim under
"not explained" unless a known class explains it, and a failed run of a format is read as that
format, never refused. Real public outputs (tests/fixtures/*/failed/, truth.json beside them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.evidence.failure_lines import (
    LIMIT,
    FailureLines,
    looks_like_failure,
    not_explained_finding,
    shown,
)
from ncclprobe.evidence.nccl.nccl_log import parse_nccl_log_files
from ncclprobe.evidence.nccl.nccl_tests import parse_nccl_tests

FIXTURES = Path(__file__).parent / "fixtures"
FAILED_TESTS = FIXTURES / "failed" / "nccl_tests"
FAILED_LOGS = FIXTURES / "failed" / "nccl_logs"


@pytest.mark.parametrize(
    "line",
    [
        "gpu-1-1: Test CUDA failure common.cu:1304 'CUDA-capable device(s) is/are busy or unavailable'",
        "Traceback (most recent call last):",
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1331, unhandled system error",
        "h:1:2 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.1<5000> failed",
        "# Out of bounds values : 50 FAILED",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "socketProgress: Connection closed by remote peer",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "Segmentation fault (core dumped)",
    ],
)
def test_failure_lines_are_seen(line):
    assert looks_like_failure(line)


@pytest.mark.parametrize(
    "line",
    [
        "h:1:2 [0] NCCL INFO Failed to open libibverbs.so[.1]",  # NCCL's INFO level
        "h:1:2 [0] NCCL INFO NCCL_DEBUG set by environment to WARN",
        "NCCL_DEBUG=WARN torchrun --nproc-per-node 8 train.py",
        "# Out of bounds values : 0 OK",
        "  error_file: <N/A>",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong",
        "[W1201 19:36:43.616830926 Utils.hpp:137] Warning: Environment variable "
        "TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated; use TORCH_FR_BUFFER_SIZE instead",
        "FutureWarning: `torch.cuda.amp.autocast(args...)` is deprecated",
        "errors: 0",
        "INFO 05-06 12:00:01 metrics.py:351] Avg prompt throughput: 0.0 tokens/s",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9d",
    ],
)
def test_healthy_lines_with_a_failure_word_are_not(line):
    assert not looks_like_failure(line)


def test_shown_masks_escapes_and_cuts():
    assert shown("Error: \x1b[31mred\x1b[0m") == "Error: \\x1b[31mred\\x1b[0m"
    assert "hunter2hunter2" not in shown("Error: login failed for --password hunter2hunter2")
    long = "Error " + "x" * 1000
    assert len(shown(long)) == 400 and shown(long).endswith("…")


def test_repeats_count_once_and_the_rest_past_the_limit_is_counted():
    found = FailureLines("log")
    for n in range(3):
        found.offer(n + 1, "RuntimeError: the same")
    for n in range(LIMIT + 5):
        found.offer(100 + n, f"RuntimeError: number {n}")
    assert found.lines[0].count == 3 and found.lines[0].number == 1
    assert len(found.lines) == LIMIT and found.total == 3 + LIMIT + 5
    assert found.more == 6  # LIMIT distinct lines kept: the first and LIMIT - 1 numbered ones
    finding = not_explained_finding([found, FailureLines("clean")])
    assert finding.rule == "not-explained" and finding.severity == "warning"
    assert "log:1: RuntimeError: the same (x3)" in finding.detail
    assert f"and {found.more} more" in finding.detail
    assert not_explained_finding([FailureLines("clean")]) is None


TRUTH = json.loads((FAILED_TESTS / "truth.json").read_text())


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_failed_nccl_tests_runs_are_read_and_explained(name):
    truth = TRUTH[name]
    result = CliRunner().invoke(cli, ["import", str(FAILED_TESTS / name), "--format", "json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    [failure] = doc["failures"]
    assert failure["kind"] == truth["class"] and truth["cuda_error"] in failure["message"]
    shown_lines = [line["text"] for line in (doc["not_explained"] or {"lines": []})["lines"]]
    assert shown_lines == truth["not_explained"]


def test_nccl_log_names_a_failed_run_instead_of_zero_lines():
    result = CliRunner().invoke(
        cli, ["nccl-log", str(FAILED_TESTS / "illegal_address_4x_v100_nvprof_nccltests11.txt")]
    )
    assert result.exit_code == 1, result.output
    assert "0 NCCL lines" not in result.output
    assert "cudaErrorIllegalAddress" in result.output
    assert "Internal profiling error 4054:1." in result.output  # shown, not explained


def test_a_healthy_run_has_no_failure_lines():
    """The healthy twin: a complete run's header, table and footer show nothing."""
    run = parse_nccl_tests(
        (FIXTURES / "nccl_tests" / "allreduce_4x_rtx5090_pcie_genoa.txt").read_text()
    )
    assert not run.failed and not run.not_explained and run.failures == []
    assert run.wrong_summary() is None


def test_wrong_results_say_how_many_where_and_in_which_placement():
    """A real table with two `#wrong` cells set (a mutation of the file, as test_trust_mutations
    does): how many values, at which sizes, out of and in place."""
    text = (FIXTURES / "nccl_tests" / "allreduce_4x_rtx5090_pcie_genoa.txt").read_text()
    lines = text.splitlines()
    rows = [i for i, line in enumerate(lines) if line.strip()[:1].isdigit()]
    for index, (cell, value) in zip(rows[-2:], ((8, "7"), (12, "5"))):
        tokens = lines[index].split()
        tokens[cell] = value
        lines[index] = "  ".join(tokens)
    run = parse_nccl_tests("\n".join(lines) + "\n")
    summary = run.wrong_summary()
    assert summary.startswith("12 wrong value(s): out of place at 1 size(s)")
    assert "in place at 1 size(s)" in summary and run.wrong


@pytest.mark.parametrize("name", sorted(json.loads((FAILED_LOGS / "truth.json").read_text())))
def test_failed_nccl_logs_are_explained(name):
    truth = json.loads((FAILED_LOGS / "truth.json").read_text())[name]
    result = CliRunner().invoke(cli, ["nccl-log", str(FAILED_LOGS / name), "--format", "json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert [e["kind"] for e in doc["explained"]] == [truth["class"]]
    assert [line["text"] for line in doc["not_explained"]["lines"]] == truth["not_explained"]


def test_socket_between_hosts_is_named_only_across_hosts():
    """The RCCL log of 4 MI50s on one host over Socket: one host, so no socket-network class (its
    healthy twin); the same lines read as two hosts are."""
    log = parse_nccl_log_files(
        [FIXTURES / "nccl_logs" / "rccl_2.21.5_4x_mi50_socket_rccltests163.log"]
    )
    from ncclprobe.evidence.nccl.nccl_failures import explain

    assert "socket-network" not in [k.kind for k in explain(log)[0]]
    log.hosts.add("another-host")
    kinds = {k.kind: k for k in explain(log)[0]}
    assert "librccl-net.so" in kinds["socket-network"].message


def test_a_failed_servers_log_is_read_and_its_known_failure_named():
    """SGLang's scheduler died in NCCL's bootstrap (no route to its peer): the log of a server that
    never served is that engine's log, read, the class named and the traceback line shown."""
    result = CliRunner().invoke(
        cli,
        [
            "diagnose",
            "--server-log",
            str(FAILED_LOGS / "no_route_to_host_bootstrap_sglang3820.log"),
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 1, result.output
    findings = json.loads(result.stdout)["findings"]
    assert [f["rule"] for f in findings] == ["failure-peer-unreachable", "not-explained"]
    assert "Traceback" in findings[1]["detail"] and "No route to host" not in findings[1]["detail"]


def test_rccl_settings_are_shown_and_credential_names_in_them_still_masked():
    """Issue 36 §3: RCCL_MSCCL_ENABLE=1 was masked as a secret; RCCL_ is NCCL's family on ROCm.
    The healthy twin of the policy: a credential word in such a name is still masked."""
    from ncclprobe.secrets import mask_env

    shown_env = mask_env(
        {"RCCL_MSCCL_ENABLE": "1", "HIP_VISIBLE_DEVICES": "0,1", "RCCL_API_TOKEN": "abc123"}
    )
    assert shown_env["RCCL_MSCCL_ENABLE"] == "1" and shown_env["HIP_VISIBLE_DEVICES"] == "0,1"
    assert shown_env["RCCL_API_TOKEN"] != "abc123"


def test_scan_numbers_lines_from_one_and_names_its_source():
    from ncclprobe.evidence.failure_lines import from_json, scan

    found = scan(["fine", "RuntimeError: boom", "fine", "RuntimeError: boom"], "x.log")
    assert [(line.source, line.number, line.count) for line in found.lines] == [("x.log", 2, 2)]
    again = from_json(found.to_json())
    assert again.to_json() == found.to_json() and again.total == 2
    again.offer(9, "RuntimeError: boom")  # the index survives the round trip: a repeat counts
    assert again.lines[0].count == 3 and len(again.lines) == 1
