"""The adversarial walk (issue 16): every file or directory parameter of every command, found from
the CLI itself, gets every class of bad file; every directory output gets a directory of the user's.

Each answer must be exit 2 with one line naming the file, no traceback, nothing on stdout and
nothing left behind. A new path option that this table does not place fails the walk, so it cannot
escape it. Commands run in-process (CliRunner): the whole walk takes a few seconds.
"""

import codecs
import json
import os
import signal
from contextlib import contextmanager

import click
import pytest
from click.testing import CliRunner

from ncclprobe.cli import SUBCOMMANDS, cli, load_target
from ncclprobe.cli.probe import PROBES
from tests.data.resultsets import config, curve, engine_trace, write_set

# a path parameter -> how to call the command with FILE there (T: a good engine trace, R: good results)
INPUTS = {
    "sweep --resume": lambda f, t, r: ["sweep", "--resume", f],
    "sweep --collect": lambda f, t, r: ["sweep", "--collect", f, "--output", "o.jsonl"],
    "knobs --topo": lambda f, t, r: ["knobs", "--lint", "--topo", f],
    "knobs --collect-env": lambda f, t, r: ["knobs", "--lint", "--collect-env", f],
    "topo --from": lambda f, t, r: ["topo", "--from", f],
    "nccl-log files": lambda f, t, r: ["nccl-log", f],
    "import file": lambda f, t, r: ["import", f],
    "export results": lambda f, t, r: ["export", f, "--output", "o.txt"],
    "env-check --expect-from": lambda f, t, r: [
        "env-check",
        "--pid",
        str(os.getpid()),
        "--expect-from",
        f,
    ],
    "run-engine --prompts": lambda f, t, r: ["run-engine", "--prompts", f],
    "train-draft --prompts": lambda f, t, r: ["train-draft", "--prompts", f, "--output", "d.st"],
    "train-draft --eval-prompts": lambda f, t, r: [
        "train-draft",
        "--eval-prompts",
        f,
        "--output",
        "d.st",
    ],
    "recommend results": lambda f, t, r: ["recommend", f],
    "recommend --trace": lambda f, t, r: ["recommend", r, "--trace", f],
    "report results": lambda f, t, r: ["report", f, "--output", "rep"],
    "report --trace": lambda f, t, r: ["report", r, "--trace", f, "--output", "rep"],
    "diagnose --trace": lambda f, t, r: ["diagnose", "--trace", f],
    "diagnose --profile": lambda f, t, r: ["diagnose", "--profile", f],
    "diagnose --server-log": lambda f, t, r: ["diagnose", "--server-log", f],
    "diagnose --baseline": lambda f, t, r: ["diagnose", "--trace", t, "--baseline", f],
    "diagnose --baseline-profile": lambda f, t, r: [
        "diagnose",
        "--trace",
        t,
        "--baseline-profile",
        f,
    ],
    "diagnose --baseline-server-log": lambda f, t, r: [
        "diagnose",
        "--trace",
        t,
        "--baseline-server-log",
        f,
    ],
    "diagnose --model-config": lambda f, t, r: ["diagnose", "--trace", t, "--model-config", f],
    "diagnose --sweep": lambda f, t, r: ["diagnose", "--trace", t, "--sweep", f],
    "diagnose --env-check": lambda f, t, r: ["diagnose", "--trace", t, "--env-check", f],
    "diagnose --collect-env": lambda f, t, r: ["diagnose", "--trace", t, "--collect-env", f],
    "diagnose --flight-recorder": lambda f, t, r: ["diagnose", "--flight-recorder", f],
    "diagnose --nccl-log": lambda f, t, r: ["diagnose", "--nccl-log", f],
    "diagnose --capture": lambda f, t, r: ["diagnose", "--capture", f],
    "diagnose --draft-config": lambda f, t, r: ["diagnose", "--trace", t, "--draft-config", f],
    "probe graph-capture --trace": lambda f, t, r: ["probe", "graph-capture", "--trace", f],
}
# walked elsewhere: a log that may be any text (tests/test_envcheck.py, tests/test_diagnose_hang.py),
# a checkpoint or draft (torch loads: tests/test_engine_gguf.py, test_engine_draft.py)
ELSEWHERE = {
    "capture --output",  # needs a command after `--`: tests/test_capture_signals.py refuses a used one
    "env-check --log",
    "diagnose --log",
    "run-engine --checkpoint",
    "run-engine --draft",
    "train-draft --checkpoint",
}
# file outputs: tests/test_trust_writers.py (existing, --force, an input as output, interrupts)
FILE_OUTPUTS = {
    "sweep --output",
    "import --output",
    "export --output",
    "run-engine --trace",
    "recommend --output",
    "train-draft --output",
}
# directory outputs without --force: a directory holding the user's file is refused before any work
DIR_OUTPUTS = {
    "topo --output": ["topo", "--check", "--no-nccl-job", "--output"],
    "run-engine --profile": ["run-engine", "--preset", "tiny", "--profile"],
    "probe env-propagation --output": ["probe", "env-propagation", "--output"],
    "sweep --torchrun-dir": ["sweep", "--nranks", "2", "--backend", "gloo", "--torchrun-dir"],
    "sweep --shared-dir": ["sweep", "--launcher", "mpirun", "--hosts", "a,b", "--shared-dir"],
    "env-check --shared-dir": [
        "env-check",
        *("--launcher", "mpirun", "--hosts", "a,b", "--match", "x", "--shared-dir"),
    ],
    "report --output": ["report", "RESULTS", "--output"],
    "train-target --output": ["train-target", "--output"],
}


