"""What the names in a PyTorch profiler trace mean: launch calls (CUDA and ROCm), collective
kernels (NCCL and RCCL, old and new naming) and the step annotations engines write.

Facts, from traces recorded on the H200 and the public ROCm traces in tests/fixtures/profiles
(see ../shared/reference/profiler-traces.md):
- a kernel's `args.correlation` is the id of the runtime/driver call that launched it; kernels
  replayed from a graph carry the id of the `cudaGraphLaunch`/`hipGraphLaunch` call;
- NCCL names its kernels `ncclDevKernel_<Coll>_<Op>_<dtype>_<ALGO>_<PROTO>` (2.19+) or
  `ncclKernel_<Coll>_<ALGO>_<PROTO>_<Op>_<dtype>` (older); RCCL keeps the older form. A fused
  generic kernel (`ncclDevKernel_Generic`) carries no collective in its name. The name is the
  kernel's specialization, not a record of the call: NCCL's maintainers say one kernel runs any
  operation, algorithm and protocol (AllGather/ReduceScatter kernels are named `RING_LL` whatever
  protocol ran: NVIDIA/nccl#2196; 2.13 named most kernels SendRecv: #714, #739). Only
  `NCCL_DEBUG_SUBSYS=TUNING` shows the choice;
- SGLang annotates each scheduler step `step[DECODE bs=32]`, `step[EXTEND bs=15 toks=15360]`;
  vLLM `execute_<N>_context_<C>(...)_generation_<G>(...)`; torch.profiler's schedule
  `ProfilerStep#<n>`; ncclprobe's engine `ncclprobe::<phase>` (engine/profiling.py).
"""

from __future__ import annotations

import re

from ncclprobe.nccl.names import (
    ALGORITHMS_TO_MATCH,
    COLLECTIVE,
    COLLECTIVE_NAMES,
    OTHER_FUNCTION_SPELLINGS,
    PROTOCOLS_TO_MATCH,
)

KERNEL_LAUNCHES = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchKernelEx",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cudaLaunchCooperativeKernel",
        "cuLaunchCooperativeKernel",
        "cudaLaunchCooperativeKernelMultiDevice",
        "hipLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipModuleLaunchKernel",
        "hipExtLaunchKernel",
        "hipLaunchCooperativeKernel",
        "hipExtLaunchKernelGGL",
        "hipModuleLaunchCooperativeKernel",
    }
)
GRAPH_LAUNCHES = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})
MEMCPY_PREFIXES = ("cudaMemcpy", "cudaMemset", "cuMemcpy", "cuMemset", "hipMemcpy", "hipMemset")
SYNC_CALLS = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "hipDeviceSynchronize",
        "hipStreamSynchronize",
        "hipEventSynchronize",
    }
)
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
HOST_API_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
# torch 1.8's Kineto wrote capitalised categories (the TensorBoard plugin maps them the same way:
# pytorch/kineto tb_plugin/torch_tb_profiler/profiler/trace.py, EventTypeMap)
OLD_CATEGORIES = {
    "Kernel": "kernel",
    "Runtime": "cuda_runtime",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "Operator": "cpu_op",
    "Python": "python_function",
}

NCCL_DTYPES = {
    "f16": "float16",
    "f32": "float32",
    "f64": "float64",
    "bf16": "bfloat16",
    "half": "float16",
    "float": "float32",
    "double": "float64",
    "i8": "int8",
    "u8": "uint8",
    "i32": "int32",
    "u32": "uint32",
    "i64": "int64",
    "u64": "uint64",
    "int8_t": "int8",
    "uint8_t": "uint8",
    "int32_t": "int32",
    "uint32_t": "uint32",
    "int64_t": "int64",
    "uint64_t": "uint64",
    "f8e4m3": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
    "__nv_bfloat16": "bfloat16",
    "__half": "float16",
    "rccl_bfloat16": "bfloat16",
    "hip_bfloat16": "bfloat16",
    # the tails of C type names once the kernel name is split on "_":
    # `Sum___nv_bfloat16` ends in "bfloat16", `Sum_int8_t` in "int8", "t"
    "bfloat16": "bfloat16",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
}
TORCH_DTYPES = {
    "BFloat16": "bfloat16",
    "Float": "float32",
    "Half": "float16",
    "Double": "float64",
    "Int": "int32",
    "Long": "int64",
    "Char": "int8",
    "Byte": "uint8",
    "Float8_e4m3fn": "float8_e4m3fn",
}
# NCCL/RCCL function names in kernel names -> ncclprobe's (`ncclprobe.nccl.names`), and those NCCL
# runs as point-to-point operations (RCCL writes `AllToAll`)
COLLECTIVES = {
    **{c.function: c.name for c in COLLECTIVE_NAMES},
    **OTHER_FUNCTION_SPELLINGS,
    "Send": "send",
    "Recv": "recv",
    "Gather": "gather",
    "Scatter": "scatter",
}
ARG_COLLECTIVES = {
    "allreduce": "all_reduce",
    "all_reduce": "all_reduce",
    "allgather": "all_gather",
    "all_gather": "all_gather",
    "_allgather_base": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "send": "send",
    "recv": "recv",
    "all_to_all": COLLECTIVE["alltoall"].name,  # torch's name of it
    "alltoall_base": COLLECTIVE["alltoall"].name,
    "gather": "gather",
    "scatter": "scatter",
    "barrier": "barrier",
    "allreduce_coalesced": "all_reduce",
}

