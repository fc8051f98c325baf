"""Where a decode step's GPU time goes: the top kernels of one eager step (torch.profiler).

python examples/engine_profile.py --preset llama-16l
"""

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from ncclprobe.engine.build import build_target
from ncclprobe.engine.config import preset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", default="llama-16l")
    parser.add_argument("--tokens", type=int, default=1)
    args = parser.parse_args()
    model = build_target(preset(args.preset), seed=0, device="cuda", dtype=torch.bfloat16)
    model.setup_caches(1, 2048)
    ids = torch.zeros(1, args.tokens, dtype=torch.long, device="cuda")
    pos = (512 + torch.arange(args.tokens, device="cuda"))[None]
    with torch.inference_mode():
        for _ in range(3):
            model(ids, pos)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            model(ids, pos)
            torch.cuda.synchronize()
    print(
        prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=70)
    )


if __name__ == "__main__":
    main()
