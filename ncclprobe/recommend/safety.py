"""What recommend refuses to suggest, whatever the measurements say.

1. LL128 forced where NCCL's own rule keeps it off, or where the results cannot show that it
   would keep it on (`ncclprobe.nccl.ll128`: every intra-node hop NVLink, GPUs of one type, an
   architecture NCCL verified). NCCL keeps it off there because a 128-byte store split and
   reordered on the way corrupts data silently (NVIDIA/nccl#786, #831). It is allowed only when the
   user passes the explicit flag *and* the sweep's correctness checks ran and passed for that
   configuration. A `^` exclusion list that does not name LL128 (`NCCL_PROTO=^LL`) forces it too.
2. Any setting `ncclprobe.nccl.lint.lint_env` flags as an error (the knowledge table's rules), for
   the collective it is judged for: a list that leaves it no algorithm it can run is refused on
   NCCL 2.24+, which fails that call (a result under it is no measurement of the setting).
3. Any setting at all when the numbers cannot reflect NCCL's settings: measured with gloo (NCCL
   variables do not touch gloo), or with `sweep --share-gpu` (ranks time-slicing one GPU over
   sockets: the settings and proofs are real, the timings are not), so a "gain" is noise.
"""

from __future__ import annotations

from dataclasses import dataclass

from ncclprobe.nccl.lint import lint_env
from ncclprobe.nccl.lint_datapath import LL128_RULE
from ncclprobe.nccl.node import NodeFacts
from ncclprobe.nccl.safety import ALLOW_LL128_FLAG, ll128_hazard


@dataclass(frozen=True)
class SafetyPolicy:
    node: (
        NodeFacts | None
    )  # the GPUs the results were measured on; None = unknown, treated as unsafe
    allow_ll128: bool = False  # the user's explicit --allow-ll128-without-nvlink
    nccl_version: str | None = None
    timing_caveat: str | None = (
        None  # why these timings cannot rank NCCL settings (gloo, --share-gpu)
    )
    # the collective the settings are judged for (ncclprobe's name): the lint's rules about what a
    # collective can run speak of it alone (NCCL_ALGO=Tree is an error for all_gather on 2.24+)
    collective: str | None = None


def timing_caveat(headers: list[dict]) -> str | None:
    """Why the results' timings cannot rank NCCL settings, or None when they can."""
    if any(h.get("backend") == "gloo" for h in headers):
        return (
            "measured with the gloo backend: NCCL settings did not shape these numbers, "
            "so any difference is noise (sweep on GPUs with NCCL)"
        )
    if any(h.get("share_gpu") for h in headers):
        return (
            "measured with sweep --share-gpu: the ranks time-slice one GPU over sockets, so the settings "
            "and their proofs are real but the timings are not (sweep with one GPU per rank)"
        )
    return None


def refusals(settings: dict, *, correctness_checked: bool, policy: SafetyPolicy) -> list[str]:
    """Every reason not to recommend `settings`; empty when it may be recommended."""
    reasons = []
    if policy.timing_caveat:
        reasons.append(policy.timing_caveat)
    unsafe = ll128_hazard(settings, policy.node, policy.nccl_version)
    if unsafe:
        if not policy.allow_ll128:
            reasons.append(
                f"LL128 refused: {unsafe.summary}, where forced LL128 can corrupt data silently "
                f"(pass {ALLOW_LL128_FLAG} to consider it)"
            )
        elif not correctness_checked:
            reasons.append(
                f"LL128 refused: {unsafe.summary} and the sweep did not verify this configuration's "
                "results (run the sweep with correctness checks)"
            )
    reasons += [f"lint error: {message}" for message in lint_errors(settings, policy)]
    return reasons


def lint_errors(settings: dict, policy: SafetyPolicy) -> list[str]:
    """Messages of the lint's error findings for `settings` (the knowledge table's verdict)."""
    if not settings:
        return []
    findings = lint_env(
        settings,
        node=policy.node,
        nccl_version=policy.nccl_version,
        collectives=[policy.collective] if policy.collective else None,
    )
    # forced LL128 is rule 1's call (flag + verified results), not an unconditional no
    return [
        f.message
        for f in findings
        if f.severity == "error" and getattr(f, "code", "") != LL128_RULE
    ]
