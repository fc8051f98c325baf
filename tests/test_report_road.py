"""The one judging road's own parts: a rule set runs only on the evidence it needs, `judge` ranks what
the sets found, a Report's verdict turns at its `fails_at` severity and on `answered`, and the one
renderer prints every format (each threshold pinned at its boundary, each rule beside its healthy twin)."""

import dataclasses
import json
from types import SimpleNamespace

from click.testing import CliRunner

from ncclprobe.diagnose.render import fit, next_lines, table_blocks, text, unsaid_evidence
from ncclprobe.diagnose.report import FINDINGS, Lines, Report, RuleSet, Table, judge
from ncclprobe.findings import Cost, Finding, NotChecked, RuledOut
from ncclprobe.verdict import Verdict


def _finding(
    rule="r", severity="warning", confidence="high", cost=None, detail="why", unit="token", **more
):
    return Finding(
        rule=rule,
        severity=severity,
        confidence=confidence,
        title=f"{rule} {severity}",
        detail=detail,
        cost=None if cost is None else Cost.measured(cost, unit, "a measured difference"),
        **more,
    )


def test_a_rule_set_runs_only_where_its_evidence_is():
    seen = []
    rule_set = RuleSet("s", (lambda ev: seen.append(ev) or [],), needs=("p2p", "processes"))
    assert not rule_set.applies(SimpleNamespace(p2p=None, processes=[]))  # empty counts as absent
    assert rule_set.applies(SimpleNamespace(p2p=None, processes=[1]))  # one of them is enough
    assert RuleSet("always", ()).applies(SimpleNamespace())  # needs nothing: always
    judge(SimpleNamespace(p2p=None, processes=[]), (rule_set,), kind="k")
    assert seen == []


def test_judge_ranks_severity_then_confidence_then_fix_first_then_cost():
    outcomes = [
        _finding("cheap", cost=1.0),
        _finding("dear", cost=5.0),
        _finding("note", severity="info"),
        _finding("env-check"),  # fix first, same severity and confidence
        _finding("low", confidence="low", cost=99.0),
        _finding("bad", severity="error", confidence="low"),
        RuledOut(rule="x", hypothesis="h", reason="r"),
        NotChecked(rule="y", hypothesis="h", missing="m"),
    ]
    report = judge(None, (RuleSet("s", (lambda ev: outcomes,)),), kind="k")
    assert [f.rule for f in report.findings] == ["bad", "env-check", "dear", "cheap", "low", "note"]
    assert [r.rule for r in report.ruled_out] == ["x"] and [n.rule for n in report.not_checked] == [
        "y"
    ]
    # a cost under one millisecond still outranks no cost at all (none counts as 0), per token and
    # per step alike
    for costed in (_finding("some", cost=0.5), _finding("some", cost=0.5, unit="step")):
        ranked = judge(None, (RuleSet("s", (lambda ev: [_finding("none"), costed],)),), kind="k")
        assert [f.rule for f in ranked.findings] == ["some", "none"]


def test_the_verdict_turns_at_fails_at_and_on_answered():
    warning, error, info = _finding(), _finding(severity="error"), _finding(severity="info")
    assert Report("k", [warning]).verdict() is Verdict.FINDINGS  # diagnose: a warning fails
    assert Report("k", [warning], fails_at="error").verdict() is Verdict.FINE  # a lint: it does not
    assert Report("k", [error], fails_at="error").verdict() is Verdict.FINDINGS
    assert Report("k", [error]).verdict() is Verdict.FINDINGS  # worse than fails_at fails too
    assert Report("k", [info]).verdict() is Verdict.FINE
    assert Report("k", [info], answered=False).verdict() is Verdict.NOTHING_HERE
    assert Report("k", [error], fails_at="error", answered=False).verdict() is Verdict.FINDINGS


def test_a_rule_set_can_fail_at_its_own_severity():
    """nccl-log: a failure line not explained fails at a warning, the lint's warning does not."""
    lines = RuleSet("lines", (lambda ev: [_finding("not-explained")],), fails_at="warning")
    lint = RuleSet("lint", (lambda ev: [_finding("typo")],))
    both = judge(None, (lines, lint), kind="k", fails_at="error")
    assert [f.rule for f in both.actionable()] == ["not-explained"]
    assert both.verdict() is Verdict.FINDINGS
    assert judge(None, (lint,), kind="k", fails_at="error").verdict() is Verdict.FINE


def test_the_renderer_wraps_text_but_never_a_next_command():
    long = "ncclprobe sweep " + " ".join(f"--set NCCL_X{i}=a,b" for i in range(12))
    lines = next_lines(long + "  # " + "why " * 30, "   ")
    fitted = fit(["# " + "word " * 40, *lines], 60)
    assert fitted[0].startswith("# word") and fitted[1].startswith("#   word")  # under `#   `
    assert any(line.endswith(long) and len(line) > 60 for line in fitted)  # the command whole
    assert all(len(line) <= 60 for line in fitted if "ncclprobe" not in line)
    assert fit(["# " + "word " * 40], None) == ["# " + "word " * 40]  # --wide: as it is


