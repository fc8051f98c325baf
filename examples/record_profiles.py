"""Record small PyTorch profiler traces on one GPU and run `ncclprobe diagnose` on each (issue 15).

Traces (gzipped Chrome JSON, each meant to stay under 2 MB), all written under OUT:
- our engine, `run-engine --profile` with `--graphs decode` (the seed case: decode captured, verify
  eager) and `--graphs all` (its fix), speculative and baseline, one rank with its all-reduces issued
  (`--single-rank-collectives`, so NCCL kernels appear eager and graph-replayed);
- Hugging Face transformers, an engine nobody here wrote: plain `generate()` (dynamic cache),
  static-cache `generate()` with the forward compiled in "reduce-overhead" mode (CUDA graphs), and
  assisted generation (speculative decoding with a small assistant model). Random weights unless
  --checkpoint DIR (a local Llama checkpoint) is given; no download is attempted. A step marker
  `ProfilerStep#N` is opened at every generation step (a stopping-criteria callback), the markers
  torch.profiler's own schedule writes.
Then `ncclprobe diagnose` on each, and a table last: trace, size, diagnose's exit code, top finding.

  python examples/record_profiles.py OUT [--checkpoint DIR] [--tokens 24]

Needs a CUDA GPU; about 3-6 minutes on an H200 (the compiled static-cache run compiles first).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


def sh(args: list[str], **kw) -> subprocess.CompletedProcess:
    print("$", " ".join(args), file=sys.stderr, flush=True)
    return subprocess.run(args, capture_output=True, text=True, **kw)


def engine_traces(out: Path, tokens: int, preset: str) -> list[tuple[str, list[str]]]:
    """run-engine --profile for --graphs decode and all; returns (name, diagnose args) per case."""
    cases = []
    for graphs in ("decode", "all"):
        pdir, trace = out / f"engine-graphs-{graphs}", out / f"engine-graphs-{graphs}.trace.json"
        proc = sh(
            [
                sys.executable,
                "-m",
                "ncclprobe",
                "-q",
                "run-engine",
                "--preset",
                preset,
                "--graphs",
                graphs,
                "--new-tokens",
                str(tokens),
                "--single-rank-collectives",
                "--profile",
                str(pdir),
                "--trace",
                str(trace),
            ]
        )
        if proc.returncode not in (0, 1):
            print(
                f"run-engine --graphs {graphs} failed: {proc.stderr.strip()[-400:]}",
                file=sys.stderr,
            )
            continue
        spec, base = (
            pdir / "untuned-speculative-rank0.trace.json.gz",
            pdir / "untuned-baseline-rank0.trace.json.gz",
        )
        cases.append(
            (
                f"engine --graphs {graphs} (profiles)",
                ["--profile", str(spec), "--baseline-profile", str(base)],
            )
        )
        cases.append((f"engine --graphs {graphs} (its trace)", ["--trace", str(trace)]))
    return cases


def step_markers():
    """A stopping criterion that never stops: it closes the previous `ProfilerStep#N` annotation and
    opens the next at every generation step (every cycle in assisted generation), so the trace has
    one marker per step."""
    import torch
    from transformers import StoppingCriteria

    class StepMarkers(StoppingCriteria):
        def __init__(self):
            self.step, self.current = 0, None

        def __call__(self, input_ids, scores, **kwargs):
            self.close()
            self.current = torch.profiler.record_function(f"ProfilerStep#{self.step}")
            self.current.__enter__()
            self.step += 1
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

        def close(self):
            if self.current is not None:
                self.current.__exit__(None, None, None)
                self.current = None

    return StepMarkers()


def hf_models(checkpoint: str | None, device: str):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if checkpoint:
        target = AutoModelForCausalLM.from_pretrained(
            checkpoint, torch_dtype=torch.bfloat16, local_files_only=True
        )
    else:
        target = LlamaForCausalLM(
            LlamaConfig(
                hidden_size=1024,
                intermediate_size=2816,
                num_hidden_layers=8,
                num_attention_heads=16,
                num_key_value_heads=4,
                vocab_size=32000,
            )
        )
    vocab = target.config.vocab_size
    assistant = LlamaForCausalLM(
        LlamaConfig(
            hidden_size=256,
            intermediate_size=704,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=vocab,
        )
    )
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    target = target.to(device, dtype).eval()
    assistant = assistant.to(device, dtype).eval()
    for model in (target, assistant):
        model.generation_config.pad_token_id = 0
        model.generation_config.eos_token_id = None
    return target, assistant


def hf_profile(path: Path, generate, device: str) -> None:
    """Profile one generate() call (after an untimed one: compilation and capture stay out)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from transformers import StoppingCriteriaList

    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    generate(StoppingCriteriaList())
    sync()
    markers = step_markers()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, record_shapes=True) as prof:
        generate(StoppingCriteriaList([markers]))
        markers.close()
        sync()
    plain = path.with_suffix("")
    prof.export_chrome_trace(str(plain))
    with open(plain, "rb") as src, gzip.open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    plain.unlink()


