"""The full chain on measured NCCL results, through the CLI as a user runs it: `ncclprobe import`
of six real nccl-tests runs (2 ranks, NCCL 2.29.7; three with NCCL's defaults, three with
NCCL_PROTO=Simple, tests/fixtures/INDEX.md) -> `recommend` -> `report`.

The right answer is known from the numbers themselves: Simple's median is 37-53 % faster at 64M
and 128M, but the default's three runs spread from 29 to 64 ms at 128M, over Simple's times; no
size has Simple's slowest run below the default's fastest. A gain inside the spread is noise, so
the recommendation is no change, while the fastest configuration per size is still Simple at the
large sizes: the selection logic decides, not a refusal (gloo, --share-gpu) that answers "no change"
whatever the numbers say.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.records import read_results

SIX = (
    Path(__file__).parent
    / "fixtures"
    / "nccl_tests"
    / "allgather_6runs_2ranks_1x_rtx5090_socket_nccltests2.18_eunomia.txt"
)
LABELS = ["default"] * 3 + ["NCCL_PROTO=Simple"] * 3


def ncclprobe(*args):
    result = CliRunner().invoke(cli, ["-q", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result


def _times(path: Path) -> dict[int, list[float]]:
    """Every out-of-place and in-place time per size in one imported run."""
    out: dict[int, list[float]] = {}
    for r in read_results(path).results:
        out.setdefault(r.size_bytes, []).append(r.time_us)
    return out


def test_import_then_recommend_then_report(tmp_path):
    ncclprobe(
        "import",
        SIX,
        "--output",
        tmp_path / "ag.jsonl",
        *[a for label in LABELS for a in ("--settings", label)],
    )
    runs = [tmp_path / f"ag-{k}.jsonl" for k in range(1, 7)]
    default = [_times(p) for p in runs[:3]]
    simple = [_times(p) for p in runs[3:]]
    sizes = sorted(default[0])
    # the reference, from the files: at no size is every Simple time below every default time
    beyond_spread = [
        s
        for s in sizes
        if max(t for run in simple for t in run[s]) < min(t for run in default for t in run[s])
    ]
    assert beyond_spread == []

    ncclprobe(
        "recommend",
        *runs,
        "--collective",
        "all_gather",
        "--emit",
        "json",
        "--output",
        tmp_path / "rec.json",
    )
    rec = json.loads((tmp_path / "rec.json").read_text())
    assert rec["env"] == {} and rec["change"] is False and rec["refused"] == []
    assert rec["global"]["best_config_id"] == "NCCL_PROTO=Simple"
    per_size = {p["size_bytes"]: p for p in rec["per_size"]}
    assert sorted(per_size) == sizes
    for size in (64 << 20, 128 << 20):
        assert per_size[size]["fastest"] == "NCCL_PROTO=Simple" and per_size[size]["gain_pct"] > 30
        assert per_size[size]["significant"] is False and per_size[size]["chosen"] == "default"

    report = ncclprobe("report", *runs, "--output", tmp_path / "report", "--format", "json")
    files = json.loads(report.output)
    assert {f["name"] for f in files["figures"]} >= {"latency", "busbw"}
    assert (tmp_path / "report" / "report.md").read_text().count("No change") >= 1
