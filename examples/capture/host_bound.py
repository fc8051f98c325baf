"""A step loop the GPU (or, on the CPU, the model) waits on: after each forward of a small MLP, a
`postprocess` reads scores back one `.item()` at a time (a host sync per element on a GPU), as
draft preprocessing or a stopping check written in Python does. Records torch.profiler with
`with_stack=True` and `record_shapes=True` over --steps steps, each marked `ProfilerStep#N`, into
--output (a .json.gz trace), so `ncclprobe diagnose --profile` can name the host call.

  python examples/capture/host_bound.py --output host_bound.json.gz [--device cuda] [--items 4096]
"""

from __future__ import annotations

import argparse
import sys


def postprocess(scores, items: int) -> int:
    """Count the positive scores, reading each back to the host: one `.item()` (a sync) each."""
    kept = 0
    for i in range(items):
        if scores[i].item() > 0:
            kept += 1
    return kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--items", type=int, default=4096)
    parser.add_argument("--width", type=int, default=512)
    args = parser.parse_args()
    import torch

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = torch.nn.Sequential(
        torch.nn.Linear(args.width, args.width),
        torch.nn.GELU(),
        torch.nn.Linear(args.width, args.width),
    ).to(device)
    x = torch.randn(64, args.width, device=device)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.no_grad():
        for _ in range(args.warmup):
            postprocess(model(x).flatten(), args.items)
        profiler = torch.profiler.profile(
            activities=activities, record_shapes=True, with_stack=True
        )
        profiler.start()
        for step in range(args.steps):
            with torch.profiler.record_function(f"ProfilerStep#{step}"):
                scores = model(x).flatten()
                postprocess(scores, args.items)
        if device.type == "cuda":
            torch.cuda.synchronize()
        profiler.stop()
    profiler.export_chrome_trace(args.output)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
