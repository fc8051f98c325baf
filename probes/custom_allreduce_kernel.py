"""One-shot and two-shot all-reduce over buffers that every rank maps (CUDA IPC), in Triton.

The design follows the facts of vLLM's `csrc/custom_all_reduce.cuh` (its counter barrier) and of
torch's symmetric memory (a signal area in front of the data), written here from scratch:

Workspace (one per rank, every rank maps every other's; `layout` gives the byte offsets):
  counters  int32[MAX_BLOCKS]                 this rank's barrier count per block (local only)
  status    int32                             set when a barrier gave up waiting (see below)
  flags     int32[2][MAX_BLOCKS][MAX_RANKS]   flags[parity][block][src]: written by rank src
  data      the input, copied in by the kernel itself (so one launch does the whole call)
  tmp       two-shot only: this rank's reduced partition

Barrier (per block b, pairwise with block b of every rank, so no kernel needs all its blocks
resident at once): the count of b goes up by one to `val` (every warp reads the count, a CTA barrier,
then one thread stores it: no warp may read the new count and signal one too far); a CTA barrier orders every thread's
writes before the signal; rank r stores `val` into flags[val % 2][b][r] of every rank (a plain
release store at system scope: PCIe carries it without peer atomics), then spins on its own
flags[val % 2][b][p] until each equals `val` (acquire, local memory). Counts only grow, so nothing
is reset and a CUDA graph replays the same kernels forever; two parities because a rank that is
one barrier ahead writes the next count into the other slot (parity = count & 1), never over a flag its peer has not
read yet.

One-shot: copy in, barrier, every rank sums all ranks' data (same order everywhere, so every rank
holds the same bits), barrier (nobody copies the next input over data a peer still reads).
Two-shot: copy in, barrier, rank r sums partition r into its tmp, barrier, every rank gathers all
partitions from the tmps. No third barrier: a peer's next call reaches its first barrier only after
its whole previous kernel ended, and the data a peer reads is never rewritten before that.

Block b only ever reads positions that block b of the other ranks wrote (the grid-stride pattern
is the same relative to each partition), which is why the per-block barrier is enough.

Bounded waits: a barrier gives up after `max_spins` polls per peer, sets its bit in `status`
(PHASES) and lets the kernel finish, so a missing peer becomes an error the host reads, never a GPU that
spins forever.

The same kernels run under Triton's CPU interpreter (TRITON_INTERPRET=1) on host shared memory,
which is how CI tests them; only the remote flag store differs there (an atomic exchange, the
interpreter has no inline assembly).
"""

from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl

MAX_BLOCKS = 32
MAX_RANKS = 8
BLOCK = 1024  # elements per block per step
ALIGN_ELEMENTS = 16  # two-shot partitions start on 16-element boundaries
ONE_SHOT, TWO_SHOT = "one-shot", "two-shot"
PHASES = {1: "the first barrier (after the copy-in)", 2: "the second barrier"}  # status bits

_COUNTERS = tl.constexpr(0)
_STATUS = tl.constexpr(4 * MAX_BLOCKS)
_FLAGS = tl.constexpr(4 * MAX_BLOCKS + 128)
_SLOTS = tl.constexpr(MAX_BLOCKS * MAX_RANKS)
_NRANKS = tl.constexpr(MAX_RANKS)
SIGNAL_BYTES = 4096
assert 4 * MAX_BLOCKS + 128 + 4 * 2 * MAX_BLOCKS * MAX_RANKS <= SIGNAL_BYTES


