"""One CLI convention for every command (issue 18 §5), checked by walking `ncclprobe --help`
through every command and subcommand, and on the tables of real commands at 100 columns."""

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from ncclprobe.cli import HELP_WIDTH, TRACEBACK_FLAG, cli

# the shipped traces this module diagnoses are parsed once per session (conftest.py)
pytestmark = pytest.mark.usefixtures("shared_timelines")

ROOT = Path(__file__).resolve().parent.parent
# every command that writes a file or directory, and the option that names it
WRITERS = {
    ("sweep",): "--output",
    ("import",): "--output",
    ("export",): "--output",
    ("recommend",): "--output",
    ("report",): "--output",
    ("train-draft",): "--output",
    ("train-target",): "--output",
    ("topo",): "--output",
    ("probe", "env-propagation"): "--output",
    ("run-engine",): "--trace",
}
OLD_SPELLINGS = ("--out", "--output-dir", "--workdir", "--workload")
ENGINE_TRACE_READERS = (
    ("diagnose",),
    ("recommend",),
    ("report",),
    ("run-engine",),
    ("probe", "graph-capture"),
)


def _commands():
    ctx = click.Context(cli)
    yield ()
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        yield (name,)
        if isinstance(command, click.Group):
            yield from ((name, sub) for sub in command.list_commands(ctx))


COMMANDS = list(_commands())


def _invoke(*args, columns=100):
    return CliRunner().invoke(cli, list(args), prog_name="ncclprobe", env={"COLUMNS": str(columns)})


@pytest.fixture(scope="module")
def helps():
    return {path: _invoke(*path, "--help") for path in COMMANDS}


def test_the_walk_reaches_every_command():
    assert (
        len(COMMANDS) >= 18
        and ("probe", "custom-allreduce") in COMMANDS
        and ("train-target",) in COMMANDS
    )


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "ncclprobe")
def test_every_help_states_its_exit_codes_fits_100_columns_and_takes_q_v_wide(helps, path):
    result = helps[path]
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    for code in (
        "Exit codes: 0",
        "2 bad usage",
        "130",
        "143",
        f"4 internal error ({TRACEBACK_FLAG} shows",
    ):
        assert code in text, (path, code)
    for flag in ("-q, --quiet", "-v, --verbose", "--wide"):
        assert flag in result.output, (path, flag)
    assert max(len(line) for line in result.output.splitlines()) <= HELP_WIDTH
    shown = {
        word.strip(",")
        for line in result.output.splitlines()
        for word in line.split()
        if word.startswith("--")
    }
    assert not shown & set(OLD_SPELLINGS), (path, shown & set(OLD_SPELLINGS))
    if path in WRITERS:
        assert WRITERS[path] in shown, path
    if path in ENGINE_TRACE_READERS:
        assert "--trace" in shown, path
    if path:  # -q, -v and --wide after the command act as before it
        assert _invoke(*path, "-q", "-v", "--wide", "--help").exit_code == 0


def test_old_spellings_still_work_hidden(tmp_path):
    result = _invoke("train-draft", "--out", str(tmp_path / "d.safetensors"), "--lr", "nan")
    assert (
        result.exit_code == 2 and "--lr" in result.output
    )  # parsed past --out: the alias is accepted
    missing = _invoke("train-draft")
    assert (
        missing.exit_code == 2 and "'--output'" in missing.output and "--out'" not in missing.output
    )


def test_the_hint_names_the_flag_that_really_shows_the_traceback(monkeypatch):
    import ncclprobe.cli.knobs as knobs

    def broken(*_args, **_kwargs):
        raise RuntimeError("planted bug")

    monkeypatch.setattr(knobs, "explain", broken)
    plain = _invoke("knobs", "NCCL_PROTO")
    assert plain.exit_code == 4 and f"run with {TRACEBACK_FLAG} for the traceback" in plain.output
    assert "Traceback" not in plain.output
    for args in ((TRACEBACK_FLAG, "knobs", "NCCL_PROTO"), ("knobs", "NCCL_PROTO", TRACEBACK_FLAG)):
        shown = _invoke(*args)
        assert (
            shown.exit_code == 4 and "Traceback" in shown.output and "planted bug" in shown.output
        ), args


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def test_knobs_fits_100_columns_and_wide_shows_everything():
    narrow, wide, doc = (
        _invoke("knobs"),
        _invoke("--wide", "knobs"),
        _invoke("knobs", "--format", "json"),
    )
    assert narrow.exit_code == wide.exit_code == 0
    assert _widest(narrow.stdout) <= 100 < _widest(wide.stdout)
    assert all(k["summary"] for k in json.loads(doc.stdout)["knobs"])  # JSON stays complete


def test_run_engine_table_and_notes_fit_100_columns_and_say_what_they_left_out(monkeypatch, capsys):
    from ncclprobe.cli.output import emit
    from ncclprobe.evidence.run.trace_table import table_notes, table_rows

    doc = json.loads(
        (ROOT / "examples" / "results" / "h200_small_synthetic_target_272_trace.json").read_text()
    )
    doc.setdefault("warnings", [])
    monkeypatch.setenv("COLUMNS", "100")
    emit("table", doc, table_rows(doc), title="ncclprobe run-engine", notes=table_notes(doc))
    out = capsys.readouterr().out
    assert _widest(out) <= 100 and "columns left out to fit 100 columns" in out and "--wide" in out
    assert "tokens_per_s" in out and "accept_len" in out  # the first columns stay


