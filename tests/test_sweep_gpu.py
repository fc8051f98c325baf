"""One-rank NCCL sweeps on a real GPU: eager and CUDA-graph modes, NCCL log capture and proof.

On the one-H200 machine NCCL runs one rank: no data moves between GPUs, but the per-call host
path, graph replay and NCCL's reading of its environment are all real.
"""

import pytest
import torch

from ncclprobe.sweep import session
from ncclprobe.sweep.plan import SweepSpec

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _run(tmp_path, grid, name):
    spec = SweepSpec(
        grid=grid,
        sizes=(4096, 1 << 20),
        modes=("eager", "graph"),
        iters=10,
        trials=3,
        warmup=2,
        nranks=1,
        backend="nccl",
        timeout_s=120,
    )
    job = session.new_job(spec, {}, str(tmp_path / name), ["test"])
    return session.run_job(job)


def test_one_rank_eager_and_graph_with_proof_of_p2p_level(tmp_path):
    results = _run(tmp_path, {"NCCL_P2P_LEVEL": ("default", "SYS")}, "p2p.jsonl")
    assert results.header["topology"]["gpu_count"] >= 1
    assert any("one rank" in note for note in results.header["notes"])
    assert {(r.mode, r.in_place) for r in results.results} == {
        ("eager", True),
        ("eager", False),
        ("graph", True),
        ("graph", False),
    }
    assert all(r.wrong == 0 and r.time_us > 0 for r in results.results)
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
    assert all(r.status == "ignored" for r in results.results)
    assert session.verdict(results).exit_code == 1


SHARED_GRID = {"NCCL_PROTO": ("default", "LL", "Simple"), "NCCL_ALGO": ("default", "Ring")}
CANONICAL = {"LL": "LL", "Simple": "SIMPLE", "Ring": "RING"}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """--share-gpu 2: both ranks on GPU 0, told apart by NCCL_HOSTID, talking over NET/Socket."""
    from ncclprobe.sweep.build import SweepRequest, build_spec

    spec, skipped = build_spec(
        SweepRequest(
            share_gpu=2,
            protocols=SHARED_GRID["NCCL_PROTO"],
            algorithms=SHARED_GRID["NCCL_ALGO"],
            modes=("eager", "graph"),
            sizes=(4096, 1 << 20),
            warmup=1,
            iters=3,
            trials=2,
        )
    )
    job = session.new_job(
        spec, skipped, str(tmp_path_factory.mktemp("shared") / "s.jsonl"), ["test"]
    )
    return session.run_job(job)


def test_shared_gpu_runs_every_configuration_exactly(shared):
    from ncclprobe.sweep.table import document

    assert shared.header["share_gpu"] is True and shared.header["nranks"] == 2
    assert any("NET/Socket" in note for note in shared.header["notes"])
    assert {c["status"] for c in shared.configs} == {"ok"}, [
        (c["config_id"], c["reason"]) for c in shared.configs
    ]
    assert len(shared.results) == 6 * 2 * 2 * 2  # configs x modes x placements x sizes
    assert all(r.status == "ok" and r.wrong == 0 and r.time_us > 0 for r in shared.results)
    assert session.verdict(shared).exit_code == 0
    assert not any(
        r["best"] or r["speedup_vs_default"] for r in document(shared)["results"]
    )  # not ranked


def test_shared_gpu_ranks_are_separate_hosts_on_one_device(shared):
    for config in shared.configs:
        seen = config["proof"]["seen_env"]
        assert seen["0"]["NCCL_HOSTID"] != seen["1"]["NCCL_HOSTID"]
        assert set(config["proof"]["transports"]) == {"NET"}, config["proof"]["transports"]


def test_shared_gpu_each_forced_setting_was_read_and_chosen_in_every_call(shared):
    for config in shared.configs:
        proof = config["proof"]
        assert proof["tuning"], f"{config['config_id']}: NCCL logged no TUNING lines"
        for name, value in config["settings"].items():
            assert proof["set_by_environment"][name] == value
            assert proof["verdicts"][name] == "applied"
            chosen = proof["chosen"][name]
            assert chosen["calls"] > 0 and chosen["matching"] == chosen["calls"], chosen
            field = "proto" if name == "NCCL_PROTO" else "algo"
            assert {row[field] for row in proof["tuning"]} == {CANONICAL[value]}


