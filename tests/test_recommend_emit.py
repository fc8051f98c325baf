"""recommend's artifacts: the env snippet (sourced by a real bash), the tuner CSV (parsed back by
the example plugin's rules), the JSON file, and the CLI around them."""

from __future__ import annotations

import json
import subprocess

import pytest

from ncclprobe.cli import cli
from ncclprobe.recommend import build_recommendation
from ncclprobe.recommend.emit import TUNER_COLUMNS, TUNER_MAX_BYTES, env_snippet, tuner_csv
from tests.data.resultsets import config, curve, scaled, write_set

DEFAULT = curve(20.0, 0.05)
ALGOS = {"tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"}
PROTOS = {"ll", "ll128", "simple"}
COLLS = {"broadcast", "reduce", "allgather", "reducescatter", "allreduce"}


def parse_tuner_csv(text: str) -> list[dict]:
    """Read a tuner config the way plugins/tuner/example/plugin.c does, failing on what it would drop."""
    rows = []
    assert all(len(line) + 1 <= 256 for line in text.splitlines())  # plugin.c reads 256-byte lines
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split(",")]
        assert 8 <= len(fields) <= 10, line
        row = dict(zip(TUNER_COLUMNS, fields))
        assert (
            row["collective_type"] in COLLS
            and row["algorithm"] in ALGOS
            and row["protocol"] in PROTOS
        ), line
        for key in TUNER_COLUMNS[5:]:
            int(row.get(key, "-1"))
        row["min_bytes"], row["max_bytes"] = int(row["min_bytes"]), int(row["max_bytes"])
        assert 0 <= row["min_bytes"] <= row["max_bytes"] <= TUNER_MAX_BYTES, line
        rows.append(row)
    return rows


def mixed_set(tmp_path, **kw):
    """LL wins up to 64K, Simple (with its TUNING proof saying ring) wins from 256K."""
    simple_tuning = [
        {"collective": "AllReduce", "size_bytes": s, "algo": "RING", "proto": "SIMPLE", "calls": 3}
        for s in (1 << 18, 1 << 20)
    ]
    ll = config({"NCCL_PROTO": "LL"}, scaled(DEFAULT, 0.6, 1.3), tuning=[])
    simple = config({"NCCL_PROTO": "Simple"}, scaled(DEFAULT, 1.2, 0.7), tuning=simple_tuning)
    return write_set(tmp_path / "r.jsonl", [config({}, DEFAULT), ll, simple], **kw)


def test_tuner_csv_rows_cover_the_winning_ranges(tmp_path):
    rec = build_recommendation([mixed_set(tmp_path)])
    text = tuner_csv(rec)
    rows = parse_tuner_csv(text)
    # LL's range has no algorithm (NCCL_PROTO only, no TUNING proof): left out, with the reason
    assert "left out 1K..64K NCCL_PROTO=LL" in text and "does not fix one algorithm" in text
    assert rows == [
        {
            "collective_type": "allreduce",
            "min_bytes": int((1 << 16) ** 0.5 * (1 << 18) ** 0.5) + 1,
            "max_bytes": TUNER_MAX_BYTES,
            "algorithm": "ring",
            "protocol": "simple",
            "channels": "-1",
            "nNodes": "1",
            "nRanks": "2",
            "numPipeOps": "-1",
            "regBuff": "-1",
        }
    ]
    assert "NCCL_TUNER_PLUGIN" in text and "NCCL_TUNER_CONFIG_FILE" in text and "2.27.5" in text
    assert "sets nChannels=1" in text  # the example plugin's channel cap is spelled out


def test_tuner_csv_from_a_torchrun_plan_does_not_claim_one_node(tmp_path):
    """Collected multi-node results don't record the node count: a row saying nNodes 1 would never match."""
    rec = build_recommendation([mixed_set(tmp_path)])
    rec.measurements.headers[0]["collected_at"] = "2026-11-29T10:00:00Z"
    rows = parse_tuner_csv(tuner_csv(rec))
    assert [(r["nNodes"], r["nRanks"]) for r in rows] == [("-1", "-1")]
    assert "one node" not in tuner_csv(rec)  # sweep/torchrun.collect_header adds collected_at


def test_tuner_csv_long_comments_are_cut_below_the_plugin_line_limit(tmp_path):
    many = {f"NCCL_SETTING_NUMBER_{i}": "VALUE" * 4 for i in range(12)}
    path = write_set(
        tmp_path / "r.jsonl", [config({}, DEFAULT), config(many, scaled(DEFAULT, 0.5, 0.5))]
    )
    text = tuner_csv(build_recommendation([path]))
    assert parse_tuner_csv(text) == [] and "left out 1K..1M" in text


