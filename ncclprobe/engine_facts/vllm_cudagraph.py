"""vLLM's CUDA-graph modes (`CompilationConfig.cudagraph_mode`, V1 engine) and what each captures.

Read in vllm/config/compilation.py (the `CUDAGraphMode` enum, whose tuple members name a decode mode
and a mixed-batch mode, and the option's documentation) and vllm/v1/cudagraph_dispatcher.py (which
batches get full graphs: `uniform_decode=True` keys when the decode mode is FULL). A uniform decode
batch is one where every request brings the same number of query tokens: 1, or 1 + k with
speculative decoding, the verify step (gpu_model_runner.py's `uniform_decode_query_len = 1 +
self.num_spec_tokens`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ncclprobe.engine_facts.fact_row import EngineFact

COMPILATION = "vllm-project/vllm vllm/config/compilation.py"
COMPILATION_AT = "002284db4c87420647c6bc2cafe923942bcea307"
DISPATCHER = "vllm-project/vllm vllm/v1/cudagraph_dispatcher.py"
DISPATCHER_AT = "009eec3b2b00e1b8afb4bcafb58e9403b2aa1ada"


@dataclass(frozen=True)
class CudagraphMode:
    name: str
    decode: str  # the runtime mode of uniform decode batches: "FULL", "PIECEWISE" or "NONE"
    mixed: str  # ... of prefill and mixed prefill-decode batches
    captures: str  # in words: what runs inside graphs, and what outside

    @property
    def attention_outside(self) -> bool:
        """Whether decode steps run their attention outside the graphs (between captured pieces)."""
        return self.decode == "PIECEWISE"


MODES = {
    m.name: m
    for m in (
        CudagraphMode("NONE", "NONE", "NONE", "no step runs from a graph"),
        CudagraphMode(
            "PIECEWISE",
            "PIECEWISE",
            "PIECEWISE",
            "every step runs as captured pieces with the attention outside the graphs, between them "
            "(the verify step's included)",
        ),
        CudagraphMode(
            "FULL",
            "FULL",
            "FULL",
            "every batch of a captured size runs as one full graph, attention included",
        ),
        CudagraphMode(
            "FULL_DECODE_ONLY",
            "FULL",
            "NONE",
            "uniform decode batches (the speculative verify's 1+k tokens per request included) run "
            "as full graphs, attention included; prefill and mixed prefill-decode batches run "
            "without graphs",
        ),
        CudagraphMode(
            "FULL_AND_PIECEWISE",
            "FULL",
            "PIECEWISE",
            "uniform decode batches (the verify included) run as full graphs; prefill and mixed "
            "batches as captured pieces with the attention outside",
        ),
    )
}


def mode(name: str | None) -> CudagraphMode | None:
    """The mode a log names (`FULL_DECODE_ONLY`), None for a name vLLM's table does not hold."""
    return MODES.get((name or "").upper())


FACTS = (
    EngineFact(
        name="vllm.cudagraph_mode.members",
        engine="vllm",
        summary="CUDAGraphMode: NONE, PIECEWISE, FULL, and FULL_DECODE_ONLY = (FULL, NONE), "
        "FULL_AND_PIECEWISE = (FULL, PIECEWISE): (decode mode, mixed mode)",
        source=COMPILATION,
        read_at=COMPILATION_AT,
        excerpt="vllm_compilation.py.txt",
        lines=(
            "NONE = 0",
            "PIECEWISE = 1",
            "FULL = 2",
            "FULL_DECODE_ONLY = (FULL, NONE)",
            "FULL_AND_PIECEWISE = (FULL, PIECEWISE)",
            "return CUDAGraphMode(self.value[0]) if self.separate_routine() else self",
            "return CUDAGraphMode(self.value[1]) if self.separate_routine() else self",
        ),
    ),
    EngineFact(
        name="vllm.cudagraph_mode.PIECEWISE",
        engine="vllm",
        summary=MODES["PIECEWISE"].captures,
        source=COMPILATION,
        read_at=COMPILATION_AT,
        excerpt="vllm_compilation.py.txt",
        lines=(
            "PIECEWISE mode build piecewise cudagraph only, keeping the cudagraph",
            "incompatible ops (i.e. some attention ops) outside the cudagraph",
        ),
    ),
    EngineFact(
        name="vllm.cudagraph_mode.FULL_DECODE_ONLY",
        engine="vllm",
        summary=MODES["FULL_DECODE_ONLY"].captures,
        source=f"{COMPILATION}; {DISPATCHER}",
        read_at=f"{COMPILATION_AT}; {DISPATCHER_AT}",
        excerpt="vllm_compilation.py.txt",
        lines=(
            "FULL_DECODE_ONLY mode: Capture full cudagraph for decode batches only.",
            "Mixed prefill-decode batches are run without cudagraphs. Can be good for",
        ),
    ),
    EngineFact(
        name="vllm.cudagraph_mode.FULL_AND_PIECEWISE",
        engine="vllm",
        summary=MODES["FULL_AND_PIECEWISE"].captures,
        source=COMPILATION,
        read_at=COMPILATION_AT,
        excerpt="vllm_compilation.py.txt",
        lines=(
            "FULL_AND_PIECEWISE mode: Capture full cudagraph for decode batches and",
            "piecewise cudagraph for prefill and mixed prefill-decode batches.",
        ),
    ),
    EngineFact(
        name="vllm.cudagraph_dispatch.uniform_decode",
        engine="vllm",
        summary="with a FULL decode mode of a separate routine, full graphs are keyed by uniform "
        "decode batches (uniform_decode=True) up to uniform_decode_query_len x max_num_seqs tokens; "
        "mixed batches get the mixed mode's keys",
        source=DISPATCHER,
        read_at=DISPATCHER_AT,
        excerpt="vllm_cudagraph_dispatcher.py.txt",
        lines=(
            "BatchDescriptor(num_tokens=bs, uniform_decode=False),",
            "cudagraph_mode.decode_mode() == CUDAGraphMode.FULL",
            "and cudagraph_mode.separate_routine()",
            "uniform_decode_query_len",
            "* self.vllm_config.scheduler_config.max_num_seqs",
        ),
    ),
)
