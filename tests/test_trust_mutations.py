"""The mutated-input walk (issue 29 §3): the real fixtures, broken the ways a torn copy, a careless
exporter or an attacker breaks them, through the command that reads each; and gzip bombs.

Every answer must be an answer: exit 0, 1, 2 or 3 (never 4, an internal error), a refusal in one
line, within a time bound per case, and memory bounded. The walk's mutations: integers of 5000 and
400 digits, superscript and Arabic-Indic digits, NaN/Infinity/1e400, negative numbers, nesting
100000 deep, every occurrence of a key given a value of the wrong type or null, a key given twice,
data after the document, truncation, a 1 MB value and NUL bytes. Each case's position in the file
is drawn from a generator seeded by the case's name: the walk is the same on every run (a failure
reproduces), and different positions need only another name.

Commands run in-process (CliRunner), which takes seconds for the whole walk; the bombs run in a
subprocess whose peak RSS is measured (`resource.getrusage` inside it).
"""

import gzip
import json
import random
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from tests.data.control import PAYLOAD, raw_controls
from tests.test_trust_walk import _bounded

FIXTURES = Path(__file__).parent / "fixtures"
SECONDS_PER_CASE = 15
RSS_LIMIT = 2 << 30

# (name, fixture, how to call the command with FILE there)
TARGETS = [
    ("profile json", "profiles/handwritten_graph_share_cut_4steps.json", ["diagnose", "--profile"]),
    (
        "profile gz",
        "profiles/nccl_2.28.9_h200_2ranks_1gpu_hostid_allreduce_eager_then_graph.json.gz",
        ["diagnose", "--profile"],
    ),
    (
        "profile tracelens",
        "profiles/sglang_qwen3-8b_decode_bs32_mi300x_tracelens.json.gz",
        ["diagnose", "--profile"],
    ),
    ("engine trace", "traces/handwritten_seed_case_tp2_h200.json", ["diagnose", "--trace"]),
    ("sglang log", "server_logs/sglang_decode_comma_graph_false_above_capture_pr13023.log", None),
    ("vllm log", "server_logs/vllm_0.10_v1_specdecoding_throughput_pr24127.log", None),
    ("nccl-log", "nccl_logs/nccl_2.22.3_2x_a100_sxm64_nvlink_sendrecv_leonardo.log", ["nccl-log"]),
    (
        "diagnose --nccl-log",
        "nccl_logs/nccl_2.29.7dev_tuning_subsys_rtx5090_2ranks_1gpu_socket.log",
        ["diagnose", "--nccl-log"],
    ),
    ("nccl-tests text", "nccl_tests/allreduce_4x_rtx5090_pcie_genoa.txt", ["import"]),
    (
        "nccl-tests old text",
        "nccl_tests/sendrecv_2x_gtx1080_old_format_no_redop_no_root_issue104.txt",
        ["import"],
    ),
    (
        "nccl log tagged",
        "nccl_logs/nccl_2.8.3_2node_16x_a100_p4d_efa_mpirun_tagged_old_tests_format.log",
        ["nccl-log"],
    ),
    (
        "nccl-tests -J",
        "nccl_tests/allreduce_1x_h200_1rank_nccltests2.19.6_eager_J.json",
        ["import"],
    ),
    ("nvbandwidth json", "nvbandwidth/nvbandwidth_v0.5_1gpu_json_full_dcgm.json", ["import"]),
    (
        "nvbandwidth text",
        "nvbandwidth/nvbandwidth_v0.10_2gpu_h2d_d2h_d2d_read_azurehpc.txt",
        ["import"],
    ),
    ("p2p", "p2p/p2p_4x_a100_pcie_nvlink_pairs_can_cannot_sushruta.txt", ["import"]),
    (
        "collect-env",
        "collect_env/vllm_0.8.5_collect_env_2x_nv12_8nic_sectioned_issue19607.txt",
        ["knobs", "--lint", "--collect-env"],
    ),
    (
        "check_env",
        "collect_env/sglang_check_env_8x_h20_nv18_8nic_issue24966.txt",
        ["knobs", "--lint", "--collect-env"],
    ),
    ("topo", "topo/dgx_a100_80g_8gpu_nv12_4nic.txt", ["topo", "--from"]),
    ("results", "results/handwritten_sweep_nccl_2ranks_h200.jsonl", ["recommend"]),
    ("results report", "results/handwritten_sweep_nccl_2ranks_h200.jsonl", ["report"]),  # sampled
    (
        "flight recorder",
        "flight_recorder/gloo/skip/json/nccl_trace_rank_0",
        ["diagnose", "--flight-recorder"],
    ),
    ("job log", "flight_recorder/nccl/groups/torchrun.log", ["diagnose", "--log"]),
]
REPORT_SAMPLE = {"400 digits", "non-finite", "wrong type", "duplicate key", "truncated"}
_NUMBER = re.compile(r"(?<![\w.])-?[0-9]+(?:\.[0-9]+)?(?![\w])")
_WRONG = ([1], {"a": 1}, "x", 7, True, None)


