"""Record Hugging Face transformers `generate()` traces with their ground truth (issue 26 fixtures).

For each model shape and each kind of generation, two profiled runs (torch.profiler, CPU+CUDA
activities, no stacks, `record_shapes` on and off), each written as `hf_<shape>_<kind>_<shapes|
noshapes>.json.gz` (gzipped Chrome JSON, under 2 MB: trimmed by time span only if needed, said in
the truth) beside `....truth.json`: the config, tokens generated, every target and draft forward
call (input length, phase, host start and end on the Unix clock and on the trace's axis), the
accepted drafts per verify, and tokens/s measured without the profiler (median, min, max of
--repeats runs after warm-up). Kinds:
  plain   generate() with the dynamic cache, eager
  static  cache_implementation="static": transformers compiles the decode forward ("reduce-overhead",
          CUDA graphs) on a GPU; warmed up (compile and capture) before anything is measured
  assisted  assistant_model=<the shape's draft>, a constant --draft-tokens per cycle
  lookup  prompt_lookup_num_tokens=--lookup-tokens (draft-free speculative decoding)
Models are built from configs with seeded random weights (no download, no tokenizer); the draft is
a layer-skip model: the target's embedding, first --draft-layers layers, final norm and LM head.
Every run uses the same prompt, --prompt-len token ids made of a repeated 4-gram, so prompt lookup
finds n-grams to propose. How forwards are counted: forward hooks on the eager calls; under the
static cache the decode runs through transformers' compiled call, where hooks are traced into the
graph and replayed on the GPU (no Python runs), so the compiled callable is wrapped instead and the
hooks skip themselves while compiling (`torch.compiler.is_compiling()`); each call says "via".

  python examples/record_hf_traces.py --out DIR [--device cuda] [--shapes llama8l,qwen2-6l]
      [--only plain,assisted,lookup,static] [--new-tokens 48] [--prompt-len 16] [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hf_call_logs import AcceptLog, ForwardLog

SHAPES = {  # name: (model_type, config fields); the draft keeps all but the layer count
    "llama8l": (
        "llama",
        dict(
            hidden_size=1024,
            intermediate_size=2816,
            num_hidden_layers=8,
            num_attention_heads=16,
            num_key_value_heads=4,
            vocab_size=32000,
        ),
    ),
    "qwen2-6l": (
        "qwen2",
        dict(
            hidden_size=896,
            intermediate_size=4864,
            num_hidden_layers=6,
            num_attention_heads=14,
            num_key_value_heads=2,
            vocab_size=151936,
            tie_word_embeddings=True,
        ),
    ),
    "llama2l": (  # shallow enough that a whole 48-token plain run with shapes fits in 2 MB
        "llama",
        dict(
            hidden_size=1024,
            intermediate_size=2816,
            num_hidden_layers=2,
            num_attention_heads=16,
            num_key_value_heads=4,
            vocab_size=32000,
        ),
    ),
    "tiny-llama": (  # CPU checks only
        "llama",
        dict(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=512,
        ),
    ),
    "tiny-qwen2": (
        "qwen2",
        dict(
            hidden_size=64,
            intermediate_size=160,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=1,
            vocab_size=1024,
            tie_word_embeddings=True,
        ),
    ),
}
KINDS = ("plain", "assisted", "lookup", "static")  # static last: its compile is the slow part


def parse_args(argv=None) -> argparse.Namespace:
    """Every option checked here, before torch is imported: bad input costs one line and exit 2."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="a new or empty directory")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--shapes", default="llama8l,qwen2-6l", help=f"of {', '.join(SHAPES)}")
    parser.add_argument("--only", default=",".join(KINDS), help=f"of {', '.join(KINDS)}")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs without the profiler")
    parser.add_argument("--draft-layers", type=int, default=2)
    parser.add_argument("--draft-tokens", type=int, default=4, help="assisted: drafts per cycle")
    parser.add_argument("--lookup-tokens", type=int, default=4, help="prompt lookup: drafts")
    parser.add_argument("--seed", type=int, default=0)
    opts = parser.parse_args(argv)
    opts.shapes, opts.only = _names(parser, opts.shapes, SHAPES), _names(parser, opts.only, KINDS)
    for name in ("new_tokens", "prompt_len", "repeats", "draft_layers", "draft_tokens"):
        if getattr(opts, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if opts.lookup_tokens < 1 or opts.prompt_len < 4:
        parser.error("--lookup-tokens must be at least 1 and --prompt-len at least 4")
    if opts.out.exists() and (not opts.out.is_dir() or any(opts.out.iterdir())):
        parser.error(f"--out {opts.out} must be a new or empty directory")
    return opts


def _names(parser, text: str, allowed) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown or not names:
        parser.error(f"unknown {unknown or 'empty list'}; choose from {', '.join(allowed)}")
    return names


def build_models(shape: str, opts):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type, fields = SHAPES[shape]
    dtype = torch.bfloat16 if opts.device == "cuda" else torch.float32
    models = {}
    for role, layers in (("target", fields["num_hidden_layers"]), ("draft", opts.draft_layers)):
        config = AutoConfig.for_model(model_type, **{**fields, "num_hidden_layers": layers})
        torch.manual_seed(opts.seed)
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
        if role == "draft":  # layer skip: the target's own weights for every tensor the draft has
            missing, unexpected = model.load_state_dict(models["target"].state_dict(), strict=False)
            assert not missing, missing
        models[role] = model
    for model in models.values():
        model.to(opts.device, dtype).eval()
        model.generation_config.eos_token_id = None  # every run makes exactly --new-tokens
        model.generation_config.pad_token_id = 0
        model.generation_config.do_sample = False
    draft = models["draft"].generation_config
    draft.num_assistant_tokens, draft.num_assistant_tokens_schedule = opts.draft_tokens, "constant"
    draft.assistant_confidence_threshold = 0.0  # no early stop: every cycle drafts --draft-tokens
    return models["target"], models["draft"]


def prompt_ids(opts, vocab: int):
    """A repeated random 4-gram, `--prompt-len` ids long (seeded, ids >= 2)."""
    import torch

    generator = torch.Generator().manual_seed(opts.seed + 1)
    gram = torch.randint(2, vocab, (4,), generator=generator)
    return gram.repeat(opts.prompt_len // 4 + 1)[: opts.prompt_len].unsqueeze(0).to(opts.device)


def generate_options(kind: str, draft, opts) -> dict:
    options = dict(max_new_tokens=opts.new_tokens, do_sample=False)
    if kind == "static":
        options["cache_implementation"] = "static"
    elif kind == "assisted":
        options["assistant_model"] = draft
    elif kind == "lookup":
        options["prompt_lookup_num_tokens"] = opts.lookup_tokens
    return options


def record_kind(shape: str, kind: str, target, draft, prompt, opts) -> list[dict]:
    """Warm up, time without the profiler, then the two profiled runs; returns the truth docs."""
    import torch

    sync = torch.cuda.synchronize if opts.device == "cuda" else (lambda: None)
    options = generate_options(kind, draft, opts)

    def generate():
        with torch.inference_mode():
            out = target.generate(prompt, **options)
        sync()
        made = out.shape[1] - prompt.shape[1]
        if made != opts.new_tokens:
            raise RuntimeError(f"{kind}: generated {made} tokens, not {opts.new_tokens}")
        return out

    # the hooks stay on from the warm-up on, so the compiled graph is traced with them (they
    # skip themselves while compiling) and adding them later cannot trigger a recompile
    logs = {"target": ForwardLog(target, "target"), "draft": ForwardLog(draft, "draft")}
    try:
        return _record_runs(shape, kind, target, draft, prompt, opts, generate, logs)
    finally:
        for log in logs.values():
            log.remove()


def _record_runs(shape, kind, target, draft, prompt, opts, generate, logs) -> list[dict]:
    import torch
    from torch.profiler import ProfilerActivity, profile
    from trace_recording import export_trace, say, spread, write_json

    started = time.perf_counter()
    for _ in range(3 if kind == "static" else 1):  # static: compile, cudagraph warm-up, record
        output = generate()
    warm_s = time.perf_counter() - started
    speeds = []
    for _ in range(opts.repeats):
        t0 = time.perf_counter()
        generate()
        speeds.append(opts.new_tokens / (time.perf_counter() - t0))
    tps = spread(speeds)
    say(f"{shape} {kind}: warm-up {warm_s:.1f} s, {tps['median']:.1f} tok/s median")
    activities = [ProfilerActivity.CPU]
    if opts.device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    docs = []
    for shapes in (True, False):
        for log in logs.values():
            log.calls, log.recording = [], True
        accepts = AcceptLog()
        try:
            with profile(activities=activities, record_shapes=shapes, with_stack=False) as prof:
                profiled = generate()
        finally:
            accepts.remove()
            for log in logs.values():
                log.recording = False
        name = f"hf_{shape}_{kind}_{'shapes' if shapes else 'noshapes'}"
        trace = export_trace(prof, opts.out / f"{name}.json.gz")
        doc = truth_doc(shape, kind, shapes, target, logs, accepts.accepted, trace, opts)
        doc["tokens_per_s_unprofiled"] = tps
        doc["warmup_s"] = warm_s
        doc["same_tokens_as_timed_runs"] = bool(torch.equal(profiled, output))
        write_json(opts.out / f"{name}.truth.json", doc)
        say(f"  {name}: {trace['bytes'] / 1e6:.2f} MB, {summary(doc)}")
        docs.append(doc)
    return docs


def truth_doc(shape, kind, shapes, target, logs, accepted, trace, opts) -> dict:
    from trace_recording import trace_us, versions

    base = trace["baseTimeNanoseconds"]
    forwards = {}
    for role, log in logs.items():
        calls = []
        for i, call in enumerate(log.calls):
            calls.append(
                {
                    "i": i,
                    "phase": phase(role, kind, i, call["input_len"], opts.prompt_len),
                    **call,
                    "start_trace_us": trace_us(call["start_ns"], base),
                    "end_trace_us": trace_us(call.get("end_ns", call["start_ns"]), base),
                }
            )
        forwards[role] = calls
    if trace["trim"]:
        cut = trace["trim"]["kept_until_us"]
        for call in forwards["target"] + forwards["draft"]:
            call["in_trimmed_trace"] = call["end_trace_us"] <= cut
    phases = {}
    for call in forwards["target"]:
        phases[call["phase"]] = phases.get(call["phase"], 0) + 1
    verifies = [c for c in forwards["target"] if kind in ("assisted", "lookup")]
    return {
        "what": f"transformers generate(), {kind}, shape {shape}, record_shapes={shapes}",
        "kind": kind,
        "shape": shape,
        "record_shapes": shapes,
        "device": opts.device,
        "model_config": target.config.to_dict(),
        "draft": {
            "layers": opts.draft_layers,
            "how": "layer skip: the target's embedding, first layers, final norm and LM head",
        }
        if kind == "assisted"
        else None,
        "dtype": str(next(target.parameters()).dtype),
        "prompt_len": opts.prompt_len,
        "new_tokens": opts.new_tokens,
        "batch": 1,
        "greedy": True,
        "generate_options": {
            k: v for k, v in generate_options(kind, None, opts).items() if k != "assistant_model"
        },
        "draft_tokens_per_cycle": opts.draft_tokens if kind == "assisted" else None,
        "lookup_tokens": opts.lookup_tokens if kind == "lookup" else None,
        "target_forwards": len(forwards["target"]),
        "draft_forwards": len(forwards["draft"]),
        "target_phases": phases,
        "compiled_calls": sum(1 for c in forwards["target"] if c["via"] == "compiled call"),
        "accepted_per_verify": accepted if verifies else None,
        "drafted_per_verify": drafted(verifies, opts.prompt_len) if verifies else None,
        "tokens_check": tokens_check(kind, forwards["target"], accepted, opts),
        "forwards": forwards,
        "trace": trace,
        "clock": "start_ns/end_ns: time.time_ns() on the host; *_trace_us = (ns - "
        "baseTimeNanoseconds) / 1000, the trace's ts axis",
        "versions": versions(),
        "recorded_by": "examples/record_hf_traces.py " + " ".join(sys.argv[1:]),
    }


def drafted(target_calls: list[dict], prompt_len: int) -> list[int]:
    """Drafts each target forward verified: the first carries the prompt besides its drafts."""
    return [target_calls[0]["input_len"] - prompt_len] + [
        c["input_len"] - 1 for c in target_calls[1:]
    ]


def phase(role: str, kind: str, i: int, input_len: int, prompt_len: int) -> str:
    """prefill, decode (1 token), verify (k drafts + 1); a draft's calls are draft_prefill, draft.
    Assisted generation's first target forward is the prompt plus the first drafts."""
    if role == "draft":
        return "draft_prefill" if i == 0 else "draft"
    if i == 0:
        return "prefill" if input_len <= prompt_len else "prefill+verify"
    return "verify" if kind in ("assisted", "lookup") else "decode"


def tokens_check(kind: str, target_calls: list[dict], accepted: list[int], opts) -> dict:
    """Do the forwards account for the tokens made? plain/static: 1 prefill + (N-1) decodes;
    speculative: each target forward commits its accepted drafts + 1."""
    if kind in ("plain", "static"):
        expected = 1 + (opts.new_tokens - 1)
        return {"expected_forwards": expected, "ok": len(target_calls) == expected}
    committed = sum(a + 1 for a in accepted)
    return {
        "committed_by_verifies": committed,
        "verifies": len(accepted),
        "ok": committed == opts.new_tokens and len(accepted) == len(target_calls),
    }


def summary(doc: dict) -> str:
    acc = doc["accepted_per_verify"]
    extra = f", accepted {sum(acc)} drafts in {len(acc)} verifies" if acc is not None else ""
    return (
        f"{doc['target_forwards']} target forwards {doc['target_phases']}, "
        f"{doc['draft_forwards']} draft, {doc['compiled_calls']} compiled{extra}, "
        f"check {'ok' if doc['tokens_check']['ok'] else 'FAILED'}"
    )


def main(argv=None) -> int:
    opts = parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from trace_recording import say, write_json

    opts.out.mkdir(parents=True, exist_ok=True)
    failures, rows = [], []
    for shape in opts.shapes:
        target, draft = build_models(shape, opts)
        prompt = prompt_ids(opts, target.config.vocab_size)
        say(f"{shape}: target and draft built on {opts.device}")
        for kind in opts.only:
            try:
                rows += [
                    summary_row(d) for d in record_kind(shape, kind, target, draft, prompt, opts)
                ]
            except Exception as exc:  # one kind failing must not lose the others
                failures.append(f"{shape} {kind}: {type(exc).__name__}: {exc}"[:600])
                say(f"FAILED {failures[-1]}")
        del target, draft
    write_json(opts.out / "hf_summary.json", {"recordings": rows, "failures": failures})
    for row in rows:
        print(" ".join(f"{k}={v}" for k, v in row.items()))
    return 1 if failures else 0


def summary_row(doc: dict) -> dict:
    return {
        "shape": doc["shape"],
        "kind": doc["kind"],
        "shapes": doc["record_shapes"],
        "tok_s": round(doc["tokens_per_s_unprofiled"]["median"], 1),
        "target_fw": doc["target_forwards"],
        "draft_fw": doc["draft_forwards"],
        "accepted": sum(doc["accepted_per_verify"] or []),
        "MB": round(doc["trace"]["bytes"] / 1e6, 2),
        "ok": doc["tokens_check"]["ok"],
    }


if __name__ == "__main__":
    sys.exit(main())
