"""Numbers are finite, in range and parsed one way (issue 16 §2), on the command line and in files."""

import json
import math

import click
import pytest
from click.testing import CliRunner

from ncclprobe.cli import SUBCOMMANDS, cli, load_target
from ncclprobe.cli.probe import PROBES
from ncclprobe.cli.types import StrictFloat, StrictInt
from ncclprobe.errors import UsageProblem
from ncclprobe.numbers import (
    is_digits,
    parse_duration,
    parse_float,
    parse_int,
    parse_version,
    version_prefix,
)
from ncclprobe.safe_output import dumps_json
from ncclprobe.sizes import parse_sizes

# NaN and infinities, a superscript (isdigit() is true), other scripts' digits (int() reads them),
# 5000 digits (int() fails past 4300), and Python-only spellings
BAD_NUMBERS = ["nan", "inf", "-inf", "²", "١٢", "9" * 5000, "1_0", "0x10", "1e999", ""]


def _numeric_options():
    """(command path, option) for every number-typed option of every command, probes included."""
    found = []
    for name, target in [*SUBCOMMANDS.items(), *((f"probe {k}", v) for k, v in PROBES.items())]:
        command = load_target(target)
        if command is None or isinstance(command, click.Group):
            continue
        for param in command.params:
            if (
                isinstance(param, click.Option)
                and isinstance(param.type, (StrictInt, StrictFloat))
                and not param.count
            ):  # -v/-q count: they take no value
                found.append((name.split(), max(param.opts, key=len)))
    return found


OPTIONS = _numeric_options()


def test_no_command_keeps_a_lenient_number_type():
    """Every int/float option is strict, also those whose author wrote type=int (cli.types.harden)."""
    lenient = []
    for name, target in [*SUBCOMMANDS.items(), *PROBES.items()]:
        command = load_target(target)
        for param in getattr(command, "params", []):
            if (
                param.type is click.INT
                or param.type is click.FLOAT
                or isinstance(param.type, click.types._NumberRangeBase)
            ):
                lenient.append(f"{name} {param.name}")
    assert lenient == [] and len(OPTIONS) >= 30


@pytest.mark.parametrize("path, option", OPTIONS, ids=[f"{' '.join(p)} {o}" for p, o in OPTIONS])
def test_every_number_option_refuses_every_bad_number(path, option):
    runner = CliRunner()
    for bad in BAD_NUMBERS:
        result = runner.invoke(cli, [*path, option, bad], prog_name="ncclprobe")
        assert result.exit_code == 2, (bad[:20], result.output)
        lines = result.stderr.strip().splitlines()
        assert (
            len(lines) == 1 and lines[0].startswith("ncclprobe: error:") and len(lines[0]) < 300
        ), lines
        assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "args, needle",
    [
        (["topo", "--from", "x", "--nccl-version", "banana"], "not a version"),
        (["knobs", ""], "is empty"),
        (["knobs", "--nccl-version", "2.28.9"], "go with --lint"),
        (["env-check", "--pid", "1", "--count", "3"], "--count is the number of --watch checks"),
        (["env-check", "--pid", "1", "--watch", "nan"], "not a finite"),
        (["sweep", "--collect", ".", "--resume", "x.jsonl"], "cannot be combined"),
        (["sweep", "--resume", "x.jsonl", "--force"], "drop --force"),
        (
            ["sweep", "--torchrun-dir", "p", "--nranks", "2", "--backend", "gloo", "--output", "x"],
            "the later --collect",
        ),
        (["sweep", "--sizes", "1K..64K:²"], "step factor"),
        (["sweep", "--sizes", "9" * 5000], "bad size"),
        (["sweep", "--p2p-level", "²"], "not a P2P level"),
        (["sweep", "--set", "NCCL_BUFFSIZE=²"], "not an integer"),
        (["sweep", "--timeout", "nan"], "not a finite"),
        (["probe", "env-propagation", "--timeout", "inf"], "not a finite"),
        (["train-draft", "--output", "d.st", "--lr", "nan"], "not a finite"),
        (["run-engine", "--temperature", "nan"], "not a finite"),
    ],
)
def test_contradictions_and_nonsense_values_are_refused(tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, args, prog_name="ncclprobe")
    assert result.exit_code == 2 and needle in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []


