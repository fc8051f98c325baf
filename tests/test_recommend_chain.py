"""The full chain on CPU, all real processes: `ncclprobe sweep` (2 gloo ranks) -> `recommend` -> `report`.

gloo ignores NCCL variables, so the only right recommendation from a CPU sweep is "no change",
whatever the noisy numbers say; the report must still draw the measurements.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("ncclprobe.cli.sweep")


def ncclprobe(*args, cwd):
    return subprocess.run([sys.executable, "-m", "ncclprobe", "-q", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=240)


def test_sweep_then_recommend_then_report(tmp_path):
    results = tmp_path / "sweep.jsonl"
    sweep = ncclprobe("sweep", "--nranks", "2", "--sizes", "1K,16K,256K", "--proto", "default,LL", "--algo",
                      "default", "--output", str(results), cwd=tmp_path)
    assert sweep.returncode == 0, sweep.stderr

    rec_file = tmp_path / "rec.json"
    rec = ncclprobe("recommend", str(results), "--emit", "json", "--output", str(rec_file), cwd=tmp_path)
    assert rec.returncode == 0, rec.stderr
    doc = json.loads(rec_file.read_text())
    assert doc["env"] == {} and [r["config_id"] for r in doc["refused"]] == ["NCCL_PROTO=LL"]
    assert [p["size_bytes"] for p in doc["per_size"]] == [1024, 16384, 262144]

    report = ncclprobe("report", str(results), "--out", str(tmp_path / "report"), "--format", "json", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    files = json.loads(report.stdout)
    assert {f["name"] for f in files["figures"]} == {"latency", "busbw", "speedup"}
    assert "gloo" in (tmp_path / "report" / "report.md").read_text()
