"""Nothing from an input drives the terminal (issue 40 §1): every control character, escape
sequence, C1 control, bidi override and invisible format character planted in an input is printed
as a visible escape (`\\x1b`, `\\u009b`), in table, `--wide`, CSV and JSON, on stdout and stderr.

The mechanism is one guard on both streams (`ncclprobe.visible`, installed by the command group
for a command's whole life); tables escape each cell first, so columns line up. The walk here
plants the payload (tests/data/control.py) in every string of every input kind, each kind once with
every string planted (refusals: the error line) and once with identifiers left alone (the reader's
happy path: names, paths, descriptions, environments shown), and runs every command that reads it
in every format. The walk one string at a time is examples/bench_terminal_walk.py.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import shutil
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.visible import ACTING, VisibleStream, visible
from tests.data.control import (
    PAYLOAD,
    SHOWN,
    plant_doc,
    plant_json_text,
    plant_lines,
    raw_controls,
)

FIXTURES = Path(__file__).parent / "fixtures"
FORMATS = (["--format", "table"], ["--wide"], ["--format", "csv"], ["--format", "json"])
FR = FIXTURES / "flight_recorder" / "nccl" / "groups"

# (name, fixture, command before the file); the file is planted as text (lines) or JSON (strings)
INPUTS = [
    ("nccl log", "nccl_logs/nccl_2.22.3_2x_a100_sxm64_nvlink_sendrecv_leonardo.log", ["nccl-log"]),
    (
        "rank logs",
        "nccl_logs/nccl_2.29.7dev_tuning_subsys_rtx5090_2ranks_1gpu_socket.log",
        ["diagnose", "--nccl-log"],
    ),
    ("nccl-tests", "nccl_tests/allreduce_4x_rtx5090_pcie_genoa.txt", ["import"]),
    (
        "nccl-tests -J",
        "nccl_tests/allreduce_1x_h200_1rank_nccltests2.19.6_eager_J.json",
        ["import"],
    ),
    ("nvbandwidth", "nvbandwidth/nvbandwidth_v0.10_2gpu_h2d_d2h_d2d_read_azurehpc.txt", ["import"]),
    ("nvbandwidth -j", "nvbandwidth/nvbandwidth_v0.5_1gpu_json_full_dcgm.json", ["import"]),
    ("p2p", "p2p/p2p_4x_a100_pcie_nvlink_pairs_can_cannot_sushruta.txt", ["import"]),
    (
        "collect-env",
        "collect_env/vllm_0.8.5_collect_env_2x_nv12_8nic_sectioned_issue19607.txt",
        ["knobs", "--lint", "--collect-env"],
    ),
    (
        "check_env",
        "collect_env/sglang_check_env_8x_h20_nv18_8nic_issue24966.txt",
        ["import"],
    ),
    ("topo", "topo/dgx_a100_80g_8gpu_nv12_4nic.txt", ["topo", "--from"]),
    (
        "server log",
        "server_logs/sglang_eagle3_cuda_graph_true_issue11948.log",
        ["diagnose", "--server-log"],
    ),
    ("job log", "flight_recorder/nccl/groups/torchrun.log", ["diagnose", "--log"]),
    ("profile", "profiles/handwritten_graph_share_cut_4steps.json", ["diagnose", "--profile"]),
    ("engine trace", "traces/handwritten_seed_case_tp2_h200.json", ["diagnose", "--trace"]),
    ("results", "results/handwritten_sweep_nccl_2ranks_h200.jsonl", ["recommend"]),
]


SHOWN_BY = {
    "nccl log",
    "nccl-tests -J",
    "check_env",
    "topo",
    "results",
    "flight recorder pickle",
    "flight recorder json",
}


def _runner():
    return CliRunner()


def _run(runner, args, where, env=None):
    result = runner.invoke(cli, args, prog_name="ncclprobe", env={"COLUMNS": "100", **(env or {})})
    text = result.stdout + result.stderr
    assert result.exit_code in (0, 1, 2, 3), (where, result.exit_code, text[-600:])
    assert raw_controls(text) == [], (where, raw_controls(text), text[-600:])
    return result


def _planted_inputs(tmp_path, ways=("word", "value")) -> list[tuple[str, str, str, list[str]]]:
    """(kind, where, path, command) for every input kind: JSON with every string planted and with
    identifiers kept, text planted each of `ways`."""
    made = []
    for name, fixture, command in INPUTS:
        source = FIXTURES / fixture
        text = source.read_text()
        variants = {
            variant: plant_json_text(text, keep_identifiers=variant == "identifiers kept")
            for variant in ("every string", "identifiers kept")
        }
        if variants["every string"] is None:
            variants = {f"text, {how}": plant_lines(text, how) for how in ways}
        for variant, planted in variants.items():
            path = tmp_path / f"{len(made)}-{source.name}"
            path.write_text(planted, encoding="utf-8", errors="surrogatepass")
            made.append((name, f"{name} ({variant})", str(path), command))
    return made


def _flight_recorder_dumps(tmp_path) -> list[tuple[str, str, str, list[str]]]:
    """The recorded NCCL dumps (pickles), every string planted (group descriptions, dtypes, frame
    file names, states), as pickles and as JSON, and the identifiers-kept variant."""
    from ncclprobe.evidence.hang.safe_pickle import loads_data

    made = []
    for variant in ("every string", "identifiers kept"):
        for form in ("pickle", "json"):
            folder = tmp_path / f"fr-{variant.split()[0]}-{form}"
            folder.mkdir()
            for dump in sorted((FR / "dumps").iterdir()):
                doc = loads_data(dump.read_bytes(), str(dump))
                plant_doc(doc, keep_identifiers=variant != "every string")
                for pg in doc["pg_config"].values():  # the group descriptions, whatever the variant
                    pg["desc"] += PAYLOAD
                for entry in doc["entries"]:
                    entry["process_group"] = (
                        entry["process_group"][0],
                        entry["process_group"][1] + PAYLOAD,
                    )
                    for frame in entry["frames"]:
                        frame["filename"] += PAYLOAD
                data = (
                    pickle.dumps(doc, protocol=2)
                    if form == "pickle"
                    else json.dumps(doc).encode("utf-8", "surrogatepass")
                )
                (folder / dump.name).write_bytes(data)
            made.append(
                (
                    f"flight recorder {form}",
                    f"flight recorder {form} ({variant})",
                    str(folder),
                    ["diagnose", "--flight-recorder"],
                )
            )
    return made


def test_every_input_kind_prints_no_raw_control_character_in_any_format(tmp_path):
    runner, shown, runs = _runner(), set(), 0
    started = time.perf_counter()
    for kind, where, path, command in _planted_inputs(tmp_path) + _flight_recorder_dumps(tmp_path):
        for fmt in FORMATS:
            args = [fmt[0], *command, path] if fmt == ["--wide"] else [*command, path, *fmt]
            result = _run(runner, args, f"{where} {fmt}")
            runs += 1
            if SHOWN in result.stdout + result.stderr or "\\u202eRLO" in result.stdout:
                shown.add(kind)
    # positive control: the planted strings were read and printed (escaped) by these kinds at least
    # (the others print no string of theirs, or refuse without quoting one)
    assert shown >= SHOWN_BY, sorted(SHOWN_BY - shown)
    assert runs >= 100 and time.perf_counter() - started < 120, runs


def test_a_planted_error_line_and_file_name_print_escaped(tmp_path):
    """The one-line error path and the log formatter: a file name and a value of the user's."""
    runner = _runner()
    name = tmp_path / f"log{PAYLOAD.replace('/', '')}.txt"
    result = _run(runner, ["nccl-log", str(name)], "missing file")
    assert result.exit_code == 2 and "\\x1b" in result.stderr
    result = _run(runner, ["sweep", "--proto", "LL" + PAYLOAD], "bad option value")
    assert result.exit_code == 2 and "\\u202e" in result.stderr
    result = _run(
        runner,
        [
            "-v",
            "import",
            str(FIXTURES / "nccl_tests/allreduce_4x_rtx5090_pcie_genoa.txt"),
            "--settings",
            "NCCL_IB_HCA=mlx5_0\u202e\x1b[2J",
        ],
        "settings",
    )
    assert "mlx5_0\\u202e\\x1b[2J" in result.stdout + result.stderr


