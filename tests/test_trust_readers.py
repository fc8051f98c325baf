"""Every malformed file is one line and exit 2 naming file, line and field (issue 16 §3), whichever
command reads it: one validation layer per file kind, shared by all of its readers."""

import codecs
import json
import pickle
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from tests.data.resultsets import config, curve, engine_trace, write_set

FIXTURES = Path(__file__).parent / "fixtures"
LOG = FIXTURES / "nccl_logs" / "nccl_2.28.9_h200_2ranks_1gpu_hostid_proto_excl_ll_tuning.log"


def _invoke(*args):
    return CliRunner().invoke(cli, list(args), prog_name="ncclprobe")


def _one_line_exit_2(result, *needles):
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output and result.stdout == "", (
        result.output
    )
    for needle in needles:
        assert needle in lines[0], lines[0]


def _results_lines(tmp_path):
    path = write_set(tmp_path / "good.jsonl", [config({}, curve(10, 1))])
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def _write_lines(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return str(path)


# (what is wrong, how to break a good results file's records, what the message names)
RESULT_DEFECTS = [
    (
        "a size that is a word",
        lambda rs: rs[2].update(size_bytes="big"),
        ["line 3", '"size_bytes"'],
    ),
    (
        "a result without config_id",
        lambda rs: rs[2].pop("config_id"),
        ["line 3", '"config_id" is missing'],
    ),
    (
        "a time that is not a number",
        lambda rs: rs[3].update(time_us="fast"),
        ["line 4", '"time_us"'],
    ),
    (
        "NaN, which JSON has not",
        lambda rs: rs.__setitem__(2, json.dumps({**rs[2], "time_us": float("nan")})),
        ["line 3", "NaN"],
    ),
    (
        "a record that is a list",
        lambda rs: rs.__setitem__(2, "[1, 2]"),
        ["line 3", "not a JSON object"],
    ),
    (
        "settings that are not strings",
        lambda rs: rs[1].update(settings={"NCCL_PROTO": 3}),
        ["line 2", '"settings"'],
    ),
    ("an unknown status", lambda rs: rs[2].update(status="great"), ["line 3", '"status"']),
    (
        "a size of 10^30 (report crashed on it)",
        lambda rs: rs[2].update(size_bytes=10**30),
        ["line 3", '"size_bytes"', "from 0 to 281474976710656"],
    ),
    (
        "a time of 400 digits",
        lambda rs: rs[3].update(time_us=10**400),
        ["line 4", '"time_us"'],
    ),
]


@pytest.mark.parametrize(
    "what, damage, needles", RESULT_DEFECTS, ids=[d[0] for d in RESULT_DEFECTS]
)
def test_a_malformed_results_file_is_named_with_line_and_field_by_every_reader(
    tmp_path, what, damage, needles
):
    records = _results_lines(tmp_path)
    damage(records)
    bad = _write_lines(tmp_path / "bad.jsonl", records)
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(engine_trace({1 << 14: 10})))
    for args in (
        ["recommend", bad],
        ["report", bad, "--output", str(tmp_path / "rep")],
        ["diagnose", "--trace", str(trace), "--sweep", bad],
        ["sweep", "--resume", bad],
    ):
        _one_line_exit_2(_invoke(*args), "bad.jsonl", *needles)
    assert not (tmp_path / "rep").exists()


TRACE_DEFECTS = [
    (
        "runs entries that are not objects",
        lambda t: t["runs"].__setitem__(0, "oops"),
        ["runs[0]", "run"],
    ),
    (
        "a collective size that is a word",
        lambda t: t["runs"][1]["collectives"]["sizes"][0].update(size_bytes="big"),
        ["runs[1].collectives.sizes[0]", "size_bytes"],
    ),
    (
        "a phase that is a number",
        lambda t: t["runs"][0]["phases"].update(decode=3),
        ["runs[0].phases", "decode"],
    ),
    (
        "a histogram of words",
        lambda t: t["runs"][1]["acceptance"].update(histogram=["a"]),
        ["histogram"],
    ),
    (
        "a non-numeric throughput",
        lambda t: t["runs"][1].update(tokens_per_s="fast"),
        ["tokens_per_s"],
    ),
]


