"""The interface every collective implements, modelled on nccl-tests' `testColl`.

A collective knows four things and nothing about timing or processes:
  - bytes accounting: how many elements each rank holds for a message of `size_bytes`, and the
    bytes S that algbw = S / t counts (nccl-tests `*GetBw`);
  - the busbw factor that makes busbw comparable to link bandwidth (docs/METRICS.md);
  - exact inputs: small integers, so the result is exact in float32, bfloat16 and float16, and
    the analytic expected output element by element;
  - how to launch it on a process group, in place or out of place.

Inputs are `(i + rank) % PATTERN + 1`, integers 1..PATTERN. A sum over n ranks is at most
PATTERN * n, exact in bfloat16 (8-bit mantissa: integers up to 256) for n <= 36.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

PATTERN = 7
DTYPES = ("float32", "bfloat16", "float16")


def torch_dtype(name: str):
    import torch
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def element_size(dtype: str) -> int:
    return {"float32": 4, "bfloat16": 2, "float16": 2}[dtype]


def crafted_input(count: int, rank: int, dtype, device):
    """Rank `rank`'s exact input: element i is (i + rank) % PATTERN + 1."""
    import torch
    index = torch.arange(count, device=device, dtype=torch.int64)
    return ((index + rank) % PATTERN + 1).to(dtype)


class Collective(ABC):
    name: str = ""

    def count(self, size_bytes: int, dtype: str, nranks: int) -> int:
        """Elements per rank buffer for a message of `size_bytes` (at least one element)."""
        return max(1, size_bytes // element_size(dtype))

    def algbw_bytes(self, count: int, dtype: str, nranks: int) -> int:
        """S in algbw = S / t (nccl-tests' convention for this collective)."""
        return count * element_size(dtype)

    @abstractmethod
    def busbw_factor(self, nranks: int) -> float:
        """busbw = algbw * factor."""

    @abstractmethod
    def make_buffers(self, count: int, rank: int, nranks: int, dtype, device):
        """(input, output) tensors holding the crafted input; output is input when in place."""

    @abstractmethod
    def expected(self, count: int, rank: int, nranks: int, dtype, device):
        """The exact output rank `rank` must hold after one collective on crafted inputs."""

    @abstractmethod
    def launch(self, inp, out, group, in_place: bool) -> None:
        """Issue the collective once on `group`."""

    def bandwidths(self, size_bytes: int, dtype: str, nranks: int, time_us: float | None):
        """(algbw_gbps, busbw_gbps) for a measured time; None without a time."""
        if not time_us:
            return None, None
        algbw = self.algbw_bytes(self.count(size_bytes, dtype, nranks), dtype, nranks) / (time_us * 1e3)
        return algbw, algbw * self.busbw_factor(nranks)