@dataclass(frozen=True)
class Layout:
    """Byte offsets inside one rank's workspace for messages of up to `max_bytes`."""

    max_bytes: int

    @property
    def status(self) -> int:
        return int(_STATUS)

    @property
    def data(self) -> int:
        return SIGNAL_BYTES

    @property
    def tmp(self) -> int:
        return SIGNAL_BYTES + _round_up(self.max_bytes, 256)

    @property
    def total(self) -> int:
        return self.tmp + _round_up(self.max_bytes, 256)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def partition(n: int, world: int) -> int:
    """Elements per two-shot partition: n split over the ranks, rounded up to ALIGN_ELEMENTS."""
    return _round_up(-(-n // world), ALIGN_ELEMENTS)


def grid(
    algorithm: str, n: int, world: int, max_blocks: int = MAX_BLOCKS, block: int = BLOCK
) -> int:
    """Blocks to launch: enough for one step over the range each block strides, at most max_blocks."""
    span = n if algorithm == ONE_SHOT else partition(n, world)
    return max(1, min(max_blocks, MAX_BLOCKS, -(-span // block)))


@triton.jit
def _base(bases, rank, offset):
    return tl.load(bases + rank) + offset


@triton.jit
def _region(bases, rank, offset, dtype: tl.constexpr):
    # workspaces come from cuMemAlloc (256-byte aligned) and every region offset is a multiple of
    # 256: saying so lets the compiler use 16-byte loads and stores
    return tl.multiple_of(_base(bases, rank, offset).to(tl.pointer_type(dtype)), 16)


@triton.jit
def _put(flag, val, INTERPRET: tl.constexpr):
    if INTERPRET:
        tl.atomic_xchg(flag, val, sem="release", scope="sys")
    else:
        tl.inline_asm_elementwise(
            "st.release.sys.global.b32 [$1], $2;\n\tmov.u32 $0, 0;",
            "=r,l,r",
            [flag, val],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )


@triton.jit
def _barrier(bases, rank, max_spins, phase, WORLD: tl.constexpr, INTERPRET: tl.constexpr):
    block = tl.program_id(0)
    own = tl.load(bases + rank)
    counter = (own + _COUNTERS + block * 4).to(tl.pointer_type(tl.int32))
    val = tl.load(counter) + 1
    # every warp reads the count before it is stored: the store is one thread's, and a warp that read after
    # it would signal count + 1, which a peer takes for the next barrier's signal and reads data not yet written
    tl.debug_barrier()
    tl.store(counter, val)
    slot = (val & 1) * _SLOTS + block * _NRANKS
    tl.debug_barrier()  # every thread's writes of this phase come before the signal
    for peer in tl.static_range(WORLD):
        flag = (_base(bases, peer, _FLAGS) + (slot + rank) * 4).to(tl.pointer_type(tl.int32))
        _put(flag, val, INTERPRET)
    for peer in tl.static_range(WORLD):
        mine = (own + _FLAGS + (slot + peer) * 4).to(tl.pointer_type(tl.int32))
        spins = 0
        while (tl.atomic_add(mine, 0, sem="acquire", scope="sys") != val) & (spins < max_spins):
            spins += 1
        if spins >= max_spins:
            tl.atomic_or((own + _STATUS).to(tl.pointer_type(tl.int32)), phase)
    tl.debug_barrier()  # nobody reads peer data before the signals arrived


# Triton specialises an integer argument equal to 1: without this, rank 1 gets a binary of its own, loaded at
# its first launch, while rank 0's kernel may already spin in the barrier (one process driving both ranks)
@triton.jit(do_not_specialize=["rank"])
def one_shot_kernel(
    inp,
    out,
    bases,
    rank,
    n,
    data_offset,
    max_spins,
    WORLD: tl.constexpr,
    BLOCK: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    dtype = inp.dtype.element_ty
    start, step = tl.program_id(0) * BLOCK, tl.num_programs(0) * BLOCK
    lanes = tl.arange(0, BLOCK)
    mine = _region(bases, rank, data_offset, dtype)
    for first in range(start, n, step):
        offs = first + lanes
        tl.store(mine + offs, tl.load(inp + offs, mask=offs < n), mask=offs < n)
    _barrier(bases, rank, max_spins, 1, WORLD, INTERPRET)
    for first in range(start, n, step):
        offs = first + lanes
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for peer in tl.static_range(WORLD):
            src = _region(bases, peer, data_offset, dtype)
            acc += tl.load(src + offs, mask=offs < n, other=0.0, cache_modifier=".cg").to(
                tl.float32
            )
        tl.store(out + offs, acc.to(out.dtype.element_ty), mask=offs < n)
    _barrier(bases, rank, max_spins, 2, WORLD, INTERPRET)


# Triton specialises an integer argument equal to 1: without this, rank 1 gets a binary of its own, loaded at
# its first launch, while rank 0's kernel may already spin in the barrier (one process driving both ranks)
@triton.jit(do_not_specialize=["rank"])
def two_shot_kernel(
    inp,
    out,
    bases,
    rank,
    n,
    chunk,
    data_offset,
    tmp_offset,
    max_spins,
    WORLD: tl.constexpr,
    BLOCK: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    dtype = inp.dtype.element_ty
    start, step = tl.program_id(0) * BLOCK, tl.num_programs(0) * BLOCK
    lanes = tl.arange(0, BLOCK)
    mine = _region(bases, rank, data_offset, dtype)
    for first in range(start, chunk, step):  # copy in, partition by partition, same pattern
        rel = first + lanes
        for part in tl.static_range(WORLD):
            idx = part * chunk + rel
            keep = (rel < chunk) & (idx < n)
            tl.store(mine + idx, tl.load(inp + idx, mask=keep), mask=keep)
    _barrier(bases, rank, max_spins, 1, WORLD, INTERPRET)
    reduced = _region(bases, rank, tmp_offset, dtype)
    for first in range(start, chunk, step):  # reduce this rank's partition into its tmp
        rel = first + lanes
        idx = rank * chunk + rel
        keep = (rel < chunk) & (idx < n)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for peer in tl.static_range(WORLD):
            src = _region(bases, peer, data_offset, dtype)
            acc += tl.load(src + idx, mask=keep, other=0.0, cache_modifier=".cg").to(tl.float32)
        tl.store(reduced + rel, acc.to(dtype), mask=keep)
    _barrier(bases, rank, max_spins, 2, WORLD, INTERPRET)
    for first in range(start, chunk, step):  # gather every partition from its owner's tmp
        rel = first + lanes
        for part in tl.static_range(WORLD):
            idx = part * chunk + rel
            keep = (rel < chunk) & (idx < n)
            src = _region(bases, part, tmp_offset, dtype)
            tl.store(out + idx, tl.load(src + rel, mask=keep, cache_modifier=".cg"), mask=keep)


def interpreted() -> bool:
    """True when Triton runs its CPU interpreter (TRITON_INTERPRET=1 when this module was imported)."""
    return type(one_shot_kernel).__name__ == "InterpretedFunction"


def launch(
    algorithm: str,
    inp,
    out,
    bases,
    rank: int,
    world: int,
    layout: Layout,
    max_spins: int,
    *,
    max_blocks: int = MAX_BLOCKS,
    block: int = BLOCK,
    warmup: bool = False,
):
    """One all-reduce of `inp` (n elements, contiguous) into `out` on the current stream.

    `bases` holds every rank's workspace address (int64, on the device the kernel runs on); the
    caller keeps the mappings alive and the ranks in lockstep. `warmup=True` compiles without
    launching (no barrier runs), so a slow compile never leaves a peer spinning."""
    n = inp.numel()
    if not 0 < n * inp.element_size() <= layout.max_bytes:
        raise ValueError(
            f"{n * inp.element_size()} bytes do not fit the {layout.max_bytes}-byte workspace"
        )
    if not 1 < world <= MAX_RANKS:
        raise ValueError(f"world size {world} is outside 2..{MAX_RANKS}")
    blocks = (grid(algorithm, n, world, max_blocks, block),)
    common = dict(WORLD=world, BLOCK=block, INTERPRET=interpreted())
    args: tuple
    if algorithm == ONE_SHOT:
        kernel, args = one_shot_kernel, (inp, out, bases, rank, n, layout.data, max_spins)
    elif algorithm == TWO_SHOT:
        kernel, args = (
            two_shot_kernel,
            (inp, out, bases, rank, n, partition(n, world), layout.data, layout.tmp, max_spins),
        )
    else:
        raise ValueError(f"unknown algorithm {algorithm!r}")
    if warmup:
        if not interpreted():
            kernel.warmup(*args, grid=blocks, **common)
        return None
    return kernel[blocks](*args, **common)


def describe_status(bits: int) -> str | None:
    """What a workspace's status word says about the kernels since it was zeroed; None when fine."""
    if not bits:
        return None
    where = " and ".join(text for bit, text in PHASES.items() if bits & bit)
    return (
        f"a barrier gave up waiting for a peer's signal in {where} (status {bits}): a rank fell behind by "
        "more than the spin limit or peer writes do not arrive; the results of these calls are not valid"
    )
