"""Speed figures of the engine on one GPU (issue 6's targets); prints figures, asserts nothing.

  python examples/engine_bench.py steps --preset llama-16l     # decode/verify: graph vs eager vs roofline
  python examples/engine_bench.py steps --preset llama3-8b
  python examples/engine_bench.py hf --preset llama-16l        # our graph decode vs HF generate()
  python examples/engine_bench.py kimi                         # kimi-k2-slice: per-layer decode, all-reduce sizes
  python examples/engine_bench.py overhead --preset small      # tokens/s with and without instrumentation
  python examples/engine_bench.py attention                    # one layer's attention: formulations and backends
Add --compile to steps, hf and overhead to torch.compile each step before capture.

Roofline = bytes of all weights / measured device copy bandwidth (a copy reads and writes, so
bandwidth = 2 x bytes / time), as in ../shared/reference/h200-measurements.md.
"""

from __future__ import annotations

import argparse
import time

import torch

from ncclprobe.engine.build import build_target
from ncclprobe.engine.comm import Communicator
from ncclprobe.engine.config import preset
from ncclprobe.engine.graphs import CapturedStep
from ncclprobe.engine.model import fuse_projections
from ncclprobe.engine.share import time_call_ms

REPS_NOTE = "mean of 10 calls after 2 warm-ups (engine.share.time_call_ms)"


def copy_bandwidth_gbps(gib: float = 2.0) -> float:
    x = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ms = time_call_ms(lambda: y.copy_(x), "cuda")
    return 2 * x.numel() / (ms / 1000) / 1e9


def weight_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def step_times(
    model, batch: int, tokens: int, position: int, comm, captured: list | None = None, compiled=None
):
    """(graph ms, eager ms) of one target step of `tokens` per sequence at `position`; the
    graph's captured collectives are appended to `captured` when given. With `compiled` (the
    torch.compile'd model) the graph captures the compiled step; eager stays the plain model."""
    ids = torch.zeros(batch, tokens, dtype=torch.long, device="cuda")
    pos = (position + torch.arange(tokens, device="cuda")).expand(batch, tokens).contiguous()
    fn = lambda t, p: model(t, p, tokens > 1)  # noqa: E731 - verify captures features, decode does not
    graph_fn = (lambda t, p: compiled(t, p, tokens > 1)) if compiled is not None else fn  # noqa: E731
    with torch.inference_mode():
        graph = CapturedStep(f"t{tokens}", graph_fn, (ids, pos), comm)
        if captured is not None:
            captured.append(graph.collectives)
        return time_call_ms(graph.graph.replay, "cuda"), time_call_ms(lambda: fn(ids, pos), "cuda")


def compiled_or_none(model, wanted: bool, mode: str = "default"):
    from ncclprobe.engine.graphs import compile_for_capture

    return compile_for_capture(model, mode) if wanted else None


def target(name: str, fuse: bool = True):
    model = build_target(preset(name), seed=0, device="cuda", dtype=torch.bfloat16)
    return fuse_projections(model) if fuse else model


def set_inductor_option(dotted: str, value: str) -> None:
    import torch._inductor.config as inductor

    *path, name = dotted.split(".")
    target = inductor
    for part in path:
        target = getattr(target, part)
    if not hasattr(target, name):
        print(f"# inductor has no option {dotted}; ignored")
        return
    setattr(target, name, value not in ("0", "False", "false"))
    print(f"# inductor {dotted} = {getattr(target, name)}")


