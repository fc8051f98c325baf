"""A profile's events parsed strictly (`timeline.bad_field`): an event whose time or other kept field
is not what Kineto writes is never read as 0 or trusted, but skipped and named, event and field, in
a note; where every step annotation is malformed the steps cannot be read, and the file is refused
in one line (exit 2), instead of a report that says the profile holds no step annotation.
On `handwritten_graph_share_cut_4steps.json` (tests/fixtures/profiles/INDEX.md): 4 ProfilerSteps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.diagnose import diagnose, load_evidence

FOUR_STEPS = (
    Path(__file__).parent / "fixtures" / "profiles" / "handwritten_graph_share_cut_4steps.json"
)


def _damaged(tmp_path, **fields_by_step) -> Path:
    """The fixture with ProfilerStep#N's fields replaced (`fields_by_step["1"] = {"dur": -5}`)."""
    doc = json.loads(FOUR_STEPS.read_text())
    for event in doc["traceEvents"]:
        step = str(event.get("name", "")).removeprefix("ProfilerStep#")
        event.update(fields_by_step.get(step, {}))
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    return path


def _steps(path: Path) -> tuple[int, list[str]]:
    ev = load_evidence(profiles=[path])
    return sum(p.count for p in ev.runs[0].phases.values()), list(
        dict.fromkeys(ev.notes + ev.runs[0].notes)
    )


@pytest.mark.parametrize(
    "fields,said",
    [
        ({"ts": "a"}, "\"ts\": 'a' is no time"),
        ({"ts": None}, '"ts": None is no time'),
        ({"ts": True}, '"ts": True is no time'),
        ({"ts": [2000]}, '"ts": [2000] is no time'),
        ({"dur": -5}, '"dur": -5 is a negative duration'),
        ({"dur": -0.001}, '"dur": -0.001 is a negative duration'),
        ({"dur": "400x"}, "\"dur\": '400x' is no time"),
        ({"name": "ProfilerStep#1", "tid": [1]}, '"tid": [1] is not what Kineto writes there'),
    ],
)
def test_a_malformed_step_is_skipped_and_named_with_its_field(tmp_path, fields, said):
    count, notes = _steps(_damaged(tmp_path, **{"1": fields}))
    assert count == 3
    [note] = [n for n in notes if "skipped" in n]
    assert note == (
        "p.json: 1 event(s) skipped whose fields are not what Kineto writes; the first, event "
        f"'ProfilerStep#1' (user_annotation): {said}; 1 of them step annotation(s): the steps "
        "they marked are missing from the step times"
    )


@pytest.mark.parametrize("fields", [{"dur": 0}, {"ts": "2000.0"}, {"ts": 2000}, {"dur": 400}])
def test_its_healthy_twin_keeps_every_step_and_says_nothing(tmp_path, fields):
    """A zero duration, a time written as text (some exporters) or as a whole number are times."""
    count, notes = _steps(_damaged(tmp_path, **{"1": fields}))
    assert count == 4 and not [n for n in notes if "skipped" in n]


def test_every_step_malformed_is_one_line_and_exit_2(tmp_path):
    bad = {str(n): {"ts": "a"} for n in range(4)}
    result = CliRunner().invoke(
        cli, ["diagnose", "--profile", str(_damaged(tmp_path, **bad))], prog_name="ncclprobe"
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"ncclprobe: error: {tmp_path / 'p.json'}: every step annotation is malformed (4; the "
        "first, event 'ProfilerStep#0' (user_annotation): \"ts\": 'a' is no time): the steps "
        "cannot be read from it"
    ]
    assert "no step annotation" not in result.output


def test_a_malformed_kernel_is_named_and_the_steps_stand(tmp_path):
    doc = json.loads(FOUR_STEPS.read_text())
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["ts"] = "soon"
    path = tmp_path / "k.json"
    path.write_text(json.dumps(doc))
    count, notes = _steps(path)
    assert count == 4
    assert (
        "k.json: 1 event(s) skipped whose fields are not what Kineto writes; the first, event "
        "'graphed_gemm_kernel' (kernel): \"ts\": 'soon' is no time"
    ) in notes
    assert "no step could be found" not in " ".join(
        f.title for f in diagnose(load_evidence(profiles=[path])).findings
    )


