"""`probe custom-allreduce`: usage errors and the CPU refusal (exit 3), the plan and what is known
unavailable before launch (real nvidia-smi topologies), the workers' environment, the document and
table built from worker messages, the Triton kernels run for real by ranks in separate processes
under Triton's CPU interpreter (exact sums, a peer that never comes), the GPU code path compiled
for sm_90 without a GPU, and on a GPU the probe end to end with two ranks sharing it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.cli.output import emit
from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.node.topo import parse_topo
from ncclprobe.probes import custom_allreduce_plan as plan
from ncclprobe.probes.custom_allreduce_report import (
    build_document,
    table_rows,
)
from ncclprobe.probes.custom_allreduce_report import (
    verdict as report_verdict,
)
from ncclprobe.probes.custom_allreduce_run import Machine, pool_spec

try:
    import triton
except ImportError:
    triton = None

TOPO = Path(__file__).resolve().parent / "fixtures" / "topo"
no_gpu = not torch.cuda.is_available()


def invoke(*args):
    return CliRunner().invoke(cli, ["probe", "custom-allreduce", *args])


@pytest.mark.skipif(not no_gpu, reason="checks the CPU-only refusal")
@pytest.mark.parametrize("args", [[], ["--share-gpu", "2"], ["--nranks", "2", "--mode", "graph"]])
def test_cpu_exits_3_with_one_line_reason(args):
    result = invoke(*args)
    assert result.exit_code == 3, result.output
    assert result.output.count("\n") == 1 and "needs CUDA GPUs" in result.output


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--dtype", "float16"], "unknown dtype 'float16'"),
        (["--methods", "nccl,nvls"], "unknown method 'nvls'"),
        (["--methods", "nccl,nccl"], "given twice"),
        (["--mode", "eager,"], "empty name"),
        (["--sizes", "6", "--dtype", "float32"], "not a whole number of float32 elements"),
        (["--sizes", "128M"], "above the probe's limit"),
        (["--share-gpu", "1"], "at least 2 ranks"),
        (["--share-gpu", "2", "--nranks", "2"], "drop --nranks 2"),
        (["--nranks", "1"], "at least 2"),
        (["--iters", "0"], "--iters 0"),
        (
            ["--timeout", "nan"],
            "not a finite",
        ),  # refused by the strict number types (ncclprobe.cli.types)
    ],
)
def test_bad_usage_exits_2(args, fragment):
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert fragment in result.output and result.output.count("\n") == 1


def test_steps_walk_dtype_size_method_mode_and_leave_out_what_cannot_run():
    spec = plan.CustomAllReduceSpec(
        sizes=(4096, 8192),
        dtypes=("float32", "bfloat16"),
        methods=("nccl", "ipc-oneshot", "symm-twoshot"),
    )
    walked = plan.steps(spec, {"symm-twoshot": "why"})
    assert len(walked) == 2 * 2 * 2 * 2
    assert walked[:3] == [
        {"dtype": "float32", "size_bytes": 4096, "method": "nccl", "mode": "eager"},
        {"dtype": "float32", "size_bytes": 4096, "method": "nccl", "mode": "graph"},
        {"dtype": "float32", "size_bytes": 4096, "method": "ipc-oneshot", "mode": "eager"},
    ]
    assert {s["method"] for s in walked} == {"nccl", "ipc-oneshot"}
    assert plan.DEFAULT_SIZES[0] == 4096 and plan.DEFAULT_SIZES[-1] == 1 << 20


def _links(name: str):
    return parse_topo((TOPO / name).read_text()).gpu_links


@pytest.mark.parametrize(
    "fixture,gpus,nvlink,vllm_off",
    [
        ("aws_g6e12xlarge_4x_l40s_node.txt", [0, 1, 2, 3], False, True),  # 4 PCIe L40S
        ("rtx5090_2gpu_phb_tabs.txt", [0, 1], False, False),  # two PCIe GPUs: vLLM keeps it
        (
            "rtx3090_4gpu_nvlink_bridge_pairs_nv4_phb_node.txt",
            [0, 1, 2, 3],
            False,
            True,
        ),  # bridged pairs only
        ("aws_p5_8x_h100_nv18_no_nic_rows.txt", list(range(8)), True, False),  # NVSwitch
    ],
)
def test_what_vllm_would_do_on_real_topologies(fixture, gpus, nvlink, vllm_off):
    every = plan.all_nvlink(_links(fixture), gpus)
    assert every is nvlink
    notes = plan.engine_notes(len(gpus), False, every)
    assert any("switch their custom all-reduce off" in n for n in notes) is vllm_off


def test_links_follow_cuda_visible_devices():
    links = _links(
        "rtx3090_4gpu_nvlink_bridge_pairs_nv4_phb_node.txt"
    )  # NV4 bridges GPU0-GPU2, GPU1-GPU3
    assert plan.all_nvlink(links, plan.physical_gpus([0, 1], "0,2")) is True
    assert plan.all_nvlink(links, plan.physical_gpus([0, 1], "0,1")) is False  # PHB
    assert plan.all_nvlink(links, plan.physical_gpus([0, 1], "1,3")) is True
    assert (
        plan.physical_gpus([0, 1], "GPU-5a3c,GPU-77e1") is None
        and plan.physical_gpus([0, 1], "3") is None
    )
    assert plan.all_nvlink(links, None) is None and plan.physical_gpus([0, 1], None) == [0, 1]


def test_engine_notes_for_odd_world_sizes_unknown_links_and_a_shared_gpu():
    assert any("supports 2, 4, 6, 8 ranks only" in n for n in plan.engine_notes(3, False, True))
    assert any("link types unknown" in n for n in plan.engine_notes(4, False, None))
    assert plan.engine_notes(2, True, None) == [plan.SYMM_NOTE]
    assert plan.engine_notes(2, True, None, ("nccl", "ipc-oneshot")) == []


def test_unavailable_before_launch_names_the_reason():
    spec = plan.CustomAllReduceSpec()
    missing = plan.no_peer_access_pairs(
        [[True, True, False], [True, True, True], [False, True, True]], [0, 1, 2]
    )
    assert missing == [(0, 2)]
    skip = plan.unavailable_before_launch(spec, 3, triton_error=None, no_peer_access=missing)
    assert set(skip) == set(plan.IPC_METHODS + plan.SYMM_METHODS) and "0-2" in skip["symm-oneshot"]
    skip = plan.unavailable_before_launch(
        spec, 16, triton_error="ImportError: no triton", no_peer_access=[]
    )
    assert set(skip) == set(plan.IPC_METHODS) and "at most 8 ranks" in skip["ipc-oneshot"]
    assert plan.unavailable_before_launch(spec, 2, triton_error=None, no_peer_access=[]) == {}


def _machine(world: int, share: bool) -> Machine:
    return Machine(
        gpus=[0] * world if share else list(range(world)),
        gpu_count=1 if share else world,
        triton_error=None,
        no_peer_access=[],
        all_nvlink=None,
        links=None,
    )


def _worker_envs(spec, machine, tmp_path):
    from ncclprobe.launch import worker_env

    pool = pool_spec(spec, machine, {})
    return pool, [worker_env(pool, rank, tmp_path, 12345) for rank in range(machine.world)]


def test_every_worker_keeps_multicast_off_and_shared_ranks_get_their_own_host_id(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")  # inherited: the pool overrides it
    pool, envs = _worker_envs(plan.CustomAllReduceSpec(share_gpu=3), _machine(3, True), tmp_path)
    assert len({env["NCCL_HOSTID"] for env in envs}) == 3 and {
        env["NCCLPROBE_GPU"] for env in envs
    } == {"0"}
    for env in envs:
        assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
        assert (
            env["NVSHMEM_DISABLE_NVLS"] == "1"
            and env["TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES"] == "1"
        )
    assert pool.payload["max_bytes"] == 1 << 20 and len(pool.payload["steps"]) == 9 * 5 * 2
    monkeypatch.delenv("NCCL_HOSTID", raising=False)
    _, envs = _worker_envs(plan.CustomAllReduceSpec(nranks=2), _machine(2, False), tmp_path)
    assert all(
        "NCCL_HOSTID" not in env and "TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES" not in env
        for env in envs
    )
    assert all(env["NCCL_NVLS_ENABLE"] == "0" for env in envs) and "NCCLPROBE_GPU" not in envs[1]


def _result(rank, method, mode, trials, wrong=0, size=4096, host=None):
    return {
        "kind": "result",
        "rank": rank,
        "dtype": "bfloat16",
        "size_bytes": size,
        "method": method,
        "mode": mode,
        "elements": size // 2,
        "wrong": wrong,
        "checked": 3 * size // 2,
        "trial_us": trials,
        **({"host_us": host} if host else {}),
    }


def _document(messages, share_gpu=0, pool=None):
    spec = plan.CustomAllReduceSpec(
        sizes=(4096,), share_gpu=share_gpu, nranks=0 if share_gpu else 2
    )
    return build_document(
        spec,
        {"gpus": [0, 0] if share_gpu else [0, 1], "all_nvlink": False},
        {},
        messages,
        pool or {"status": "ok", "reason": None, "wall_s": 1.0},
    )


def _two_ranks(method, mode, trials, **kw):
    return [
        _result(0, method, mode, trials, **kw),
        _result(1, method, mode, [t + 0.5 for t in trials], **kw),
    ]


def test_document_takes_the_slowest_rank_and_calls_a_winner_only_beyond_the_noise():
    messages = (
        _two_ranks("nccl", "graph", [20.0, 21.0, 20.5])
        + _two_ranks("ipc-oneshot", "graph", [8.0, 8.2, 8.1])
        + _two_ranks("ipc-twoshot", "graph", [19.0, 22.0, 20.0])
        + _two_ranks("nccl", "eager", [30.0, 30.0, 30.0], host=[29.5, 29.5, 29.5])
        + [
            {
                "kind": "unavailable",
                "rank": r,
                "method": "symm-oneshot",
                "reasons": {"all ranks": "no P2P"},
            }
            for r in (0, 1)
        ]
    )
    doc = _document(messages)
    graph = {r["method"]: r for r in doc["rows"] if r["mode"] == "graph"}
    assert graph["nccl"]["time_us"] == 21.0 and graph["ipc-oneshot"]["vs_nccl"] == pytest.approx(
        21.0 / 8.6, rel=1e-3
    )
    verdict = next(v for v in doc["verdicts"] if v["mode"] == "graph")
    assert verdict["best"] == "ipc-oneshot" and "faster than nccl" in verdict["verdict"]
    assert (
        "ipc-twoshot" not in verdict["slower_than_nccl"]
    )  # overlapping spreads: no claim either way
    assert next(r for r in doc["rows"] if r["mode"] == "eager")["host_bound"] is True
    assert any("symm-oneshot not measured: no P2P" in n for n in doc["notes"])
    assert any("switch their custom all-reduce off" in n for n in doc["notes"]) is False  # two GPUs
    assert report_verdict(doc).exit_code == 0
    json.dumps(doc, allow_nan=False)


def test_wrong_results_dropped_methods_and_an_early_end_exit_1():
    wrong = _document(_two_ranks("nccl", "eager", [9.0, 9.0, 9.0], wrong=3))
    assert wrong["rows"][0]["status"] == "WRONG" and report_verdict(wrong).exit_code == 1
    assert any("WRONG RESULTS: nccl" in n and "6 of" in n for n in wrong["notes"])
    dropped = {
        "kind": "dropped",
        "rank": 0,
        "dtype": "bfloat16",
        "size_bytes": 4096,
        "method": "ipc-twoshot",
        "mode": "graph",
        "reasons": {"1": "a barrier gave up waiting"},
    }
    doc = _document(_two_ranks("nccl", "eager", [9.0] * 3) + [dropped])
    assert report_verdict(doc).exit_code == 1 and any(
        "ipc-twoshot FAILED at bfloat16 4K graph" in n for n in doc["notes"]
    )
    assert [line["ipc-twoshot"] for line in table_rows(doc)] == [None, "FAILED"]
    early = _document(
        _two_ranks("nccl", "eager", [9.0] * 3)[:1],
        pool={"status": "hang", "reason": "no progress", "wall_s": 3.0},
    )
    assert early["rows"][0]["status"] == "incomplete" and report_verdict(early).exit_code == 1
    assert any("ended early (hang)" in n for n in early["notes"])


def test_table_under_share_gpu_gives_no_verdict_and_shows_every_method(capsys, monkeypatch):
    monkeypatch.setenv(
        "COLUMNS", "200"
    )  # nothing wraps: the test is of the columns, not the fitting
    messages = _two_ranks("nccl", "graph", [900.0] * 3) + _two_ranks(
        "ipc-oneshot", "graph", [300.0] * 3
    )
    doc = _document(messages, share_gpu=2)
    assert (
        doc["verdicts"] == []
        and doc["notes"][0].startswith("--share-gpu 2:")
        and plan.SYMM_NOTE in doc["notes"]
    )
    rows = table_rows(doc)
    assert rows == [
        {
            "size": "4K",
            "dtype": "bfloat16",
            "mode": "graph",
            "nccl": 900.5,
            "ipc-oneshot": 300.5,
            "ipc-twoshot": None,
            "symm-oneshot": None,
            "symm-twoshot": None,
            "verdict": "not link times (--share-gpu)",
        }
    ]
    emit("table", doc, rows, title="t", notes=doc["notes"])
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("size"))
    assert header.split() == [
        "size",
        "dtype",
        "mode",
        "nccl",
        "ipc-oneshot",
        "ipc-twoshot",
        "symm-oneshot",
        "symm-twoshot",
        "verdict",
    ]
    assert "900.50" in lines[-1] and "300.50" in lines[-1]


def test_spec_rejects_a_negative_warmup():
    with pytest.raises(UsageProblem):
        plan.CustomAllReduceSpec(warmup=-1)


needs_triton = pytest.mark.skipif(triton is None, reason="Triton is not installed")


def _interpreter_breaks_on_this_numpy() -> bool:
    """Triton before 3.8 turns loop bounds into 1-element arrays, which NumPy 2.4 no longer converts."""
    import numpy

    version = lambda text: tuple(int(part) for part in text.split(".")[:2])  # noqa: E731
    return (
        triton is not None
        and version(triton.__version__) < (3, 8)
        and version(numpy.__version__) >= (2, 4)
    )


@needs_triton
@pytest.mark.skipif(
    _interpreter_breaks_on_this_numpy(), reason="Triton < 3.8's interpreter fails on NumPy >= 2.4"
)
def test_interpreted_kernels_sum_exactly_across_ranks_in_separate_processes():
    """Two ranks: both algorithms and dtypes, lengths that are no multiple of the block, blocks that
    stride more than once, fresh inputs each call; then a case only rank 0 launches, whose waits
    give up and say so. Three ranks: uneven two-shot partitions (a short one and an empty one)."""
    from tests.custom_allreduce_ranks import run_ranks

    two = run_ranks(
        2,
        [
            {"algorithm": "one-shot", "dtype": "float32", "n": 300, "calls": 2, "block": 128},
            {"algorithm": "two-shot", "dtype": "bfloat16", "n": 299, "calls": 2},
            {"algorithm": "one-shot", "dtype": "float32", "n": 64, "only": {0}, "max_spins": 50},
        ],
    )
    three = run_ranks(
        3,
        [
            {"algorithm": "two-shot", "dtype": "float32", "n": 20, "calls": 2, "block": 16},
            {"algorithm": "one-shot", "dtype": "bfloat16", "n": 20, "block": 16},
        ],
    )
    assert sorted(two) == [0, 1] and sorted(three) == [0, 1, 2]
    for report in [*two.values(), *three.values()]:
        assert "error" not in report, report
        for case in (c for c in report["cases"] if "only" not in c):
            assert case["wrong"] == [0] * case.get("calls", 1) and case["status"] == 0, case
    alone = two[0]["cases"][2]
    assert (
        alone["status"] == 3 and alone["wrong"][0] > 0
    )  # both barriers gave up; it read unwritten data
    assert (
        "the first barrier" in alone["status_text"] and "the second barrier" in alone["status_text"]
    )
    assert two[1]["cases"][2]["status"] == 0 and two[1]["cases"][2]["wrong"] == []
    assert (
        two[0]["addresses"] != two[1]["addresses"]
    )  # each rank maps the peers at its own addresses


@needs_triton
def test_launch_refuses_what_the_workspace_cannot_hold():
    from ncclprobe.probes import custom_allreduce_kernel as kernels

    layout = kernels.Layout(max_bytes=256)
    bases = torch.zeros(2, dtype=torch.int64)
    with pytest.raises(ValueError, match="do not fit"):
        kernels.launch("one-shot", torch.zeros(65), torch.zeros(65), bases, 0, 2, layout, 10)
    with pytest.raises(ValueError, match="outside 2..8"):
        kernels.launch("two-shot", torch.zeros(8), torch.zeros(8), bases, 0, 9, layout, 10)
    assert kernels.partition(37, 3) == 16 and kernels.grid("two-shot", 37, 3, 4, 16) == 1
    assert (
        kernels.grid("one-shot", 1 << 20, 2) == kernels.MAX_BLOCKS
        and kernels.grid("one-shot", 10, 2) == 1
    )


@needs_triton
def test_the_gpu_code_path_compiles_for_sm90_without_a_gpu():
    """The branch the interpreter never takes: the release store to a peer's flag as inline PTX,
    the acquire poll, CTA barriers around them, 16-byte accesses to the workspace; ptxas assembles it."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from ncclprobe.probes import custom_allreduce_kernel as kernels

    if kernels.interpreted():
        pytest.skip("TRITON_INTERPRET is set in this process")
    kernel = kernels.two_shot_kernel
    names = kernel.arg_names
    signature = {
        a: {"inp": "*bf16", "out": "*bf16", "bases": "*i64"}.get(
            a, "constexpr" if a.isupper() else "i32"
        )
        for a in names
    }
    constants = {
        (names.index("WORLD"),): 4,
        (names.index("BLOCK"),): kernels.BLOCK,
        (names.index("INTERPRET"),): False,
    }
    aligned = {
        (names.index(a),): [["tt.divisibility", 16]] for a in ("inp", "out", "bases", "n", "chunk")
    }
    try:
        compiled = triton.compile(
            ASTSource(fn=kernel, signature=signature, constexprs=constants, attrs=aligned),
            target=GPUTarget("cuda", 90, 32),
        )
    except RuntimeError as exc:  # a Triton without its NVIDIA backend (ptxas)
        pytest.skip(f"Triton cannot compile for CUDA here: {exc}")
    ptx = compiled.asm["ptx"]
    assert ptx.count("st.release.sys.global.b32") == 2 * 4  # two barriers, one store per peer
    assert "ld.global.sys.acquire.b32" in ptx and "bar.sync" in ptx
    assert "ld.global.cg.v4.b32" in ptx and compiled.asm["cubin"]