def test_tuner_csv_ranges_are_contiguous_and_disjoint(tmp_path):
    tuning = [
        {"bytes": s, "algo": "RING", "proto": "LL"} for s in (1 << 10, 1 << 12, 1 << 14, 1 << 16)
    ]
    ll = config({"NCCL_PROTO": "LL"}, scaled(DEFAULT, 0.6, 1.3), tuning=tuning)
    simple = config({"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}, scaled(DEFAULT, 1.2, 0.7))
    rec = build_recommendation([write_set(tmp_path / "r.jsonl", [config({}, DEFAULT), ll, simple])])
    rows = parse_tuner_csv(tuner_csv(rec))
    assert [(r["algorithm"], r["protocol"]) for r in rows] == [("ring", "ll"), ("ring", "simple")]
    assert rows[0]["min_bytes"] == 0 and rows[-1]["max_bytes"] == TUNER_MAX_BYTES
    assert rows[0]["max_bytes"] + 1 == rows[1]["min_bytes"]
    assert rows[0]["min_bytes"] <= 1 << 16 <= rows[0]["max_bytes"] < 1 << 18 <= rows[1]["max_bytes"]


def test_env_snippet_sourced_by_bash(tmp_path):
    ll = config({"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"}, scaled(DEFAULT, 0.6, 0.6))
    rec = build_recommendation([write_set(tmp_path / "r.jsonl", [config({}, DEFAULT), ll])])
    snippet = tmp_path / "nccl.env"
    snippet.write_text(env_snippet(rec))
    out = subprocess.run(
        ["bash", "-c", f"set -eu; source {snippet}; env"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        check=True,
    ).stdout
    seen = {
        k: v
        for k, _, v in (line.partition("=") for line in out.splitlines())
        if k.startswith("NCCL_")
    }
    assert seen == {
        "NCCL_ALGO": "allreduce:Ring",
        "NCCL_PROTO": "LL",
    }  # for the collective measured


def test_env_snippet_with_no_change_exports_nothing(tmp_path):
    rec = build_recommendation([write_set(tmp_path / "r.jsonl", [config({}, DEFAULT)])])
    snippet = tmp_path / "nccl.env"
    snippet.write_text(env_snippet(rec))
    out = subprocess.run(
        ["bash", "-c", f"set -eu; source {snippet}; env"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        check=True,
    ).stdout
    assert "NCCL_" not in out and "no change recommended" in snippet.read_text()
    assert "tuner-csv" not in snippet.read_text()  # nothing per size to point at either


def test_env_snippet_points_to_the_tuner_csv_when_only_some_sizes_gain(tmp_path):
    """LL wins small sizes but loses large ones: no global export, but the per-size gain is real."""
    ll = config({"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"}, scaled(DEFAULT, 0.6, 1.3))
    rec = build_recommendation([write_set(tmp_path / "r.jsonl", [config({}, DEFAULT), ll])])
    text = env_snippet(rec)
    assert (
        rec.env == {} and "export" not in text and "--emit tuner-csv applies those per size" in text
    )


def run_cli(args):
    """The real command group in-process: (exit code, stdout, stderr)."""
    from click.testing import CliRunner

    runner = CliRunner()
    result = runner.invoke(cli, args, prog_name="ncclprobe")
    return result.exit_code, result.stdout, result.stderr


def test_cli_emit_json_file_and_table(tmp_path):
    path = write_set(
        tmp_path / "r.jsonl",
        [
            config({}, DEFAULT),
            config({"NCCL_PROTO": "LL"}, scaled(DEFAULT, 0.6, 1.3)),
            config({"NCCL_ALGO": "Tree"}, scaled(DEFAULT, 0.2, 0.2), wrong={1 << 20: 3}),
        ],
    )
    out_file = tmp_path / "rec.json"
    code, stdout, stderr = run_cli(
        ["recommend", path, "--sizes", "4K,16K", "--emit", "json", "--output", str(out_file)]
    )
    assert code == 1, stderr  # a configuration gave wrong results: a finding
    doc = json.loads(out_file.read_text())
    assert (
        doc["schema_version"] == 1
        and doc["kind"] == "recommendation"
        and doc["env"] == {"NCCL_PROTO": "LL"}
    )
    assert (
        doc["excluded"][0]["config_id"] == "NCCL_ALGO=Tree"
        and doc["per_size"][0]["size_bytes"] == 1024
    )
    assert (
        "recommendation: NCCL_PROTO=LL" in stdout
        and "excluded NCCL_ALGO=Tree: wrong results" in stdout
    )
    assert (
        "SGLang" in stdout and "vLLM" in stdout and "env-check --pid" in stdout
    )  # how to apply and verify


def test_cli_emit_to_stdout_and_json_format(tmp_path):
    path = write_set(
        tmp_path / "r.jsonl",
        [config({}, DEFAULT), config({"NCCL_PROTO": "LL"}, scaled(DEFAULT, 0.6, 1.3))],
    )
    code, stdout, _ = run_cli(["recommend", path, "--sizes", "4K", "--emit", "env"])
    assert code == 0 and "export NCCL_PROTO=LL" in stdout
    code, stdout, _ = run_cli(["recommend", path, "--format", "json"])
    assert code == 0 and json.loads(stdout)["kind"] == "recommendation"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sizes", "4K", "--trace", "t.json"], "either --trace FILE or --sizes"),
        (["--output", "x.json"], "add --emit"),
        (["--sizes", "4Q"], "bad size '4Q'"),
        (["--workload", "missing.json"], "cannot read 'missing.json'"),
        (["--sizes", ""], "--sizes is empty"),
        (["--emit", "env", "--output", "/nonexistent-dir/nccl.env"], "cannot write it"),
    ],
)
def test_cli_bad_usage_is_one_line_exit_2(tmp_path, args, message):
    path = write_set(tmp_path / "r.jsonl", [config({}, DEFAULT)])
    proc = subprocess.run(
        ["python", "-m", "ncclprobe", "recommend", path, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert (
        proc.returncode == 2
        and message in proc.stderr
        and len(proc.stderr.strip().splitlines()) == 1
    )
    assert proc.stdout == ""


def test_env_check_reads_the_recommendation_file(tmp_path):
    from ncclprobe.diagnose.process_env.expect import load_recommendation

    path = write_set(
        tmp_path / "r.jsonl",
        [config({}, DEFAULT), config({"NCCL_PROTO": "LL"}, scaled(DEFAULT, 0.6, 0.6))],
    )
    out_file = tmp_path / "rec.json"
    code, _, stderr = run_cli(["recommend", path, "--emit", "json", "--output", str(out_file)])
    assert code == 0, stderr
    assert [(e.variable, e.value) for e in load_recommendation(out_file)] == [("NCCL_PROTO", "LL")]
