"""The graph-capture probe: usage errors, its CPU refusal (exit 3 with the reason), the document it
builds from worker messages, and on a GPU the real measurement."""

import json

import pytest
import torch
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.errors import UsageProblem
from ncclprobe.probes.graph_capture_run import GraphCaptureSpec, build_document, capture_verdict, timing_rows

no_gpu = not torch.cuda.is_available()


def invoke(*args):
    return CliRunner().invoke(cli, ["probe", "graph-capture", *args])


@pytest.mark.skipif(not no_gpu, reason="checks the CPU-only refusal")
def test_cpu_exits_3_with_one_line_reason():
    result = invoke("--sizes", "8K")
    assert result.exit_code == 3, result.output
    assert result.output.count("\n") == 1
    assert "needs a CUDA GPU" in result.output


@pytest.mark.parametrize("args,fragment", [
    (["--values", "LL"], "exactly two values"),
    (["--values", "LL,ll"], "must differ"),
    (["--variable", "NCCL_P2P_LEVEL", "--values", "PIX,SYS"], "once per process"),
    (["--values", "LL,Fast"], "unknown token"),
    (["--sizes", "2"], "at least 4 bytes"),
])
def test_bad_usage_exits_2(args, fragment):
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert fragment in result.output and result.output.count("\n") == 1


def test_sizes_from_an_engine_trace():
    """--trace reads the engine's collective sizes (then, on CPU, refuses to run: exit 3)."""
    from pathlib import Path
    traces = Path(__file__).resolve().parent.parent / "examples" / "traces"
    no_collectives = invoke("--trace", str(traces / "healthy.json"))  # tp=1: the engine issued none
    assert no_collectives.exit_code == 2 and "records no collective sizes" in no_collectives.output
    if no_gpu:
        assert invoke("--trace", str(traces / "collective-bound.json")).exit_code == 3


def test_spec_rejects_zero_iterations():
    with pytest.raises(UsageProblem):
        GraphCaptureSpec(sizes=(1024,), iters=0)


def _timing(rank, path, size, loop, device, graph):
    return {"kind": "timing", "rank": rank, "path": path, "size_bytes": size, "eager_loop_us": loop,
            "eager_host_us": loop - 1, "eager_device_us": device, "graph_us_per_op": graph,
            "graph_launch_host_us": 4.0, "queued_ahead": True}


def test_timing_rows_take_the_slowest_rank():
    rows = timing_rows([_timing(0, "torch.distributed", 8192, 18.0, 0.5, 0.2),
                        _timing(1, "torch.distributed", 8192, 20.0, 0.7, 0.3),
                        _timing(0, "cupy.nccl", 8192, 5.0, 0.5, 0.2)])
    assert [r["path"] for r in rows] == ["torch.distributed", "cupy.nccl"]
    assert rows[0]["eager_loop_us"] == 20.0 and rows[0]["graph_us_per_op"] == 0.3
    assert rows[0]["graph_saves_us_per_call"] == pytest.approx(19.7)


def _step(value, us, env=None, tuning=()):
    return {"value_in_env": value, "graph_us_per_op": us, "graph_launch_host_us": 5.0,
            "log": {"env": env or {}, "tuning": [{"collective": "AllReduce", "bytes": 1 << 20, "algo": "RING",
                                                  "proto": p} for p in tuning]}}


def test_capture_verdict_two_ranks():
    spec = GraphCaptureSpec(sizes=(8192,), nranks=2)
    msg = {"steps": {"first_comm_capture": _step("LL", 30.0, {"NCCL_PROTO": "LL"}, ["LL"]),
                     "second_comm_capture": _step("Simple", 12.0, {"NCCL_PROTO": "Simple"}, ["SIMPLE"]),
                     "first_graph_replayed_after_switch": _step("Simple", 31.0),
                     "first_comm_eager_after_switch": _step("Simple", 0.0, tuning=["LL"])}}
    verdict = capture_verdict(spec, msg)
    assert verdict["each_comm_read_its_value"] and verdict["replay_kept_capture"]
    assert verdict["protos_at_first_capture"] == ["RING/LL"]
    assert verdict["protos_first_comm_after_switch"] == ["RING/LL"]
    msg["steps"]["first_graph_replayed_after_switch"] = _step("Simple", 12.0)  # would mean it re-planned
    assert capture_verdict(spec, msg)["replay_kept_capture"] is False


def test_document_notes_one_rank_limits():
    spec = GraphCaptureSpec(sizes=(8192,))
    doc = build_document(spec, [_timing(0, "torch.distributed", 8192, 18.0, 0.0, 0.1),
                                {"kind": "raw-nccl-unavailable", "rank": 0, "reason": "ModuleNotFoundError: cupy"}])
    assert doc["schema_version"] == 1 and doc["capture"] is None
    assert any("cupy" in n for n in doc["notes"]) and any("one rank" in n for n in doc["notes"])
    json.dumps(doc)


@pytest.mark.gpu
@pytest.mark.skipif(no_gpu, reason="needs a CUDA GPU")
def test_gpu_probe_measures_host_cost_and_capture():
    result = invoke("--sizes", "8K,1M", "--iters", "100", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    torch_rows = [r for r in doc["timings"] if r["path"] == "torch.distributed"]
    assert len(torch_rows) == 2
    for row in torch_rows:  # one rank: NCCL moves nothing, the eager call is host path only
        assert row["graph_us_per_op"] < row["eager_loop_us"]
    verdict = doc["capture"]
    assert verdict["each_comm_read_its_value"], verdict


def test_debug_log_segments_follow_what_nccl_appends(tmp_path, monkeypatch):
    """The worker reads its own NCCL debug file in segments between steps (NCCL flushes per line)."""
    import os

    from ncclprobe.probes.graph_capture import _DebugLog
    path = tmp_path / f"nccl.host.{os.getpid()}.log"
    prefix = f"host:{os.getpid()}:{os.getpid()} [0] NCCL INFO "
    path.write_text(prefix + "NCCL_PROTO set by environment to Simple\n")
    monkeypatch.setenv("NCCLPROBE_NCCL_LOG_DIR", str(tmp_path))
    log = _DebugLog()
    assert log.since()["env"] == {}  # what was there before is not this segment's
    with open(path, "a") as fh:
        fh.write(prefix + "NCCL_PROTO set by environment to LL\n")
        fh.write(prefix + "AllReduce: 1048576 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}\n")
    seg = log.since()
    assert seg["env"] == {"NCCL_PROTO": "LL"}
    assert seg["tuning"] == [{"collective": "AllReduce", "bytes": 1048576, "algo": "RING", "proto": "LL"}]
    assert log.since()["tuning"] == []
    path.write_text(prefix + "NCCL_ALGO set by environment to Tree\n")  # reopened with "w" elsewhere
    assert log.since()["env"] == {"NCCL_ALGO": "Tree"}
