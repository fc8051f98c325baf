"""The process-environment rule set over processes built as the walk records them (no live job):
which processes count, each finding beside its healthy twin, the caveats, the two row forms and the
--watch title. The live walk itself is tests/test_envcheck.py's."""

from ncclprobe.diagnose.process_env.check import env_check_report, process_findings
from ncclprobe.evidence.bundle import Evidence
from ncclprobe.evidence.live.logcheck import ProcessNcclLog
from ncclprobe.evidence.live.processes import Expectation, ProcessEvidence
from ncclprobe.evidence.live.walk import ProcessInfo
from ncclprobe.verdict import Verdict


def _proc(pid, ppid=None, env=None, *, libnccl=None, depth=0, readable=True, forked_from=None):
    return ProcessInfo(
        pid=pid,
        ppid=ppid,
        depth=depth,
        command=f"python worker{pid}.py",
        status="sleeping",
        role="launcher" if depth == 0 else "spawn worker",
        readable=readable,
        libnccl=libnccl,
        maps_readable=True,
        environ=dict(env or {}),
        forked_from=forked_from,
    )


def _report(processes, expectations=(), logs=None, snapshot=None):
    ev = ProcessEvidence(10, processes, logs or {}, list(expectations))
    return env_check_report(Evidence(processes=ev), snapshot)


def test_a_lint_error_in_a_process_with_nccl_is_a_finding_and_a_warning_is_not():
    bad = _report([_proc(10, env={"NCCL_P2P_LEVEL": "sys"}, libnccl="/lib/libnccl.so.2")])
    assert [f.rule for f in bad.findings] == [
        "env-check-lint"
    ] and bad.verdict() is Verdict.FINDINGS
    assert bad.findings[0].title.startswith("pid 10: lint error: NCCL_P2P_LEVEL=sys")
    assert "Fix: " in bad.findings[0].detail
    typo = _report([_proc(10, env={"NCCL_PROTOO": "LL"}, libnccl="/lib/libnccl.so.2")])
    assert typo.findings == [] and typo.verdict() is Verdict.FINE  # a lint warning decides nothing


def test_only_processes_with_nccl_count_when_one_has_it():
    launcher = _proc(10, env={"NCCL_P2P_LEVEL": "sys"})
    worker = _proc(11, 10, {"NCCL_PROTO": "LL"}, libnccl="/lib/libnccl.so.2", depth=1)
    assert _report([launcher, worker]).findings == []  # the launcher runs no NCCL
    assert [f.title[:6] for f in _report([launcher]).findings] == [
        "pid 10"
    ]  # none has it: all count


def test_an_expectation_missed_or_different_is_a_finding_met_is_none():
    want = [Expectation("NCCL_PROTO", "LL", "--expect")]
    met = _report([_proc(10, env={"NCCL_PROTO": "LL"})], want)
    assert met.findings == [] and met.verdict() is Verdict.FINE
    assert not any("exec-time environment" in n for n in met.notes)  # nothing unsure: no caveat
    empty = _report([_proc(10, env={})], want)  # an empty block: unknown, and said why
    assert any("NCCL_PROTO: judged from the exec-time environment" in n for n in empty.notes)
    missed = _report([_proc(10, env={"NCCL_ALGO": "Ring"})], want)
    assert [f.title for f in missed.findings] == [
        "pid 10: NCCL_PROTO missing (expected 'LL', has None)"
    ]
    assert any("judged from the exec-time environment" in n for n in missed.notes)
    read = {10: ProcessNcclLog(10, "nccl.10.log", {"NCCL_PROTO": "Simple"}, "2.28.9")}
    other = _report([_proc(10, env={"NCCL_PROTO": "LL"})], want, read)
    assert [f.evidence["source"] for f in other.findings] == ["NCCL log"]  # what NCCL read wins
    assert not any("exec-time environment" in n for n in other.notes)  # the log answered it


def test_caveats_name_an_empty_block_and_a_fork():
    report = _report([_proc(10, env={}), _proc(11, 10, {"A": "1"}, depth=1, forked_from=10)])
    assert any("pid 10: its /proc environment block is empty" in n for n in report.notes)
    assert not any("pid 11: its /proc environment block is empty" in n for n in report.notes)
    assert any("pid 11: forked without exec" in n for n in report.notes)


def test_no_readable_process_is_nothing_here_and_unreadable_ones_are_not_cross_checked():
    gone = _proc(10, readable=False)
    log = {10: ProcessNcclLog(10, "nccl.10.log", {"NCCL_PROTO": "LL"}, None)}
    report = _report([gone], logs=log)
    assert report.verdict() is Verdict.NOTHING_HERE and report.data["disagreements"] == []


def test_rows_are_indented_for_the_table_and_whole_for_csv_and_the_watch_titles_its_snapshot():
    launcher = _proc(10, env={"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"})
    worker = _proc(11, 10, {"NCCL_PROTO": "LL"}, depth=1)
    report = _report([launcher, worker], snapshot=3)
    table = report.sections[0]
    assert table.rows[1]["role"] == "  spawn worker" and report.rows[1]["role"] == "spawn worker"
    assert "\n" in table.rows[0]["settings"] and "; " in report.rows[0]["settings"]
    assert table.title.startswith("snapshot 3: env-check of pid 10: 2 processes, 2 readable")
    assert _report([launcher]).sections[0].title.startswith("env-check of pid 10")


def test_the_rule_set_reads_the_bundle():
    ev = Evidence(processes=ProcessEvidence(10, [_proc(10, env={"NCCL_P2P_LEVEL": "sys"})]))
    assert [f.rule for f in process_findings(ev)] == ["env-check-lint"]
