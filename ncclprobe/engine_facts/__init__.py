"""What the engines (vLLM, SGLang) do, as facts read in their source: one row per fact with the
repository, file and commit it was read at (`EngineFact`), as `ncclprobe.nccl`'s table does for NCCL.
`tests/test_engine_facts_source.py` reads every row in a pinned excerpt (tests/fixtures/engine_source/).

- `vllm_cudagraph`: vLLM's CUDA-graph modes and what each captures;
- `spec_logs`: the speculative-decoding lines of vLLM's and SGLang's logs, and how acceptance over
  several log intervals is aggregated (weighted by what each interval counts);
- `profiler`: how the engines' own profilers are turned on and driven over HTTP (what `ncclprobe
  capture` sets and calls);
- `spec_config`: speculative-decoding configurations that run without working (an EAGLE-3 draft
  under EAGLE), sourced from the engines' issues and documents rather than a source line, so its
  facts carry their own sources and are not rows of `FACTS`.

More rows go in more files here (per engine); each file keeps a `FACTS` tuple that `FACTS` below
joins. No engine fact lives in a rule.
"""

from __future__ import annotations

from ncclprobe.engine_facts.fact_row import EngineFact
from ncclprobe.engine_facts.profiler import FACTS as PROFILER_FACTS
from ncclprobe.engine_facts.spec_logs import FACTS as SPEC_LOG_FACTS
from ncclprobe.engine_facts.vllm_cudagraph import FACTS as CUDAGRAPH_FACTS

FACTS: tuple[EngineFact, ...] = CUDAGRAPH_FACTS + SPEC_LOG_FACTS + PROFILER_FACTS

__all__ = ["FACTS", "EngineFact"]
