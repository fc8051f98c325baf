"""The engines' speculative-decoding log lines and how their acceptance over several intervals adds
up, read in their source.

Each line is an aggregate over one logging interval, and intervals count different numbers of
cycles: a short warm-up interval counts a few, a busy one thousands. The acceptance of the run is
the engines' own ratio over the whole run, so each interval weighs by what it counted:
- vLLM (vllm/v1/spec_decode/metrics.py, `SpecDecodingLogging.log`): `Mean acceptance length` is
  `1 + accepted / num_drafts` of the interval (the bonus token included), and the line prints
  `Accepted: N tokens, Drafted: M tokens`. Over several lines the run's value is `1 + sum(accepted) /
  sum(drafts)`: each interval's mean weighs by its drafts, and with a fixed k per draft the
  drafted tokens are proportional to them (`Drafted`);
- SGLang (scheduler_metrics_mixin.py, `log_decode_stats`): `accept len` is `accepted /
  forward_ct` of the interval, where every decode batch adds its request count to forward_ct
  (`update_spec_metrics`) and the interval is `decode_log_interval` batches. The line prints no
  count; `#running-req` at the log is the nearest weight it carries (the batch of its last step).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ncclprobe.engine_facts.fact_row import EngineFact

VLLM_METRICS = "vllm-project/vllm vllm/v1/spec_decode/metrics.py"
VLLM_METRICS_AT = "016a8587edb04ae53c913a1da9355a07dc0ca4ae"
SGLANG_METRICS = "sgl-project/sglang python/sglang/srt/managers/scheduler_metrics_mixin.py"
SGLANG_METRICS_AT = "01bb3c807f7e62c19a31de7548837505488c2b64"

# the fields each engine's line carries, as the engine prints them (the readers match these names)
VLLM_MEAN = "Mean acceptance length"  # per interval, 1 + accepted / num_drafts
VLLM_ACCEPTED, VLLM_DRAFTED = "Accepted", "Drafted"  # `Accepted: N tokens, Drafted: M tokens`
SGLANG_ACCEPT_LEN = "accept len"  # per interval, accepted / forward_ct
SGLANG_RUNNING = "#running-req"  # the batch at the log line: the weight SGLang's line carries


@dataclass(frozen=True)
class Aggregate:
    """The run's acceptance length from its intervals, and how it was weighed."""

    value: float | None
    intervals: int
    weighted_by: str | None  # "drafted tokens" (vLLM), "running requests" (SGLang), None: plain
    plain_mean: float | None  # the unweighted mean of the intervals, for comparison


def aggregate(
    values: Sequence[float], weights: Sequence[float | None], weighted_by: str
) -> Aggregate:
    """Each interval's value weighed by what it counted. Where any weight is missing the plain mean
    is all that can be said (weighted_by None)."""
    if not values:
        return Aggregate(None, 0, None, None)
    plain = sum(values) / len(values)
    known = [w for w in weights if w is not None and w >= 0]
    if len(known) != len(values):
        return Aggregate(plain, len(values), None, plain)
    total = sum(known)
    if total <= 0:
        return Aggregate(plain, len(values), None, plain)
    value = sum(v * w for v, w in zip(values, known)) / total
    return Aggregate(value, len(values), weighted_by, plain)


FACTS = (
    EngineFact(
        name="vllm.spec_decode.mean_acceptance_length",
        engine="vllm",
        summary="per logging interval, 1 + accepted / num_drafts (the bonus token included); the "
        "line also prints the interval's accepted and drafted token counts",
        source=VLLM_METRICS,
        read_at=VLLM_METRICS_AT,
        excerpt="vllm_spec_decode_metrics.py.txt",
        lines=(
            "mean_acceptance_length = 1 + (num_accepted_tokens / num_drafts)",
            '"Mean acceptance length: %.2f, "',
            '"Accepted: %d tokens, "',
            '"Drafted: %d tokens, "',
            '"Per-position acceptance rate: %s, "',
        ),
    ),
    EngineFact(
        name="sglang.spec.accept_len",
        engine="sglang",
        summary="per logging interval, accepted / forward_ct, where each decode batch adds its "
        "request count to forward_ct; the counters reset at every log line",
        source=SGLANG_METRICS,
        read_at=SGLANG_METRICS_AT,
        excerpt="sglang_scheduler_metrics_mixin.py.txt",
        lines=(
            "self.spec_num_forward_ct += bs",
            "self.spec_num_accepted_tokens / self.spec_num_forward_ct",
            "self.spec_num_accepted_tokens = self.spec_num_forward_ct = 0",
            'msg += f"accept len: {spec_accept_length:.2f}, accept rate: {spec_accept_rate:.2f}, "',
        ),
    ),
)