def test_a_live_process_environment_and_command_line_print_escaped(tmp_path):
    """env-check of a job whose environment and argv carry the payload (the issue's example)."""
    words = [f"--flag{i}" for i in range(60)]  # a long command line: --wide shows it whole
    argv = [f"train{PAYLOAD}", "-c", "import time; time.sleep(60)", f"--name={PAYLOAD}", *words]
    env = {
        **os.environ,
        "NCCL_SOCKET_IFNAME": "eth0" + PAYLOAD.replace("\x00", ""),
        "NCCL_DEBUG": "INFO" + PAYLOAD,
    }
    proc = subprocess.Popen(argv, executable=sys.executable, env=env)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if b"--name=" in open(f"/proc/{proc.pid}/cmdline", "rb").read():
                    break
            except OSError:
                pass
            time.sleep(0.05)
        runner = _runner()
        for fmt in FORMATS:
            for extra in ([], ["--all"]):
                args = [
                    *(fmt if fmt == ["--wide"] else []),
                    "env-check",
                    "--pid",
                    str(proc.pid),
                    *extra,
                ]
                args += fmt if fmt != ["--wide"] else []
                result = _run(runner, args, f"env-check {fmt} {extra}")
                out = result.stdout
                assert SHOWN in out or "\\u202eRLO" in out, out[-500:]
                if fmt != ["--format", "table"]:  # issue 40 §8: --wide cut the command column
                    assert "--flag59" in out, (fmt, out[-800:])
                else:
                    assert "--flag59" not in out and " ..." in out, out[-800:]
    finally:
        proc.kill()
        proc.wait()


def test_the_acting_class_is_unicodes_control_format_and_separator_characters():
    """Cc (but tab and newline), Cf, Zl, Zp and Cs, by this Python's Unicode tables; the pattern
    may hold the Cf characters of a later Unicode too (U+13439-U+1343F), nothing else."""
    later = set(range(0x13439, 0x13440))
    for code in range(0x110000):
        char = chr(code)
        acting = unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp", "Cs") and char not in "\t\n"
        matched = ACTING.fullmatch(char) is not None
        assert matched == acting or (matched and code in later), (
            hex(code),
            unicodedata.category(char),
        )