# ---- every collective (issue 19) ----
from ncclprobe.probes.collectives import COLLECTIVES  # noqa: E402


def _every(tmp_path, name, **kw):
    spec = SweepSpec(
        grid=kw.pop("grid", {}),
        sizes=(4096, 1 << 20),
        collectives=tuple(COLLECTIVES),
        modes=("eager", "graph"),
        iters=10,
        trials=3,
        warmup=2,
        backend="nccl",
        timeout_s=180,
        **kw,
    )
    return session.run_job(session.new_job(spec, {}, str(tmp_path / name), ["test"]))


def _check_exact_and_timed(results, expect):
    assert {r.collective for r in results.results} == expect
    bad = [
        (r.collective, r.mode, r.in_place, r.size_bytes, r.status, r.reason)
        for r in results.results
        if r.status != "ok" or r.wrong != 0 or not r.time_us
    ]
    assert not bad, bad
    for r in results.results:
        clock = r.iter.clock
        assert clock == (
            "CUDA events per graph replay" if r.mode == "graph" else "CUDA events per iteration"
        )
        assert r.iter.min_us <= r.iter.p50_us <= r.iter.p99_us and r.cpu_issue_us > 0


def test_every_collective_on_one_rank_eager_and_graph(tmp_path):
    results = _every(tmp_path, "every.jsonl", nranks=1)
    _check_exact_and_timed(
        results, set(COLLECTIVES) - {"sendrecv"}
    )  # torch refuses a send to itself
    assert any("sendrecv" in note and "itself" in note for note in results.header["notes"])


def _check_split(results):
    """Every eager row says what is NCCL's own and what the path adds, each part measured."""
    for r in results.results:
        split = r.cost_split
        if r.mode == "graph":
            assert split is None
            continue
        assert split.nccl_us > 0 and split.path_us is not None, (r.collective, split)
        assert {"nccl", "nccl+events"} <= set(split.variants) and split.events_us is not None
        # each variant is timed or refused with the reason, never silently missing
        names = {"nccl", "nccl+events", "torch", "torch+events"}
        assert set(split.variants) | set(split.refused) == names, split
        assert (split.torch_dispatch_us is None) == ("torch" not in split.variants)


def test_every_collective_through_raw_nccl_on_one_rank(tmp_path):
    results = _every(tmp_path, "raw.jsonl", nranks=1, path="nccl")
    _check_exact_and_timed(results, set(COLLECTIVES))
    assert {r.path for r in results.results} == {"nccl"}
    # the install built the C issue loop here, and every eager row says it issued its calls
    eager = [r for r in results.results if r.mode == "eager"]
    assert eager and {(r.issued_by, r.issued_by_why) for r in eager} == {("c-loop", None)}
    # torch 2.11 runs a one-rank sendrecv that the planner keeps from the torch path (93 µs per
    # call on the H200, docs/LOG.md): its split is timed or refused with the reason, never guessed
    _check_split(results)


def test_every_collective_through_raw_nccl_with_two_ranks_sharing_the_gpu(tmp_path):
    """The unique id travels through the launcher's store; both ranks' calls meet over sockets."""
    results = _every(tmp_path, "raw-shared.jsonl", nranks=2, share_gpu=True, path="nccl")
    _check_exact_and_timed(results, set(COLLECTIVES))
    _check_split(results)


def test_every_collective_with_shared_gpu_proves_the_protocol_per_collective(tmp_path):
    results = _every(
        tmp_path,
        "shared.jsonl",
        nranks=2,
        share_gpu=True,
        grid={"NCCL_PROTO": ("default", "Simple")},
        cost_split=False,  # the proof is what this test is about
    )
    _check_exact_and_timed(results, set(COLLECTIVES))
    simple = next(c for c in results.configs if c["config_id"] == "NCCL_PROTO=Simple")
    assert simple["status"] == "ok", simple["reason"]
    by = simple["proof"]["chosen_by_collective"]
    for name, coll in COLLECTIVES.items():
        check = by[name]["NCCL_PROTO"]
        if coll.tuned_by_nccl:
            assert check["calls"] > 0 and check["matching"] == check["calls"], (name, check)
        else:
            assert "do not apply" in check["not_applicable"]
