"""The Flight Recorder reader: real dumps (tests/fixtures/flight_recorder, recorded with torch's own
writer), hand-written dumps of the older schema versions (tests/flight_recorder_dumps.py), and
hostile pickles that must be refused without running: each checks that its side effect (a file
created) did not happen, and a control shows that plain `pickle.load` would have run it."""

import builtins
import copyreg
import gzip
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.hang import flight_recorder as fr
from ncclprobe.evidence.hang.safe_pickle import Budget, loads_data
from tests.flight_recorder_dumps import dump

GLOO = Path(__file__).parent / "fixtures" / "flight_recorder" / "gloo"
SCENARIOS = ("skip", "size-mismatch", "order", "groups", "healthy")


# ---- real dumps ---------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_recorded_pickle_and_json_dumps_read_alike(scenario):
    """torch writes the same entries to both forms; the JSON of a rank was written a moment after
    its pickle, so only completion may have moved on."""
    pickled = fr.read_flight_recorder([GLOO / scenario / "dumps"])
    as_json = fr.read_flight_recorder([GLOO / scenario / "json"])
    assert [d.rank for d in pickled] == [d.rank for d in as_json] == [0, 1]
    for p, j in zip(pickled, as_json):
        assert (p.format, j.format, p.version, j.version) == ("pickle", "json", "2.10", "2.10")
        key = lambda e: (e.group, e.collective_seq, e.op, e.input_sizes, e.input_dtypes)  # noqa: E731
        assert [key(e) for e in p.entries] == [key(e) for e in j.entries]
        assert set(p.status) == set(j.status)


def test_recorded_skip_dump_fields():
    rank0, rank1 = fr.read_flight_recorder([GLOO / "skip" / "dumps"])
    last = rank0.entries[-1]
    assert (last.backend, last.op, last.group, last.group_desc) == (
        "gloo",
        "all_reduce",
        "0",
        "default_pg",
    )
    assert (last.collective_seq, last.input_sizes, last.input_dtypes) == (
        4,
        ((1048576,),),
        ("Float",),
    )
    assert last.state == "scheduled" and last.retired is False and last.timeout_ms == 5000
    assert last.where.endswith("record_flight_recorder.py:305 skip")
    assert rank0.status[0] == fr.GroupStatus(last_enqueued=4, last_started=-1, last_completed=3)
    assert rank1.status[0].last_enqueued == 3 and len(rank1.entries) == 3
    # gloo (torch 2.13) records its ranks under an empty group name
    assert rank0.groups == {"": fr.GroupConfig(name="", desc="", ranks=(0, 1))}
    assert rank0.comm_lib_version is None


def test_a_directory_skips_the_other_files_of_a_recording(tmp_path):
    """Dumps often share a folder with the job's logs and NCCL's: only the dumps are read."""
    recording = GLOO / "skip"
    for name in ("rank0.stderr", "torchrun.log", "scenario.json"):
        shutil.copy(recording / name, tmp_path / name)
    for rank in (0, 1):
        shutil.copy(recording / "dumps" / f"nccl_trace_rank_{rank}", tmp_path)
    (tmp_path / "nccl.host.1234.log").write_text("host:1234:1234 [0] NCCL INFO hello\n")
    assert [d.rank for d in fr.read_flight_recorder([tmp_path])] == [0, 1]


# ---- every schema version (hand-written) --------------------------------------------------


