"""What an NCCL log's failure lines mean: each known kind once, with its cause, its count and the fix,
instead of the WARN lines listed one by one.

Known kinds (the lines are NCCL's own, seen in the public logs of tests/fixtures/nccl_logs):
- `shm-full`: creating a shared-memory segment (`nccl-shm-*`, `/dev/shm/nccl-*`) failed with "No
  space left on device" (`Call to posix_fallocate failed` to 2.11, `failed to extend /dev/shm/nccl-X
  to N bytes` after). That is the container's /dev/shm: Docker gives 64 MB unless `--shm-size` (or
  `--ipc=host`), a Kubernetes pod the node's default unless an `emptyDir` of `medium: Memory` is
  mounted there. NCCL needs one segment of the logged size per SHM connection.
- `no-ibverbs`: `Failed to open libibverbs.so` is NCCL looking for InfiniBand and not finding the
  library: harmless on a machine without IB (NCCL then uses its socket transport). A WARN line up to
  2.7 (explained here); an INFO line since, and in RCCL, which needs no explaining.
- `test-failure`: nccl-tests' and rccl-tests' `Test NCCL failure FILE:LINE 'reason'` lines, the
  reason the run stopped; the last one is shown (every rank prints one).
Other WARN lines are shown as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from ncclprobe.evidence.nccl.nccl_log import NcclLog
from ncclprobe.numbers import ascii_re
from ncclprobe.secrets import mask_text
from ncclprobe.verdict import Verdict, worst

_SHM_SEGMENT = ascii_re(
    r"creating shared memory segment (?P<name>\S+) \(size (?P<size>[0-9]{1,19})\)"
)
_NO_SPACE = "No space left on device"
_SHM_MARKS = ("posix_fallocate", "shared memory segment", "/dev/shm/nccl-")
_IBVERBS = "Failed to open libibverbs.so"


@dataclass(frozen=True)
class Explained:
    """One kind of failure line, explained."""

    kind: str
    severity: str  # "error" (the job failed or will), "info" (harmless)
    message: str
    fix: str
    lines: int  # how many log lines it stands for

    def to_json(self) -> dict:
        return self.__dict__ | {"message": mask_text(self.message)}


def explain(log: NcclLog) -> tuple[list[Explained], list[str]]:
    """(the explained kinds, the WARN lines no kind explains)."""
    shm = [w for w in log.warnings if any(mark in w for mark in _SHM_MARKS)]
    if not any(_NO_SPACE in w for w in shm):
        shm = []  # a shared-memory failure of another cause: shown as it is
    ib = [w for w in log.warnings if _IBVERBS in w]
    out = []
    if shm:
        sizes = {int(m["size"]) for w in shm if (m := _SHM_SEGMENT.search(w))}
        segment = f" of {max(sizes)} bytes ({max(sizes) / 2**20:.1f} MiB)" if sizes else ""
        out.append(
            Explained(
                kind="shm-full",
                severity="error",
                message=f"/dev/shm is full: NCCL could not create its shared-memory segments{segment} "
                f"({len(shm)} line(s)). In a container /dev/shm is small (Docker's default is 64 MB), "
                "and NCCL needs one segment per SHM connection between local ranks",
                fix="give the container a larger /dev/shm (docker run --shm-size=1g, or --ipc=host; "
                "Kubernetes: an emptyDir with medium: Memory mounted at /dev/shm), or "
                "NCCL_SHM_DISABLE=1 (local ranks then connect by P2P or the network: slower where "
                "P2P is off)",
                lines=len(shm),
            )
        )
    if ib:
        out.append(
            Explained(
                kind="no-ibverbs",
                severity="info",
                message="libibverbs.so not found: NCCL looked for InfiniBand and uses its socket "
                "transport for the network instead; harmless on a machine without InfiniBand",
                fix="nothing, unless the job should use InfiniBand/RoCE: then install rdma-core",
                lines=len(ib),
            )
        )
    if log.failures:
        last = log.failures[-1]
        out.append(
            Explained(
                kind="test-failure",
                severity="error",
                message=f"the test stopped: {last}"
                + (
                    f" (the last of {len(log.failures)} such lines)"
                    if len(log.failures) > 1
                    else ""
                ),
                fix="the reason is in the NCCL lines before it: run with NCCL_DEBUG=INFO and read the "
                "first WARN line",
                lines=len(log.failures),
            )
        )
    explained = set(shm) | set(ib)
    return out, [w for w in log.warnings if w not in explained]


def verdict(log: NcclLog, lint_findings=()) -> Verdict:
    """FINDINGS on an error-kind failure, an unexplained WARN line or a lint error; harmless lines
    (no libibverbs on a machine without InfiniBand) alone are not a finding."""
    from ncclprobe.nccl import lint

    kinds, unexplained = explain(log)
    failed = any(k.severity == "error" for k in kinds) or bool(unexplained)
    return worst([Verdict.of(failed), lint.verdict(lint_findings)])
