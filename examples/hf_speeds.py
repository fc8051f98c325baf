"""Hugging Face `generate()` speed in its plain configuration (dynamic cache, eager) and its fastest
one (static cache, the decoding forward compiled in "reduce-overhead" mode, i.e. CUDA graphs): the
two references our engine's tokens/s is quoted against (examples/engine_bench.py hf,
examples/smollm_bench.py). Greedy, batch 1, exactly `new_tokens` per prompt; a first call per
configuration warms up (and compiles) outside the timing."""

from __future__ import annotations

import time

import torch


def generate_speeds(model, prompts: list[torch.Tensor], new_tokens: int, device: str) -> dict:
    """{"plain": {...}, "static_compiled": {...}, "transformers": version}: tokens/s over `prompts`
    one after another, the warm-up time, and whether transformers really compiled the forward."""
    import transformers

    results = {}
    for name, extra in {"plain": {}, "static_compiled": {"cache_implementation": "static"}}.items():
        options = dict(
            max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, **extra
        )
        if name == "static_compiled":
            try:  # transformers >= 4.48 compiles the decoding forward itself when the cache is static
                options["compile_config"] = transformers.CompileConfig(
                    fullgraph=True, mode="reduce-overhead"
                )
            except AttributeError:
                model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        started = time.perf_counter()
        model.generate(prompts[0], **options)  # warm-up: compiles here
        _sync(device)
        warm_s = time.perf_counter() - started
        started = time.perf_counter()
        for prompt in prompts:
            model.generate(prompt, **options)
        _sync(device)
        wall = time.perf_counter() - started
        results[name] = {
            "tokens_per_s": new_tokens * len(prompts) / wall,
            "prompts": len(prompts),
            "warmup_s": warm_s,
            "compiled": getattr(model, "_compiled_call", None) is not None,
        }
    results["transformers"] = transformers.__version__
    return results


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
