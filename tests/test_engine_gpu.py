"""GPU-only engine tests: CUDA-graph replays give the eager tokens, all-reduces are captured
inside the graphs and counted per replay, and `run-engine --graphs all` reports it.

One GPU is enough: a one-rank NCCL group with `issue_single_rank` makes every all-reduce a real
NCCL call (nothing moved), so capture and counting are exercised for real.
Run: pytest -m gpu tests/test_engine_gpu.py
"""

import json
import subprocess
import sys

import pytest
import torch

from ncclprobe.engine.build import build_draft, build_target, random_prompts
from ncclprobe.engine.comm import Communicator
from ncclprobe.engine.config import preset
from ncclprobe.engine.generate import Engine
from ncclprobe.engine.graphs import CapturedGraphs, GraphedSteps
from ncclprobe.engine.instrument import CollectiveTrace, PhaseTimer
from ncclprobe.engine.limits import max_positions
from ncclprobe.engine.tp import apply_tp

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

PROMPT, NEW = 8, 24


@pytest.fixture(scope="module")
def comm():
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    yield Communicator(0, 1, dist.group.WORLD, issue_single_rank=True)
    dist.destroy_process_group()


def _models(name, dtype, comm, batch, k, draft_tp=False):
    target = build_target(preset(name), seed=0, device="cuda", dtype=dtype)
    draft = build_draft(target, seed=0)
    apply_tp(target, comm)
    if draft_tp:
        apply_tp(draft, comm)
    target.setup_caches(batch, max_positions(PROMPT, NEW, k))
    draft.setup_caches(batch, max_positions(PROMPT, NEW, k))
    return target, draft


def _run(
    target,
    draft,
    comm,
    *,
    batch,
    k,
    graphs,
    mode,
    trace=None,
    capture=None,
    compile="",
    prefill=False,
):
    timer = PhaseTimer("cuda")
    steps = None
    if graphs != "none":
        captured = CapturedGraphs(
            target,
            draft,
            comm,
            mode=graphs,
            compile=compile,
            batches=capture or batch,
            k=k,
            speculative=mode == "speculative",
            prompt_len=PROMPT if prefill else None,
        )
        steps = GraphedSteps(captured, trace=trace, timer=timer)
    engine = Engine(target, draft, k=k, steps=steps, timer=timer)
    if trace is not None:
        trace.attach(comm, timer)
    prompts = random_prompts(256, batch, PROMPT, seed=batch + k, device="cuda")
    result = (engine.baseline if mode == "baseline" else engine.speculative)(prompts, NEW)
    comm.listener = None
    return result, steps


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", ["tiny", "tiny-moe"])
def test_graph_replay_tokens_equal_eager(comm, name, dtype):
    batch, k = 3, 3
    target, draft = _models(name, dtype, comm, batch, k, draft_tp=True)
    for mode in ("baseline", "speculative"):
        eager, _ = _run(target, draft, comm, batch=batch, k=k, graphs="none", mode=mode)
        graphed, steps = _run(target, draft, comm, batch=batch, k=k, graphs="all", mode=mode)
        assert graphed.tokens == eager.tokens, (name, dtype, mode)
        assert steps.graphed_phases == (
            {"decode"} if mode == "baseline" else {"draft", "verify", "draft_extend"}
        )
        with_prefill, steps = _run(
            target, draft, comm, batch=batch, k=k, graphs="all", mode=mode, prefill=True
        )
        assert with_prefill.tokens == eager.tokens, (name, dtype, mode, "prefill graphed")
        assert "prefill" in steps.graphed_phases and any(
            "prefill" in n for n in steps.graph_names()
        )
    if dtype == torch.float32:  # exact greedy equivalence also holds on the GPU in float32
        spec, _ = _run(target, draft, comm, batch=batch, k=k, graphs="all", mode="speculative")
        base, _ = _run(target, draft, comm, batch=batch, k=k, graphs="all", mode="baseline")
        assert spec.tokens == base.tokens


def test_compiled_graphs_give_the_eager_tokens_and_keep_their_all_reduces(comm):
    """torch.compile before capture: same greedy tokens as eager (float32), and the all-reduces,
    kept out of the compiled code, are still captured inside every graph (2 per target layer, 2
    per draft step with a tensor-parallel draft: the greedy chain graph holds k-1 of them)."""
    batch, k = 2, 3
    target, draft = _models("tiny", torch.float32, comm, batch, k, draft_tp=True)
    for mode in ("baseline", "speculative"):
        eager, _ = _run(target, draft, comm, batch=batch, k=k, graphs="none", mode=mode)
        compiled, steps = _run(
            target, draft, comm, batch=batch, k=k, graphs="all", mode=mode, compile="default"
        )
        assert compiled.tokens == eager.tokens, mode
        per_graph = {"target": 2 * target.cfg.layers, "draft_chain": 2 * (k - 1), "draft_extend": 2}
        for step in steps.captured.values():
            expected = next(
                count for prefix, count in per_graph.items() if step.name.startswith(prefix)
            )
            assert sum(step.collectives.values()) == expected, step.name


