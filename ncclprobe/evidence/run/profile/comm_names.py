"""Kernels that move data between GPUs, by what they are: NCCL's and RCCL's (`names.collective_kernel`)
and everything else that communicates, whose levers are never NCCL settings.

Names read from each project's source (below); a peer copy on the copy engine (`Memcpy PtoP`) and
gloo's host ops (`names.backend_collective`) are communication too.
"""

from __future__ import annotations

import functools
import re

from ncclprobe.evidence.run.profile.names import collective_kernel

# Communication kernels that are not NCCL's or RCCL's, by what they are (names read from each
# project's source): (library, pattern, op). Their levers are their own, never NCCL settings.
# - DeepEP (deepseek-ai/DeepEP csrc/kernels/{intranode,internode,internode_ll}.cu): the MoE
#   all-to-all `deep_ep::intranode::dispatch<...>`, `...::combine<...>`, `notify_dispatch`,
#   `cached_notify_dispatch`, `cached_notify_combine`; NVSHMEM's own kernels (`nvshmemi_...`)
# - vLLM's and SGLang's custom all-reduce (csrc/custom_all_reduce.cuh):
#   `vllm::cross_device_reduce_1stage<...>`, `..._2stage<...>`; vLLM's ROCm quick all-reduce
#   (csrc/quickreduce): `quickreduce::allreduce_prototype_twoshot<...>`
# - PyTorch's symmetric memory (torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu):
#   `multimem_all_reduce_kernel`, `multimem_one_shot_all_reduce_kernel`,
#   `one_shot_all_reduce_kernel`, `two_shot_all_reduce_kernel`, `multimem_all_gather_kernel`
# - TensorRT-LLM's and FlashInfer's all-reduce (cpp/tensorrt_llm/kernels/customAllReduceKernels.cu,
#   flashinfer/comm): `oneShotAllReduceKernel`, `twoShotAllReduceKernel`, `allreduce_fusion_kernel...`
# - MSCCL++ (microsoft/mscclpp): kernels in the `mscclpp` namespace
OTHER_COMMUNICATION = (
    ("DeepEP", re.compile(r"deep_ep::.*?(?P<op>dispatch|combine)"), "alltoall"),
    ("NVSHMEM", re.compile(r"nvshmem"), "unknown"),
    ("custom all-reduce", re.compile(r"cross_device_reduce_[12]stage"), "all_reduce"),
    ("quick all-reduce", re.compile(r"quickreduce|allreduce_prototype"), "all_reduce"),
    (
        "symmetric memory",
        re.compile(r"multimem_(?:one_shot_)?all_(?P<op>reduce|gather)|(?:one|two)_shot_all_reduce"),
        "all_reduce",
    ),
    (
        "TensorRT-LLM all-reduce",
        re.compile(r"(?:one|two)ShotAllReduceKernel|allreduce_fusion_kernel|lamport", re.I),
        "all_reduce",
    ),
    ("MSCCL++", re.compile(r"mscclpp"), "unknown"),
)
_OTHER_QUICK = re.compile(
    r"deep_ep|nvshmem|cross_device_reduce|quickreduce|allreduce_prototype|multimem_|_shot_all_reduce"
    r"|ShotAllReduce|allreduce_fusion|lamport|mscclpp",
    re.I,
)
NCCL_LIBRARIES = frozenset({"NCCL", "RCCL"})  # where NCCL settings act
PEER_COPY = "Memcpy PtoP"  # a GPU-to-GPU copy on the copy engine (cudaMemcpyPeer, P2P copies)


@functools.lru_cache(maxsize=8192)
def communication_kernel(name: str, category: str = "kernel") -> dict | None:
    """{library, op, algo, proto, dtype} of a kernel that moves data between GPUs, by what it is:
    NCCL's and RCCL's (`collective_kernel`), DeepEP's, custom all-reduces, symmetric memory,
    NVSHMEM, MSCCL++ (OTHER_COMMUNICATION), a peer copy on the copy engine; None for any other.
    Cached per name (names repeat by the thousand); the dict returned is shared: read it only."""
    if category != "kernel":
        if category == "gpu_memcpy" and name.startswith(PEER_COPY):
            return {
                "library": "copy engine",
                "op": "peer copy",
                "algo": None,
                "proto": None,
                "dtype": None,
            }
        return None
    found = collective_kernel(name)
    if found or not _OTHER_QUICK.search(name):
        return found
    for library, pattern, op in OTHER_COMMUNICATION:
        match = pattern.search(name)
        if match:
            named = match.groupdict().get("op") or ""
            found_op = {"reduce": "all_reduce", "gather": "all_gather"}.get(named, named or op)
            return {"library": library, "op": found_op, "algo": None, "proto": None, "dtype": None}
    return None
