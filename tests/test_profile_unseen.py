"""The step finder on traces of the kinds nobody here recorded (issue 26's unseen data): a
torch.compile'd model whose embedding inductor fused (no `aten::embedding` on the host), vLLM's
per-layer `rotary_embedding` kernels, a prefill whose gather kernel aten named otherwise than the
decodes' (torch 2.11: `vectorized_gather_kernel` for 16 tokens, `indexSelectSmallIndex` for 1), a
profiler schedule whose `ProfilerStep#N` wraps several tokens, and two `generate()` calls in one
trace (a second prompt of 16 tokens or fewer). Each is built in memory from the reader's own
dataclasses (no file, no mock), each with its healthy twin; derived from the HF fixtures the same
variants are checked in docs/LOG.md (2026-12-02).

Private stages (`F._x`, `K._x`, `S._x`) are called directly, kept so (issue 38 §4): each
boundary sits inside one stage of the step finder, and a whole timeline that places it there
exactly is many launches long; find_steps on real traces covers the road end to end."""

from __future__ import annotations

import json
from collections import Counter

from ncclprobe.evidence.run import load_runs
from ncclprobe.evidence.run.profile import forwards as F
from ncclprobe.evidence.run.profile import names
from ncclprobe.evidence.run.profile import steps as S
from ncclprobe.evidence.run.profile.timeline import Annotation, Kernel, Launch, Timeline

GAP = 10.0  # µs between launches


def timeline(spec, embeddings=(), annotations=(), attention=(), cpu_ops=1) -> Timeline:
    """spec: (kind, name) per launch, GAP µs apart; each kernel runs 1 µs right after its launch."""
    kernels, launches = [], {}
    for corr, (kind, name) in enumerate(spec, start=1):
        ts = corr * GAP
        launches[corr] = Launch(kind, name, ts, 1.0, 1)
        if kind != "sync":
            category = "gpu_memcpy" if kind == "memcpy" else "kernel"
            kernels.append(Kernel(ts + 2, 1.0, 7, corr, name, None, category, blocks=4))
    return Timeline(
        "mem",
        {},
        kernels=kernels,
        launches=launches,
        embeddings=list(embeddings),
        annotations=list(annotations),
        attention=list(attention),
        cpu_ops=cpu_ops,
    )


def at(index: int) -> float:
    """The host time of launch `index` (0-based) of a spec."""
    return (index + 1) * GAP


def forward(lookup="indexSelectSmallIndex", layers=2, rotary=""):
    """One forward: its lookup, `layers` layers of 9 kernels (a rotary kernel in each when named),
    the LM head, the token read back."""
    layer = [("kernel", f"L{i}") for i in range(9)] + ([("kernel", rotary)] if rotary else [])
    return (
        [("kernel", lookup)]
        + layer * layers
        + [("kernel", "head"), ("memcpy", "DtoH"), ("sync", "s")]
    )


def starts(tl):
    return [f.start for f in F.find_forwards(tl, F.units_of(tl))]


# ---- the lookup by its kernel's name ---------------------------------------------------------------


def test_a_compiled_model_with_host_ops_but_no_aten_embedding_starts_forwards_at_its_fused_kernel():
    """inductor fuses the embedding into a Triton kernel and no aten op runs on the host for it,
    though the trace holds other host ops (cpu_ops > 0): the named kernel starts each forward."""
    one = forward(lookup="triton_poi_fused_embedding_0")
    tl = timeline(one * 3, cpu_ops=500)
    fws = F.find_forwards(tl, F.units_of(tl))
    assert [f.start for f in fws] == [0, len(one), 2 * len(one)]
    assert "kernels named for an embedding lookup" in fws[0].found_by and fws[0].lm
    # the twin: the host's lookups are there, and they decide (one per forward, here every other)
    looked = timeline(one * 3, embeddings=[(at(0), 1.0, None), (at(2 * len(one)), 1.0, None)])
    assert starts(looked) == [0, 2 * len(one)]


def test_rotary_embedding_kernels_run_in_every_layer_and_start_no_forward():
    rotary = "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, ...)"
    assert not names.embedding_kernel(rotary)
    assert not names.embedding_kernel("triton_poi_fused_apply_rotary_pos_emb_0")
    assert names.embedding_kernel("triton_red_fused__to_copy_embedding_mean_pow_0")
    one = forward(lookup="triton_poi_fused_embedding_0", layers=3, rotary=rotary)
    tl = timeline(one * 3, cpu_ops=0)
    assert starts(tl) == [0, len(one), 2 * len(one)]