@pytest.mark.parametrize("what, damage, needles", TRACE_DEFECTS, ids=[d[0] for d in TRACE_DEFECTS])
def test_a_malformed_engine_trace_is_named_by_every_reader(tmp_path, what, damage, needles):
    results = write_set(tmp_path / "s.jsonl", [config({}, curve(10, 1))])
    doc = engine_trace({1 << 14: 10})
    damage(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    good = tmp_path / "good.json"
    good.write_text(json.dumps(engine_trace({1 << 14: 10})))
    for args in (
        ["diagnose", "--trace", str(bad)],
        ["diagnose", "--trace", str(good), "--baseline", str(bad)],
        ["recommend", results, "--trace", str(bad)],
        ["report", results, "--trace", str(bad), "--output", str(tmp_path / "rep")],
    ):
        _one_line_exit_2(_invoke(*args), "bad.json", *needles)


@pytest.mark.parametrize(
    "doc, needles",
    [
        (
            {
                "kind": "env-check",
                "schema_version": 1,
                "root_pid": 7,
                "processes": ["x"],
                "verdict": {},
            },
            ["processes[0]"],
        ),
        (
            {
                "kind": "env-check",
                "schema_version": 1,
                "root_pid": "seven",
                "processes": [],
                "verdict": {},
            },
            ['"root_pid"'],
        ),
        (
            {
                "kind": "env-check",
                "schema_version": 1,
                "root_pid": 7,
                "processes": [],
                "verdict": {"findings": [3]},
            },
            ['"findings"[0]'],
        ),
        ({"kind": "sweep"}, ["not an env-check document"]),
    ],
)
def test_a_malformed_env_check_document_is_named(tmp_path, doc, needles):
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(engine_trace({1 << 14: 10})))
    bad = tmp_path / "env.json"
    bad.write_text(json.dumps(doc))
    _one_line_exit_2(
        _invoke("diagnose", "--trace", str(trace), "--env-check", str(bad)), "env.json", *needles
    )


@pytest.mark.parametrize(
    "data, needles",
    [
        (
            pickle.dumps({"version": "2.10", "entries": [{"profiling_name": 7}]}),
            ['"profiling_name"'],
        ),
        (pickle.dumps({"version": "2.10", "entries": [], "pg_status": {"x": {}}}), ["pg_status"]),
        (pickle.dumps({"version": "two", "entries": []}), ['"version"']),
        (pickle.dumps({"entries": []}), ["not a Flight Recorder dump"]),
        (b'{"version": "2.10", "entries": [', ["not JSON"]),
        (b'{"version": "2.10", "entries": [], "x": NaN}', ["NaN"]),
        (b"\x80\x02cposix\nsystem\nq\x00.", ["opcode GLOBAL"]),
        (b"\x80\x02]q\x00(K\x01K\x02", ["not a readable pickle"]),
    ],
)
def test_a_malformed_flight_recorder_dump_is_named(tmp_path, data, needles):
    """The Flight Recorder reader (issue 27): a torn or foreign dump is one line naming file and field;
    hostile pickles are tests/test_flight_recorder_reader.py's."""
    bad = tmp_path / "nccl_trace_rank_0"
    bad.write_bytes(data)
    _one_line_exit_2(
        _invoke("diagnose", "--flight-recorder", str(bad)), "nccl_trace_rank_0", *needles
    )


@pytest.mark.parametrize(
    "doc, needle",
    [
        ({"kind": "recommendation", "schema_version": 1, "env": {"NCCL_PROTO": 1}}, '"env"'),
        (
            {"kind": "recommendation", "schema_version": 1, "env": {"NCCL PROTO": "LL"}},
            "not a variable name",
        ),
        ({"kind": "recommendation", "schema_version": 2, "env": {}}, "schema_version 2"),
        ([1, 2], "not a recommendation file"),
    ],
)
def test_a_malformed_recommendation_is_named_by_every_reader(tmp_path, doc, needle):
    bad = tmp_path / "rec.json"
    bad.write_text(json.dumps(doc))
    _one_line_exit_2(
        _invoke("env-check", "--pid", "1", "--expect-from", str(bad)), "rec.json", needle
    )
    _one_line_exit_2(_invoke("run-engine", "--tuned", str(bad)), "rec.json", needle)


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda p: p.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 4), "binary"),
        (lambda p: p.write_bytes(b""), "empty"),
        (lambda p: p.write_text('{"kind": '), "not JSON"),
        (lambda p: p.mkdir(), "directory"),
    ],
)
def test_binary_empty_truncated_files_and_directories_are_named(tmp_path, make, needle):
    path = tmp_path / "input"
    make(path)
    _one_line_exit_2(_invoke("diagnose", "--trace", str(path)), "input", needle)


