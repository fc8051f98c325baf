"""`ncclprobe nccl-log`: what NCCL debug logs say NCCL read and did."""

from __future__ import annotations

import click

from ncclprobe.cli import exit_codes
from ncclprobe.cli.output import emit_report, format_option
from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.nccl.nccl_log import parse_nccl_log_files
from ncclprobe.nccl.recipes import proof_env

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
    from ncclprobe.diagnose.settings.nccl_log import nccl_log_report
    from ncclprobe.evidence.bundle import Evidence
    from ncclprobe.gather.settings import log_settings

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
    ev = Evidence(nccl_log=log, settings=log_settings(log), inputs={"nccl_log": list(files)})
    report = nccl_log_report(ev, list(files))
    emit_report(report, fmt)
    return report.verdict()
