"""The one safety rule for settings a job runs with, whoever chose them: recommend, `run-engine
--env` and `--tuned`, and diagnose over the settings found in evidence.

1. Forced LL128 where NCCL's own rule keeps it off, or where nothing shows it would keep it on
   (`ncclprobe.nccl.ll128`), is unsafe: it can corrupt data silently.
2. Every lint error (a value NCCL rejects or silently ignores) is refused: the job would not run
   what the user asked for.
"""

from __future__ import annotations

from collections.abc import Mapping

from ncclprobe.errors import UsageProblem
from ncclprobe.nccl.lint import lint_env
from ncclprobe.nccl.lint_datapath import LL128_RULE
from ncclprobe.nccl.ll128 import Ll128Default, ll128_default
from ncclprobe.nccl.node import NodeFacts
from ncclprobe.nccl.values import forcing_ll128
from ncclprobe.nccl.version import parse_version

ALLOW_LL128_FLAG = "--allow-ll128-without-nvlink"
# lint rules about the links between GPUs: where NCCL does not run (gloo) they concern nothing
TOPOLOGY_CODES = (LL128_RULE, "nvls-without-nvlink")


def ll128_hazard(
    settings: Mapping[str, str], node: NodeFacts | None, nccl_version: str | None
) -> Ll128Default | None:
    """NCCL's own LL128 verdict on `node` when these settings force LL128 and NCCL would not keep it
    on there by itself (off, or not known); None when they do not force it or NCCL would."""
    if not forcing_ll128(settings.get("NCCL_PROTO")):
        return None
    default = ll128_default(
        node, parse_version(nccl_version), ll128_c2c=settings.get("NCCL_LL128_C2C")
    )
    return None if default.on is True else default


def check_job_settings(
    settings: Mapping[str, str],
    *,
    source: str,
    node: NodeFacts | None,
    nccl_version: str | None,
    nccl_used: bool,
    allow_ll128: bool = False,
) -> list[str]:
    """Settings a job is about to run with (`source` names where they came from, e.g. `--env`):
    UsageProblem (exit 2) for a lint error or an unsafe LL128; the warnings to show otherwise."""
    findings = [
        f
        for f in lint_env(settings, node=node, nccl_version=nccl_version)
        if nccl_used or f.code not in TOPOLOGY_CODES
    ]
    errors = [f for f in findings if f.severity == "error" and f.code != LL128_RULE]
    if errors:
        raise UsageProblem(f"{source}: {errors[0].message}; fix: {errors[0].fix}")
    warnings = [
        f"{source}: {f.message}"
        for f in findings
        if f.severity == "warning" and f.code != LL128_RULE
    ]
    hazard = ll128_hazard(settings, node, nccl_version) if nccl_used else None
    if hazard and not allow_ll128:
        raise UsageProblem(
            f"{source}: NCCL_PROTO={settings['NCCL_PROTO']} forces LL128, but {hazard.summary}; "
            f"forced LL128 can corrupt data silently (pass {ALLOW_LL128_FLAG} to run it anyway)"
        )
    if hazard:
        warnings.append(
            f"{source}: NCCL_PROTO={settings['NCCL_PROTO']} forces LL128 although {hazard.summary} "
            f"({ALLOW_LL128_FLAG}): check the run's correctness"
        )
    return warnings
