"""NCCL debug logs of a job's ranks, one file per rank, as evidence for `diagnose --nccl-log`.

Each file is read by `nccl_log.parse_nccl_log_file` on its own (the comparisons between ranks need one
log per rank: NCCL_DEBUG_FILE with `%p`, or a name per rank). Which rank wrote a file: the rank of
its largest communicator (NCCL's `comm ... rank R nranks N` lines), which is the rank in the job's
world group; a file without one gets None. A file with no NCCL line is not an NCCL log: refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.nccl.nccl_log import NcclLog, parse_nccl_log_file


@dataclass(frozen=True)
class RankNcclLog:
    path: str
    rank: int | None
    log: NcclLog

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else Path(self.path).name

    @property
    def unfinished_inits(self) -> list[dict]:
        """Communicators whose `Init START` has no `Init COMPLETE` in this log."""
        return [c for c in self.log.communicators if c.get("init_complete") is False]


def load_nccl_logs(paths: Iterable[str | Path]) -> list[RankNcclLog]:
    """Every file an NCCL debug log of a rank of the job; in the order given."""
    logs = []
    for path in paths:
        log = parse_nccl_log_file(path)  # streamed
        if log.nccl_lines == 0 and log.nccl_version is None:
            raise UsageProblem(
                f"no NCCL log lines in {str(path)!r}: expected lines like "
                "`host:pid:tid [0] NCCL INFO ...` (run with NCCL_DEBUG=INFO)"
            )
        logs.append(RankNcclLog(path=str(path), rank=_rank(log), log=log))
    return logs


def _rank(log: NcclLog) -> int | None:
    if len(log.pids) != 1 or not log.communicators:
        return None
    world = max(log.communicators, key=lambda c: c.get("nranks") or 0)
    return world.get("rank")