def peak_rss() -> int:
    """This process's peak resident set in bytes: Linux's VmHWM, which belongs to the process's
    memory map and so starts afresh at exec and at reset_peak_rss. getrusage's ru_maxrss does not:
    a child started from a 2 GB pytest process reported 2 GB before reading anything."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_rss() -> None:
    """Set the peak to the current resident set (Linux 4.0+, /proc/self/clear_refs value 5)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass  # an older kernel: the peak stays the process's whole life (an upper bound)


def _numbers(text, rng, n=3):
    spans = [m.span() for m in _NUMBER.finditer(text)]
    return sorted(rng.sample(spans, min(n, len(spans))), reverse=True)


def _replace_numbers(make):
    def mutate(text, rng):
        for start, end in _numbers(text, rng):
            text = text[:start] + make(text[start:end], rng) + text[end:]
        return text

    return mutate


def _insert_line(piece):
    def mutate(text, rng):
        lines = text.splitlines(keepends=True)
        at = rng.randrange(len(lines) + 1)
        return "".join(lines[:at] + [piece(rng) + "\n"] + lines[at:])

    return mutate


def _json_parts(text):
    """(prefix, document, rest) of a fixture whose JSON starts after a `# source:` header, or None."""
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        return None
    try:
        doc, end = json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        return None
    if text[end:].strip() or end - start < len(text) / 2:
        return None  # a list inside a log is no JSON document
    return text[:start], doc, text[end:]


def _json_mutation(change):
    """A change to the parsed document (each line of JSON Lines), dumped back in place."""

    def mutate(text, rng):
        if "\n{" in text.strip() and text.lstrip().startswith("{") and "\n" in text.strip():
            lines = text.splitlines()
            if all(line.strip().startswith("{") for line in lines if line.strip()):
                docs = [json.loads(line) for line in lines if line.strip()]
                change(docs, rng)
                return "\n".join(json.dumps(d) for d in docs) + "\n"
        parts = _json_parts(text)
        if parts is None:
            return None
        prefix, doc, rest = parts
        holder = [doc]
        change(holder, rng)
        return prefix + json.dumps(holder[0], indent=1) + rest

    return mutate