def test_captured_all_reduces_are_counted_per_replay(comm):
    batch, k = 2, 3
    target, draft = _models("tiny", torch.bfloat16, comm, batch, k)
    layers, hidden = target.cfg.layers, target.cfg.hidden
    trace = CollectiveTrace()
    _, steps = _run(
        target, draft, comm, batch=batch, k=k, graphs="decode", mode="baseline", trace=trace
    )
    (decode_graph,) = steps.captured.values()
    assert sum(decode_graph.collectives.values()) == 2 * layers  # captured once, inside the graph
    sizes = {(s["graph"], s["phase"], s["size_bytes"]): s["count"] for s in trace.sizes()}
    assert sizes[(decode_graph.name, "decode", batch * hidden * 2)] == 2 * layers * (
        NEW - 1
    )  # per replay
    assert sizes[(None, "prefill", batch * PROMPT * hidden * 2)] == 2 * layers  # eager prefill


@pytest.mark.parametrize("batch, in_list", [(2, True), (3, False)])
def test_capture_list_replays_its_batch_and_runs_others_eagerly(comm, batch, in_list):
    """Graphs captured for batch sizes 1, 2, 4 over caches of 4 rows: a batch-2 run replays the
    b2 graphs (and their all-reduces), a batch-3 run runs eagerly; tokens equal eager either way."""
    k, graph_kinds = 3, {"baseline": 1, "speculative": 3}
    target, draft = _models("tiny", torch.float32, comm, 4, k, draft_tp=True)
    for mode in ("baseline", "speculative"):
        eager, _ = _run(target, draft, comm, batch=batch, k=k, graphs="none", mode=mode)
        trace = CollectiveTrace()
        graphed, steps = _run(
            target,
            draft,
            comm,
            batch=batch,
            k=k,
            graphs="all",
            mode=mode,
            trace=trace,
            capture=(1, 2, 4),
        )
        assert graphed.tokens == eager.tokens, (batch, mode)
        assert len(steps.captured) == 3 * graph_kinds[mode]
        replayed = {s["graph"] for s in trace.sizes() if s["graph"]}
        if in_list:
            assert steps.graphed_phases == (
                {"decode"} if mode == "baseline" else {"draft", "verify", "draft_extend"}
            )
            assert len(replayed) == graph_kinds[mode] and all(
                f"_b{batch}_" in name for name in replayed
            )
        else:
            assert steps.graphed_phases == set() and replayed == set()


def test_run_engine_graphs_all_reports_coverage_and_nccl_read(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ncclprobe",
            "-q",
            "run-engine",
            "--preset",
            "tiny",
            "--graphs",
            "all",
            "--capture-batches",
            "1,2,4",
            "--single-rank-collectives",
            "--batch",
            "2",
            "--env",
            "NCCL_P2P_LEVEL=SYS",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode in (0, 1), result.stderr
    doc = json.loads(result.stdout)
    runs = {r["mode"]: r for r in doc["runs"]}
    assert doc["config"]["capture_batches"] == [1, 2, 4]
    assert {g.split("_b")[1][0] for g in runs["speculative"]["graphs"]} == {"1", "2", "4"}
    assert runs["baseline"]["phases"]["decode"]["graphed"] is True
    assert all(
        runs["speculative"]["phases"][p]["graphed"] for p in ("draft", "verify", "draft_extend")
    )
    for run in runs.values():
        assert 0.0 < run["graph_coverage"] <= 1.0
        assert any(s["graph"] for s in run["collectives"]["sizes"])
        assert run["collective_share"] is not None
        assert {s["graph"] for s in run["collectives"]["sizes"]} - {None} <= {
            g for g in run["graphs"] if "_b2_" in g
        }
    assert doc["checks"]["settings"][0]["read_by_nccl"] == {
        "NCCL_P2P_LEVEL": True
    }  # NCCL's own log
    spec = runs["speculative"]
    assert (
        spec["phases"]["host"]["count"] == spec["acceptance"]["cycles"]
    )  # CUDA events + readout marks
    assert spec["loop"]["efficiency"] == pytest.approx(
        spec["loop"]["cycle_time_share"] * spec["loop"]["token_yield"]
    )
    print(
        json.dumps(
            {
                m: {
                    k: r[k]
                    for k in (
                        "tokens_per_s",
                        "graph_coverage",
                        "collective_share",
                        "verify_decode_ratio",
                        "loop",
                    )
                }
                for m, r in runs.items()
            }
        )
    )