def test_dev_zero_is_refused_without_reading_it_all():
    _one_line_exit_2(_invoke("nccl-log", "/dev/zero"), "/dev/zero", "not a regular file")
    _one_line_exit_2(_invoke("diagnose", "--trace", "/dev/zero"), "/dev/zero")


def test_an_input_over_the_size_limit_is_refused(tmp_path, monkeypatch):
    from ncclprobe import validate

    monkeypatch.setattr(validate, "DEFAULT_LIMIT", 1000)
    big = tmp_path / "big.log"
    big.write_text("x" * 2000)
    with pytest.raises(Exception, match="larger than"):
        validate.read_text(big, "NCCL log")


@pytest.mark.parametrize(
    "encoding, bom",
    [
        ("utf-16-le", codecs.BOM_UTF16_LE),
        ("utf-16-be", codecs.BOM_UTF16_BE),
        ("utf-16-le", b""),
        ("utf-8", codecs.BOM_UTF8),
    ],
)
def test_utf16_and_bom_files_read_as_the_text_they_are(tmp_path, encoding, bom):
    """PowerShell's `>` writes UTF-16: the same log, the same facts."""
    text = LOG.read_text(encoding="utf-8")
    path = tmp_path / "log.txt"
    path.write_bytes(bom + text.encode(encoding))
    expected, got = (
        _invoke("nccl-log", str(LOG), "--format", "json"),
        _invoke("nccl-log", str(path), "--format", "json"),
    )
    assert got.exit_code == expected.exit_code and got.exit_code in (0, 1), got.output
    strip = lambda out: {k: v for k, v in json.loads(out).items() if k != "files"}  # noqa: E731
    assert strip(got.stdout) == strip(expected.stdout)


def test_a_torn_last_line_is_a_killed_write_not_an_error(tmp_path):
    records = _results_lines(tmp_path)
    path = tmp_path / "torn.jsonl"
    path.write_text(
        "".join(json.dumps(r) + "\n" for r in records) + '{"record": "result", "config_id": "def'
    )
    result = _invoke("recommend", str(path))
    assert result.exit_code in (0, 1) and "torn" not in result.stderr, result.output


# --- one JSON policy and one input limit (issue 29 §3) ---------------------------------------------


@pytest.mark.parametrize(
    "text, needle",
    [
        ('{"a": NaN}', "NaN is not a JSON number"),
        ('{"a": -Infinity}', "-Infinity is not a JSON number"),
        ('{"a": 1e309}', "1e309 is beyond the range of a number"),
        ('{"a": [{"b": 1, "b": 2}]}', "the key 'b' is given twice"),
        ('{"a": 1} {"a": 2}', "data after the end of the JSON document"),
        ('{"a": 1}\nx', "data after the end of the JSON document"),
        ('{"a": ' + "9" * 4301 + "}", "an integer of more than 4300 digits"),
        ("[" * 100000 + "]" * 100000, "nested too deeply"),
        ('{\n"a": 1,\n"b": NaN}', "at line 3"),
    ],
)
def test_every_json_reader_shares_one_policy(text, needle):
    from ncclprobe.errors import UsageProblem
    from ncclprobe.validate import loads_json

    with pytest.raises(UsageProblem, match=needle) as refused:
        loads_json(text, "f.json")
    assert str(refused.value).startswith("f.json") and "\n" not in str(refused.value)


def test_the_json_policy_accepts_what_is_json_up_to_each_bound():
    """The healthy twins: the largest finite float, 4300 digits, a key once per object, blanks after."""
    from ncclprobe.validate import loads_json

    doc = loads_json('{"a": 1.7976931348623157e308, "b": ' + "9" * 4300 + ', "c": {"a": 1}}\n', "f")
    assert doc["a"] > 1e308 and len(str(doc["b"])) == 4300 and doc["c"] == {"a": 1}
    assert loads_json('"NaN"', "f") == "NaN"  # a string that says NaN is a string


def _trace(tmp_path, events: int):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "i", "n": i} for i in range(events)]}))
    return path


