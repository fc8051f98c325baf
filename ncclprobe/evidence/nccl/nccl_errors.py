"""CUDA's and NCCL's error strings and what each means, from their documentation: the CUDA runtime
API's cudaError enum, NCCL's ncclResult_t (src/nccl.h.in) with the strings ncclGetErrorString
returns (src/init.cc: `invalid usage` to 2.17, `invalid usage (run with NCCL_DEBUG=WARN for
details)` since 2.18) and NCCL's documentation of each code (docs/api/types: ncclInvalidUsage 'The
call to NCCL is incorrect. This is usually reflecting a programming error.'). A reader's failure
line that holds one of these strings is named by it (`nccl_failures`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KnownError:
    """A CUDA or NCCL error string and what it means, from its documentation."""

    words: str  # how the error string reads (a substring of it)
    name: str  # the enum name
    meaning: str
    fix: str


# the strings cudaGetErrorString and ncclGetErrorString return, with the documented meaning
ERRORS = (
    KnownError(
        "illegal memory access",
        "cudaErrorIllegalAddress (700)",
        "a kernel loaded or stored at an invalid address; the CUDA context is lost and every later "
        "CUDA call of the process fails the same way (CUDA runtime API: 'This leaves the process in "
        "an inconsistent state'). It is reported at the next synchronisation, not where the kernel "
        "ran: with nccl-tests' device-API kernels (-D) or an NCCL built from changed source, the "
        "fault is most likely in that kernel",
        "run the same test without -D (the host API) and with CUDA_LAUNCH_BLOCKING=1; if only the "
        "device-API kernel fails, report it with the NCCL and nccl-tests versions; compute-sanitizer "
        "names the faulting kernel",
    ),
    KnownError(
        "busy or unavailable",
        "cudaErrorDevicesUnavailable (46)",
        "the GPU refused a new context: it is in Exclusive_Process (or Prohibited) compute mode and "
        "another process already holds it, or long-running kernels block new work (CUDA runtime "
        "API). When every rank reports it, ranks are placed on GPUs another rank or job holds "
        "(two ranks per GPU under Exclusive_Process, or a leftover process)",
        "check `nvidia-smi --query-gpu=index,compute_mode --format=csv` and `nvidia-smi` for other "
        "processes; give each rank its own GPU (srun --gpus-per-task=1 / CUDA_VISIBLE_DEVICES per "
        "rank), or have the administrator set the default mode (nvidia-smi -c DEFAULT)",
    ),
    KnownError(
        "no CUDA-capable device is detected",
        "cudaErrorNoDevice (100)",
        "the process sees no GPU: CUDA_VISIBLE_DEVICES is empty or wrong, the container was started "
        "without GPUs, or the driver is not loaded",
        "run nvidia-smi in the same environment; check CUDA_VISIBLE_DEVICES and the container's "
        "GPU options (--gpus all)",
    ),
    KnownError(
        "invalid device ordinal",
        "cudaErrorInvalidDevice (101)",
        "a rank asked for a GPU index the process cannot see: more GPUs per process (-g) or ranks "
        "per node than visible GPUs",
        "make -g times the local ranks at most the GPUs nvidia-smi lists (or CUDA_VISIBLE_DEVICES allows)",
    ),
    KnownError(
        "out of memory",
        "cudaErrorMemoryAllocation (2)",
        "a GPU allocation failed: the sizes tested (-e) need more memory than is free, or another "
        "process holds the GPU's memory",
        "lower -e, or free the GPU (nvidia-smi lists the processes holding memory)",
    ),
    KnownError(
        "unhandled cuda error",
        "ncclUnhandledCudaError",
        "a CUDA call inside NCCL failed; NCCL's WARN line before it names the call and CUDA's error",
        "run with NCCL_DEBUG=INFO (or WARN) and read the first WARN line",
    ),
    KnownError(
        "unhandled system error",
        "ncclSystemError",
        "a system call inside NCCL failed (a socket, shared memory, a file); NCCL's WARN line before "
        "it names the call",
        "run with NCCL_DEBUG=INFO and read the first WARN line",
    ),
    KnownError(
        "invalid usage",
        "ncclInvalidUsage",
        "NCCL refused the call: it is not valid in the communicator's state or with the other "
        "ranks' calls (ncclGetErrorString: 'invalid usage'; NCCL's documentation: 'usually "
        "reflecting a programming error'); the error string itself does not say which rule",
        "set NCCL_DEBUG=WARN in the failing process's environment (for a server: where it is "
        "started) and read the WARN line NCCL prints just before the error: it names the refused "
        "argument or state",
    ),
    KnownError(
        "invalid argument (run with NCCL_DEBUG=WARN",
        "ncclInvalidArgument",
        "an argument of the NCCL call has an invalid value (a pointer, a count, a datatype, a "
        "rank; ncclGetErrorString 2.18+: 'invalid argument (run with NCCL_DEBUG=WARN for "
        "details)'); the error string does not say which",
        "set NCCL_DEBUG=WARN in the failing process's environment and read the WARN line NCCL "
        "prints just before the error: it names the argument",
    ),
    KnownError(
        "internal error - please report this issue to the NCCL developers",
        "ncclInternalError",
        "NCCL reached a state its own code treats as a bug (ncclGetErrorString 2.18+)",
        "run with NCCL_DEBUG=INFO, read the first WARN line, and report it with the NCCL version",
    ),
    KnownError(
        "remote process exited or there was a network error",
        "ncclRemoteError",
        "a peer went away or the network between the ranks failed; the failure is on another rank "
        "or link, not on the rank that printed it",
        "read the first failure of every rank (the earliest time), and the network's WARN lines",
    ),
)


def known_error(text: str) -> KnownError | None:
    """The documented CUDA or NCCL error a failure's reason names, if one does."""
    lowered = text.lower()
    return next((e for e in ERRORS if e.words.lower() in lowered), None)