def test_recommend_notes_wrap_to_100_columns(tmp_path):
    from tests.data.resultsets import config, curve, write_set

    results = write_set(
        tmp_path / "r.jsonl",
        [config({}, curve(20.0, 0.05)), config({"NCCL_PROTO": "LL"}, curve(15.0, 0.05))],
        backend="gloo",
    )
    narrow = _invoke("recommend", results)
    assert narrow.exit_code == 0, narrow.output
    assert _widest(narrow.stdout) <= 100 and any(
        line.startswith("#   ") for line in narrow.stdout.splitlines()
    )


def test_no_link_in_the_docs_leaves_the_repository():
    import re

    link = re.compile(r"\]\(([^)#\s]+)")
    found = []
    for doc in [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "examples").rglob("*.md"),
    ]:
        for target in link.findall(doc.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            resolved = (doc.parent / target).resolve()
            if ROOT not in resolved.parents or not resolved.exists():
                found.append(f"{doc.relative_to(ROOT)}: {target}")
        if "../shared" in doc.read_text(encoding="utf-8"):
            found.append(f"{doc.relative_to(ROOT)}: ../shared")
    assert not found, found


def test_two_long_text_columns_share_the_width():
    """knobs --lint's finding and fix: before, the finding was cut to 16 characters (27 lines) while
    the fix kept 58."""
    topo = str(ROOT / "tests/fixtures/topo/rtx3090_4gpu_nvlink_bridge_pairs_nv4_phb_node.txt")
    result = CliRunner().invoke(
        cli, ["knobs", "--lint", "--topo", topo], env={"COLUMNS": "100", "NCCL_PROTO": "^LL"}
    )
    assert result.exit_code == 1, result.output
    rule = next(line for line in result.stdout.splitlines() if line.startswith("----"))
    finding, fix = (len(dashes) for dashes in rule.split()[2:4])
    assert _widest(result.stdout) <= 100 and min(finding, fix) >= 30, (finding, fix)


def _readme_fixture_blocks():
    """(environment, argv, printed lines) of each README command that reads only a fixture."""
    import shlex

    lines, blocks = (ROOT / "README.md").read_text(encoding="utf-8").splitlines(), []
    for n, line in enumerate(lines):
        while line.endswith("\\"):  # a command continued on the next line
            n += 1
            line = line[:-1] + lines[n]
        if (
            not line.startswith("$ ")
            or "ncclprobe " not in line
            or "tests/fixtures/" not in line
            or "--output" in line
        ):
            continue
        words = shlex.split(line[2:].split("   #")[0])
        env = dict(w.split("=", 1) for w in words[: words.index("ncclprobe")])
        printed = []
        for after in lines[n + 1 :]:
            if after.startswith(("$ ", "```")):
                break
            printed.append(after)
        blocks.append((env, words[words.index("ncclprobe") + 1 :], printed))
    return blocks


@pytest.mark.parametrize(
    "env, argv, printed",
    _readme_fixture_blocks(),
    ids=lambda v: v[0] if isinstance(v, list) and v else "",
)
def test_readme_real_output_blocks_are_what_the_commands_print_now(env, argv, printed):
    """Every line of the README block is a line of today's output, in order; `...` marks a cut."""
    result = CliRunner().invoke(cli, argv, env={"COLUMNS": "100", **env})
    assert result.exit_code in (0, 1), result.output
    out, at = result.stdout.splitlines(), 0
    for line in (p for p in printed if p.strip() != "..." and not p.startswith("# ...")):
        assert line in out[at:], (argv, line)
        at = out.index(line, at) + 1


def test_numbers_the_caller_formatted_are_printed_as_given():
    """The sweep gives busbw three significant digits (gloo's 0.00123 GB/s); tabulate used to reparse
    the string and print 0.00 in every CPU row."""
    from ncclprobe.cli.table import render_table
    from ncclprobe.records import ResultRecord, Status
    from ncclprobe.sweep.table import Ranked, table_row

    record = ResultRecord(
        config_id="default",
        size_bytes=64,
        mode="eager",
        in_place=True,
        time_us=444.28,
        busbw_gbps=0.00123456,
        status=Status.OK,
    )
    row = table_row(Ranked(record), ranked=False)
    table, _ = render_table([row], None)
    assert "0.00123" in table and "444.28" in table


def test_a_cell_is_cut_past_max_cell_characters_and_says_so():
    from ncclprobe.cli.table import MAX_CELL, cut_long_cells

    rows = [{"a": "x" * MAX_CELL, "b": 1}, {"a": "y" * (MAX_CELL + 1), "b": "z" * (MAX_CELL + 5)}]
    cut, note = cut_long_cells(rows)
    assert cut[0] == rows[0] and cut[1]["a"] == "y" * MAX_CELL + f"... ({MAX_CELL + 1} characters)"
    assert note.startswith("2 cell(s) longer than 1000 characters cut") and "--wide" in note
    assert cut_long_cells(rows[:1]) == (rows[:1], None)
