"""The typed records a job's log is read into (`job_log.JobLog` and what it holds).

They live apart from the reader so that the analyses that only consume a reading (the hang rules,
the rank exits) depend on the records, not on the line patterns that fill them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ncclprobe.evidence.failure_lines import FailureLines


@dataclass(frozen=True)
class WatchdogTimeout:
    rank: int | None
    group: str | None  # the PG ID of the line's prefix ("0"), when it names one
    group_desc: str | None  # "default_pg"
    seq: int | None
    op: str | None  # OpType as printed: ALLREDUCE, BROADCAST, ...
    numel_in: int | None
    numel_out: int | None
    timeout_ms: int | None
    ran_ms: int | None
    time: str | None  # the log line's own clock ("0810 03:04:11.06"), when printed


@dataclass(frozen=True)
class WatchdogStatus:
    rank: int | None
    group: str | None
    group_desc: str | None
    seq: (
        int | None
    )  # the work the watchdog failed at; None on a rank that dumped on a peer's signal
    last_enqueued: int
    last_completed: int | None  # None: printed as -1 or as an impossible value (none completed)


@dataclass(frozen=True)
class Fingerprint:
    """One rank's collective as TORCH_DISTRIBUTED_DEBUG=DETAIL's check printed it."""

    rank: int
    seq: int  # as the group counts collectives from 1 (the Flight Recorder's number): printed + 1
    op: str
    numel: int | None  # elements of its (first) tensor


@dataclass(frozen=True)
class TorchrunFailure:
    rank: int | None
    local_rank: int | None
    exitcode: int | None
    signal: str | None  # "SIGABRT", from the traceback field
    pid: int | None
    host: str | None
    time: str | None
    root_cause: bool
    # where the rank ran under torch's @record, the summary holds its traceback: its last line and
    # innermost frame ("train.py:406 in step"); else None
    exception: str | None = None
    raised_at: str | None = None


@dataclass
class JobLog:
    path: str
    lines: int = 0
    read_lines: int = 0  # lines that carried something read here
    timeouts: list[WatchdogTimeout] = field(default_factory=list)
    statuses: list[WatchdogStatus] = field(default_factory=list)
    failures: list[TorchrunFailure] = field(default_factory=list)
    errors: dict[int, str] = field(default_factory=dict)  # rank -> last exception line
    # rank -> the innermost frame of its last traceback: "train.py:406 in step"
    raised_at: dict[int, str] = field(default_factory=dict)
    # ranks that wrote more after their last traceback (`step 2 ...`): it was caught and logged, the
    # rank went on; a traceback is a rank's end only where nothing but blank or launcher lines follow
    went_on: set[int] = field(default_factory=set)
    # torchrun's `<attempt>/N/stderr.log`: N is the LOCAL rank (torch's elastic/multiprocessing
    # names the folder by local_rank); set to N where the file's own lines (`[rankN]:`) do not show
    # it to be the global rank too, else None
    local_file_rank: int | None = None
    gloo_timeouts: dict[int, int] = field(default_factory=dict)  # rank -> ms
    peer_closed: set[int] = field(default_factory=set)  # ranks that saw a peer's socket close
    fr_disabled: set[int] = field(default_factory=set)
    dump_signals: set[int] = field(default_factory=set)
    ranks: set[int] = field(default_factory=set)  # every rank a line was attributed to, read or not
    fingerprints: list[Fingerprint] = field(default_factory=list)  # DETAIL's mismatched calls
    barrier_missing: dict[int, int] = field(default_factory=dict)  # rank -> ms (monitoredBarrier)
    # rank -> (bytes received, bytes expected)
    gloo_size_mismatch: dict[int, tuple[int, int]] = field(default_factory=dict)
    remote_errors: set[int] = field(default_factory=set)  # ranks whose NCCL saw a peer go away
    ops_failed: set[int] = field(
        default_factory=set
    )  # `Some NCCL operations have failed or timed out`
    # how NCCL connects, as its INFO lines in the log say: {"network": "AWS Libfabric",
    # "NCCL_NET_GDR_LEVEL": "PHB", "net_plugin_missing": "<NCCL's line>"}; empty where none
    transport: dict[str, str] = field(default_factory=dict)
    # NCCL's communicator lines in the log (`comm 0x.. rank 0 nranks 4 ... - Init COMPLETE`): rank,
    # nranks, init_complete (evidence.nccl.nccl_log's dicts), at most MAX_COMMS
    nccl_comms: list[dict] = field(default_factory=list)
    # lines that look like a failure and that nothing here reads (`evidence.failure_lines`)
    failure_lines: FailureLines = field(default_factory=lambda: FailureLines("job log"))

    @property
    def hang_seen(self) -> bool:
        """A timeout (NCCL's watchdog or gloo's) or a failed rank: the job did not finish cleanly."""
        return bool(
            self.timeouts
            or self.statuses
            or self.gloo_timeouts
            or self.failures
            or self.fingerprints
            or self.barrier_missing
            or self.gloo_size_mismatch
            or self.ops_failed
        )