_NEW = re.compile(r"^ncclDevKernel_(?P<coll>[A-Za-z]+)(?:_(?P<rest>[^(]*))?")
_OLD = re.compile(r"^(?:void )?(?:nccl|rccl)Kernel_(?P<coll>[A-Za-z]+)(?:_(?P<rest>[^(]*))?")
_SGLANG = re.compile(r"^step\[(?P<mode>[A-Z_]+)(?P<args>[^\]]*)\]$")
_VLLM = re.compile(
    r"^execute_(?P<reqs>\d{1,19})_context_(?P<ctx>\d{1,19})\((?P<cargs>[^)]*)\)_generation_(?P<gen>\d{1,19})\((?P<gargs>[^)]*)\)"
)
_OURS = re.compile(r"^ncclprobe::(?P<phase>[a-z_]+)(?:\[(?P<args>[^\]]*)\])?$")
_PROFILER_STEP = re.compile(r"^ProfilerStep#(?P<n>\d{1,19})$")
_BACKEND_OP = re.compile(r"^(?P<backend>nccl|gloo|ucc|mpi|xccl|hccl):(?P<op>[a-z_]+)$")
# `Input type` of a collective's `<backend>:<op>` annotation (C++ type names as torch prints them)
CPP_DTYPES = {
    "float": "float32",
    "double": "float64",
    "c10::BFloat16": "bfloat16",
    "c10::Half": "float16",
    "long int": "int64",
    "int": "int32",
    "signed char": "int8",
    "unsigned char": "uint8",
    "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2": "float8_e5m2",
}
_SQ = re.compile(r"^sq(?P<sq>\d{1,19})(?!\d)")

# SGLang forward modes (python/sglang/srt/model_executor/forward_batch_info.py) by phase kind
SGLANG_KINDS = {
    "DECODE": "decode",
    "EXTEND": "prefill",
    "PREFILL": "prefill",
    "MIXED": "prefill",
    "TARGET_VERIFY": "verify",
    "DRAFT_EXTEND": "draft",
    "DRAFT_EXTEND_V2": "draft",
    "IDLE": "other",
    "SPLIT_PREFILL": "prefill",
    "DUMMY_FIRST": "other",
}
OUR_KINDS = {
    "prefill": "prefill",
    "decode": "decode",
    "verify": "verify",
    "draft": "draft",
    "draft_extend": "draft",
    "accept": "other",
}


# CUPTI's per-thread-default-stream and versioned entry points: `cudaLaunchKernel_ptsz`,
# `cudaMemcpyAsync_ptsz`, `cudaGraphLaunch_ptsz`, `cuLaunchKernel_ptsz`, `cudaMemcpy_ptds`,
# `cuGraphLaunch_v10000`: the same calls
_API_SUFFIX = re.compile(r"_(?:ptsz|ptds|v\d+)$")


def launch_kind(name: str) -> str | None:
    """kernel | graph | memcpy | sync for a runtime or driver call, None for anything else."""
    if "_" in name[-9:]:
        name = _API_SUFFIX.sub("", name)
    if name in KERNEL_LAUNCHES:
        return "kernel"
    if name in GRAPH_LAUNCHES:
        return "graph"
    if name.startswith(MEMCPY_PREFIXES):
        return "memcpy"
    if name in SYNC_CALLS:
        return "sync"
    return None


def collective_kernel(name: str) -> dict | None:
    """{library, op, algo, proto, dtype} from an NCCL/RCCL kernel name, None for any other."""
    if "ccl" not in name[:12]:
        return None
    match = _NEW.match(name) or _OLD.match(name)
    if not match:
        return None
    coll = match.group("coll")
    parts = (match.group("rest") or "").split("_")
    upper = "_".join(parts).upper()
    algo = next((a for a in ALGORITHMS_TO_MATCH if re.search(rf"(^|_){a}(_|$)", upper)), None)
    proto = next((p for p in PROTOCOLS_TO_MATCH if re.search(rf"(^|_){p}(_|$)", upper)), None)
    dtype = next((NCCL_DTYPES[p] for p in reversed(parts) if p in NCCL_DTYPES), None)
    return {
        "library": "RCCL" if "rccl" in name[:12] else "NCCL",
        "op": COLLECTIVES.get(coll, coll.lower() if coll != "Generic" else "unknown"),
        "algo": algo,
        "proto": proto,
        "dtype": dtype,
    }


