"""The known-bad NCCL releases table (`nccl.known_bad`): every row carries its sources and is pinned at
its version boundaries, on its GPUs and hosts, by NCCL's own line of the failure; and it is consulted
from a real log of the failure (NVIDIA/nccl-tests#287's 2x RTX 5090 log) by diagnose, nccl-log and
env-check, with a real healthy log as the twin."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ncclprobe.diagnose import diagnose, load_evidence
from ncclprobe.nccl import known_bad as K

FIXTURES = Path(__file__).parent / "fixtures"
SM120_LOG = FIXTURES / "nccl_logs" / "nccl_2.25.1_2x_rtx5090_pcie_shm_genoa.log"
H200_LOG = FIXTURES / "nccl_logs" / "nccl_2.28.9_h200_2ranks_1gpu_hostid_proto_excl_ll_tuning.log"
H20_COLLECT_ENV = FIXTURES / "collect_env" / "sglang_check_env_8x_h20_nv18_8nic_issue24966.txt"


def _keys(matches) -> list[str]:
    return sorted(m.row.key for m in matches)


def test_every_row_names_its_sources_and_a_range():
    for row in K.ROWS:
        assert row.sources and all(re.search(r"[\w-]+/[\w.-]+#\d+", s) for s in row.sources), (
            row.key
        )
        assert row.fixed_in or row.works_in, row.key
        if row.fixed_in:
            assert K.parse_version(row.first_bad) < K.parse_version(row.fixed_in)


@pytest.mark.parametrize(
    "version, expected",
    [("2.25.0", []), ("2.25.1", ["sm120-shared-memory"]), ("2.26.1", ["sm120-shared-memory"])],
)
def test_sm120_row_below_its_first_bad_and_at_it(version, expected):
    assert _keys(K.matching(version, [120])) == expected


def test_sm120_row_ends_at_the_fixed_release_where_the_next_report_begins():
    assert _keys(K.matching("2.26.2", [120])) == ["sm120-illegal-access-2.26.2"]


def test_a_gpu_row_needs_that_gpu_or_the_failure_line():
    assert K.matching("2.25.1", [90]) == []
    assert K.matching("2.25.1", None) == []
    line = "GENOA-06:4766:4780 [0] NCCL INFO ncclMaxSharedMem 82240 exceeds device/fn maxSharedMem 79856"
    (seen,) = K.matching("2.25.1", None, lines=[line])
    assert seen.seen and seen.severity == "error"
    (said,) = K.matching("2.25.1", [120])
    assert not said.seen and said.severity == "warning"


@pytest.mark.parametrize(
    "version, read, expected",
    [
        ("2.18.6", {}, []),
        ("2.19.3", {}, ["cumem-graph-memory"]),
        ("2.22.2", {}, ["cumem-graph-memory"]),
        ("2.22.3", {}, []),
        ("2.19.3", {"NCCL_CUMEM_ENABLE": "0"}, []),
        ("2.19.3", {"NCCL_CUMEM_ENABLE": "1"}, ["cumem-graph-memory"]),
    ],
)
def test_cumem_row_for_any_gpu_and_its_workaround(version, read, expected):
    assert _keys(K.matching(version, None, read=read)) == expected


@pytest.mark.parametrize(
    "version, arch, expected",
    [
        ("2.28.8", "aarch64", []),
        ("2.28.9", "aarch64", ["aarch64-proxy-deadlock"]),
        ("2.29.2", "aarch64", ["aarch64-proxy-deadlock"]),
        ("2.29.3", "aarch64", []),
        ("2.28.9", "x86_64", []),
        ("2.28.9", None, []),
    ],
)
def test_host_row_needs_its_host(version, arch, expected):
    assert _keys(K.matching(version, None, host_arch=arch)) == expected


@pytest.mark.parametrize(
    "name, capability",
    [
        ("NVIDIA GeForce RTX 5090", 120),
        ("NVIDIA GeForce RTX 5070 Ti", 120),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 120),
        ("NVIDIA H100 80GB HBM3", 90),
        ("NVIDIA B200", 100),
        ("NVIDIA GeForce RTX 4090", None),
        ("NVIDIA H20", None),
    ],
)
def test_gpu_names_to_capabilities_from_nvidias_table(name, capability):
    assert K.capability_of(name) == capability


def test_an_unreadable_version_matches_nothing():
    assert K.matching(None, [120]) == [] and K.matching("two", [120]) == []


def test_diagnose_names_the_failure_from_the_real_5090_log():
    ev = load_evidence(nccl_logs=[SM120_LOG])
    found = [f for f in diagnose(ev).findings if f.rule == "known-bad-nccl"]
    assert len(found) == 1
    (finding,) = found
    assert finding.severity == "error" and finding.evidence["failure_seen"]
    assert finding.evidence["fixed_in"] == "2.26.2" and finding.evidence["capabilities"] == [120]
    assert "NVIDIA/nccl-tests#287" in finding.detail


def test_diagnose_healthy_twin_with_known_gpus_rules_it_out():
    ev = load_evidence(nccl_logs=[H200_LOG], collect_env=H20_COLLECT_ENV)
    result = diagnose(ev)
    assert not [f for f in result.findings if f.rule == "known-bad-nccl"]
    (ruled,) = [r for r in result.ruled_out if r.rule == "known-bad-nccl"]
    assert "9.0" in ruled.reason


def test_diagnose_without_gpus_says_what_it_could_not_check():
    result = diagnose(load_evidence(nccl_logs=[H200_LOG]))
    (missing,) = [n for n in result.not_checked if n.rule == "known-bad-nccl"]
    assert "which GPUs" in missing.missing


def test_nccl_log_command_reports_it_and_exits_1():
    run = subprocess.run(
        [sys.executable, "-m", "ncclprobe", "nccl-log", str(SM120_LOG), "--format", "json"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1, run.stderr
    doc = json.loads(run.stdout)
    assert [k["row"] for k in doc["known_bad"]] == ["sm120-shared-memory"]
    assert doc["known_bad"][0]["seen"] is True


def test_a_row_that_needs_a_condition_is_said_without_failing_nccl_log():
    """NCCL 2.20.5 (vLLM's own line) falls in the cuMem row, which needs CUDA graphs the log cannot
    show: an info note, exit 0. RCCL 2.21.5 follows that NCCL release but is not NVIDIA's NCCL: no
    row at all."""
    vllm = FIXTURES / "nccl_logs" / "vllm_is_using_nccl_2.20.5_lines_run_together_vllm12292.log"
    rccl = FIXTURES / "nccl_logs" / "rccl_2.21.5_4x_mi50_socket_rccltests163.log"
    for log, rows in ((vllm, ["cumem-graph-memory"]), (rccl, [])):
        run = subprocess.run(
            [sys.executable, "-m", "ncclprobe", "nccl-log", str(log), "--format", "json"],
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0, (log.name, run.stdout[-400:], run.stderr)
        assert [k["row"] for k in json.loads(run.stdout)["known_bad"]] == rows, log.name


def test_the_sentence_names_the_gpu_and_where_the_range_ends():
    """describe(): the GPUs as compute capabilities (12.0, not 120), the range up to the fixed
    release, or up to the release that works where no fix is named (mutation survivors)."""
    (shared,) = [m for m in K.matching("2.25.1", {120}) if m.row.key == "sm120-shared-memory"]
    text = K.describe(shared)
    assert "GPU compute capability 12.0)" in text and "Affected: 2.25.1 up to 2.26.2;" in text
    (illegal,) = [m for m in K.matching("2.26.2", {120}) if m.row.key.startswith("sm120-illegal")]
    assert "Affected: 2.26.2 up to at least 2.31.2;" in K.describe(illegal)


def test_a_row_for_any_gpu_is_high_confidence_without_the_gpus():
    """The cuMem row holds on every GPU: matched from the version alone, with no GPU known, it is
    still sure of the GPU (mutation survivor: the confidence's `capabilities is None`)."""
    from ncclprobe.diagnose.settings.rules_known_bad import _finding

    (match,) = K.matching("2.20.5")
    assert match.row.capabilities is None
    assert _finding(match, ["a log"], set()).confidence == "high"