def test_a_gather_not_named_for_an_embedding_starts_a_forward_where_the_first_layer_follows_it():
    """torch 2.11 gathers a 16-token prompt or a 20-token verify with `vectorized_gather_kernel`,
    a decode's token with `indexSelectSmallIndex`: a gather followed by the kernels that follow
    the named lookups starts a forward, first or in the middle of the run. Twins: a gather followed
    by other kernels (an engine's acceptance step), and a kernel that is no gather followed by the
    first layer (the previous layer's last kernel), start nothing."""
    gather = "void at::native::vectorized_gather_kernel<16, long>(char*)"
    setup = [("kernel", "arange"), ("kernel", "fill")]
    decode = forward()
    spec = setup + forward(lookup=gather) + decode * 2 + forward(lookup=gather) + decode
    tl = timeline(spec, cpu_ops=0)
    fws = F.find_forwards(tl, F.units_of(tl))
    assert [f.start for f in fws] == [len(setup) + i * len(decode) for i in range(5)]
    assert "2 more by the kernels that follow a lookup" in fws[0].found_by
    accept = [("kernel", gather)] + [("kernel", f"A{i}") for i in range(8)]
    tl = timeline(setup + decode + accept + decode * 2, cpu_ops=0)
    assert starts(tl) == [
        len(setup),
        len(setup + decode + accept),
        len(setup + decode * 2 + accept),
    ]
    assert not names.gather_kernel("L8") and names.gather_kernel(gather)


# ---- a profiler schedule's steps -------------------------------------------------------------------


def _scheduled(per_step: int, forwards: int = 8):
    one = forward()
    spec = one * forwards
    lookups = [(at(i * len(one)), 1.0, None) for i in range(forwards)]
    windows = []
    for n, first in enumerate(range(0, forwards, per_step)):
        t0 = at(first * len(one)) - 1.0
        last = min(first + per_step, forwards) * len(one) - 1
        windows.append(Annotation(f"ProfilerStep#{n}", t0, at(last) + 1.0 - t0, 1, None, n))
    return timeline(spec, embeddings=lookups, annotations=windows)


def test_profiler_steps_that_each_hold_several_forwards_give_way_to_the_forwards():
    """`prof.step()` every 4 tokens: 2 ProfilerSteps, 8 forwards; the steps are the forwards and
    the output says why. The twin, one forward per ProfilerStep, keeps the profiler's steps."""
    steps, how = S.find_steps(_scheduled(per_step=4))
    assert len(steps) == 8 and how.startswith("the kernel stream")
    assert "ProfilerStep#N annotations each held several forwards" in how
    steps, how = S.find_steps(_scheduled(per_step=1))
    assert len(steps) == 8 and how == "torch.profiler's ProfilerStep#N annotations"
    assert {s.label for s in steps} == {"ProfilerStep"}


def test_forwards_found_only_by_repetition_never_replace_profiler_steps():
    """A training step's forward and backward repeat their layers too: without a token lookup or a
    replayed forward the ProfilerSteps stay the steps."""
    one = [("kernel", f"L{i}") for i in range(9)] * 3 + [("kernel", "head"), ("sync", "s")]
    spec = one * 4
    window = Annotation("ProfilerStep#0", 0.0, at(len(spec)), 1, None, 0)
    steps, how = S.find_steps(timeline(spec, annotations=[window], cpu_ops=0))
    assert len(steps) == 1 and how == "torch.profiler's ProfilerStep#N annotations"


# ---- two generate() calls in one trace -------------------------------------------------------------


def test_a_forward_from_an_empty_kv_cache_is_a_prefill_however_few_its_tokens():
    """Two generate() calls of a 16-token prompt and 3 decodes each, with shapes: both prompts
    start from an empty cache (attention's key minus query is 0) and are prefills, though 16
    tokens alone would read as a verify. The twin: the same 16 tokens on a cache of 19 (a
    speculative verify) stay a verify."""
    one = forward()
    n = len(one)
    tokens = [16, 1, 1, 1, 16, 1, 1, 1]
    cache = [0, 16, 17, 18, 0, 16, 17, 18]
    lookups = [(at(i * n), 1.0, [1, t]) for i, t in enumerate(tokens)]
    attention = [(at(i * n + 1), t, c + t) for i, (t, c) in enumerate(zip(tokens, cache))]
    steps, _ = S.find_steps(timeline(one * 8, embeddings=lookups, attention=attention, cpu_ops=100))
    assert [s.label for s in steps] == ["prefill", "decode", "decode", "decode"] * 2
    cache[4] = 19
    attention = [(at(i * n + 1), t, c + t) for i, (t, c) in enumerate(zip(tokens, cache))]
    steps, _ = S.find_steps(timeline(one * 8, embeddings=lookups, attention=attention, cpu_ops=100))
    assert Counter(s.label for s in steps) == {"prefill": 1, "decode": 6, "verify": 1}


