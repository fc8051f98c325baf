"""diagnose on engine traces recorded on the H200 (examples/traces/*.h200.json), not edited.

The seed case recorded for real: `--graphs decode` captures the baseline decode step and runs
verify, draft and draft extend eagerly. These run on CPU: the traces are fixed inputs.
"""

import json
from pathlib import Path

from ncclprobe.diagnose import Evidence, diagnose

TRACES = Path(__file__).resolve().parent.parent / "examples" / "traces"


def diagnose_recorded(name):
    trace = json.loads((TRACES / name).read_text())
    return trace, diagnose(Evidence.from_trace(trace, name))


def test_recorded_seed_case_top_finding_is_the_eager_verify():
    trace, result = diagnose_recorded("seed-graphs-decode.h200.json")
    assert trace["config"]["graphs"] == "decode" and trace["config"]["device"] == "cuda"
    top = result.top
    assert (top.rule, top.evidence["phase"], top.severity) == ("eager-phase", "verify", "error")
    assert top.evidence["decode_graphed"] is True and top.evidence["verify_graphed"] is False
    # the gap is real: the eager verify costs several decode steps
    assert top.evidence["verify_median_ms"] > 3 * top.evidence["decode_median_ms"]
    assert any(r.rule == "nccl-settings" and "identical" in r.reason for r in result.ruled_out)


def test_recorded_all_graphs_run_rules_the_eager_phase_out():
    _, result = diagnose_recorded("graphs-all.h200.json")
    assert "eager-phase" not in [f.rule for f in result.findings]
    assert "eager-phase" in [r.rule for r in result.ruled_out]
    assert "verify-ratio" in [r.rule for r in result.ruled_out]