def _path_parameters():
    found = set()
    for name, target in [*SUBCOMMANDS.items(), *((f"probe {k}", v) for k, v in PROBES.items())]:
        command = load_target(target)
        if isinstance(command, click.Group):
            continue
        for param in command.params:
            if isinstance(param.type, (click.Path, click.File)):
                label = (
                    param.opts[0] if isinstance(param, click.Option) else param.name
                )  # not its aliases
                found.add(f"{name} {label}")
    return found


def _bad_files(tmp_path, results, trace):
    """Every class of bad file, by name: absent, empty, binary, torn, not UTF-8, a directory, a device,
    a FIFO,
    JSON that is valid but of no kind or another kind, and a newer schema of the right kind."""

    def put(name, data):
        path = tmp_path / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        return str(path)

    (tmp_path / "a-dir").mkdir()
    os.mkfifo(tmp_path / "fifo.json")  # no writer: open() blocked forever (issue 40 §8)
    header, *rest = open(results).read().splitlines()
    newer = json.dumps({**json.loads(header), "schema_version": 99})
    return {
        "missing": str(tmp_path / "absent.json"),
        "empty": put("empty.json", b""),
        "binary": put("binary.json", b"\x7fELF\x02\x01" + bytes(range(256)) * 8),
        "torn": put("torn.json", '{"kind": "engine-trace", "runs": ['),
        "latin-1": put("latin1.json", b"caf\xe9 \x80\xff\n"),
        "directory": str(tmp_path / "a-dir"),
        "device": "/dev/zero",
        "fifo": str(tmp_path / "fifo.json"),
        "a list": put("list.json", "[1, 2]"),
        "NaN": put("nan.json", '{"x": NaN}'),
        "nested": put("nested.json", "[" * 50000 + "]" * 50000),
        "newer schema": put("newer.jsonl", "\n".join([newer, *rest]) + "\n"),
        "newer trace": put(
            "newer.json", json.dumps({**json.loads(open(trace).read()), "schema_version": 99})
        ),
    }


@contextmanager
def _bounded(where, seconds=20):
    """A reader that hangs (an endless /dev/zero, a quadratic parse) fails the walk instead of stalling it."""

    def expired(*_):
        raise AssertionError(f"{where}: no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _refused(result, where):
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, (where, result.exit_code, result.output[-300:])
    assert len(lines) == 1 and lines[0].startswith("ncclprobe: error: ") and len(lines[0]) < 400, (
        where,
        lines,
    )
    assert "Traceback" not in result.output and result.stdout == "", where


def test_every_path_parameter_is_walked():
    placed = set(INPUTS) | ELSEWHERE | FILE_OUTPUTS | set(DIR_OUTPUTS)
    assert _path_parameters() == placed


def test_every_input_refuses_every_bad_file_in_one_line(tmp_path, monkeypatch):
    results = write_set(tmp_path / "good.jsonl", [config({}, curve(10, 1))])
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(engine_trace({1 << 14: 10})))
    bad = _bad_files(tmp_path, results, trace)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    runner = CliRunner()
    for name, make in INPUTS.items():
        for kind, path in bad.items():
            if kind.startswith("newer") and name.split()[0] not in (
                "recommend",
                "report",
                "diagnose",
                "sweep",
            ):
                continue  # a results file or trace of a newer ncclprobe: only their readers
            with _bounded(f"{name} <- {kind}"):
                result = runner.invoke(cli, make(path, str(trace), results), prog_name="ncclprobe")
            _refused(result, f"{name} <- {kind}")
            assert list(work.iterdir()) == [], f"{name} <- {kind} left {list(work.iterdir())}"


@pytest.mark.parametrize("name", sorted(DIR_OUTPUTS))
def test_a_directory_of_the_users_files_is_never_written_into(tmp_path, name):
    results = write_set(tmp_path / "good.jsonl", [config({}, curve(10, 1))])
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious\n")
    args = [results if a == "RESULTS" else a for a in DIR_OUTPUTS[name]] + [str(mine)]
    _refused(CliRunner().invoke(cli, args, prog_name="ncclprobe"), name)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"] and (
        mine / "notes.txt"
    ).read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.jsonl", "mine"]


def test_a_utf16_input_is_read_as_text(tmp_path):
    """The other side of the walk: a UTF-16 file with a BOM is the text it holds, not binary."""
    log = tmp_path / "log.txt"
    log.write_bytes(codecs.BOM_UTF16_LE + "hello world\n".encode("utf-16-le"))
    result = CliRunner().invoke(cli, ["nccl-log", str(log)], prog_name="ncclprobe")
    assert "binary" not in result.stderr and "Traceback" not in result.output