# ---- the period of the launch sequence, when no lookup is named ----------------------------------


def _rotary_layer():
    """A layer whose query and key get the same 6 rotary kernels: the 6-gram recurs 6 launches
    later inside every layer, which breaks runs of equal nearest recurrence."""
    rotary = [("kernel", f"R{i}") for i in range(6)]
    return (
        [("kernel", "norm"), ("kernel", "qkv")] + rotary * 2 + [("kernel", "attn"), ("kernel", "o")]
    )


def test_layers_with_an_inner_repeat_are_found_by_comparing_launches_a_period_apart():
    step = _rotary_layer() * 3 + [("kernel", "head"), ("memcpy", "DtoH"), ("sync", "s")]
    tl = timeline(step * 4, cpu_ops=0)
    units = F.units_of(tl)
    assert all(p != len(_rotary_layer()) for _, _, p in F.tandem_repeats(units.tokens))
    assert any(p == len(_rotary_layer()) for _, _, p in F.tandem_repeats(units.tokens, True))
    fws = F.find_forwards(tl, units)
    assert len(fws) >= 3 and not fws[0].lm
    assert [f.start for f in fws][-3:] == [len(step), 2 * len(step), 3 * len(step)]
    steps, _ = S.find_steps(tl)
    assert {s.label for s in steps} == {"repeated"}  # "repeated steps", never "step steps"


def test_a_host_loops_short_repeats_with_a_sync_each_are_no_steps():
    """Prompt lookup's candidate search: a few kernels and a sync, repeated, between forwards of
    varying length. Repeats shorter than a layer are no step: one forward per stack of layers."""
    search = [("kernel", "cmp"), ("kernel", "any"), ("kernel", "c3")] * 3 + [("sync", "s")]
    spec = []
    for extra, tries in ((0, 1), (2, 3), (1, 2), (3, 4)):  # forwards and searches differ
        spec += _rotary_layer() * 3 + [("kernel", "tail")] * extra + [("kernel", "head")]
        spec += [("memcpy", "DtoH"), ("sync", "s")] + search * tries
    tl = timeline(spec, cpu_ops=0)
    fws = F.find_forwards(tl, F.units_of(tl))
    assert len(fws) == 4 and "repeated layer kernels" in fws[0].found_by


# ---- end to end: a GPU-only trace in torch 1.8's capitalised categories -----------------------------


def _chrome_trace(path, spec, cpu_op=False, old=True):
    """spec as Kineto writes it: a runtime event per launch, a kernel per kernel launch (its
    correlation id naming the launch), in torch 1.8's categories when `old`."""
    cat = (
        {"kernel": "Kernel", "runtime": "Runtime", "memcpy": "Memcpy"}
        if old
        else {"kernel": "kernel", "runtime": "cuda_runtime", "memcpy": "gpu_memcpy"}
    )
    calls = {
        "kernel": "cudaLaunchKernel",
        "memcpy": "cudaMemcpyAsync",
        "sync": "cudaStreamSynchronize",
    }
    events = []
    for corr, (kind, name) in enumerate(spec, start=1):
        ts = corr * GAP
        args = {"correlation": corr}
        events.append(
            {
                "ph": "X",
                "cat": cat["runtime"],
                "name": calls[kind],
                "ts": ts,
                "dur": 1.0,
                "pid": 1,
                "tid": 1,
                "args": args,
            }
        )
        if kind != "sync":
            events.append(
                {
                    "ph": "X",
                    "cat": cat[kind],
                    "name": name,
                    "ts": ts + 2,
                    "dur": 1.0,
                    "pid": 0,
                    "tid": 7,
                    "args": {**args, "stream": 7},
                }
            )
    if cpu_op:
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "ts": 1.0,
                "dur": 1.0,
                "pid": 1,
                "tid": 1,
            }
        )
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_a_gpu_only_trace_in_old_categories_finds_its_steps_and_says_what_is_missing(tmp_path):
    step = _rotary_layer() * 3 + [("kernel", "head"), ("memcpy", "DtoH"), ("sync", "s")]
    gpu_only = load_runs(profiles=[_chrome_trace(tmp_path / "gpu.json", step * 6)])
    run = gpu_only.runs[0]
    assert list(run.phases) == ["repeated"] and run.phases["repeated"].count >= 5
    note = next(n for n in gpu_only.notes if n.startswith("decode and verify"))
    assert note.endswith(
        "this profile holds no host ops at all: record ProfilerActivity.CPU with the CUDA activity"
    )
    with_host = load_runs(
        profiles=[_chrome_trace(tmp_path / "cpu.json", step * 6, cpu_op=True, old=False)]
    )
    assert with_host.runs[0].phases["repeated"].count == run.phases["repeated"].count
    note = next(n for n in with_host.notes if n.startswith("decode and verify"))
    assert "no host ops" not in note


