"""`ncclprobe nccl-log`: what NCCL debug logs say NCCL read and did."""

from __future__ import annotations

import click

from ncclprobe.cli import exit_codes
from ncclprobe.cli.output import emit, format_option
from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.nccl.known_bad_scan import known_bad_in_logs
from ncclprobe.evidence.nccl.nccl_failures import explain
from ncclprobe.evidence.nccl.nccl_failures import verdict as failures_verdict
from ncclprobe.evidence.nccl.nccl_log import NcclLog, parse_nccl_log_files
from ncclprobe.nccl.known_bad import describe
from ncclprobe.nccl.lint import lint_env
from ncclprobe.nccl.node import NodeFacts
from ncclprobe.nccl.recipes import proof_env
from ncclprobe.secrets import mask_env, mask_text
from ncclprobe.sizes import format_size
from ncclprobe.verdict import Verdict, worst

_PROOF = " ".join(f"{k}={v}" for k, v in proof_env().items())
EPILOG = f"""\b
Examples:
  ncclprobe nccl-log nccl.host1.1234.log
  ncclprobe nccl-log logs/nccl.*.log --format json
  {_PROOF} python train.py 2>&1 | tee run.log
  ncclprobe nccl-log run.log

{exit_codes("read, no WARN line and no lint error", "an NCCL WARN line, a failure line, or a lint error")}
"""


@click.command(
    epilog=EPILOG, short_help="Read NCCL_DEBUG=INFO logs: version, env, transports, algorithms."
)
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@format_option
def command(files, fmt):
    """Read NCCL_DEBUG=INFO/WARN logs (NCCL 2.8 to 2.30; application output, mpirun tags and
    timestamps in between are fine) and report the NCCL version, every variable NCCL said it read
    (`set by environment`), communicator sizes, transports, the algorithm/protocol NCCL chose per
    call (TUNING lines) and WARN lines, plus lint findings on the variables NCCL read.

    Several files (one per process) are read as one log. Exits 1 on NCCL WARN lines or lint errors.
    """
    log = parse_nccl_log_files(files)
    if (
        log.nccl_lines == 0
        and log.nccl_version is None
        and not log.failures
        and not log.failure_lines
    ):
        raise UsageProblem(
            f"no NCCL log lines in {', '.join(files)}: expected lines like "
            "`host:pid:tid [0] NCCL INFO ...` (run with NCCL_DEBUG=INFO)"
        )
    findings = lint_env(log.env, node=_node(log), nccl_version=log.nccl_version)
    lint = [
        {**f.to_json(), "message": mask_text(f.message), "fix": mask_text(f.fix)} for f in findings
    ]
    explained, unexplained = explain(log)
    known_bad, _scan = known_bad_in_logs(files, log)
    doc = {
        **log.to_json(),
        "files": list(files),
        "lint": lint,
        "explained": [e.to_json() for e in explained],
        "known_bad": [{"row": m.row.key, "seen": m.seen, "text": describe(m)} for m in known_bad],
    }
    emit(
        fmt,
        doc,
        _rows(log, unexplained),
        title=_title(log),
        notes=[f"{e.severity}: {mask_text(e.message)}; fix: {e.fix}" for e in explained]
        + [f"{f['severity']}: {f['message']}" for f in lint]
        + [f"{m.severity}: {describe(m)}" for m in known_bad],
    )
    # a row that needs a condition the log cannot show is said (info) without failing the run
    return worst(
        [failures_verdict(log, findings), Verdict.of(any(m.severity != "info" for m in known_bad))]
    )


def _node(log: NcclLog) -> NodeFacts | None:
    """What the log itself shows of the links: ranks connected only through NET met over the network."""
    return (
        NodeFacts(over_network=True) if log.transports and set(log.transports) == {"NET"} else None
    )


def _title(log: NcclLog) -> str:
    library = log.library or "NCCL"
    version = log.nccl_version or "(version not logged)"
    if log.library == "RCCL":  # its build tag (2.21.5-HEAD:9a0e6a1) names the RCCL build
        version = (
            f"{log.nccl_version_full} (ROCm's NCCL; its number is the NCCL release it follows)"
        )
    if log.version_source and log.version_source != "banner":
        version += f" (from {log.version_source})"
    if log.nccl_lines == 0:  # a run that failed before NCCL logged: its failure lines follow
        return f"{library} {version}: no NCCL line; the run's failure lines are below"
    return (
        f"{library} {version}, {log.nranks or '?'} ranks, "
        f"{len(log.pids)} process(es), {log.nccl_lines} NCCL lines"
    )


def _rows(log: NcclLog, warnings: list[str]) -> list[dict]:
    rows = [
        {"what": "set by environment", "detail": f"{k}={v}"} for k, v in mask_env(log.env).items()
    ]
    rows += [
        {"what": "transport", "detail": f"{kind}: {count} connection lines"}
        for kind, count in log.transports.items()
    ]
    rows += [{"what": "tuning", "detail": line} for line in tuning_summary(log)]
    rows += [{"what": "calls", "detail": f"{name}: {count}"} for name, count in log.calls.items()]
    rows += [{"what": "WARN", "detail": mask_text(text)} for text in warnings]
    rows += [
        {
            "what": "not explained",
            "detail": f"{line.source}:{line.number}: {line.text}"
            + (f" (x{line.count})" if line.count > 1 else ""),
        }
        for line in log.failure_lines.lines
    ]
    if log.failure_lines.more:
        rows.append({"what": "not explained", "detail": f"and {log.failure_lines.more} more"})
    return rows


def tuning_summary(log: NcclLog) -> list[str]:
    """`AllReduce RING/SIMPLE 32K..64M (12 calls)`: consecutive sizes with one choice merged."""
    groups: dict[tuple, list[int]] = {}
    for entry in log.tuning:
        groups.setdefault((entry.collective or "?", entry.algo, entry.proto), []).append(
            entry.bytes
        )
    return [
        f"{coll} {algo}/{proto} {format_size(min(sizes))}..{format_size(max(sizes))} ({len(sizes)} calls)"
        for (coll, algo, proto), sizes in groups.items()
    ]
