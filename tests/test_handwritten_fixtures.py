"""recommend, report and diagnose on files no ncclprobe writer produced (issue 28 §4): a results
set and an engine trace written by hand from the documented formats (docs/DESIGN.md, the records
schema), so a field that writer and reader share wrongly fails here. Their answers are worked out
by hand in the files' own notes (tests/fixtures/INDEX.md)."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.diagnose import diagnose, load_evidence

FIX = Path(__file__).parent / "fixtures"
SWEEP = FIX / "results" / "handwritten_sweep_nccl_2ranks_h200.jsonl"
TRACE = FIX / "traces" / "handwritten_seed_case_tp2_h200.json"


def _json(args):
    result = CliRunner().invoke(cli, [*args, "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_recommend_reads_a_hand_written_results_set():
    doc = _json(["recommend", str(SWEEP)])
    per_size = {row["size_bytes"]: (row["chosen"], row["gain_pct"]) for row in doc["per_size"]}
    assert per_size == {
        16384: ("NCCL_PROTO=LL", pytest.approx(33.333, abs=1e-3)),  # 30 -> 20 us, spreads apart
        65536: ("default", pytest.approx(3.75)),  # 40 -> 38.5 us: below the 5 % floor
        1048576: ("NCCL_PROTO=Simple", pytest.approx(16.667, abs=1e-3)),
    }
    # every size weighs the same without a workload: Simple's 174 us against the default's 190
    assert doc["global"]["config_id"] == "NCCL_PROTO=Simple" and doc["env"] == {
        "NCCL_PROTO": "Simple"
    }


def test_recommend_weighs_the_hand_written_trace_as_workload():
    """The trace's speculative run issued 2560 all-reduces of 16 KiB and 64 of 64 KiB: LL saves
    (30 - 20) x 2560 + (40 - 38.5) x 64 of 79360 us, 32.38 %."""
    doc = _json(["recommend", str(SWEEP), "--trace", str(TRACE)])
    assert doc["workload"]["sizes"] == [
        {"size_bytes": 16384, "count": 2560.0},
        {"size_bytes": 65536, "count": 64.0},
    ]
    assert doc["env"] == {"NCCL_PROTO": "LL"}
    assert doc["global"]["gain_pct"] == pytest.approx(100 * (1 - 53664 / 79360), abs=1e-3)


def test_report_builds_from_the_hand_written_files(tmp_path):
    out = tmp_path / "report"
    doc = _json(["report", str(SWEEP), "--trace", str(TRACE), "--output", str(out)])
    assert {f["name"] for f in doc["figures"]} >= {"latency", "busbw", "speedup", "phases"}
    text = (out / "report.md").read_text()
    assert "`NCCL_PROTO=LL`: 32.4% less all_reduce time" in text


def test_diagnose_reads_the_hand_written_trace():
    result = diagnose(load_evidence(TRACE))
    top = result.top
    assert (top.rule, top.evidence["phase"], top.severity) == ("eager-phase", "verify", "error")
    assert top.evidence["verify_median_ms"] == 29.0 and top.evidence["decode_median_ms"] == 12.0
    ruled = {r.rule for r in result.ruled_out}
    assert {"settings-propagation", "nccl-settings", "collective-share", "unsafe-settings"} <= ruled
    slower = next(f for f in result.findings if f.rule == "speculative-slower")
    assert slower.evidence["tokens_per_cycle"] == pytest.approx(2.5)  # the histogram's, by hand


def test_diagnose_matches_the_hand_written_sweep_by_settings_and_mode():
    """The baseline's decode all-reduces ran in a graph and the sweep measured graph mode under the
    runs' NCCL_PROTO=LL: only the eager sizes (prefill; the eager verify) are missing."""
    result = diagnose(load_evidence(TRACE, sweep=SWEEP))
    missing = {
        n.hypothesis.split(":")[0]: n.missing
        for n in result.not_checked
        if n.rule == "collectives-vs-sweep"
    }
    assert missing == {
        "untuned baseline": "the sweep has no NCCL_PROTO=LL result within 2x of 64K at 2 ranks",
        "untuned speculative": "the sweep has no NCCL_PROTO=LL result within 2x of 16K,64K at 2 ranks",
    }


def test_the_slower_findings_decomposition_of_the_hand_written_trace():
    """Per token (50 tokens): draft 60/50 = 1.2 ms, verify 580/50 = 11.6 ms; per cycle (20 cycles):
    (60 + 580 + 10 + 60 + 93.5) / 20 = 40.175 ms, so break-even is 40.175 / 12.5 = 3.214 tokens."""
    slower = next(
        f for f in diagnose(load_evidence(TRACE)).findings if f.rule == "speculative-slower"
    )
    e = slower.evidence
    assert (e["draft_ms_per_token"], e["verify_ms_per_token"]) == (1.2, 11.6)
    assert e["cycle_ms"] == pytest.approx(40.175) and e["baseline_ms_per_token"] == 12.5
    assert e["breakeven_tokens_per_cycle"] == pytest.approx(40.175 / 12.5, abs=1e-4)