gpu = pytest.mark.skipif(no_gpu or triton is None, reason="needs a CUDA GPU and Triton")


def _gpu_workspaces(world: int, max_bytes: int):
    """`world` workspaces in this process (no IPC needed within one process), their bases."""
    from ncclprobe.probes.custom_allreduce_ipc import Driver, Workspace
    from ncclprobe.probes.custom_allreduce_kernel import Layout

    torch.zeros(1, device="cuda")
    layout = Layout(max_bytes=max_bytes)
    driver = Driver()
    spaces = [Workspace(driver, layout.total) for _ in range(world)]
    bases = torch.tensor([s.own.value for s in spaces], dtype=torch.int64, device="cuda")
    return layout, spaces, bases


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("algorithm", ["one-shot", "two-shot"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gpu_kernels_two_ranks_on_two_streams_eager_and_graph(algorithm, dtype):
    """Both ranks in this process, each on its own stream so their kernels run at once and meet in
    the barriers: exact sums on fresh inputs, eagerly and replayed from CUDA graphs."""
    from ncclprobe.probes.collectives.base import crafted_input
    from ncclprobe.probes.custom_allreduce_kernel import launch

    n, world = (1 << 19) + 37, 2
    layout, spaces, bases = _gpu_workspaces(world, n * 4)
    streams = [torch.cuda.Stream() for _ in range(world)]
    inputs = [torch.empty(n, dtype=dtype, device="cuda") for _ in range(world)]
    outputs = [torch.empty_like(x) for x in inputs]

    def both():
        torch.cuda.synchronize()  # the inputs were written on the default stream
        for rank, stream in enumerate(streams):
            with torch.cuda.stream(stream):
                launch(algorithm, inputs[rank], outputs[rank], bases, rank, world, layout, 1 << 22)

    def check(call):
        torch.cuda.synchronize()
        want = sum(crafted_input(n, r + call, torch.float32, "cuda") for r in range(world)).to(
            dtype
        )
        for out in outputs:
            assert torch.equal(out, want)

    for rank in range(world):  # compile both before either spins
        launch(
            algorithm, inputs[rank], outputs[rank], bases, rank, world, layout, 1 << 22, warmup=True
        )
    for call in range(
        8
    ):  # calls back to back: a barrier signalled one count too far shows as stale sums
        for rank in range(world):
            inputs[rank].copy_(crafted_input(n, rank + call, dtype, "cuda"))
        both()
        check(call)
    graphs = [torch.cuda.CUDAGraph() for _ in range(world)]
    for rank, (graph, stream) in enumerate(zip(graphs, streams)):
        with torch.cuda.graph(graph, stream=stream):
            launch(algorithm, inputs[rank], outputs[rank], bases, rank, world, layout, 1 << 22)
    for call in range(8, 16):
        for rank in range(world):
            inputs[rank].copy_(crafted_input(n, rank + call, dtype, "cuda"))
        torch.cuda.synchronize()
        for graph, stream in zip(graphs, streams):
            with torch.cuda.stream(stream):
                graph.replay()
        check(call)
    assert [s.read_int32(layout.status) for s in spaces] == [0, 0]
    for s in spaces:
        s.free()


@pytest.mark.gpu
@gpu
def test_gpu_barrier_gives_up_when_the_peer_never_comes():
    from ncclprobe.probes.custom_allreduce_kernel import describe_status, launch

    layout, spaces, bases = _gpu_workspaces(2, 4096)
    x = torch.ones(1024, device="cuda")
    launch("one-shot", x, torch.empty_like(x), bases, 0, 2, layout, 10_000)
    torch.cuda.synchronize()
    status = spaces[0].read_int32(layout.status)
    assert status == 3 and "the first barrier" in describe_status(status)
    for s in spaces:
        s.free()


@pytest.mark.gpu
@gpu
def test_gpu_probe_with_two_ranks_sharing_the_gpu():
    """The probe end to end on one GPU: every method is measured exactly or says why it cannot run;
    ours and NCCL must run; no speed verdict is given."""
    result = invoke(
        "--share-gpu",
        "2",
        "--sizes",
        "4K,1M",
        "--iters",
        "3",
        "--trials",
        "2",
        "--warmup",
        "1",
        "--graph-ops",
        "2",
        "--replays",
        "1",
        "--checks",
        "2",
        "--format",
        "json",
        "-q",
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["verdicts"] == [] and doc["dropped"] == [] and doc["pool"]["status"] == "ok", doc[
        "notes"
    ]
    measured = {r["method"] for r in doc["rows"]}
    assert {"nccl", "ipc-oneshot", "ipc-twoshot"} <= measured
    assert measured | set(doc["unavailable"]) == set(plan.METHODS)
    assert all(r["status"] == "ok" and r["checked"] > 0 for r in doc["rows"])
    assert len(doc["rows"]) == 2 * 2 * len(measured)