def _slots(doc):
    """Every (container, key) of a parsed document."""
    found, stack = [], [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            found.append((node, key))
            if isinstance(value, (dict, list)):
                stack.append(value)
    return found


def _every_key(value_of):
    """Every occurrence of one key (chosen at random among the document's keys) set to a value."""

    def change(docs, rng):
        slots = [(c, k) for c, k in _slots(docs) if isinstance(c, dict)]
        if not slots:
            return
        key = rng.choice(sorted({k for _, k in slots}))
        for container, k in slots:
            if k == key:
                container[k] = value_of(rng)

    return change


def _some_values(value_of, share=0.05):
    def change(docs, rng):
        slots = [s for s in _slots(docs) if s[0] is not docs]
        for container, key in rng.sample(slots, max(1, int(len(slots) * share))):
            container[key] = value_of(rng)

    return change


def _duplicate_key(text, rng):
    spans = [m.start() for m in re.finditer(r'\{\s*"', text)]
    if not spans:
        return None
    at = rng.choice(spans)
    key = re.match(r'\{\s*("(?:[^"\\]|\\.)*")', text[at:])
    return text[: at + 1] + f"{key.group(1)}: 1, " + text[at + 1 :] if key else None


LONG = 1 << 18  # characters of a long line here; examples/bench_mutation_walk.py goes to 4 MB


def _long_line(text, rng):
    """A random line of the file, repeated into one line of LONG characters, inserted at random."""
    lines = [line for line in text.splitlines() if line.strip()] or ["x"]
    piece = rng.choice(lines).strip() + " "
    long = (piece * (LONG // len(piece) + 1))[:LONG]
    return _insert_line(lambda r: long)(text, rng)


def _truncate(text, rng):
    return text[: int(len(text) * rng.uniform(0.2, 0.98))]


MUTATIONS = {
    "5000 digits": _replace_numbers(lambda n, rng: "9" * 5000),
    "400 digits": _replace_numbers(lambda n, rng: "1" + "0" * 400),
    "superscript": _replace_numbers(lambda n, rng: n + "²"),
    "arabic digits": _replace_numbers(lambda n, rng: "١٢"),
    "non-finite": _replace_numbers(
        lambda n, rng: rng.choice(["NaN", "Infinity", "-Infinity", "1e400", "nan", "inf"])
    ),
    "negative": _replace_numbers(lambda n, rng: "-" + n.lstrip("-")),
    "nested 100000": _insert_line(lambda rng: "[" * 100000 + "]" * 100000),
    "deep value": _json_mutation(_some_values(lambda r: json.loads("[" * 900 + "]" * 900), 0)),
    "wrong type": _json_mutation(_every_key(lambda rng: rng.choice(_WRONG[:5]))),
    "wrong type again": _json_mutation(_every_key(lambda rng: rng.choice(_WRONG[:5]))),
    "wrong types": _json_mutation(_some_values(lambda rng: rng.choice(_WRONG[:5]))),
    "null": _json_mutation(_every_key(lambda rng: None)),
    "nulls": _json_mutation(_some_values(lambda rng: None)),
    "duplicate key": _duplicate_key,
    "trailing data": lambda text, rng: text + rng.choice(["\n{}\n", "\n[1]", " x", "\n" + text]),
    "truncated": _truncate,
    "truncated again": _truncate,
    "1 MB value": _insert_line(
        lambda rng: "h:1:2 [0] NCCL INFO NCCL_IB_HCA set by environment to " + "x" * (1 << 20)
    ),
    "NUL bytes": _insert_line(lambda rng: "\x00" * rng.randrange(1, 64)),
    # issue 40: a line as long as a bomb needs (a real line repeated: the reader's own patterns meet
    # their own words), a file of blank lines (sniffers anchored at every line start), lone
    # surrogates (valid JSON escapes, no valid text) and every control character
    "long line": lambda text, rng: _long_line(text, rng),
    "blank lines": lambda text, rng: text + "\n" * LONG,
    "surrogate": _json_mutation(_some_values(lambda rng: "x\ud800y", 0.2)),
    "surrogate bytes": _insert_line(lambda rng: "\ud800\udfff caf\udce9"),
    "control characters": _insert_line(lambda rng: PAYLOAD),
}


def _write(path: Path, text: str, gzipped: bool) -> None:
    data = text.encode("utf-8", "surrogatepass")
    path.write_bytes(gzip.compress(data, 1) if gzipped else data)


def _args(target, path: Path, out: Path) -> list[str]:
    name, _, command = target
    if command is None:
        return ["diagnose", "--server-log", str(path)]
    if command == ["report"]:
        return ["report", str(path), "--output", str(out / "report")]
    return [*command, str(path)]


def _answered(result, where: str) -> None:
    output = result.output
    assert result.exit_code in (0, 1, 2, 3), (where, result.exit_code, output[-400:])
    assert raw_controls(output) == [], (where, raw_controls(output))
    assert "Traceback" not in output and "internal error" not in output, (where, output[-400:])
    if result.exit_code == 2:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ncclprobe: error: "), (where, lines[:3])
        assert len(lines[0]) < 600, (where, lines[0][:200])


def test_every_reader_answers_every_mutation_of_its_real_fixture(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    runner, started, cases = CliRunner(), time.perf_counter(), 0
    reset_peak_rss()  # this test's own peak, not the suite's before it
    for target in TARGETS:
        name, fixture, _ = target
        source = FIXTURES / fixture
        gzipped = source.suffix == ".gz"
        raw = source.read_bytes()
        text = (gzip.decompress(raw) if gzipped else raw).decode("utf-8")
        for kind, mutate in MUTATIONS.items():
            if name == "results report" and kind not in REPORT_SAMPLE:
                continue  # a report that renders takes a second: its reader is walked by "results"
            where = f"{name} <- {kind}"
            mutated = mutate(text, random.Random(where))
            if mutated is None or mutated == text:
                continue  # not a JSON document: no keys to give wrong types
            case = tmp_path / f"case{cases}"
            case.mkdir()
            path = case / source.name
            _write(path, mutated, gzipped)
            with _bounded(where, SECONDS_PER_CASE):
                result = runner.invoke(cli, _args(target, path, case), prog_name="ncclprobe")
            _answered(result, where)
            cases += 1
    peak = peak_rss()
    assert cases >= 400 and peak < RSS_LIMIT, (cases, peak)
    assert time.perf_counter() - started < 180


def test_the_listed_breakages_are_refused_in_one_line_naming_what(tmp_path):
    """The cases issue 29 found ending in exit 4, each pinned to its refusal (the walk above only
    asks for an answer)."""
    profile = gzip.decompress(
        (
            FIXTURES
            / "profiles/nccl_2.28.9_h200_2ranks_1gpu_hostid_allreduce_eager_then_graph.json.gz"
        ).read_bytes()
    ).decode()
    jfile = (
        FIXTURES / "nccl_tests/allreduce_1x_h200_1rank_nccltests2.19.6_eager_J.json"
    ).read_text()
    cases = {
        "p.json": (profile.replace('"ts": ', '"ts": ' + "9" * 5000 + ', "x": ', 1), "4300 digits"),
        "p2.json": (profile.replace('"dur": ', '"dur": NaN, "y": ', 1), "NaN is not a JSON"),
        "p3.json": (profile.replace('"dur": ', '"dur": 1e400, "y": ', 1), "1e400 is beyond"),
        "p4.json": (profile.replace('"dur": ', '"dur": 1, "dur": ', 1), "'dur' is given twice"),
        "p5.json": (profile + "\n{}", "data after the end of the trace"),
        "j.json": (jfile.replace('"time": ', '"time": -', 1), "time -"),
        "j2.json": (jfile.replace('"size": 8,', '"size": 1' + "0" * 30 + ",", 1), "31 digits"),
        "j3.json": (jfile.replace('"nwrong": 0.0', '"nwrong": NaN', 1), "at line 1"),
        "j4.json": (jfile + "\n" + jfile, "a second document"),
    }
    for name, (text, needle) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        command = ["diagnose", "--profile"] if name.startswith("p") else ["import"]
        result = CliRunner().invoke(cli, [*command, str(path)], prog_name="ncclprobe")
        assert result.exit_code == 2 and needle in result.stderr, (name, result.output[-300:])
        assert len(result.stderr.strip().splitlines()) == 1
    kinds = gzip.decompress(
        (
            FIXTURES
            / "profiles/nccl_2.28.9_h200_2ranks_1gpu_hostid_allreduce_eager_then_graph.json.gz"
        ).read_bytes()
    )
    doc = json.loads(kinds)
    for event in doc["traceEvents"]:
        if event.get("cat") == "kernel":
            event["args"] = [1]
            break
    path = tmp_path / "wrong.json"
    path.write_text(json.dumps(doc))
    result = CliRunner().invoke(cli, ["diagnose", "--profile", str(path)], prog_name="ncclprobe")
    said = " ".join(result.output.split()).replace("# ", "")
    assert result.exit_code in (0, 1), result.output[:800]
    assert "1 event(s) skipped whose fields are not what Kineto writes; the first, event '" in said
    assert '(kernel): "args": [1] is not what Kineto writes there' in said, said[:1200]


# --- bombs: small files that expand; each in a subprocess whose peak RSS it reports ----------------

_RUN = """
import sys
from ncclprobe.evidence.run.profile import stream
for name, value in (a.split("=", 1) for a in sys.argv[2:] if "=" in a):
    setattr(stream, name, int(value))  # a lowered limit: the bomb is refused in a second, not seven
try:
    from ncclprobe.cli import main
    sys.argv = ["ncclprobe", *[a for a in sys.argv[2:] if "=" not in a]]
    main()
finally:
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]  # see peak_rss
    open({out!r}, "w").write(str(int(hwm[0].split()[1]) * 1024))
"""


def _run_bomb(tmp_path, args, limits=(), timeout=60):
    rss_file = tmp_path / "rss"
    code = _RUN.format(out=str(rss_file))
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code, "x", *limits, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
    )
    return proc, int(rss_file.read_text()), time.perf_counter() - started


def _members(head: bytes, block: bytes, repeats: int, tail: bytes) -> bytes:
    """A gzip file of many members (gzip reads them as one stream): `block` compressed once."""
    one = gzip.compress(block, 9)
    return gzip.compress(head) + one * repeats + gzip.compress(tail)


@pytest.mark.parametrize(
    "bomb, limits, needle",
    [
        (
            "blanks",
            ["DEFAULT_LIMIT=" + str(64 << 20)],
            "decompresses to more than 64 MiB, the most ncclprobe reads of it; is it the right "
            "file? (set NCCLPROBE_MAX_INPUT_MIB to raise the limit)",
        ),
        (
            "kernel events",
            ["MAX_EVENTS=50000"],
            "has more than 50000 events, the most ncclprobe reads of one trace (set "
            "NCCLPROBE_MAX_PROFILE_EVENTS to raise the limit)",
        ),
        ("one long string", [], "an element longer than 64 MB"),
    ],
)
def test_a_gzip_bomb_of_a_profile_is_refused_with_bounded_memory(tmp_path, bomb, limits, needle):
    path = tmp_path / "bomb.json.gz"
    if bomb == "blanks":  # 80 MiB of blanks in 80 KB
        data = _members(b'{"traceEvents": [', b" " * (16 << 20), 5, b"]}")
    elif bomb == "kernel events":  # the issue's bomb, smaller: 60,000 kernel events in 200 KB
        event = (
            '{"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel'
            '<4, at::native::FillFunctor<float> >(int)", "pid": 0, "tid": 7, "ts": 1.5, "dur": 3.2, '
            '"args": {"correlation": 5, "stream": 7, "grid": [1, 1, 1]}},'
        )
        data = _members(b'{"traceEvents": [', (event * 10000).encode(), 6, b'{"ph": "i"}]}')
    else:  # a 96 MiB string in 100 KB
        data = _members(b'{"traceEvents": [{"name": "', b"x" * (32 << 20), 3, b'"}]}')
    path.write_bytes(data)
    assert len(data) < 2 << 20
    proc, rss, seconds = _run_bomb(tmp_path, ["diagnose", "--profile", str(path)], limits)
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr[-500:]
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stdout == ""
    assert rss < (1 << 30) and seconds < 60, (rss, seconds)


def test_a_gzip_bomb_of_a_flight_recorder_dump_is_refused_with_bounded_memory(tmp_path):
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(_members(b"", b"\x80\x02" + b"N" * (32 << 20), 9, b"."))
    proc, rss, _ = _run_bomb(tmp_path, ["diagnose", "--flight-recorder", str(path)])
    # refused while streaming, at 20x its size (the ratio cap), long before the absolute 64 MiB
    assert proc.returncode == 2 and "decompresses to more than 20x its size" in proc.stderr, (
        proc.stderr
    )
    assert "gunzip it yourself" in proc.stderr and rss < RSS_LIMIT, rss


def test_a_1mb_value_is_cut_in_the_table_and_kept_whole_in_json(tmp_path):
    log = tmp_path / "nccl.log"
    value = "x" * (1 << 20)
    log.write_text(f"h:1:2 [0] NCCL INFO NCCL_IB_HCA set by environment to {value}\n")
    runner = CliRunner()
    started = time.perf_counter()
    table = runner.invoke(
        cli, ["nccl-log", str(log)], prog_name="ncclprobe", env={"COLUMNS": "100"}
    )
    assert time.perf_counter() - started < 10 and table.exit_code == 0, table.output[-300:]
    assert "1 cell(s) longer than 1000 characters cut" in table.output
    assert f"{'x' * 900}" in table.output.replace("\n", "").replace(" ", "")
    assert len(table.output) < 5000
    whole = runner.invoke(cli, ["nccl-log", str(log), "--format", "json"], prog_name="ncclprobe")
    assert json.loads(whole.stdout)["env"]["NCCL_IB_HCA"] == value
    wide = runner.invoke(cli, ["--wide", "nccl-log", str(log)], prog_name="ncclprobe")
    assert value in wide.output and "cut" not in wide.output


def test_the_exit_4s_of_issue_40_are_answers(tmp_path):
    """A 400-digit `In msg nelems` in a profile (float overflow in the bus bandwidth), integers of
    more than 4,300 digits as a Flight Recorder dump's keys and ranks (`str()` raises past them),
    and a lone surrogate in a JSON string (no encoder writes it): each an answer, never exit 4."""
    import pickle

    from ncclprobe.evidence.hang.safe_pickle import loads_data

    profile = gzip.decompress(
        (
            FIXTURES
            / "profiles/nccl_2.28.9_h200_2ranks_1gpu_hostid_allreduce_eager_then_graph.json.gz"
        ).read_bytes()
    ).decode()
    nelems = re.search(r'"In msg nelems": \d+', profile).group(0)
    (tmp_path / "p.json").write_text(profile.replace(nelems, '"In msg nelems": 1' + "0" * 400))
    runner = CliRunner()
    result = runner.invoke(cli, ["diagnose", "--profile", str(tmp_path / "p.json")])
    assert result.exit_code in (0, 1) and "internal error" not in result.output, result.output[
        -400:
    ]

    huge = 10**5000
    dumps = FIXTURES / "flight_recorder" / "nccl" / "groups" / "dumps"
    for case, change in {
        "status key": lambda d: d["pg_status"].update({huge: d["pg_status"]["0"]}),
        "config key": lambda d: d["pg_config"].update({huge: d["pg_config"]["0"]}),
        "ranks": lambda d: d["pg_config"]["0"].update(ranks="[" + "1" * 5000 + "]"),
        "old ranks": lambda d: d.update(version="1.4", pg_config={"0": [0, huge]}),
        "sizes": lambda d: d["entries"][0].update(input_sizes=[[huge]]),
        "p2p name": lambda d: d["entries"][0].update(profiling_name="nccl:send 0->" + "1" * 5000),
    }.items():
        folder = tmp_path / case.replace(" ", "-")
        folder.mkdir()
        for dump in sorted(dumps.iterdir()):
            doc = loads_data(dump.read_bytes(), str(dump))
            change(doc)
            (folder / dump.name).write_bytes(pickle.dumps(doc, protocol=2))
        result = runner.invoke(cli, ["diagnose", "--flight-recorder", str(folder)])
        assert result.exit_code in (0, 1, 2, 3), (case, result.exit_code, result.output[-400:])
        assert "internal error" not in result.output, (case, result.output[-400:])

    trace = json.loads((FIXTURES / "traces/handwritten_seed_case_tp2_h200.json").read_text())
    trace["config"]["preset"] = "tiny\ud800"
    (tmp_path / "t.json").write_text(json.dumps(trace))
    for fmt in ("table", "csv", "json"):
        result = runner.invoke(
            cli, ["diagnose", "--trace", str(tmp_path / "t.json"), "--format", fmt]
        )
        assert result.exit_code in (0, 1, 2), (fmt, result.exit_code, result.output[-400:])


def _changed(doc, change):
    doc = json.loads(json.dumps(doc))
    change(doc)
    return doc


def test_the_full_walks_exit_4s_are_refusals_naming_the_field(tmp_path):
    """What examples/bench_mutation_walk.py found at 20 positions per case (8 exit 4s in 8,159
    cases): fields of another type or null that a reader let through, and digits past 4,300 in a
    job log's and a profile's names. Each is now a one-line refusal or an answer."""
    trace = json.loads((FIXTURES / "traces/handwritten_seed_case_tp2_h200.json").read_text())
    results = (FIXTURES / "results/handwritten_sweep_nccl_2ranks_h200.jsonl").read_text()
    header, rest = results.split("\n", 1)
    cases = {
        "trace checkpoint": (
            ["diagnose", "--trace"],
            _changed(trace, lambda d: d["config"].update(checkpoint={"a": 1})),
            'field "checkpoint" must be a string',
        ),
        "trace sizes": (
            ["diagnose", "--trace"],
            _changed(trace, lambda d: d["runs"][0]["collectives"].update(sizes=7)),
            "collectives.sizes must be a list",
        ),
        "trace median": (
            ["diagnose", "--trace"],
            _changed(trace, lambda d: d["runs"][1]["phases"]["verify"].update(median_ms=None)),
            "verify.median_ms is missing",
        ),
        "results env": (
            ["report"],
            json.dumps({**json.loads(header), "env": True}) + "\n" + rest,
            'field "env" must be a JSON object',
        ),
        "results node": (
            ["recommend"],
            json.dumps({**json.loads(header), "node": "nvlink"}) + "\n" + rest,
            'field "node" must be a JSON object',
        ),
    }
    runner = CliRunner()
    for name, (command, doc, needle) in cases.items():
        path = tmp_path / name.replace(" ", "-")
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        out = ["--output", str(tmp_path / "r")] if command == ["report"] else []
        result = runner.invoke(cli, [*command, str(path), *out], prog_name="ncclprobe")
        assert result.exit_code == 2 and needle in result.stderr, (name, result.output[-400:])
    log = tmp_path / "job.log"
    log.write_text(f"[rank{'9' * 5000}]: RuntimeError: x\nProfilerStep#{'1' * 5000}\n")
    result = runner.invoke(cli, ["diagnose", "--log", str(log)], prog_name="ncclprobe")
    assert result.exit_code in (0, 1, 3) and "internal error" not in result.output, result.output