@pytest.mark.parametrize("version", ["1.1", "1.4", "2.2", "2.3", "2.7", "2.10"])
def test_every_schema_version_reads_into_the_same_records(tmp_path, version):
    path = tmp_path / "nccl_trace_rank_1"
    doc = dump(version, 1, [("all_reduce", 8, "completed"), ("broadcast", 4, "started")])
    path.write_bytes(pickle.dumps(doc, protocol=2))
    d = fr.read_dump(path)
    assert d.rank == 1 and d.version == version
    assert [(e.op, e.collective_seq, e.input_sizes, e.state) for e in d.entries] == [
        ("all_reduce", 1, ((8,),), "completed"),
        ("broadcast", 2, ((4,),), "started"),
    ]
    major, minor = d.version_tuple
    assert d.entries[0].group == "0"
    assert d.entries[0].group_desc == (None if major == 1 else "default_pg")
    assert d.entries[0].input_dtypes == (None if major == 1 else ("Float",))
    assert d.entries[0].timeout_ms == (None if major == 1 else 10000)
    assert d.entries[0].record_id == (None if version == "1.1" else 0)
    assert bool(d.groups) == (version != "1.1")
    if d.groups:
        assert d.groups["0"].ranks == (0, 1)
    assert bool(d.status) == ((major, minor) >= (2, 3))
    assert d.comm_lib_version == {"2.7": "2.21.5", "2.10": "2.28.9"}.get(version)
    assert d.entries[1].where == "/job/train.py:42 step"


def test_json_dump_strings_and_zero_times(tmp_path):
    """The JSON writer's own forms: pg_status values as strings, unset times as 0, lists for tuples."""
    doc = dump("2.10", 0, [("all_reduce", 8, "scheduled")])
    doc["pg_status"]["0"] = {k: str(v) for k, v in doc["pg_status"]["0"].items()}
    doc["entries"][0].update(time_discovered_started_ns=0, time_discovered_completed_ns=0)
    doc["entries"][0]["process_group"] = list(doc["entries"][0]["process_group"])
    path = tmp_path / "nccl_trace_rank_0.json"
    path.write_text(json.dumps(doc))
    d = fr.read_dump(path)
    assert d.format == "json" and d.status[0].last_enqueued == 1 and d.status[0].last_started == -1
    assert d.entries[0].time_started_ns is None and d.entries[0].group_desc == "default_pg"


def test_a_newer_minor_version_reads_with_a_note_and_a_newer_major_is_refused(tmp_path):
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(
        pickle.dumps({**dump("2.10", 0, [("all_reduce", 8, "completed")]), "version": "2.11"})
    )
    assert "newer than 2.10" in fr.read_dump(path).notes[0]
    path.write_bytes(pickle.dumps({**dump("2.10", 0, []), "version": "3.0"}))
    with pytest.raises(UsageProblem, match="3.0 changed existing fields"):
        fr.read_dump(path)