def hf_traces(
    out: Path, tokens: int, checkpoint: str | None, device: str = "cuda"
) -> list[tuple[str, list[str]]]:
    import torch

    target, assistant = hf_models(checkpoint, device)
    ids = torch.randint(1, target.config.vocab_size - 1, (1, 32), device=device)
    common = dict(max_new_tokens=tokens, do_sample=False)  # no EOS token: every run makes `tokens`
    paths = {}

    def record(name, **kw):
        path = out / f"hf-{name}.trace.json.gz"
        try:
            with torch.inference_mode():
                hf_profile(
                    path,
                    lambda crit: target.generate(ids, stopping_criteria=crit, **common, **kw),
                    device,
                )
            paths[name] = path
        except Exception as exc:  # one variant failing must not lose the others
            print(f"hf {name}: {type(exc).__name__}: {exc}"[:400], file=sys.stderr)

    record("plain")
    eager_forward = target.forward
    try:
        if device == "cuda":  # "reduce-overhead" replays CUDA graphs: a GPU-only mode
            target.forward = torch.compile(target.forward, mode="reduce-overhead", fullgraph=True)
            record("static-compiled", cache_implementation="static")
    except Exception as exc:
        print(f"hf static-compiled: {exc}"[:400], file=sys.stderr)
    target.forward = eager_forward
    if "static-compiled" not in paths:
        record("static", cache_implementation="static")
    assistant.generation_config.num_assistant_tokens = 3
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    record("assisted", assistant_model=assistant)
    cases = [(f"hf {name}", ["--profile", str(path)]) for name, path in paths.items()]
    base = paths.get("static-compiled") or paths.get("static")
    if "assisted" in paths and base:
        cases.append(
            (
                "hf assisted vs static",
                ["--profile", str(paths["assisted"]), "--baseline-profile", str(base)],
            )
        )
    if "plain" in paths and base:
        cases.append(
            (
                "hf plain vs static",
                ["--profile", str(paths["plain"]), "--baseline-profile", str(base)],
            )
        )
    return cases


def diagnose(name: str, args: list[str], out: Path) -> dict:
    proc = sh([sys.executable, "-m", "ncclprobe", "-q", "diagnose", *args, "--format", "json"])
    safe = name.replace(" ", "_").replace("(", "").replace(")", "").replace("/", "-")
    (out / f"diagnose-{safe}.txt").write_text(
        sh([sys.executable, "-m", "ncclprobe", "-q", "diagnose", *args]).stdout
    )
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"name": name, "rc": proc.returncode, "top": proc.stderr.strip()[-200:]}
    top = doc["findings"][0] if doc["findings"] else None
    return {
        "name": name,
        "rc": proc.returncode,
        "top": f"{top['rule']}: {top['title']}" if top else "no findings",
        "ruled_out": [r["rule"] for r in doc["ruled_out"]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument(
        "--checkpoint",
        help="a local Hugging Face Llama checkpoint directory (default: random weights)",
    )
    parser.add_argument("--tokens", type=int, default=24, help="tokens generated per run")
    parser.add_argument("--preset", default="small", help="our engine's model preset")
    parser.add_argument("--skip-hf", action="store_true")
    parser.add_argument("--skip-engine", action="store_true")
    parser.add_argument(
        "--device", default="cuda", help="cuda; cpu only to try the Hugging Face part (no graphs)"
    )
    opts = parser.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    cases = [] if opts.skip_engine else engine_traces(out, opts.tokens, opts.preset)
    if not opts.skip_hf:
        cases += hf_traces(out, opts.tokens, opts.checkpoint, opts.device)
    rows = [diagnose(name, args, out) for name, args in cases]
    (out / "summary.json").write_text(json.dumps(rows, indent=1))
    sizes = {
        str(p.relative_to(out)): round(p.stat().st_size / 1e6, 2)
        for p in sorted(out.rglob("*.json.gz"))
    }
    print(
        f"# {len(rows)} diagnoses in {time.perf_counter() - started:.0f} s; traces (MB gzipped): {sizes}"
    )
    print(f"{'case':<34} {'rc':>3}  top finding")
    for row in rows:
        print(f"{row['name']:<34} {row['rc']:>3}  {row['top'][:150]}")
    big = [name for name, mb in sizes.items() if mb > 2.0]
    if big:
        print(f"# over 2 MB (rerun with fewer --tokens before committing): {', '.join(big)}")


if __name__ == "__main__":
    main()