def cmd_steps(args) -> None:
    from ncclprobe.engine import split_kv_attention

    split_kv_attention.ENABLED = args.attention == "split-kv"
    if args.blas:
        torch.backends.cuda.preferred_blas_library(args.blas)
    for setting in args.inductor:  # e.g. coordinate_descent_tuning=1
        set_inductor_option(*setting.split("=", 1))
    model = target(args.preset, not args.no_fuse)
    model.setup_caches(1, args.max_seq)
    comm = Communicator()
    bw = copy_bandwidth_gbps()
    roofline_ms = weight_bytes(model) / (bw * 1e9) * 1000
    compiled = compiled_or_none(model, args.compile, args.compile_mode)
    print(
        f"# {args.preset}: {weight_bytes(model) / 1e9:.2f} GB bf16 weights, copy bandwidth {bw / 1000:.2f} TB/s, "
        f"roofline {roofline_ms:.3f} ms; {f'compiled ({args.compile_mode}), ' if args.compile else ''}"
        f"{f'BLAS {args.blas}, ' if args.blas else ''}attention {args.attention}; {REPS_NOTE}"
    )
    started = time.perf_counter()
    decode_graph, decode_eager = step_times(model, 1, 1, args.position, comm, compiled=compiled)
    print(f"# decode capture (and compile) {time.perf_counter() - started:.1f} s")
    print(
        f"decode  graph {decode_graph:.3f} ms ({decode_graph / roofline_ms:.2f}x roofline)  eager {decode_eager:.3f} ms"
    )
    for tokens in args.verify_tokens:
        graph, eager = step_times(model, 1, tokens, args.position, comm, compiled=compiled)
        print(
            f"verify{tokens} graph {graph:.3f} ms ({graph / decode_graph:.2f}x graph decode)  eager {eager:.3f} ms "
            f"({eager / decode_graph:.2f}x graph decode)"
        )