@pytest.mark.parametrize(
    "name, rank",
    [("nccl_trace_rank_12", 12), ("rank3.pkl", 3), ("trace_7.json", 7), ("rank_0.pkl.gz", 0)],
)
def test_the_rank_comes_from_the_file_name(tmp_path, name, rank):
    data = pickle.dumps(dump("2.10", 0, [("all_reduce", 8, "completed")]))
    (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    assert fr.read_dump(tmp_path / name).rank == rank


@pytest.mark.parametrize(
    "defect, needle",
    [
        ("a name without a rank", "cannot tell which rank"),
        ("two dumps of one rank", "two Flight Recorder dumps of rank 0"),
        ("a folder without dumps", "no Flight Recorder dump in"),
        ("a dict of something else", "not a Flight Recorder dump"),
        ("ranks that are code", 'field "ranks" must be a list of ranks'),
        ("a state torch never writes", 'field "state" must be one of'),
        ("sizes that are not shapes", 'field "input_sizes" must be a list of tensor shapes'),
        ("text", "neither a pickle nor JSON"),
        ("a gzip bomb", "decompresses to more than"),
    ],
)
def test_malformed_dumps_are_one_usage_problem(tmp_path, monkeypatch, defect, needle):
    good = dump("2.10", 0, [("all_reduce", 8, "completed")])
    paths = [tmp_path / "nccl_trace_rank_0"]
    if defect == "a name without a rank":
        paths = [tmp_path / "trace.pkl"]
        paths[0].write_bytes(pickle.dumps(good))
    elif defect == "two dumps of one rank":
        (tmp_path / "a").mkdir()
        (tmp_path / "a" / "nccl_trace_rank_0").write_bytes(pickle.dumps(good))
        paths = [tmp_path / "a", tmp_path / "rank0.pkl"]
        paths[1].write_bytes(pickle.dumps(good))
    elif defect == "a folder without dumps":
        (tmp_path / "logs").mkdir()
        (tmp_path / "logs" / "rank0.stderr").write_text("[rank0]: hello\n")
        paths = [tmp_path / "logs"]
    elif defect == "a gzip bomb":
        monkeypatch.setattr(fr, "DECOMPRESSED_LIMIT", 1 << 16)
        paths[0].write_bytes(gzip.compress(b"\x80\x02" + b"N" * (1 << 17)))
    else:
        doc = {
            "a dict of something else": {"kind": "engine-trace"},
            "ranks that are code": {
                **good,
                "pg_config": {"0": {"name": "0", "desc": "x", "ranks": "__import__('os')"}},
            },
            "a state torch never writes": {
                **good,
                "entries": [{**good["entries"][0], "state": "hung"}],
            },
            "sizes that are not shapes": {
                **good,
                "entries": [{**good["entries"][0], "input_sizes": [8]}],
            },
        }.get(defect)
        paths[0].write_bytes(pickle.dumps(doc) if doc is not None else b"hello, world\n")
    with pytest.raises(UsageProblem, match=needle):
        fr.read_flight_recorder(paths)


def test_the_decompressed_size_at_its_limit_reads(tmp_path, monkeypatch):
    data = pickle.dumps(dump("2.10", 0, [("all_reduce", 8, "completed")]))
    monkeypatch.setattr(fr, "DECOMPRESSED_LIMIT", len(data))
    path = tmp_path / "nccl_trace_rank_0.gz"
    path.write_bytes(gzip.compress(data))
    assert len(fr.read_dump(path).entries) == 1
    monkeypatch.setattr(fr, "DECOMPRESSED_LIMIT", len(data) - 1)
    with pytest.raises(UsageProblem, match="decompresses to more than"):
        fr.read_dump(path)


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(fr, "DUMP_LIMIT", 1000)
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(dump("2.10", 0, [("all_reduce", 8, "completed")] * 20)))
    assert path.stat().st_size > 1000
    with pytest.raises(UsageProblem, match="larger than|too large|limit"):
        fr.read_dump(path)


def test_too_many_entries_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(fr, "MAX_ENTRIES", 3)
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(dump("2.10", 0, [("all_reduce", 8, "completed")] * 3)))
    assert len(fr.read_dump(path).entries) == 3  # at the limit: read
    path.write_bytes(pickle.dumps(dump("2.10", 0, [("all_reduce", 8, "completed")] * 4)))
    with pytest.raises(UsageProblem, match="more than 3 entries"):
        fr.read_dump(path)


# ---- shapes: depth, size, self-reference: refused where read, never walked where not -------


def _with(field: str, value_bytes: bytes) -> bytes:
    """A real-shaped dump whose first entry's `field` is the raw pickle opcodes `value_bytes`."""
    doc = dump("2.10", 0, [("all_reduce", 8, "completed")])
    doc["entries"][0][field] = "PLACEHOLDER"
    data = pickle.dumps(doc, protocol=2)
    marker = b"X\x0b\x00\x00\x00PLACEHOLDER"
    assert data.count(marker) == 1
    return data.replace(marker, value_bytes)


def test_nesting_deeper_than_the_schema_is_refused_where_it_is_read(tmp_path):
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(dump("2.10", 0, [("all_reduce", 8, "completed")])))
    assert fr.read_dump(path).entries[0].input_sizes == ((8,),)  # the healthy twin
    doc = dump("2.10", 0, [("all_reduce", 8, "completed")])
    doc["entries"][0]["input_sizes"] = [[[8]]]
    path.write_bytes(pickle.dumps(doc))
    with pytest.raises(
        UsageProblem, match=r'"input_sizes" must be a list of tensor shapes, got \[\[\[8\]\]\]'
    ):
        fr.read_dump(path)