def test_a_report_prints_its_sections_in_order_with_the_findings_where_marked():
    report = Report(
        "k",
        [_finding("slow", evidence={"ms": 1.23456})],
        ruled_out=[RuledOut(rule="x", hypothesis="settings", reason="same")],
        sections=[Lines(["# head"]), FINDINGS, Table([{"a": 1}], title="t")],
    )
    blocks = table_blocks(report, 100)
    assert [type(b) for b in blocks] == [Lines, Lines, Table]
    shown = text(report, 100)
    assert shown.splitlines()[:2] == ["# head", "1. [warning, high confidence] slow warning"]
    assert "evidence: ms=1.235" in shown and "ruled out:\n  - settings: same" in shown
    empty = text(Report("k", sections=[FINDINGS]), 100)
    assert empty == "# no findings: nothing above informational"


def test_every_judging_command_prints_json_csv_and_table_from_its_report():
    """knobs --lint over a collect-env text: the Report's document as JSON, its rows as CSV, its
    table (title, notes, rows) as the table; the verdict is the exit code."""
    from ncclprobe.cli import cli

    text_file = (
        "tests/fixtures/collect_env/vllm_0.8.5_collect_env_2x_nv12_8nic_sectioned_issue19607.txt"
    )
    args = ["knobs", "--lint", "--collect-env", text_file]
    doc = json.loads(CliRunner().invoke(cli, [*args, "--format", "json"]).stdout)
    csv = CliRunner().invoke(cli, [*args, "--format", "csv"]).stdout
    table = CliRunner().invoke(cli, args, env={"COLUMNS": "100"})
    assert doc["source"] == text_file and doc["schema_version"] == 1
    assert len(csv.splitlines()) == (len(doc["findings"]) + 1 if doc["findings"] else 0)
    flat = " ".join(table.stdout.replace("\n#   ", " ").split())  # the title, unwrapped
    assert flat.startswith(f"# lint of {len(doc['env'])} NCCL variable(s) from {text_file}")
    assert table.exit_code == (1 if any(f["severity"] == "error" for f in doc["findings"]) else 0)


def test_fit_keeps_each_kind_of_line_under_its_own_indent():
    """A remark that opens a next step wraps under `next: `'s column and `# `; any other indented
    line under its indent plus 3; a word longer than the width (a path) is never cut; a blank line
    stays; a line as wide as the terminal is left as it is."""
    remark = fit(next_lines("# " + "because " * 12, "   "), 40)
    assert remark[0].startswith("   next: # because") and remark[1].startswith("         # because")
    plain = fit(["  - " + "word " * 12], 30)
    assert plain[0].startswith("  - word") and plain[1].startswith("     word")
    path = "/very/long/" + "x" * 120
    assert fit([f"# see {path}"], 60) == ["# see", f"#   {path}"]
    assert fit(["a", "", "b"], 80) == ["a", "", "b"]
    assert (
        fit(["a\tb"], 3) == fit(["a\tb"], 80) == ["a\tb"]
    )  # up to the width: as it is (tabs kept)


def test_a_findings_detail_wraps_to_the_width_and_stays_whole_under_wide():
    detail = "word " * 30 + "/a/" + "p" * 90
    report = Report("k", [_finding(detail=detail.strip())], sections=[FINDINGS])
    wide = text(report, None).splitlines()
    assert wide[1] == "   " + detail.strip()  # --wide: one line
    narrow = text(report, 60).splitlines()
    assert narrow[1].startswith("   word") and all(line.startswith("   ") for line in narrow[1:])
    assert "   /a/" + "p" * 90 in narrow  # the long word whole, on a line of its own


def test_a_failure_line_prints_once_in_the_table_and_whole_in_json(tmp_path):
    """The not-explained finding quotes each line in its detail; its evidence holds the same lines
    (for JSON), so the table leaves that entry out: every line once. The healthy twin: evidence of
    text the detail does not quote, and numbers, still print."""
    from ncclprobe.diagnose import diagnose, load_evidence

    log = tmp_path / "job.log"
    log.write_text("step 1 ok\nRuntimeError: a step failed oddly\nstep 2 ok\n")
    report = diagnose(load_evidence(logs=[log]))
    out = text(report, None)
    assert out.count("RuntimeError: a step failed oddly") == 1, out
    [found] = [f for f in report.findings if f.rule == "not-explained"]
    assert "   evidence: lines=1" in out.splitlines()
    assert found.to_json()["evidence"]["not_explained"][0]["lines"][0]["text"] == (
        "RuntimeError: a step failed oddly"
    )
    twin = Finding(
        rule="x",
        severity="info",
        confidence="high",
        title="t",
        detail="rank 3 on host-a reads NCCL_PROTO=LL",
        evidence={"hosts": ["host-a"], "in_force": {"NCCL_PROTO": "LL"}, "ranks": [3]},
    )
    lines = text(Report(kind="k", findings=[twin], sections=[FINDINGS]), None).splitlines()
    assert "   evidence: hosts=[host-a], in_force={NCCL_PROTO=LL}, ranks=[3]" in lines
    shown = found.evidence["not_explained"]
    cut = dataclasses.replace(found, detail=found.detail.replace("failed oddly", "failed"))
    assert unsaid_evidence(cut.evidence, cut.detail)["not_explained"] == shown  # not quoted: shown