def cmd_hf(args) -> None:
    """HF generate() (random weights, greedy) in its plain configuration and its fastest one (static
    cache, compiled forward: CUDA graphs), against our graph decode of the same shape, one call."""
    import transformers
    from hf_speeds import generate_speeds  # examples/hf_speeds.py

    cfg = preset(args.preset)
    hf_cfg = transformers.LlamaConfig(
        vocab_size=cfg.vocab,
        hidden_size=cfg.hidden,
        intermediate_size=cfg.intermediate,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.kv_heads,
        max_position_embeddings=4096,
        rope_theta=cfg.rope_theta,
    )
    with torch.device("cuda"):
        hf = transformers.LlamaForCausalLM(hf_cfg).to(torch.bfloat16).eval()
    prompt = torch.randint(0, cfg.vocab, (1, 16), device="cuda")
    hf_speeds = generate_speeds(hf, [prompt] * args.prompts, args.new_tokens, "cuda")
    del hf
    torch.cuda.empty_cache()
    from ncclprobe.engine.generate import Engine
    from ncclprobe.engine.graphs import CapturedGraphs, GraphedSteps

    model = target(args.preset)
    model.setup_caches(1, 16 + args.new_tokens + 8)
    graphs = CapturedGraphs(
        model,
        None,
        Communicator(),
        mode="decode",
        batches=1,
        k=1,
        speculative=False,
        compile=args.compile_mode if args.compile else "",
    )
    engine = Engine(model, steps=GraphedSteps(graphs))
    engine.baseline(prompt, 8)
    walls = sorted(engine.baseline(prompt, args.new_tokens).wall_s for _ in range(args.prompts))
    ours_tps = args.new_tokens / walls[len(walls) // 2]
    print(
        f"# {args.preset}, batch 1, greedy, {args.new_tokens} new tokens; HF: {args.prompts} calls per "
        f"configuration after a warm-up (transformers {hf_speeds['transformers']}); engine: median of "
        f"{args.prompts} runs{f', steps compiled ({args.compile_mode})' if args.compile else ''}"
    )
    print(f"{'configuration':44s} {'tokens/s':>9s} {'engine / it':>12s}")
    for name in ("plain", "static_compiled"):
        speed = hf_speeds[name]
        note = (
            ""
            if name == "plain" or speed["compiled"]
            else "  (NOT compiled: transformers declined)"
        )
        print(
            f"{'HF generate() ' + name:44s} {speed['tokens_per_s']:9.1f} "
            f"{ours_tps / speed['tokens_per_s']:11.1f}x{note}"
        )
    print(f"{'engine graph decode':44s} {ours_tps:9.1f}")


def cmd_kimi(args) -> None:
    """kimi-k2-slice: decode ms per layer (graph), and the all-reduce sizes a token causes at TP."""
    import torch.distributed as dist

    from ncclprobe.engine.tp import apply_tp

    cfg = preset("kimi-k2-slice")
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    comm = Communicator(0, 1, dist.group.WORLD, issue_single_rank=True)
    model = fuse_projections(
        apply_tp(build_target(cfg, seed=0, device="cuda", dtype=torch.bfloat16), comm)
    )
    model.setup_caches(1, 512)
    captured: list = []
    graph, eager = step_times(model, 1, 1, 100, comm, captured)
    print(
        f"# kimi-k2-slice: {cfg.layers} layers ({cfg.moe.dense_layers} dense), "
        f"{weight_bytes(model) / 1e9:.1f} GB bf16; "
        f"{REPS_NOTE}"
    )
    print(
        f"decode graph {graph:.3f} ms = {graph / cfg.layers:.3f} ms per layer (eager {eager:.3f} ms)"
    )
    for (op, size, dtype, _phase, name), count in captured[0].items():
        print(
            f"{op} {size} bytes ({dtype}) x {count} per decode step, captured in graph {name} "
            f"(2 per layer: after attention, after the MLP/MoE)"
        )
    dist.destroy_process_group()


def cmd_overhead(args) -> None:
    """Instrumentation overhead: the same graph-captured run with and without phase timing and
    the collective trace (alternating, best of --repeats each, to keep drift out of the comparison)."""
    from ncclprobe.engine.build import build_draft, random_prompts
    from ncclprobe.engine.generate import Engine
    from ncclprobe.engine.graphs import CapturedGraphs, GraphedSteps
    from ncclprobe.engine.instrument import CollectiveTrace, PhaseTimer, events_needed
    from ncclprobe.engine.limits import max_positions

    model = build_target(preset(args.preset), seed=0, device="cuda", dtype=torch.bfloat16)
    draft = fuse_projections(build_draft(model, seed=0))
    fuse_projections(model)
    max_seq = max_positions(16, args.new_tokens, 3)
    model.setup_caches(1, max_seq)
    draft.setup_caches(1, max_seq)
    comm = Communicator()
    prompts = random_prompts(model.cfg.vocab, 1, 16, 0, "cuda")
    print(
        f"# {args.preset}, graphs all, batch 1, k 3, {args.new_tokens} tokens; best of {args.repeats} runs each, "
        f"alternating"
    )
    for mode in ("baseline", "speculative"):
        graphs = CapturedGraphs(
            model,
            draft,
            comm,
            mode="all",
            batches=1,
            k=3,
            speculative=mode == "speculative",
            compile=args.compile_mode if args.compile else "",
        )
        Engine(model, draft, k=3, steps=GraphedSteps(graphs)).loop(mode)(prompts, 8)
        labels = (
            ("off", "on", "timer only", "trace only", "host-clock timer")
            if args.parts
            else ("off", "on")
        )
        best = dict.fromkeys(labels, 0.0)
        for _ in range(args.repeats):
            for label in labels:
                timer = (
                    PhaseTimer("cuda", reserve=events_needed(args.new_tokens))
                    if label in ("on", "timer only")
                    else None
                )
                if label == "host-clock timer":  # perf_counter around each phase, no CUDA events
                    timer = PhaseTimer("cpu")
                trace = CollectiveTrace() if label in ("on", "trace only") else None
                engine = Engine(
                    model,
                    draft,
                    k=3,
                    steps=GraphedSteps(graphs, trace=trace, timer=timer),
                    timer=timer,
                )
                tps = args.new_tokens / engine.loop(mode)(prompts, args.new_tokens).wall_s
                best[label] = max(best[label], tps)
        drops = ", ".join(
            f"{label} {best[label]:.1f} ({100 * (best['off'] - best[label]) / best['off']:+.2f}% drop)"
            for label in labels[1:]
        )
        print(f"{mode}: {best['off']:.1f} tokens/s without instrumentation; {drops}")


def cmd_attention(args) -> None:
    """One layer's attention over a 2048-slot cache at llama-16l's head shape, in a CUDA graph:
    SDPA with enable_gqa against the query heads folded into rows (through each SDPA backend, and
    as a plain matmul-softmax-matmul, whole or split over the cache), eager and compiled; and
    the model's own `grouped_attention`, which picks per step the two fastest of these."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ncclprobe.engine.kv_cache import causal_mask
    from ncclprobe.engine.model import attention_group, grouped_attention
    from ncclprobe.engine.split_kv_attention import split_kv_attention

    heads, kv_heads, dim, slots, group = 32, 8, 128, args.slots, 4
    keys, values = (
        torch.randn(1, slots, kv_heads, dim, device="cuda", dtype=torch.bfloat16) for _ in range(2)
    )

    def folded(q):
        B, T = q.shape[:2]
        return (
            q.view(B, T, kv_heads, group, dim)
            .permute(0, 2, 1, 3, 4)
            .reshape(B, kv_heads, T * group, dim)
        )

    def unfold(y, B, T):
        return y.view(B, kv_heads, T, group, dim).transpose(1, 2).reshape(B, T, -1)

    def sdpa_folded(q, mask):
        y = torch.nn.functional.scaled_dot_product_attention(
            folded(q), keys.transpose(1, 2), values.transpose(1, 2), attn_mask=mask
        )
        return unfold(y, *q.shape[:2])

    def math_grouped(q, mask, chunks=1):
        """Grouped rows, matmul-softmax-matmul; with `chunks`, probs @ V runs as `chunks` partial
        products over slices of the cache, summed (split-KV: more blocks than 8 KV heads give)."""
        B, T = q.shape[:2]
        scores = (folded(q) @ keys.permute(0, 2, 3, 1)).float() * dim**-0.5
        probs = scores.masked_fill(~mask, float("-inf")).softmax(-1).to(q.dtype)
        if chunks == 1:
            y = probs @ values.transpose(1, 2)
        else:
            R = T * group
            parts = probs.view(B, kv_heads, R, chunks, slots // chunks).transpose(2, 3)
            y = (
                parts @ values.transpose(1, 2).reshape(B, kv_heads, chunks, slots // chunks, dim)
            ).sum(2)
        return unfold(y, B, T)

    def flex(q, pos, live_only: bool, block: int = 128):
        """flex_attention (flash-decoding kernel for short queries) with a block mask built from
        the position tensor inside the step: `live_only` visits only the KV blocks up to the
        query's position, so the step reads the live part of the cache, in one graph."""
        from torch.nn.attention.flex_attention import BlockMask, flex_attention

        blocks = slots // block
        counts = (pos[:, :1] // block + 1) if live_only else torch.full_like(pos[:, :1], blocks)
        block_mask = BlockMask.from_kv_blocks(
            counts.to(torch.int32).view(1, 1, 1),
            torch.arange(blocks, dtype=torch.int32, device=q.device).view(1, 1, 1, -1),
            BLOCK_SIZE=block,
            mask_mod=lambda b, h, q_idx, kv_idx: kv_idx <= pos[b, 0],
            seq_lengths=(1, slots),
            compute_q_blocks=False,
        )
        return flex_attention(
            q.transpose(1, 2),
            keys.transpose(1, 2),
            values.transpose(1, 2),
            block_mask=block_mask,
            enable_gqa=True,
        )

    compiled_flex = torch.compile(flex, dynamic=False)
    compiled_math = torch.compile(math_grouped, dynamic=False)
    compiled_old = torch.compile(
        lambda q, mask: torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2),
            keys.transpose(1, 2),
            values.transpose(1, 2),
            attn_mask=mask,
            enable_gqa=True,
        ),
        dynamic=False,
    )
    print(
        f"# attention of one layer, {heads} query / {kv_heads} KV heads x {dim}, cache {slots} slots, batch 1, "
        f"CUDA graph; {REPS_NOTE}"
    )
    for tokens in (1, 4):
        q = torch.randn(1, tokens, heads, dim, device="cuda", dtype=torch.bfloat16)
        pos = (512 + torch.arange(tokens, device="cuda"))[None]
        flat, grouped = causal_mask(pos, slots), causal_mask(pos, slots, group)
        variants = {
            "sdpa enable_gqa (old)": lambda: torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2),
                keys.transpose(1, 2),
                values.transpose(1, 2),
                attn_mask=flat,
                enable_gqa=True,
            ),
            "grouped, sdpa default": lambda: sdpa_folded(q, grouped),
            "grouped, matmul-softmax": lambda: math_grouped(q, grouped),
            "sdpa enable_gqa, compiled": lambda: compiled_old(q, flat),
            "grouped, matmul-softmax, compiled": lambda: compiled_math(q, grouped),
        }
        for chunks in (8, 16, 32):
            variants[f"grouped, split-KV {chunks}"] = lambda chunks=chunks: math_grouped(
                q, grouped, chunks
            )
            variants[f"grouped, split-KV {chunks}, compiled"] = lambda chunks=chunks: compiled_math(
                q, grouped, chunks
            )
        for backend in (
            SDPBackend.EFFICIENT_ATTENTION,
            SDPBackend.CUDNN_ATTENTION,
            SDPBackend.MATH,
        ):

            def pinned(backend=backend):
                with sdpa_kernel(backend):
                    return sdpa_folded(q, grouped)

            variants[f"grouped, sdpa {backend.name.lower()}"] = pinned
        if tokens == 1:
            for live_only in (False, True):
                variants[
                    f"flex_attention, compiled, {'live' if live_only else 'all'} KV blocks"
                ] = lambda live_only=live_only: compiled_flex(q, pos, live_only)
        own_mask = causal_mask(pos, slots, attention_group(tokens, heads, kv_heads))
        variants["model.grouped_attention, torch paths"] = lambda: grouped_attention(
            q, keys, values, own_mask
        )
        late = pos + slots - 512 - tokens  # the last slots of the cache: every chunk live
        for name, at in (("position 512", pos), (f"position {slots - tokens}", late)):
            variants[f"split-KV Triton kernel, {name}"] = lambda at=at: split_kv_attention(
                q, keys, values, at
            )
        for name, fn in variants.items():
            if args.only and not any(part in name for part in args.only):
                continue
            try:
                with torch.inference_mode():
                    graph = CapturedStep(name, fn, (), Communicator())
                    print(
                        f"T={tokens} {name}: {time_call_ms(graph.graph.replay, 'cuda') * 1000:.1f} us"
                    )
            except Exception as error:  # noqa: BLE001 - a variant this torch cannot run is reported, not fatal
                print(
                    f"T={tokens} {name}: not available ({type(error).__name__}: {str(error).splitlines()[0][:160]})"
                )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    steps = sub.add_parser("steps")
    steps.add_argument("--preset", default="llama-16l")
    steps.add_argument("--max-seq", type=int, default=2048)
    steps.add_argument("--position", type=int, default=512)
    steps.add_argument("--verify-tokens", type=int, nargs="+", default=[3, 4, 8])
    steps.add_argument("--no-fuse", action="store_true", help="separate q/k/v and gate/up GEMMs")
    steps.add_argument(
        "--blas", choices=("cublas", "cublaslt"), help="torch's preferred BLAS library"
    )
    steps.add_argument(
        "--inductor",
        action="append",
        default=[],
        metavar="OPTION=0|1",
        help="a boolean torch._inductor.config option, e.g. coordinate_descent_tuning=1",
    )
    steps.add_argument(
        "--attention",
        choices=("split-kv", "torch"),
        default="split-kv",
        help="the Triton split-KV kernel (the engine's default on GPUs) or the torch paths",
    )
    hf = sub.add_parser("hf")
    hf.add_argument("--preset", default="llama-16l")
    hf.add_argument("--new-tokens", type=int, default=256)
    hf.add_argument(
        "--prompts", type=int, default=3, help="timed calls per configuration (same prompt)"
    )
    sub.add_parser("kimi")
    overhead = sub.add_parser("overhead")
    overhead.add_argument("--preset", default="small")
    overhead.add_argument("--new-tokens", type=int, default=256)
    overhead.add_argument(
        "--repeats",
        type=int,
        default=10,
        help="runs per variant; 3 left the speculative figures within +-4%% run-to-run noise",
    )
    overhead.add_argument(
        "--parts",
        action="store_true",
        help="also the phase timer alone, the trace alone, and a host-clock timer (no CUDA events)",
    )
    for sub_parser in (steps, hf, overhead):
        sub_parser.add_argument(
            "--compile", action="store_true", help="torch.compile each step before capture"
        )
        sub_parser.add_argument(
            "--compile-mode", default="default", choices=("default", "max-autotune")
        )
    attention = sub.add_parser("attention")
    attention.add_argument("--slots", type=int, default=2048)
    attention.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="TEXT",
        help="time only the variants whose name contains TEXT (repeatable)",
    )
    args = parser.parse_args()
    {
        "steps": cmd_steps,
        "hf": cmd_hf,
        "kimi": cmd_kimi,
        "overhead": cmd_overhead,
        "attention": cmd_attention,
    }[args.cmd](args)


if __name__ == "__main__":
    main()