def test_a_million_levels_in_a_field_no_reader_knows_is_never_walked(tmp_path):
    """The C unpickler builds nesting without recursion and frees it iteratively; no reader walks
    a field it does not know, so depth there costs only its bytes."""
    levels = 1_000_000
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(_with("extra", b"]" * levels + b"a" * (levels - 1)))
    assert len(fr.read_dump(path).entries) == 1


def test_a_billion_laughs_is_refused_by_the_walk_budget(tmp_path):
    """One shape list shared through the memo by every tensor of every entry: a few hundred bytes
    that a walk would visit 10**10 times. The reader counts what it visits against the file's size."""
    shape = [1] * 64
    doc = dump("2.10", 0, [("all_reduce", 8, "completed")])
    doc["entries"][0]["input_sizes"] = [shape] * 60_000
    doc["entries"] = doc["entries"] * 3_000
    data = pickle.dumps(doc, protocol=2)
    assert len(data) < 200_000
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(data)
    with pytest.raises(UsageProblem, match=f"refers to more than {len(data):,} items"):
        fr.read_dump(path)


def test_the_walk_budget_at_its_limit_reads_and_one_more_is_refused():
    budget = Budget("x", 3)
    budget.spend(2)
    budget.spend(1)
    with pytest.raises(UsageProblem, match="x: refers to more than 3 items"):
        budget.spend(1)


def test_a_list_that_holds_itself_is_refused_in_one_line(tmp_path):
    loop = []
    loop.append(loop)
    doc = dump("2.10", 0, [("all_reduce", 8, "completed")])
    doc["entries"][0]["input_sizes"] = loop
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(doc))
    with pytest.raises(
        UsageProblem, match=r"must be a list of tensor shapes, got \[\[\[\[\.\.\.\]\]\]\]"
    ):
        fr.read_dump(path)


# ---- hostile pickles: refused, never run ----------------------------------------------------


class Touch:
    """A class whose construction has a side effect: what NEWOBJ/NEWOBJ_EX/BUILD's REDUCE would run."""

    def __new__(cls, path="", *args):
        if path:
            open(path, "w").close()
        return super().__new__(cls)


class Reduce:
    def __init__(self, call, *args):
        self.call, self.args = call, args

    def __reduce__(self):
        return (self.call, self.args)


def _hostile(marker: Path) -> dict[str, bytes]:
    """name -> the bytes of a pickle that creates `marker` when `pickle.load` runs it."""
    m = str(marker)
    touch = f"touch {m}"
    out = {}
    for protocol in range(6):
        out[f"os.system, protocol {protocol}"] = pickle.dumps(
            Reduce(os.system, touch), protocol=protocol
        )
    out["subprocess.call (STACK_GLOBAL)"] = pickle.dumps(
        Reduce(subprocess.call, ["touch", m]), protocol=4
    )
    out["builtins.eval"] = pickle.dumps(Reduce(builtins.eval, f"open({m!r}, 'w')"), protocol=2)
    out["builtins.open (a __reduce__ that writes a file)"] = pickle.dumps(
        Reduce(builtins.open, m, "w"), protocol=5
    )
    touch_class = b"ctests.test_flight_recorder_reader\nTouch\n"
    path_arg = b"X" + len(m).to_bytes(4, "little") + m.encode()
    out["NEWOBJ"] = b"\x80\x02" + touch_class + path_arg + b"\x85\x81."
    out["NEWOBJ_EX"] = b"\x80\x04" + touch_class + path_arg + b"\x85}\x92."
    out["INST (protocol 0, by hand)"] = f"(S'{touch}'\nios\nsystem\n.".encode()
    out["OBJ (protocol 1, by hand)"] = (
        b"(cos\nsystem\n" + pickle.dumps(touch, protocol=1)[:-1] + b"o."
    )
    out["GLOBAL inside a plausible dump"] = (
        b"\x80\x02}q\x00(X\x07\x00\x00\x00versionq\x01cos\nsystem\nq\x02X"
        + len(touch).to_bytes(4, "little")
        + touch.encode()
        + b"\x85Rq\x03X\x07\x00\x00\x00entriesq\x04]q\x05u."
    )
    out["BUILD on a class instance"] = (
        b"\x80\x02ctests.test_flight_recorder_reader\nTouch\nX"
        + len(m).to_bytes(4, "little")
        + m.encode()
        + b"\x85R}b."
    )
    out["EXT1 of a registered os.system"] = (
        b"\x80\x02\x82\xf0X" + len(touch).to_bytes(4, "little") + touch.encode() + b"\x85R."
    )
    out["PERSID"] = b"Ptouch\n."
    out["gzip of os.system"] = gzip.compress(pickle.dumps(Reduce(os.system, touch), protocol=2))
    return out


