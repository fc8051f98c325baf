"""What a result needs to be reproducible: versions, GPUs, host and the NCCL_*/CUDA_* environment.

Every results file, trace and report header carries `collect()`. Unknowns are None, never guessed;
the command line and environment are masked (`ncclprobe.secrets`), since files outlive the shell.
"""

from __future__ import annotations

import datetime as _dt
import glob
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Mapping

from ncclprobe import __version__
from ncclprobe.secrets import mask_argv, mask_env

ENV_PREFIXES = ("NCCL_", "CUDA_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "NVSHMEM_")


def relevant_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {k: v for k, v in sorted(env.items()) if k.startswith(ENV_PREFIXES)}


# What a GPU driver puts in /dev: NVIDIA's device files, WSL2's GPU paravirtualisation, ROCm's
# kernel driver. Without any of them no CUDA (or HIP) device can be visible to torch.
GPU_DEVICE_NODES = ("/dev/nvidia[0-9]*", "/dev/dxg", "/dev/kfd")


def gpu_device_visible() -> bool:
    """Whether this machine shows a GPU device node. False means torch cannot see a GPU, learnt
    without importing torch (12-14 s on a loaded 2-core machine, against microseconds here), so a
    usage error or a CPU-only path answers at once; True means only torch can tell."""
    return any(glob.glob(pattern) for pattern in GPU_DEVICE_NODES)


def nccl_version_string() -> str | None:
    """NCCL's version as torch was built against it ("2.28.9"), or None without NCCL."""
    if not gpu_device_visible():
        return None
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        version = torch.cuda.nccl.version()
    except Exception:
        return None
    return ".".join(str(part) for part in version) if isinstance(version, tuple) else str(version)


def driver_version() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if out.returncode == 0 and lines else None


def gpu_names() -> list[str]:
    if not gpu_device_visible():
        return []
    try:
        import torch

        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:
        return []


def compute_capabilities() -> list[int] | None:
    """Each visible GPU's compute capability as major*10+minor (86 for an RTX 3090); None without CUDA."""
    if not gpu_device_visible():
        return None
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return [
            major * 10 + minor
            for major, minor in (
                torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())
            )
        ]
    except Exception:
        return None


def collect(argv: list[str] | None = None) -> dict:
    import torch

    return {
        "argv": mask_argv(
            sys.argv if argv is None else argv
        ),  # files outlive the shell: no secrets
        "started_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "versions": {
            "ncclprobe": __version__,
            "python": platform.python_version(),
            "torch": torch.__version__,
            "nccl": nccl_version_string(),
            "cuda": torch.version.cuda,
            "driver": driver_version(),
        },
        "gpus": gpu_names(),
        "env": mask_env(relevant_env()),
    }
