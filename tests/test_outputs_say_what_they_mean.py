"""Outputs that say what they mean (issue 31, item 4): each a newcomer's stop, on real inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli

FIX = Path(__file__).parent / "fixtures"


def test_vllm_v0_stage_times_are_per_step_verify_and_draft_times():
    """vLLM V0's `SpecDecodeWorker stage times: ... scoring_time_ms=54.92` (issue 8370) is the verify
    step's time: it becomes the verify phase, and the log's note no longer says it has no per-step times."""
    from ncclprobe.evidence.run.serverlog import load_server_logs

    runs = load_server_logs([FIX / "server_logs/vllm_0.6_v0_spec_decode_stage_times_issue8370.log"])
    (run,) = runs.runs
    assert run.mode == "speculative"
    assert run.phases["verify"].median_ms == 54.92 and run.phases["draft"].median_ms == 4.96
    assert run.phases["verify"].graphed is None  # a log cannot say
    assert "verify (scoring) 54.92 ms" in run.notes[0]
    assert not any("holds no per-step times" in n for n in run.notes)
    plain = load_server_logs([FIX / "server_logs/vllm_0.6.3_v0_speculative_metrics_issue9539.log"])
    assert plain.runs[0].phases == {} and "holds no per-step times" in plain.runs[0].notes[0]


def test_env_check_of_the_readme_job_keeps_settings_and_whole_commands(tmp_path):
    """examples/job.py, the README's env-check job: at 100 columns the table keeps `settings` (it used
    to leave it out and keep a 16-character `command` split mid-path), JSON and CSV carry every
    command whole (they cut it with "..."), CSV's role has no tree indent."""
    import csv
    import io
    import json
    import os
    import subprocess
    import sys
    import time

    job = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent.parent / "examples" / "job.py"), "60"],
        env={**os.environ, "NCCL_P2P_LEVEL": "sys"},
    )
    try:
        runner = CliRunner()
        args = ["env-check", "--pid", str(job.pid), "--expect", "NCCL_PROTO=LL"]
        for _ in range(100):  # the launcher, its resource tracker and the worker
            doc = json.loads(runner.invoke(cli, [*args, "--format", "json"]).stdout)
            if len(doc["processes"]) >= 3:
                break
            time.sleep(0.1)
        table = runner.invoke(cli, args, env={"COLUMNS": "100"})
        assert table.exit_code == 1, table.output  # the lint error and the expectation
        header = next(line for line in table.stdout.splitlines() if line.startswith("  pid"))
        assert "settings" in header.split() and max(map(len, table.stdout.splitlines())) <= 100
        assert table.stdout.count("NCCL_P2P_LEVEL=sys") >= 3
        commands = [p["command"] for p in doc["processes"]]
        assert not any(c.endswith("...") for c in commands)
        assert any(c.endswith("examples/job.py 60") for c in commands)
        rows = list(
            csv.DictReader(io.StringIO(runner.invoke(cli, [*args, "--format", "csv"]).stdout))
        )
        assert [r["command"] for r in rows] == commands
        assert all(r["role"] == r["role"].strip() for r in rows)
    finally:
        job.kill()
        job.wait()


def test_a_table_command_is_cut_at_words_with_paths_as_their_last_part():
    from ncclprobe.evidence.live.walk import CMDLINE_CHARS, short_command

    assert short_command("/opt/venv/bin/python /home/me/job.py --x 1") == "python job.py --x 1"
    long = short_command("python -c " + "word " * 40)
    assert len(long) <= CMDLINE_CHARS and long.endswith(" ...") and "wor ..." not in long


def test_the_ll128_message_says_which_happens_when():
    """It read as a contradiction: "forces LL128 on (...), and NCCL keeps LL128 off here". With the
    setting LL128 is on; without it NCCL's own rule would keep it off; each a sentence."""
    from ncclprobe.nccl.lint import lint_env
    from ncclprobe.nccl.node import NodeFacts

    (found,) = lint_env(
        {"NCCL_PROTO": "^LL"},
        node=NodeFacts(over_network=True, net_path="SYS", compute_capabilities=(90,)),
        nccl_version="2.28.9",
    )
    assert "forces LL128 on: `^LL` is a ^ list" in found.message
    assert ". Without the setting NCCL would keep LL128 off here: " in found.message
    assert "and NCCL keeps LL128 off here" not in found.message
    assert found.message.endswith("cannot corrupt data silently.")
    (unknown,) = lint_env({"NCCL_PROTO": "LL128"}, node=None, nccl_version="2.28.9")
    assert (
        ". Whether NCCL would enable LL128 here without the setting is not known from this evidence: "
        in unknown.message
    )