def test_visible_escapes_each_class_and_keeps_what_prints():
    assert visible("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert visible("\x9b31m\x85") == "\\u009b31m\\u0085"
    assert visible("\u202eabc\u2066") == "\\u202eabc\\u2066"
    assert visible("\U000e0041\ud800") == "\\U000e0041\\ud800"
    assert visible("x\ry\bz\x07\x00\x7f") == "x\\x0dy\\x08z\\x07\\x00\\x7f"
    kept = "tab\tnew\nline é ü 中文 🙂 \\x1b ~ \x20"
    assert visible(kept) is kept  # tab, newline, letters of any script, emoji, a backslash


class _Tty:
    def __init__(self):
        self.parts = []

    def write(self, text):
        self.parts.append(text)

    def flush(self):
        pass

    def isatty(self):
        return True


def test_the_guard_passes_its_own_progress_bar_and_encodes_what_a_terminal_cannot():
    from ncclprobe.cli.output import Progress

    tty = _Tty()
    guarded = VisibleStream(tty)
    with Progress(2, "sweep", stream=guarded) as progress:
        progress.advance("config \x1b]0;x\x07")
    text = "".join(tty.parts)
    assert text.startswith("\rsweep [") and "config \\x1b]0;x\\x07" in text and "\x1b" not in text
    with pytest.raises(TypeError):
        guarded.write(b"bytes")

    import io

    latin = io.TextIOWrapper(io.BytesIO(), encoding="latin-1")
    VisibleStream(latin).write("caf\u00e9 \u4e2d\ud800")
    latin.flush()
    assert latin.buffer.getvalue() == b"caf\xe9 \\u4e2d\\ud800"


def test_the_guard_is_on_only_while_a_command_runs():
    stdout = sys.stdout
    result = CliRunner().invoke(cli, ["knobs", "--help"], prog_name="ncclprobe")
    assert result.exit_code == 0 and sys.stdout is stdout


def test_a_gzip_profile_and_a_lone_surrogate_print_escaped(tmp_path):
    """A JSON string holding a lone surrogate (`\\ud800`, valid JSON, no valid text) ended in
    exit 4 at output (UnicodeEncodeError); now it prints as its escape."""
    source = (
        FIXTURES / "profiles/nccl_2.28.9_h200_2ranks_1gpu_hostid_allreduce_eager_then_graph.json.gz"
    )
    doc = json.loads(gzip.decompress(source.read_bytes()))
    for event in doc["traceEvents"]:
        args = event.get("args")
        if isinstance(args, dict) and "Collective name" in args:
            args["Process Group Description"] = "pg\ud800" + PAYLOAD
    path = tmp_path / "p.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    runner = _runner()
    for fmt in FORMATS:
        args = (
            [fmt[0], "diagnose", "--profile", str(path)]
            if fmt == ["--wide"]
            else ["diagnose", "--profile", str(path), *fmt]
        )
        _run(runner, args, f"surrogate {fmt}")


def test_report_files_are_not_the_terminal_but_never_hold_an_unencodable_character(tmp_path):
    """What a command writes to a file keeps its text (a report is read in an editor), but a lone
    surrogate becomes its escape rather than an exit 4."""
    results = FIXTURES / "results/handwritten_sweep_nccl_2ranks_h200.jsonl"
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    lines[0]["host"] = "node\ud800" + PAYLOAD
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = _run(_runner(), ["report", str(path), "--output", str(tmp_path / "rep")], "report")
    assert result.exit_code in (0, 1), result.output[-400:]
    shutil.rmtree(tmp_path / "rep", ignore_errors=True)


def test_the_guard_wraps_both_streams_once_and_gives_them_back():
    import io

    from ncclprobe.visible import guarded

    out, err = sys.stdout, sys.stderr
    with guarded():
        assert isinstance(sys.stdout, VisibleStream) and isinstance(sys.stderr, VisibleStream)
        assert sys.stdout.stream is out and sys.stderr.stream is err
        with guarded():  # a command run from a command: not wrapped twice
            assert sys.stdout.stream is out and sys.stderr.stream is err
    assert sys.stdout is out and sys.stderr is err
    plain = VisibleStream(io.StringIO())
    assert plain.errors == "strict" and plain.encoding == "utf-8"
    wrapper = io.TextIOWrapper(io.BytesIO(), encoding="latin-1", errors="replace")
    assert (
        VisibleStream(wrapper).errors == "replace" and VisibleStream(wrapper).encoding == "latin-1"
    )


def test_every_c0_control_is_a_two_digit_escape_and_c1_a_four_digit_one():
    assert visible("\x1f\x01\x7f") == "\\x1f\\x01\\x7f"
    assert visible("\x80\x9f\u2029") == "\\u0080\\u009f\\u2029"
    assert visible("\ufeff\U000e007f") == "\\ufeff\\U000e007f"