def test_a_profile_reads_up_to_its_event_limit_and_the_variable_raises_it(tmp_path, monkeypatch):
    from ncclprobe.errors import UsageProblem
    from ncclprobe.evidence.run.profile import stream

    seen = []
    monkeypatch.setattr(stream, "MAX_EVENTS", 5)
    stream.read_events(_trace(tmp_path, 5), seen.append)
    assert len(seen) == 5
    with pytest.raises(UsageProblem, match="more than 5 events.*NCCLPROBE_MAX_PROFILE_EVENTS"):
        stream.read_events(_trace(tmp_path, 6), seen.append)
    monkeypatch.setenv("NCCLPROBE_MAX_PROFILE_EVENTS", "6")
    stream.read_events(_trace(tmp_path, 6), seen.append)
    monkeypatch.setenv("NCCLPROBE_MAX_PROFILE_EVENTS", "²")
    with pytest.raises(UsageProblem, match="NCCLPROBE_MAX_PROFILE_EVENTS"):
        stream.read_events(_trace(tmp_path, 1), seen.append)


def test_a_profile_reads_up_to_its_byte_limit_decompressed(tmp_path, monkeypatch):
    import gzip

    from ncclprobe.errors import UsageProblem
    from ncclprobe.evidence.run.profile import stream

    plain = _trace(tmp_path, 3)
    size = plain.stat().st_size
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    monkeypatch.setattr(stream, "DEFAULT_LIMIT", size)
    for path in (plain, packed):
        stream.read_events(path, lambda e: None)
    monkeypatch.setattr(stream, "DEFAULT_LIMIT", size - 1)
    with pytest.raises(UsageProblem, match="decompresses to more than.*NCCLPROBE_MAX_INPUT_MIB"):
        stream.read_events(packed, lambda e: None)
    with pytest.raises(UsageProblem, match="is larger than"):
        stream.read_events(plain, lambda e: None)
    assert stream.MAX_EVENTS == 3_000_000 and stream.DEFAULT_LIMIT == size - 1


def test_the_input_variable_only_raises_limits(monkeypatch):
    from ncclprobe.errors import UsageProblem
    from ncclprobe.validate import DEFAULT_LIMIT, MIB, limit_of

    assert limit_of(DEFAULT_LIMIT) == DEFAULT_LIMIT == 1024 * MIB
    monkeypatch.setenv("NCCLPROBE_MAX_INPUT_MIB", "2048")
    assert limit_of(DEFAULT_LIMIT) == 2048 * MIB and limit_of(8 * MIB) == 2048 * MIB
    monkeypatch.setenv("NCCLPROBE_MAX_INPUT_MIB", "1")
    assert limit_of(DEFAULT_LIMIT) == DEFAULT_LIMIT
    for bad in ("0", "nan", "1e3"):
        monkeypatch.setenv("NCCLPROBE_MAX_INPUT_MIB", bad)
        with pytest.raises(UsageProblem, match="NCCLPROBE_MAX_INPUT_MIB"):
            limit_of(DEFAULT_LIMIT)


def test_blanks_are_skipped_in_blocks(tmp_path):
    """A whitespace bomb costs the regular expression's time, not a Python loop per character:
    40 MB of blanks between two events read in well under the seconds a character loop took."""
    import time

    from ncclprobe.evidence.run.profile import stream

    path = tmp_path / "blank.json"
    path.write_text('{"traceEvents": [{"ph": "i"},' + " \n\t" * (13 << 20) + '{"ph": "i"}]}  ')
    seen, started = [], time.perf_counter()
    stream.read_events(path, seen.append)
    assert len(seen) == 2 and time.perf_counter() - started < 5


@pytest.mark.parametrize(
    "text",
    ["", "a", "a\n", "a\nb", "a\r\nb\r\n", "x" * 3000 + "\nb\n", "\n\n\na\n", "a\rb\rc", "é" * 999],
)
def test_a_streamed_log_has_the_lines_of_the_whole_text(tmp_path, monkeypatch, text):
    from ncclprobe.evidence import text as streamed

    monkeypatch.setattr(streamed, "CHUNK", 7)  # every line split by a chunk's end somewhere
    for encoding in ("utf-8", "utf-16"):
        path = tmp_path / "log.txt"
        path.write_bytes(text.encode(encoding))
        assert list(streamed.read_text_lines(path, "log")) == text.splitlines()