def test_export_of_a_gloo_sweep_to_perf_csv_says_nothing_was_exported(tmp_path):
    """It wrote a header alone and exited 0; now it says why each result was left out, that nothing
    is exported, writes no file, and exits 1. The nccl-tests tables of the same sweep export (0)."""
    sweep = Path(__file__).parent.parent / "examples/traces/collective-bound.sweep.jsonl"
    out = tmp_path / "perf.csv"
    result = CliRunner().invoke(
        cli, ["export", str(sweep), "--to", "perf-csv", "--output", str(out)]
    )
    assert result.exit_code == 1 and not out.exists()
    assert "ncclprobe: error: nothing to export: every result was left out" in result.stderr
    assert "measured with the gloo backend" in result.stderr
    tables = CliRunner().invoke(cli, ["export", str(sweep), "--to", "nccl-tests"])
    assert tables.exit_code == 0 and "# Collective test starting: all_reduce_perf" in tables.stdout


def test_matrix_titles_are_section_titles_that_fit_100_columns():
    """An 8x8 nvbandwidth matrix took 16 lines at 100 columns: its title wrapped in every row. Now
    each matrix is a section under its `# title (unit)` line, one line per row; CSV keeps the
    matrix and unit columns in every row."""
    import csv
    import io

    path = str(FIX / "nvbandwidth/nvbandwidth_v0.2_8x_rtx4090_h2d_d2h_no_bus_ids_nvbw15.txt")
    runner = CliRunner()
    out = runner.invoke(cli, ["import", path], env={"COLUMNS": "100"}).stdout.splitlines()
    assert max(map(len, out)) <= 100
    # host-to-device and device-to-host share the title `bandwidth uni ce`: one 9x9 section
    titled = [i for i, line in enumerate(out) if line.startswith("# bandwidth ")]
    assert [out[i] for i in titled] == ["# bandwidth uni ce (GB/s)"]
    first = out[titled[0] + 1 :]
    assert first[0].split() == ["from", *(f"GPU{i}" for i in range(8)), "CPU"]
    assert len(first) == 2 + 9  # header, rule, one line per row: nothing wrapped
    rows = list(
        csv.DictReader(io.StringIO(runner.invoke(cli, ["import", path, "--format", "csv"]).stdout))
    )
    assert rows and all(r["matrix"].startswith("bandwidth") and r["unit"] == "GB/s" for r in rows)


def test_the_heatmap_colours_only_differences_beyond_the_noise(tmp_path):
    """Every gloo row was marked "(refused)" (gloo timings rank nothing: the caveat says so, not a
    refusal) and a 2 % difference inside a 10 % spread was coloured green like a real gain."""
    import matplotlib

    from ncclprobe.recommend.load import load_measurements
    from ncclprobe.report import plots
    from tests.data.resultsets import config, curve, scaled, write_set

    base = curve(20.0, 0.05, spread=0.10)
    configs = [
        config({}, base),
        config({"NCCL_PROTO": "LL"}, scaled(base, 0.98, 0.98, spread=0.10)),  # inside the noise
        config({"NCCL_PROTO": "Simple"}, scaled(base, 0.5, 0.5, spread=0.01)),  # a real gain
    ]
    ev = load_measurements([write_set(tmp_path / "nccl.jsonl", configs)])
    rows = sorted(set(ev.curves) - {"default"})
    # kept (issue 38 §4): which cells are coloured lives in the image's pixels, not its text
    grid, _, real = plots._speedup_grid(ev, ev.default, rows, sorted(ev.default.points))
    noisy, gain = rows.index("NCCL_PROTO=LL"), rows.index("NCCL_PROTO=Simple")
    assert not any((noisy, c) in real for c in range(len(grid[noisy])))
    assert all((gain, c) in real for c in range(len(grid[gain])))
    gloo = load_measurements([write_set(tmp_path / "gloo.jsonl", configs, backend="gloo")])
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as text, to be read back
        [figure] = plots.speedup_heatmap(gloo, tmp_path / "figs", refused=frozenset(gloo.curves))
    svg = figure.svg.read_text()
    assert "(refused)" not in svg and "grey = inside the noise" in svg