@pytest.fixture
def registered_extension():
    """EXT codes name a class registered in copyreg: register os.system as 0xf0 while the test runs."""
    copyreg.add_extension("os", "system", 0xF0)
    yield
    copyreg.remove_extension("os", "system", 0xF0)


def test_every_hostile_pickle_is_refused_in_one_line_and_never_runs(tmp_path, registered_extension):
    marker = tmp_path / "pwned"
    for name, data in _hostile(marker).items():
        path = tmp_path / "nccl_trace_rank_0"
        path.write_bytes(data)
        result = CliRunner().invoke(
            cli, ["diagnose", "--flight-recorder", str(path)], prog_name="ncclprobe"
        )
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1, (name, result.output)
        assert lines[0].startswith("ncclprobe: error: ") and "Traceback" not in result.output, name
        assert not marker.exists(), f"{name}: the pickle ran"
        with pytest.raises(UsageProblem):
            fr.read_dump(path)
        assert not marker.exists(), f"{name}: the pickle ran"


# every hostile pickle but PERSID (plain pickle refuses it too: no persistent_load) and EXT1 (its
# registration lives in the test process)
RUNNABLE = [n for n in _hostile(Path("/m")) if not n.startswith(("PERSID", "EXT1"))]


@pytest.mark.parametrize("name", RUNNABLE)
def test_the_hostile_pickles_really_run_under_pickle_load(tmp_path, name):
    """The control: plain `pickle.load`, in a child process, creates the marker. So the refusals
    above refuse code, not garbage."""
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pkl"
    data = _hostile(marker)[name]
    path.write_bytes(gzip.decompress(data) if name.startswith("gzip") else data)
    code = "import pickle, sys; pickle.load(open(sys.argv[1], 'rb'))"
    subprocess.run(
        [sys.executable, "-c", code, str(path)],
        cwd=Path(__file__).parent.parent,
        capture_output=True,
        timeout=60,
    )
    assert marker.exists()


def test_the_refusal_names_the_opcode_and_its_offset(tmp_path):
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(Reduce(os.system, "true"), protocol=2))
    with pytest.raises(UsageProblem, match=r"opcode GLOBAL at byte 2 can run code"):
        fr.read_dump(path)


def test_the_compression_ratio_cap_at_its_boundary(monkeypatch):
    """A gzip may expand to `ratio` times its size or the floor, whichever is larger: at the cap it
    reads, one byte past it is refused as a bomb (while streaming), and the absolute limit stays."""
    body = pickle.dumps(dump("2.10", 0, [("all_reduce", 8, "completed")] * 50))
    data = gzip.compress(body)
    monkeypatch.setattr(fr, "GZIP_FLOOR", len(body))
    assert fr.gunzip_capped(data, "x", limit=1 << 30, ratio=1) == body
    monkeypatch.setattr(fr, "GZIP_FLOOR", len(body) - 1)
    with pytest.raises(UsageProblem, match="x decompresses to more than 1x its size"):
        fr.gunzip_capped(data, "x", limit=1 << 30, ratio=1)
    with pytest.raises(UsageProblem, match="decompresses to more than 0 MiB"):
        fr.gunzip_capped(data, "x", limit=len(body) - 1, ratio=10**6)


