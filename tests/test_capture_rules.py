"""The rules capture's diagnosis adds, each pinned at its thresholds and on its healthy twin:
- `late-rank`: the rank that comes late to the collectives, from the Flight Recorder's issue times
  (the real gloo dumps of tests/fixtures/flight_recorder, with one rank's times moved to the boundary);
- `capture-settings`: a setting of the job that never reached a worker (capture records);
- `spec-config`: an EAGLE-3 draft run as EAGLE, named from its server log;
- `host-call`: the host function behind the gaps, on the real host-bound CPU profile.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from ncclprobe.diagnose import diagnose, load_evidence
from ncclprobe.diagnose.hang import rules_arrival as A
from ncclprobe.diagnose.process_env import rules_capture as C
from ncclprobe.evidence.bundle import Evidence
from ncclprobe.evidence.hang.flight_recorder import read_flight_recorder
from ncclprobe.evidence.hang.fr_table import EntryTable
from ncclprobe.evidence.live.capture_dir import CapturedProcess, CaptureRecord
from ncclprobe.findings import Finding, NotChecked, RuledOut

FIXTURES = Path(__file__).parent / "fixtures"
HEALTHY_GLOO = FIXTURES / "flight_recorder" / "gloo" / "healthy" / "dumps"
LOGS = FIXTURES / "server_logs"
AS_EAGLE = LOGS / "handwritten_sglang_eagle3_draft_as_eagle_pr21272.log"
AS_EAGLE3 = LOGS / "handwritten_sglang_eagle3_draft_as_eagle3_twin.log"
KIMI_DRAFT = FIXTURES / "spec_config" / "specforge_kimi-k25-eagle3.json"
HOST_BOUND = FIXTURES / "profiles" / "host" / "host_bound_item_cpu.json.gz"
MS = 1_000_000


# ---- late-rank -----------------------------------------------------------------------------------


def _late(late: dict[int, dict[int, float]]) -> list:
    """The real healthy dumps, with `late[rank][seq]` ms added to that rank over rank 0's time
    (rank 0 the reference, or rank 1 when rank 0 is the late one)."""
    dumps = read_flight_recorder([HEALTHY_GLOO])
    times = {d.rank: {e.collective_seq: e.time_created_ns for e in d.entries} for d in dumps}
    out = []
    for dump in dumps:
        table = EntryTable()
        for e in dump.entries:
            shift = late.get(dump.rank, {}).get(e.collective_seq)
            if shift is not None:
                other = times[1 - dump.rank][e.collective_seq]
                e = dataclasses.replace(e, time_created_ns=other + round(shift * MS))
            table.add(e)
        out.append(dataclasses.replace(dump, table=table))
    return A.arrival_findings(Evidence(runs=[], flight_recorder=out))


def test_healthy_gloo_dumps_rule_a_late_rank_out():
    (outcome,) = _late({})
    assert isinstance(outcome, RuledOut) and "6 collective call(s)" in outcome.reason


def test_late_rank_named_at_the_floor_and_not_below_it():
    at = {1: dict.fromkeys((1, 2, 3), A.LATE_FLOOR_MS)}
    below = {1: dict.fromkeys((1, 2, 3), A.LATE_FLOOR_MS - 0.001)}
    (named,) = _late(at)
    assert isinstance(named, Finding) and named.evidence["rank"] == 1
    assert named.evidence["late_calls"] == 3 and named.confidence == "high"  # gloo: host = arrival
    assert isinstance(_late(below)[0], RuledOut)


def test_late_rank_needs_min_late_calls():
    late = dict.fromkeys(range(1, A.MIN_LATE_CALLS), 50.0)
    assert isinstance(_late({1: late})[0], RuledOut)
    late[A.MIN_LATE_CALLS] = 50.0
    assert isinstance(_late({1: late})[0], Finding)


def test_late_rank_needs_its_share_of_the_late_calls():
    # 4 of 6 late calls (2/3, the share) are rank 1's: named; 3 of 5: not
    named = _late({1: dict.fromkeys((1, 2, 3, 4), 50.0), 0: dict.fromkeys((5, 6), 50.0)})
    assert isinstance(named[0], Finding) and named[0].evidence["late_calls_of_any_rank"] == 6
    shared = _late({1: dict.fromkeys((1, 2, 3), 50.0), 0: dict.fromkeys((4, 5), 50.0)})
    assert not any(isinstance(o, Finding) for o in shared)


# ---- capture-settings -----------------------------------------------------------------------------


def _process(pid, ppid, *, missing=(), libnccl=None, nccl_read=None, python=True, rank=None):
    return CapturedProcess(
        pid=pid,
        ppid=ppid,
        command=f"python train.py --pid {pid}",
        role="process",
        python=python,
        libnccl=libnccl,
        injob=python,
        rank=rank,
        readable=True,
        empty_block=False,
        missing=tuple(missing),
        changed={},
        capture_missing=(),
        nccl_read=dict(nccl_read or {}),
    )


def _record(processes, settings=None, nccl_loaded=False) -> CaptureRecord:
    return CaptureRecord(
        directory="cap",
        command="torchrun train.py",
        exit_code=0,
        ended_by="exit",
        settings={"NCCL_SOCKET_IFNAME": "lo"} if settings is None else settings,
        added={},
        replaced={},
        collected={},
        missing={},
        notes=(),
        processes=tuple(processes),
        nccl_loaded=nccl_loaded,
    )


def _settings(record) -> list:
    return C.capture_findings(Evidence(runs=[], capture=record))


def test_a_setting_that_reached_every_worker_is_ruled_out():
    (outcome,) = _settings(_record([_process(10, 1), _process(11, 10)]))
    assert isinstance(outcome, RuledOut) and "2 worker process(es)" in outcome.reason


def test_a_lost_setting_without_nccl_is_a_warning_naming_the_worker_and_its_parent():
    (found,) = _settings(
        _record([_process(10, 1), _process(11, 10, missing=["NCCL_SOCKET_IFNAME"], rank=2)])
    )
    assert found.severity == "warning" and "pid 11 (rank 2)" in found.title
    assert "python train.py --pid 11" in found.detail and "pid 10" in found.detail
    assert "NCCL is not loaded in this run" in found.detail
    assert found.evidence["lost"][0]["parent_has"] is True


def test_the_lost_rows_evidence_names_the_worker_and_what_its_parent_had():
    """Each lost row: the worker (pid, rank, command, libnccl) and its parent (pid, command, and
    whether it had the setting); a parent that lacked it too, and a worker whose parent was not
    seen, say so."""
    parent = _process(10, 1)
    orphan = _process(12, None, missing=["NCCL_SOCKET_IFNAME"])
    lost = _process(11, 10, missing=["NCCL_SOCKET_IFNAME"], libnccl="/x/libnccl.so.2", rank=2)
    (found,) = _settings(_record([parent, lost, orphan], nccl_loaded=True))
    rows = {row["pid"]: row for row in found.evidence["lost"]}
    assert rows[11] == {
        "pid": 11,
        "rank": 2,
        "command": "python train.py --pid 11",
        "libnccl": "/x/libnccl.so.2",
        "parent_pid": 10,
        "parent_command": "python train.py --pid 10",
        "parent_has": True,
    }
    assert (rows[12]["parent_pid"], rows[12]["parent_command"], rows[12]["parent_has"]) == (
        None,
        None,
        None,
    )
    shared = _process(10, 1, missing=["NCCL_SOCKET_IFNAME"])
    (found,) = _settings(_record([shared, lost], nccl_loaded=True))
    assert {r["pid"]: r["parent_has"] for r in found.evidence["lost"]}[11] is False


def test_a_lost_setting_in_a_worker_that_loaded_nccl_is_an_error():
    lost = _process(11, 10, missing=["NCCL_SOCKET_IFNAME"], libnccl="/x/libnccl.so.2")
    (found,) = _settings(_record([_process(10, 1), lost], nccl_loaded=True))
    assert found.severity == "error" and "ran with its default" in found.detail


def test_a_setting_the_worker_set_itself_arrived_as_nccl_says():
    arrived = _process(
        11, 10, missing=["NCCL_SOCKET_IFNAME"], nccl_read={"NCCL_SOCKET_IFNAME": "lo"}
    )
    outcomes = _settings(_record([_process(10, 1), arrived]))
    assert [o.severity for o in outcomes if isinstance(o, Finding)] == ["info"]
    assert any(isinstance(o, RuledOut) for o in outcomes)


def test_no_setting_to_follow_is_not_checked():
    (outcome,) = _settings(_record([_process(10, 1)], settings={}))
    assert isinstance(outcome, NotChecked)


def test_non_workers_are_not_judged():
    shell = _process(12, 1, missing=["NCCL_SOCKET_IFNAME"], python=False)
    (outcome,) = _settings(_record([_process(10, 1), shell]))
    assert isinstance(outcome, RuledOut)


# ---- spec-config ----------------------------------------------------------------------------------


def _spec(log, **extra):
    result = diagnose(load_evidence(server_logs=[log], **extra))
    findings = [f for f in result.findings if f.rule == "spec-config"]
    ruled = [r for r in result.ruled_out if r.rule == "spec-config"]
    return findings, ruled, result


def test_an_eagle3_draft_run_as_eagle_is_named_from_its_log():
    findings, _, result = _spec(AS_EAGLE)
    (found,) = findings
    assert found.severity == "error" and found.confidence == "high"
    assert "EAGLE-3 draft runs as EAGLE" in found.title and "EAGLE3" in found.next_command
    assert "sgl-project/sglang#21272" in found.detail
    assert result.findings[0] is found  # the cause, first
    # the symptom ("rarely accepted", rules_log's) may stand below its cause, never above it
    ranks = {f.rule: i for i, f in reversed(list(enumerate(result.findings)))}
    assert ranks.get("acceptance", len(result.findings)) > ranks["spec-config"]


def test_its_healthy_twin_with_the_drafts_config_rules_both_out(tmp_path):
    target = tmp_path / "config.json"
    target.write_text('{"hidden_size": 7168, "num_hidden_layers": 61, "vocab_size": 163840}')
    findings, ruled, _ = _spec(AS_EAGLE3, draft_config=KIMI_DRAFT, model_config=target)
    assert findings == []
    reasons = " ".join(r.reason for r in ruled)
    assert "an EAGLE-3 draft" in reasons and "LlamaForCausalLMEagle3" in reasons
    assert "auxiliary layers [2, 30, 58] of 61" in reasons


def test_a_draft_that_does_not_fit_its_target(tmp_path):
    small = tmp_path / "config.json"
    small.write_text('{"hidden_size": 7168, "num_hidden_layers": 58, "vocab_size": 163840}')
    findings, _, _ = _spec(AS_EAGLE3, draft_config=KIMI_DRAFT, model_config=small)
    (found,) = findings
    assert "auxiliary layers [2, 30, 58] reach past the target's 58 layers" in found.detail


# ---- host-call -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def host_bound():
    return load_evidence(profiles=[HOST_BOUND])


def test_the_host_bound_profile_names_the_function_and_its_syncs(host_bound):
    result = diagnose(host_bound)
    (found,) = [f for f in result.findings if f.rule == "host-call"]
    top = found.evidence["functions"][0]
    assert top["function"].endswith("postprocess") and top["call"] == "aten::item"
    assert top["syncs_per_step"] == 4096.0
    assert found.evidence["basis"] == "outside-forward"
    assert "CPU-only profile has no idle GPU" in found.detail
    assert result.findings[0] is found


@pytest.mark.parametrize("factor, kind", [(1.0, Finding), (1.0001, RuledOut)])
def test_host_call_named_from_min_share_of_the_step(monkeypatch, host_bound, factor, kind):
    from ncclprobe.diagnose.run import rules_host

    report, _rank = host_bound.runs[0].host
    of_step = report.functions[0].ms_per_step / report.step_ms
    monkeypatch.setattr(rules_host, "MIN_SHARE", of_step * factor)
    outcomes = rules_host.host_call_findings(host_bound)
    assert [type(o) for o in outcomes] == [kind]


# ---- the launcher's own line at a signal -----------------------------------------------------------


def test_torchruns_signal_exception_is_explained_and_its_twin_is_not():
    """torchrun's two lines at SIGTERM (the traceback's source line and the exception), as a capture
    at a hang leaves them in job.log: one info class; another SignalException-less line stays."""
    from ncclprobe.evidence.failure_lines import FailureLines
    from ncclprobe.evidence.nccl.nccl_failures import explain_lines

    found = FailureLines("job log")
    lines = [
        '    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)',
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 2419 got signal: 15",
        "RuntimeError: something else went wrong",
    ]
    for number, line in enumerate(lines, 1):
        found.offer(number, line)
    (kind,) = explain_lines(found)
    assert kind.kind == "launcher-signalled" and kind.severity == "info" and kind.lines == 2
    assert "signal 15 (SIGTERM)" in kind.message
    assert [line.text for line in found.lines] == ["RuntimeError: something else went wrong"]


def _host_outcome(host_bound, *, ranks: int = 1, **top):
    """host-call's outcome on the real host-bound run, its top function changed by `top`, the run
    given `ranks` ranks."""
    from ncclprobe.diagnose.run import rules_host

    run = host_bound.runs[0]
    report, rank = run.host
    first = dataclasses.replace(report.functions[0], **top)
    report = dataclasses.replace(report, functions=(first, *report.functions[1:]))
    run = dataclasses.replace(run, ranks=[dict(run.ranks[0], rank=r) for r in range(ranks)])
    return rules_host._outcome(host_bound, run, report, rank)


def test_host_call_needs_its_function_in_min_steps(host_bound):
    from ncclprobe.diagnose.run.rules_host import MIN_STEPS

    assert isinstance(_host_outcome(host_bound, steps=MIN_STEPS), Finding)
    assert isinstance(_host_outcome(host_bound, steps=MIN_STEPS - 1), RuledOut)


def test_host_call_title_names_the_call_a_function_was_in_when_it_made_no_sync(host_bound):
    named = _host_outcome(host_bound, syncs_per_step=0.0, call="aten::mm")
    assert ", in `aten::mm` (" in named.title and "calls per step" not in named.title
    bare = _host_outcome(host_bound, syncs_per_step=0.0, call=None)
    assert ", in `" not in bare.title and "`postprocess (host_bound.py:16)` (" in bare.title


def test_host_call_says_whose_step_on_several_ranks(host_bound):
    assert "of the 106.695 ms step" in _host_outcome(host_bound, ranks=1).title
    assert "of rank 0's 106.695 ms step" in _host_outcome(host_bound, ranks=2).title


def test_late_rank_reads_three_ranks_and_needs_two():
    """The real 3-rank gloo dumps are compared (not only two ranks'); one rank's dumps alone
    compare nothing (mutation survivor: the count of dumps)."""
    dumps = read_flight_recorder([FIXTURES / "flight_recorder" / "gloo3" / "healthy" / "dumps"])
    assert len(dumps) == 3
    (outcome,) = A.arrival_findings(Evidence(runs=[], flight_recorder=dumps))
    assert isinstance(outcome, RuledOut)
    assert A.arrival_findings(Evidence(runs=[], flight_recorder=dumps[:1])) == []


def test_late_rank_totals_its_lateness_in_seconds():
    (named,) = _late({1: dict.fromkeys((1, 2, 3, 4), 500.0)})
    assert named.evidence["total_s"] == pytest.approx(2.0, abs=5e-4)
    assert named.evidence["median_ms"] == pytest.approx(500.0, abs=0.5)


def test_a_lost_setting_splits_the_communicator_only_where_some_workers_have_it():
    """Lost in some workers that loaded NCCL: the ranks disagree; lost in every worker: all run the
    default alike (mutation survivor: the comparison of the two counts)."""
    lost = _process(11, 10, missing=["NCCL_SOCKET_IFNAME"], libnccl="/x/libnccl.so.2")
    (some,) = _settings(_record([_process(10, 1), lost], nccl_loaded=True))
    assert "no longer agree" in some.detail
    alone = _process(11, 1, missing=["NCCL_SOCKET_IFNAME"], libnccl="/x/libnccl.so.2")
    every = [f for f in _settings(_record([alone], nccl_loaded=True)) if isinstance(f, Finding)]
    assert every and "no longer agree" not in every[0].detail


def test_a_setting_a_launcher_changed_is_said_with_both_values():
    changed = dataclasses.replace(
        _process(11, 10), changed={"NCCL_SOCKET_IFNAME": {"job": "lo", "here": "eth0"}}
    )
    found = [f for f in _settings(_record([_process(10, 1), changed])) if isinstance(f, Finding)]
    assert [f.title for f in found] == [
        "NCCL_SOCKET_IFNAME was changed for 1 worker(s): the job set lo, they had pid 11: eth0"
    ]


# ---- speculative configurations at their boundaries (mutation survivors) ---------------------------


def _eagle_as_eagle(accept, lines=5, path="/models/kimi-k2.5-eagle3"):
    from ncclprobe.diagnose.run import rules_spec_config as S

    log = {
        "engine": "sglang",
        "speculative_algorithm": "EAGLE",
        "speculative_draft_model_path": path,
        "tokens_per_cycle": accept,
        "tokens_per_cycle_values": lines,
    }
    return S._algorithm(Evidence(runs=[]), None, log)


def test_a_draft_named_eagle3_run_as_eagle_is_sure_only_where_the_log_shows_no_draft_kept():
    from ncclprobe.engine_facts.spec_config import NOT_WORKING

    (at,) = _eagle_as_eagle(NOT_WORKING)
    assert at.confidence == "high" and "The log agrees: 1.00 tokens per cycle over 5" in at.detail
    (one,) = _eagle_as_eagle(1.0)
    assert one.confidence == "high" and "The log agrees" in one.detail
    (kept,) = _eagle_as_eagle(2.5)
    assert kept.confidence == "medium" and "The log shows 2.50 tokens per cycle." in kept.detail
    (unknown,) = _eagle_as_eagle(None)
    assert unknown.confidence == "medium" and "tokens per cycle" not in unknown.detail


def test_a_draft_nothing_names_asks_for_its_config():
    (nameless,) = _eagle_as_eagle(1.0, path=None)
    assert isinstance(nameless, NotChecked) and nameless.missing.endswith("(--draft-config DIR)")
    (plain,) = _eagle_as_eagle(1.0, path="/models/draft")
    assert plain.missing.endswith("(--draft-config /models/draft/config.json)")


def test_an_eagle3_name_needs_a_path_that_says_so():
    from ncclprobe.engine_facts.spec_config import named_eagle3

    assert named_eagle3("lightseekorg/kimi-k2.5-EAGLE-3") and named_eagle3("x/eagle_3")
    assert not named_eagle3(None) and not named_eagle3("") and not named_eagle3("/models/draft")


def test_no_draft_token_kept_at_the_cut_and_drafts_kept_just_above_it():
    from ncclprobe.diagnose.run import rules_spec_config as S
    from ncclprobe.engine_facts.spec_config import NOT_WORKING

    assert NOT_WORKING == 1.005
    (broken,) = S._not_working(None, {"tokens_per_cycle": 1.005})
    assert isinstance(broken, Finding) and broken.evidence["lines"] == 0
    assert broken.confidence == "medium" and "in 0 decode line(s)" in broken.title
    (sure,) = S._not_working(None, {"tokens_per_cycle": 1.0, "tokens_per_cycle_values": 3})
    assert sure.confidence == "high"
    assert isinstance(S._not_working(None, {"tokens_per_cycle": 1.006})[0], RuledOut)


def test_a_draft_vocab_size_not_the_targets_is_named():
    from ncclprobe.diagnose.run import rules_spec_config as S
    from ncclprobe.evidence.run.draft_config import DraftConfig

    def judged(vocab_size):
        draft = DraftConfig(
            "d/config.json", ("LlamaForCausalLMEagle3",), vocab_size, None, 64, None, None
        )
        ev = Evidence(runs=[], config={"model": {"vocab": 32000, "layers": 8}})
        ev.draft_config = draft
        return S._draft_against_target(ev)

    (other,) = judged(32001)
    assert (
        isinstance(other, Finding)
        and "vocab_size (32001) is not the target's (32000)" in other.title
    )
    assert isinstance(judged(32000)[0], RuledOut)


def test_low_acceptance_defers_to_the_configuration_error_that_explains_it():
    """An EAGLE-3 draft run as EAGLE: the acceptance finding names spec-config's cause as the first
    fix and no weak-draft lever (another draft, fewer speculative tokens) beside it."""
    _, _, result = _spec(AS_EAGLE)
    [cause] = [f for f in result.findings if f.rule == "spec-config"]
    [low] = [f for f in result.findings if f.rule == "acceptance"]
    assert low.title.endswith("(bonus included); spec-config names the cause")
    assert low.detail == (
        "Each cycle keeps few of its drafted tokens, so speculation pays a draft and a verify for "
        "little more than the one token a plain decode step gives. The configuration is the first "
        f"thing to fix (spec-config: {cause.title}): until the draft runs as it was made to, this "
        "acceptance says nothing about how good the draft is: fix that, then read the acceptance "
        "again."
    )


def test_low_acceptance_without_a_configuration_error_names_the_weak_drafts_levers(tmp_path):
    """The twin: the same low acceptance where the draft runs as EAGLE3 and keeps some tokens (no
    configuration error named): the weak draft's levers, as before."""
    log = tmp_path / "weak.log"
    log.write_text(re.sub(r"accept len: [0-9.]+", "accept len: 1.30", AS_EAGLE3.read_text()))
    _, _, result = _spec(log)
    assert not [f for f in result.findings if f.rule == "spec-config"]
    [low] = [f for f in result.findings if f.rule == "acceptance"]
    assert "names the cause" not in low.title
    assert low.detail.endswith(
        "A draft trained on this model's own outputs, or fewer speculative tokens, are the levers."
    )


def test_low_acceptance_defers_to_a_draft_that_keeps_no_token(tmp_path):
    """The algorithm right (EAGLE3 for an EAGLE-3 draft) but not one draft token kept: spec-config's
    "does not work" (a broken or mismatched draft, not a weak one) is the cause named."""
    log = tmp_path / "none_kept.log"
    log.write_text(re.sub(r"accept len: [0-9.]+", "accept len: 1.00", AS_EAGLE3.read_text()))
    _, _, result = _spec(log)
    [cause] = [f for f in result.findings if f.rule == "spec-config"]
    [low] = [f for f in result.findings if f.rule == "acceptance"]
    assert cause.title.startswith("the draft does not work")
    assert f"(spec-config: {cause.title})" in low.detail and "are the levers" not in low.detail