# ---- bad_field's words and boundaries (timeline.bad_field) ---------------------------------------


def _event(**fields):
    return {"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0, "dur": 1.0, **fields}


@pytest.mark.parametrize(
    "fields,said",
    [
        ({"ts": "1.5"}, None),
        ({"ts": "1e3"}, None),
        ({"ts": "1" * 40}, None),  # 40 characters: still read
        ({"ts": "1" * 41}, '"ts": \'' + "1" * 36 + "... is no time"),  # its repr cut at 37
        ({"ts": "nan"}, "\"ts\": 'nan' is no time"),
        ({"ts": "1.2.3"}, "\"ts\": '1.2.3' is no time"),
        ({"ts": ""}, "\"ts\": '' is no time"),
        ({"ts": 2**63 - 1}, None),
        ({"ts": 2**63}, '"ts": 9223372036854775808 is no time'),
        ({"ts": -(2**63)}, '"ts": -9223372036854775808 is no time'),
        ({"dur": "-5"}, "\"dur\": '-5' is a negative duration"),
        ({"dur": 0}, None),
        ({"ts": -5}, None),  # a time before the trace's base is a time; only a duration is >= 0
        ({"ts": -5, "dur": -0.5}, '"dur": -0.5 is a negative duration'),
        ({"cat": 3}, '"cat": 3 is not what Kineto writes there'),
        ({"name": ["k"]}, "\"name\": ['k'] is not what Kineto writes there"),
        ({"tid": True}, '"tid": True is not what Kineto writes there'),
        ({"args": [1]}, '"args": [1] is not what Kineto writes there'),
        ({"args": {"correlation": -1}}, '"args.correlation": -1 is no id'),
        ({"args": {"correlation": 0}}, None),
        ({"args": {"External id": 2**64 - 1}}, None),
        ({"args": {"External id": 2**64}}, '"args.External id": 18446744073709551616 is no id'),
        ({"args": {"Seq": 2**64 + 1}}, '"args.Seq": 18446744073709551617 is no id'),
        ({"args": {"Seq": True}}, '"args.Seq": True is no id'),
        ({"args": {"Collective name": 5}}, '"args.Collective name": 5 is no text'),
        ({"args": {"dtype": None, "Collective name": "allreduce"}}, None),
    ],
)
def test_bad_field_names_the_field_and_what_it_held(fields, said):
    from ncclprobe.evidence.run.profile.timeline import bad_field, well_formed

    event = _event(**fields)
    assert bad_field(event) == said
    assert well_formed(event) is (said is None)


def test_a_missing_ts_is_no_time_and_a_missing_dur_is_none():
    from ncclprobe.evidence.run.profile.timeline import _num, bad_field

    event = _event()
    del event["dur"]
    assert bad_field(event) is None and _num(event, "dur") == 0.0
    del event["ts"]
    assert bad_field(event) == '"ts": None is no time'


def test_the_event_is_named_short_with_its_category():
    from ncclprobe.evidence.run.profile.timeline import _event_words

    assert _event_words({"name": "n" * 60, "cat": "c" * 40}) == f"event '{'n' * 60}' ({'c' * 40})"
    assert _event_words({"name": "n" * 61, "cat": "c" * 41}) == f"event '{'n' * 57}...'"
    assert _event_words({"name": 5}) == "event (unnamed)"


def test_the_counts_of_a_file_of_malformed_events(tmp_path):
    """Every event malformed but no step annotation among them: the file is read (nothing kept),
    each count said; an empty trace is refused."""
    from ncclprobe.errors import UsageProblem
    from ncclprobe.evidence.run.profile.timeline import read_timeline

    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [_event(ts="a"), _event(dur=-1), _event()]}))
    read = read_timeline(str(path))
    assert (read.events, read.malformed, read.malformed_steps) == (3, 2, 0)
    assert read.malformed_first == "event 'k' (kernel): \"ts\": 'a' is no time"
    assert read.malformed_step_first == "" and len(read.kernels) == 1
    path.write_text(json.dumps({"traceEvents": []}))
    with pytest.raises(UsageProblem, match="no events"):
        read_timeline(str(path))
