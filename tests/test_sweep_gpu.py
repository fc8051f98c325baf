"""One-rank NCCL sweeps on a real GPU: eager and CUDA-graph modes, NCCL log capture and proof.

On the one-H200 machine NCCL runs one rank: no data moves between GPUs, but the per-call host
path, graph replay and NCCL's reading of its environment are all real.
"""

import pytest
import torch

from ncclprobe.sweep import session
from ncclprobe.sweep.plan import SweepSpec

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _run(tmp_path, grid, name):
    spec = SweepSpec(grid=grid, sizes=(4096, 1 << 20), modes=("eager", "graph"), iters=10, trials=3, warmup=2,
                     nranks=1, backend="nccl", timeout_s=120)
    job = session.new_job(spec, {}, str(tmp_path / name), ["test"])
    return session.run_job(job)


def test_one_rank_eager_and_graph_with_proof_of_p2p_level(tmp_path):
    results = _run(tmp_path, {"NCCL_P2P_LEVEL": ("default", "SYS")}, "p2p.jsonl")
    assert results.header["topology"]["gpu_count"] >= 1
    assert any("one rank" in note for note in results.header["notes"])
    assert {(r["mode"], r["in_place"]) for r in results.results} == {
        ("eager", True), ("eager", False), ("graph", True), ("graph", False)}
    assert all(r["wrong"] == 0 and r["time_us"] > 0 for r in results.results)
    by_id = {c["config_id"]: c for c in results.configs}
    sys_level = by_id["NCCL_P2P_LEVEL=SYS"]
    assert sys_level["status"] == "ok", sys_level["reason"]
    assert sys_level["proof"]["verdicts"]["NCCL_P2P_LEVEL"] == "applied"
    assert sys_level["proof"]["set_by_environment"]["NCCL_P2P_LEVEL"] == "SYS"
    assert sys_level["proof"]["seen_env"]["0"]["NCCL_DEBUG"] == "INFO"
    assert by_id["default"]["proof"]["nccl_version"]


def test_protocol_on_one_rank_is_reported_ignored_not_measured_as_applied(tmp_path):
    # NCCL 2.28.9 with one rank never runs its tuner: no `NCCL_PROTO set by environment` line
    results = _run(tmp_path, {"NCCL_PROTO": ("LL",)}, "proto.jsonl")
    config = results.configs[0]
    assert config["status"] == "ignored", config["proof"]
    assert all(r["status"] == "ignored" for r in results.results)
    assert session.exit_code(results) == 1