def test_the_parsers_accept_ascii_numbers_only_within_bounds():
    assert parse_int("42", "n", min=1) == 42 and parse_float("1e-3", "x") == 0.001
    assert parse_duration("2.5", "t") == 2.5 and parse_version("2.29.7+cuda12.9") == (2, 29, 7)
    assert version_prefix("2.28.9+cuda13.0 extra") == (2, 28, 9) and version_prefix("²") is None
    assert parse_sizes("1K..4K") == [1024, 2048, 4096] and is_digits("12") and not is_digits("²")
    for text in BAD_NUMBERS:
        for parse in (
            lambda t: parse_int(t, "n"),
            lambda t: parse_float(t, "x"),
            lambda t: parse_duration(t, "t"),
            lambda t: parse_version(t),
            parse_sizes,
        ):
            with pytest.raises(UsageProblem):
                parse(text)
    for bad in ("0", "-1"):
        with pytest.raises(UsageProblem, match="above 0"):
            parse_duration(bad, "t")


def test_file_readers_read_ascii_numbers_only(tmp_path):
    """The same strictness in every reader: a `²` or a 5000-digit number in a file is not a number
    there either (skipped or reported), never a crash."""
    from ncclprobe.evidence.nccl.nccl_log import parse_nccl_log
    from ncclprobe.evidence.nccl.nccl_tests import parse_nccl_tests
    from ncclprobe.nccl.lint import lint_env

    log = parse_nccl_log(
        "h:1:2 [0] NCCL INFO AllReduce: ² Bytes -> Algo ² proto ²\n"
        "h:1:2 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to ²\n"
        "h:１:2 [0] NCCL INFO NCCL_PROTO set by environment to LL\n"
    )
    assert log.tuning == [] and log.env == {"NCCL_P2P_LEVEL": "²"} and log.pids == {1}
    findings = lint_env({"NCCL_P2P_LEVEL": "²", "NCCL_MIN_CTAS": "٣", "NCCL_MAX_CTAS": "1"})
    assert {f.code for f in findings} >= {"p2p-level-unknown", "invalid-value"}
    table = (
        "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong\n"
        f"{'9' * 5000}  2  float  sum  -1  1.0  1.0  1.0  0  1.0  1.0  1.0  0\n"
        "²  2  float  sum  -1  1.0  1.0  1.0  0  1.0  1.0  1.0  0\n"
        "1024  256  float  sum  -1  nan  1.0  1.0  0  1.0  1.0  1.0  0\n"
        "1024  256  float  sum  -1  9.5  0.11  0.11  0  9.4  0.11  0.11  0\n"
    )
    run = parse_nccl_tests(table)
    assert [r.size_bytes for r in run.rows] == [1024]


def test_json_is_written_without_nan():
    with pytest.raises(ValueError):
        dumps_json({"time_us": math.nan})
    assert json.loads(dumps_json({"x": 1.5})) == {"x": 1.5}


def test_format_size_prints_any_number_it_is_given():
    """A size read from a file that no check bounded must still print (400 digits crashed it)."""
    from ncclprobe.sizes import format_size

    assert format_size(65536) == "64K" and format_size(1 << 50) == "1024T"
    assert format_size(10**30) == "1e+30B" and format_size(10**400) == "2^1328+B"
    assert format_size(float("inf")) == "infB" and format_size(10**5000).startswith("2^")


def test_a_logged_number_is_read_strictly():
    """SGLang's `gen throughput (token/s): 1²0` is no number (isdigit() said it was)."""
    from ncclprobe.evidence.run.serverlog_lines import as_int, as_ints, as_number

    assert as_number("97.58") == 97.58 and as_number("0") == 0.0
    assert [as_number(t) for t in ("1²0", "nan", "inf", "١٢", "-1", "9" * 70, None)] == [None] * 7
    assert as_int("12") == 12 and as_int("²") is None and as_int("9" * 5000) is None
    assert as_ints("1, 2,²,3") == [1, 2, 3]