def test_the_markdown_report_and_the_cli_give_the_same_verdicts(tmp_path):
    """The report said "keep default" where `recommend` said "baseline fastest"."""
    import csv
    import io

    from ncclprobe.report import build_report
    from tests.data.resultsets import config, curve, scaled, write_set

    base = curve(20.0, 0.05, spread=0.10)
    results = write_set(
        tmp_path / "r.jsonl",
        [config({}, base), config({"NCCL_PROTO": "LL"}, scaled(base, 1.2, 1.2, spread=0.10))],
    )
    build_report([results], tmp_path / "out")
    markdown = "\n".join(p.read_text() for p in (tmp_path / "out").rglob("*.md"))
    shown = CliRunner().invoke(cli, ["recommend", str(results), "--format", "csv"])
    verdicts = {row["verdict"] for row in csv.DictReader(io.StringIO(shown.stdout))}
    assert verdicts == {"baseline fastest"}
    assert "| baseline fastest |" in markdown and "keep default" not in markdown


def test_csv_floats_carry_measured_digits_not_binary_noise():
    from ncclprobe.cli.output import to_csv

    text = to_csv([{"time_us": 3551.9555600000003, "n": 3, "tiny": 1.5e-07, "x": "a"}])
    assert text.splitlines() == ["time_us,n,tiny,x", "3551.95556,3,1.5e-07,a"]


def test_train_draft_progress_has_a_clock_per_stage(monkeypatch, capsys):
    """On the CPU machine train-draft printed nothing for the minutes of data generation, then a
    first ETA of 7499 s: the steps' rate counted the generation's time. Each stage has its own
    clock now: generation (100 s here) leaves the first training ETA at the steps' own rate."""
    import time as time_module

    from ncclprobe.cli import train_draft

    now = [1000.0]
    monkeypatch.setattr(time_module, "monotonic", lambda: now[0])
    # kept (issue 38 §4): the command's own run trains a draft for minutes; the clock is the unit
    stages = train_draft._Stages(quiet=False)
    stages.data(0, 128)  # generation starts
    for done in (64, 128):
        now[0] += 50.0
        stages.data(done, 128)
    for step in range(1, 101):
        now[0] += 0.1  # 0.1 s a step: 100 steps take 10 s
        stages.step(step, 100, 2.0)
    stages.close()
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("train-draft data: 64/128 (50%) eta 50s 64/128 sequences generated")
    first = next(line for line in err if line.startswith("train-draft: 5/100"))
    assert " eta 9s " in first or " eta 10s " in first  # 95 steps at 0.1 s (one clock: ~1995 s)


def test_messages_have_one_format_and_progress_shows_by_default(tmp_path):
    """'wrote 50 result records' came as a WARNING and threshold misses as `ERROR ncclprobe.sweep:`
    while every other error was `ncclprobe: error: ...`."""
    import logging

    source = FIX / "nccl_tests/allreduce_4x_rtx5090_pcie_genoa.txt"
    shown = CliRunner().invoke(cli, ["import", str(source), "--output", str(tmp_path / "a.jsonl")])
    assert (
        shown.exit_code == 0
        and "ncclprobe: wrote " in shown.stderr
        and "WARNING" not in shown.stderr
    )
    quiet = CliRunner().invoke(
        cli, ["-q", "import", str(source), "--output", str(tmp_path / "b.jsonl")]
    )
    assert quiet.exit_code == 0 and quiet.stderr == ""
    with pytest.raises(SystemExit):  # logging as a plain command line sets it (no -v, no -q)
        cli.main(["import", "--help"], prog_name="ncclprobe")
    root = logging.getLogger("ncclprobe")
    formatter = root.handlers[0].formatter
    record = lambda level, msg: logging.LogRecord(
        "ncclprobe.sweep", level, __file__, 1, msg, (), None
    )  # noqa: E731
    assert (
        formatter.format(record(logging.ERROR, "x fell short")) == "ncclprobe: error: x fell short"
    )
    assert formatter.format(record(logging.WARNING, "w")) == "ncclprobe: warning: w"
    assert formatter.format(record(logging.INFO, "results go to f")) == "ncclprobe: results go to f"
    assert root.level == logging.INFO