def step_annotation(name: str) -> dict | None:
    """A step's {kind, label, engine, batch, tokens, tokens_per_seq} from an engine's annotation."""
    m = _SGLANG.match(name)
    if m:
        args = _pairs(m.group("args"))
        batch, toks = _int(args.get("bs")), _int(args.get("toks"))
        kind = SGLANG_KINDS.get(m.group("mode"), "other")
        # a speculative SGLang step is scheduled as DECODE too: tokens per sequence come from the
        # recorded shapes then (steps._shape_tokens), not from the mode's name
        per_seq = toks / batch if toks and batch else None
        return {
            "kind": kind,
            "label": f"step[{m.group('mode')}]",
            "engine": "sglang",
            "batch": batch,
            "tokens_per_seq": per_seq,
            "found_by": "SGLang step annotation",
        }
    m = _VLLM.match(name)
    if m:
        gen, ctx = int(m.group("gen")), int(m.group("ctx"))
        sq = _SQ.match(m.group("gargs"))
        per_seq = int(sq.group("sq")) / gen if sq and gen else None
        kind = (
            "prefill" if ctx and not gen else ("verify" if per_seq and per_seq > 1.0 else "decode")
        )
        if ctx and gen:
            kind = "other"  # a mixed step: prefill chunks and decodes in one forward
        label = {
            "decode": "execute[generation]",
            "verify": "execute[generation, several tokens]",
            "prefill": "execute[context]",
            "other": "execute[mixed]",
        }[kind]
        return {
            "kind": kind,
            "label": label,
            "engine": "vllm",
            "batch": gen or int(m.group("reqs")),
            "tokens_per_seq": per_seq,
            "found_by": "vLLM execute annotation",
        }
    m = _OURS.match(name)
    if m:
        args = _pairs(m.group("args") or "")
        return {
            "kind": OUR_KINDS.get(m.group("phase"), "other"),
            "label": m.group("phase"),
            "engine": "ncclprobe",
            "batch": _int(args.get("b")),
            "tokens_per_seq": _float(args.get("t")),
            "found_by": "ncclprobe step annotation",
        }
    return None


def backend_collective(name: str) -> tuple[str, str] | None:  # ("gloo", "all_reduce")
    """(backend, op) of torch's per-collective annotation, `gloo:all_reduce`, `nccl:all_gather`."""
    m = _BACKEND_OP.match(name)
    if not m:
        return None
    return m.group("backend"), ARG_COLLECTIVES.get(m.group("op"), m.group("op"))


def profiler_step(name: str) -> int | None:
    m = _PROFILER_STEP.match(name)
    return int(m.group("n")) if m else None


def _pairs(text: str) -> dict[str, str]:
    """`bs=32 toks=15360` as a dict (split on blanks, never a backtracking pattern)."""
    return {k: v for k, sep, v in (part.partition("=") for part in text.split()) if sep}


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isascii() and text.isdigit() else None


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


_EMBEDDING_KERNEL = re.compile(r"embedding|indexSelect|index_select", re.IGNORECASE)
# positional encodings named for embeddings run once per layer, not once per forward: vLLM's
# `rotary_embedding_kernel`, inductor's `triton_..._rotary_emb...`, `apply_rotary_pos_emb`
_PER_LAYER_EMBEDDING = re.compile(r"rotary|rope|pos_emb|position", re.IGNORECASE)


def embedding_kernel(name: str) -> bool:
    """A kernel that gathers rows of an embedding table by token id: aten's `indexSelect*Index`
    (CUDA and HIP), `embedding` kernels, inductor's fused `triton_..._embedding_...`; never a
    rotary or positional one (those run in every layer)."""
    return bool(_EMBEDDING_KERNEL.search(name)) and not _PER_LAYER_EMBEDDING.search(name)


_GATHER_KERNEL = re.compile(r"gather|index", re.IGNORECASE)


def gather_kernel(name: str) -> bool:
    """A kernel that gathers by index (`vectorized_gather_kernel`, `index_elementwise_kernel`,
    `indexSelect...`): an embedding lookup where the kernels after it are a forward's first layer's
    (forwards._gathers_like_lookups), something else anywhere else."""
    return bool(_GATHER_KERNEL.search(name))