def test_per_thread_stream_and_versioned_api_names_are_the_same_launches():
    """CUPTI names the per-thread-default-stream entry points `..._ptsz`/`..._ptds` and some
    driver entry points `..._v<N>`: the same launches, copies and synchronisations."""
    for name, kind in [
        ("cudaLaunchKernel_ptsz", "kernel"),
        ("cuLaunchKernelEx_ptsz", "kernel"),
        ("cudaLaunchKernelExC_v11060", "kernel"),
        ("cudaGraphLaunch_ptsz", "graph"),
        ("cuGraphLaunch_v10000", "graph"),
        ("cudaMemcpyAsync_ptsz", "memcpy"),
        ("cudaMemcpy_ptds", "memcpy"),
        ("cudaStreamSynchronize_ptsz", "sync"),
        ("cudaLaunchKernel", "kernel"),
    ]:
        assert names.launch_kind(name) == kind, name
    assert names.launch_kind("cudaGetErrorString") is None
    assert names.launch_kind("cudaStreamIsCapturing_ptsz") is None
    assert names.launch_kind("cudaLaunchKernel_ptszX") is None


# ---- words ----------------------------------------------------------------------------------------


def test_a_share_never_rounds_a_small_part_to_nothing_nor_a_short_fall_to_all():
    """'1 small eager kernels ... 0% of the token' was printed for a 0.4 % glue on the two-rank
    replayed traces."""
    from tests.test_profile_steps_unit import glue_share_shown

    shares = (0.004, 0.0099, 0.01, 0.5, 0.994, 0.995, 0.9999, 1.0)
    assert [glue_share_shown(v) for v in shares] == [
        "0.4%",
        "1.0%",
        "1%",
        "50%",
        "99%",
        "99.5%",
        "100.0%",
        "100%",
    ]


def test_an_odd_small_forward_does_not_take_the_draft_split():
    """Two traces joined (or one cut) leave a partial forward of 32 launches among drafts of 85 and
    targets of 177: the split is the highest jump of at least DRAFT_SIZE_RATIO, so the drafts stay
    drafts (the odd one goes with them). The twin: no jump of the ratio above it, no draft at all."""
    from ncclprobe.evidence.run.profile import kinds as K

    class Fw:
        def __init__(self, launches):
            self.launch_count, self.replay = launches, False

    odd, drafts, targets = [Fw(32)], [Fw(85) for _ in range(4)], [Fw(177), Fw(195)]
    assert K._drafts(odd + drafts + targets) == odd + drafts
    assert K._drafts(odd + [Fw(85), Fw(99)]) == odd  # 85/32 is the only jump of the ratio
    assert K._drafts([Fw(85), Fw(99), Fw(120)]) == []


def test_only_the_sync_separated_one_of_inductors_embedding_named_kernels_starts_a_forward():
    """torch.compile without graphs: every forward launches 4 kernels named for the embedding (the
    residual stream's fused norms carry its name); the lookup is the one a host sync (the token
    read back) separates from the named kernel before it. Twin: with no sync at all, the first
    name's launches only."""
    names_ = [
        f"triton_per_fused__to_copy_add_embedding_mean_mul_pow_rsqrt_{n}" for n in (0, 8, 10, 11)
    ]
    body = []
    for n in names_:
        body += [("kernel", n)] + [("kernel", f"k{n}_{i}") for i in range(9)]
    one = body + [("kernel", "head"), ("memcpy", "DtoH"), ("sync", "s")]
    tl = timeline(one * 4, cpu_ops=300)
    assert starts(tl) == [0, len(one), 2 * len(one), 3 * len(one)]
    no_sync = [u for u in one if u[0] != "sync"]
    tl = timeline(no_sync * 4, cpu_ops=300)
    assert starts(tl) == [0, len(no_sync), 2 * len(no_sync), 3 * len(no_sync)]


def test_one_eager_prompt_before_compiled_forwards_of_fewer_kernels_is_no_target_beside_a_draft():
    """The prompt ran eagerly (440 launches), the decodes compiled (187 fused ones): 2.35x apart,
    yet one model. Twin: the larger forward recurs after the smaller ones (a verify after drafts)."""
    from ncclprobe.evidence.run.profile import kinds as K

    class Fw:
        def __init__(self, launches):
            self.launch_count, self.replay = launches, False

    compiled = [Fw(440)] + [Fw(187) for _ in range(5)]
    assert K._drafts(compiled) == []
    assisted = [Fw(440)] + [Fw(187) for _ in range(4)] + [Fw(440)]
    assert K._drafts(assisted) == assisted[1:5]