# ---- what no byte cap bounds: the reader worker's memory, CPU and wall caps ----------------------


def _tuple_hash_bomb() -> bytes:
    """t_k = (t_{k-1}, t_{k-1}) through the memo, 40 deep, then used as a dict key: hashing it
    visits 2**40 tuples (a tuple's hash is not cached), from 292 bytes."""
    data = b"\x80\x02K\x00q\x00"
    for k in range(40):
        data += b"h" + bytes([k]) + b"h" + bytes([k]) + b"\x86q" + bytes([k + 1])
    return data + b"}h\x28Ns."


@pytest.mark.parametrize(
    "name, data, needle",
    [
        ("memo index 2**26", b"\x80\x02Nr\x00\x00\x00\x04.", "reading it needed more than 96 MiB"),
        ("a million empty sets", b"\x80\x04(" + b"\x8f" * 1_000_000 + b"l.", "needed more than"),
        ("a tuple hashed 2**40 times", _tuple_hash_bomb(), "did not finish in|took more than"),
    ],
)
def test_what_no_byte_cap_bounds_is_refused_by_the_workers_caps(tmp_path, name, data, needle):
    """The C unpickler's memo table grows to the index a LONG_BINPUT names (9 bytes: 1 GB zeroed), an
    empty set is 216 bytes from one opcode byte, a tuple key is hashed afresh: each is stopped by the
    reader worker's address-space, CPU or wall cap and refused in one line (time and memory are the
    benchmark's: examples/bench_flight_recorder_scale.py --bombs). Run as a user runs it, in a
    fresh process: a worker forks from its parent and may use the free memory the parent's heap
    already maps, which in the test session's long-lived process (thousands of tests in) held the
    million sets without the cap."""
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(data)
    result = subprocess.run(
        [sys.executable, "-m", "ncclprobe", "diagnose", "--flight-recorder", str(path)],
        cwd=Path(__file__).parent.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, (name, result.stdout, result.stderr)
    assert re.search(needle, result.stderr) and len(result.stderr.strip().splitlines()) == 1, name


def test_a_worker_stopped_on_one_rank_file_leaves_the_others_read(tmp_path):
    """In a folder the refused rank file is named with why, and the job is read without it."""
    for r in (0, 1):
        shutil.copy(GLOO / "skip" / "dumps" / f"nccl_trace_rank_{r}", tmp_path)
    (tmp_path / "nccl_trace_rank_2").write_bytes(b"\x80\x02Nr\x00\x00\x00\x04.")
    dumps = fr.read_flight_recorder([tmp_path])
    assert [d.rank for d in dumps] == [0, 1]
    assert "needed more than" in dumps.unreadable[2][1]


# ---- the refusal's words (the mutation run's survivors) -----------------------------------------


def test_an_unpicklers_error_is_cut_at_200_characters_and_named_when_empty():
    """A protocol-0 FLOAT of n letters: the unpickler's error quotes them (the plain C unpickler's
    own error is the oracle); 200 characters are shown whole, 201 cut with "..."."""
    import pickle

    def error(letters: int) -> str:
        with pytest.raises(ValueError) as caught:
            pickle.loads(b"F" + b"x" * letters + b"\n.")
        return str(caught.value)

    def refusal(letters: int) -> str:
        with pytest.raises(UsageProblem) as caught:
            loads_data(b"F" + b"x" * letters + b"\n.", "x")
        return str(caught.value).removeprefix("x is not a readable pickle: ")

    at = next(n for n in range(100, 300) if len(error(n)) == 200)
    assert refusal(at) == error(at)
    assert refusal(at + 1) == error(at + 1)[:200] + "..."
    # an exception without a message is named by its type; no pickle raises one (kept as a unit)
    from ncclprobe.evidence.hang.safe_pickle import _short

    assert _short(ValueError()) == "ValueError"


def test_a_pickle_that_fails_on_a_code_opcode_is_refused_by_name_not_called_unreadable():
    """REDUCE with nothing callable fails inside the C unpickler (TypeError); the refusal still names
    the opcode that asked to run code, not a generic unreadable pickle."""
    with pytest.raises(UsageProblem, match=r"^x is refused: pickle opcode REDUCE at byte 4"):
        loads_data(b"\x80\x02N)R.", "x")
    with pytest.raises(UsageProblem, match=r"^x is not a readable pickle"):
        loads_data(b"\x80\x02]h\x05a.", "x")  # the healthy twin: no code opcode, just broken


def test_the_offending_opcode_is_looked_for_up_to_its_limit(monkeypatch):
    from ncclprobe.evidence.hang import safe_pickle

    data = b"\x80\x02N0cos\nsystem\n."  # PROTO, NONE, POP, GLOBAL (the 4th opcode, index 3)
    monkeypatch.setattr(safe_pickle, "LOCATE_OPCODES", 3)
    with pytest.raises(UsageProblem, match=r"^x is refused: pickle opcode GLOBAL at byte 4"):
        loads_data(data, "x")
    monkeypatch.setattr(safe_pickle, "LOCATE_OPCODES", 2)  # past the limit: the unpickler's words
    with pytest.raises(UsageProblem, match=r"^x is refused: pickle refers to os\.system"):
        loads_data(data, "x")
    with pytest.raises(UsageProblem, match=r"^x is not a readable pickle"):
        loads_data(b"\x80\x02X\xff\xff", "x")  # cut mid-opcode: no opcode named, no crash


# ---- the fast path and the checking path: one truth ------------------------------------------------


def _raw_entries(path):
    from ncclprobe.evidence.hang.safe_pickle import loads_data as load

    data = path.read_bytes()
    doc = load(data, "x") if data[:1] == b"\x80" else json.loads(data)
    return doc["entries"]


def test_the_fast_path_takes_every_real_entry():
    """Every entry torch wrote in the recordings (NCCL with timing, gloo; pickle and JSON) is read by
    the fast path; the checking path is only for what is unusual."""
    from ncclprobe.evidence.hang.fr_entries import fast_entry
    from ncclprobe.evidence.hang.fr_table import EntryTable

    files = sorted((GLOO.parent).glob("*/*/dumps/nccl_trace_rank_*"))
    files += sorted((GLOO.parent).glob("*/*/json/nccl_trace_rank_*"))
    assert len(files) >= 20
    durations = 0
    for path in files:
        for e in _raw_entries(path):
            table = EntryTable()
            assert fast_entry(e, 2, Budget("x", 10**9), table), (path, e)
            durations += e.get("duration_ms") is not None
    assert durations  # the NCCL recordings time their collectives: the duration's check ran


def _variants() -> dict[str, tuple[dict, bool]]:
    """name -> (an entry, whether the checking path refuses it)."""
    base = dump("2.10", 0, [("all_reduce", 8, "completed")])["entries"][0]
    base = {**base, "duration_ms": 1.5, "process_group": ("7", "tp"), "pg_id": 3}
    user = {"name": "s", "filename": "/job/t.py"}
    cases = [
        ("record_id", -(2**63), True),  # |value| < 2**63 only
        ("record_id", -(2**63) + 1, False),
        ("record_id", 2**63 - 1, False),
        ("record_id", True, True),
        ("time_created_ns", 2**63, True),
        ("duration_ms", float("nan"), True),
        ("duration_ms", 2.0**63, False),  # a float: finite is all it must be
        ("duration_ms", "1", True),
        ("retired", 1, True),
        ("is_p2p", 0, True),
        ("process_group", ("7",), True),
        ("process_group", ("7", "tp", "x"), True),
        ("process_group", ("7", 5), True),
        ("profiling_name", "nccl:" + "a" * 250, False),
        ("state", ["started"], True),
        ("input_sizes", [[1], [2, -1]], True),
        ("input_sizes", [[2**48]], False),  # MAX_SIZE: the sizes' bound by meaning
        ("input_sizes", [[2**48 + 1]], True),
        ("input_dtypes", ["Float", 1], True),
        ("frames", [{**user, "line": 2**63}], True),
        ("frames", [{**user, "line": 2**63 - 1}], False),
        ("frames", [["t.py"]], True),
    ]
    out = {"as torch writes it": (base, False), "not a dict": (["profiling_name"], True)}
    for field, value, refused in cases:
        out[f"{field}={value!r}"[:60]] = ({**base, field: value}, refused)
    return out


@pytest.mark.parametrize("name", list(_variants()))
def test_the_fast_path_reads_as_the_checking_path_or_leaves_it_to_it(name):
    """For each odd entry the fast path either declines (the checking path then reads or refuses
    it) or gives exactly the entry the checking path gives; it never takes what the checking path
    refuses, and the checking path refuses exactly what it should."""
    from ncclprobe.evidence.hang.fr_entries import entry, fast_entry
    from ncclprobe.evidence.hang.fr_table import EntryTable
    from ncclprobe.validate import Where

    raw, refused = _variants()[name]
    table = EntryTable()
    took = fast_entry(raw, 2, Budget("x", 10**9), table)
    try:
        checked = entry(raw, Where("x"), 2, Budget("x", 10**9))
    except UsageProblem:
        checked = None
    assert (checked is None) == refused, name
    if took:
        assert checked is not None, f"{name}: the fast path took what the checking path refuses"
        assert table.entry(0) == checked, name
    else:
        assert len(table) == 0
    if name == "as torch writes it":
        assert took and checked.group == "7"  # the group is the process group's name, not pg_id


def test_frames_are_looked_at_up_to_the_limit(tmp_path):
    torch_frame = {"name": "f", "filename": "/x/torch/a.py", "line": 1}
    user = {"name": "step", "filename": "/job/train.py", "line": 9}

    def call_site(torch_frames: int) -> str:
        doc = dump("2.10", 0, [("all_reduce", 8, "completed")])
        doc["entries"][0]["frames"] = [torch_frame] * torch_frames + [user]
        path = tmp_path / "nccl_trace_rank_0"
        path.write_bytes(pickle.dumps(doc, protocol=2))
        return fr.read_dump(path).entries[0].where

    assert call_site(256) == ""  # the 257th frame is past the limit: not looked at
    assert call_site(255) == "/job/train.py:9 step"


@pytest.mark.parametrize(
    "where", ["pg_status key", "pg_config key", "record_id", "frame line", "a dim"]
)
def test_an_integer_of_5000_digits_anywhere_is_refused_in_one_line(tmp_path, where):
    """Issue 40 §5: no str() of an integer past Python's 4,300 digits (exit 4 before)."""
    big = 10**5000
    doc = dump("2.10", 0, [("all_reduce", 8, "completed")])
    e = doc["entries"][0]
    if where == "pg_status key":
        doc["pg_status"][big] = doc["pg_status"].pop("0")
    elif where == "pg_config key":
        doc["pg_config"][big] = doc["pg_config"].pop("0")
    elif where == "record_id":
        e["record_id"] = big
    elif where == "frame line":
        e["frames"][1]["line"] = big
    else:
        e["input_sizes"] = [[big]]
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(doc))
    with pytest.raises(UsageProblem) as refused:
        fr.read_dump(path)
    assert len(str(refused.value)) < 400 and "\n" not in str(refused.value)
