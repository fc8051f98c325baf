"""Check, on a real GPU, the NCCL facts the knowledge table relies on, from NCCL's own log.

Each case runs in a fresh process (most NCCL variables are read once per process) with one NCCL
rank, NCCL_DEBUG=INFO and its own NCCL_DEBUG_FILE, performs a few all-reduces, and prints what
NCCL reported reading. One rank is enough for `set by environment` lines and for NCCL's refusal of
bad tokens; algorithm and protocol choices need two ranks.

Run: python examples/check_nccl_facts_gpu.py            (needs a CUDA GPU)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ncclprobe.nccl.recipes import NO_NVLS, proof_env, rank_log, rank_log_env

CASES = [
    # (name, environment, what the knowledge table claims)
    ("p2p_level_upper", {"NCCL_P2P_LEVEL": "SYS"}, "read: `NCCL_P2P_LEVEL set by environment to SYS`"),
    ("p2p_level_lower", {"NCCL_P2P_LEVEL": "sys"}, "lowercase is silently ignored (no set-by-environment line)"),
    ("proto_exclude_ll", {"NCCL_PROTO": "^LL"}, "accepted; ^ lists force-enable the protocols not excluded"),
    ("proto_unknown", {"NCCL_PROTO": "LL,Bogus"}, "2.24+: WARN and communicator creation fails"),
    ("algo_unknown", {"NCCL_ALGO": "Ring,Bogus"}, "2.24+: WARN and communicator creation fails"),
    ("subsys_without_env", {"NCCL_DEBUG_SUBSYS": "TUNING", "NCCL_PROTO": "LL"},
     "the `set by environment` lines vanish when ENV is not in the subsystem list"),
    ("per_comm_reread", {"NCCL_PROTO": "LL", "_SECOND_PROTO": "Simple", "NCCL_BUFFSIZE": "2097152",
                         "_SECOND_BUFFSIZE": "8388608"},
     "NCCL_PROTO is re-read for a second communicator; NCCL_BUFFSIZE keeps its first value"),
]

CHILD = r"""
import os, sys, torch, torch.distributed as dist
store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True)
torch.cuda.set_device(0)
dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=torch.device("cuda", 0))
x = torch.ones(1 << 20, device="cuda")
dist.all_reduce(x); torch.cuda.synchronize()
second = os.environ.get("_SECOND_PROTO")
if second:
    os.environ["NCCL_PROTO"] = second
    os.environ["NCCL_BUFFSIZE"] = os.environ["_SECOND_BUFFSIZE"]
    g = dist.new_group([0], device_id=torch.device("cuda", 0))
    dist.all_reduce(x, group=g); torch.cuda.synchronize()
dist.destroy_process_group()
print("COMPLETED")
"""


def run_case(name: str, env: dict, workdir: Path) -> dict:
    log_dir = workdir / name
    log_dir.mkdir()
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    child_env.update({**proof_env(), **rank_log_env(log_dir, rank=0), **NO_NVLS})
    child_env.update(env)
    proc = subprocess.run([sys.executable, "-c", CHILD], env=child_env, capture_output=True, text=True, timeout=180)
    log = rank_log(log_dir, 0)
    text = log.read_text(errors="replace") if log.exists() else ""
    return {"case": name, "env": env, "completed": "COMPLETED" in proc.stdout, "returncode": proc.returncode,
            "set_by_environment": [l.split("NCCL INFO ", 1)[-1] for l in text.splitlines() if "set by environment" in l],
            "warnings": [l.split("NCCL WARN ", 1)[-1] for l in text.splitlines() if "NCCL WARN" in l][:5],
            "matrix_lines": [l.split("NCCL INFO ", 1)[-1] for l in text.splitlines() if "Proto/Algo" in l][:3],
            "stderr_tail": proc.stderr.strip().splitlines()[-3:]}


def main() -> int:
    import torch
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 3
    print(f"# torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
          f"{torch.cuda.get_device_name(0)}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, env, claim in CASES:
            result = run_case(name, env, Path(tmp))
            result["claim"] = claim
            print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
