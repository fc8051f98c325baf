"""Read a distributed job's stderr/log for what PyTorch and torchrun said about a hang or failure.

What is read (any other line is skipped, never an error), in the formats torch 2.2 to 2.13 print:
- the rank of a line: torch's `[rankN]:` prefix (its log and excepthook prefix once the process
  group exists), after torchrun's `--tee` prefix `[default0]:`; else the `Rank N` of a watchdog
  line's own prefix (`[Rank 7]`, `[PG 0 Rank 7]`, `[PG ID 0 PG GUID 0(default_pg) Rank 1]`); else
  the rank of a rank's own file: a name that is exactly one (`rank3.stderr`, `rank_3.log`,
  `train_rank3.txt`, torchrun's `.../attempt_0/3/stderr.log`), in a file whose own prefixes name no
  other rank and no launcher's `--tee` stream, and under the job's size where NCCL's lines give it
  (any other name's digits, `..._megatron735.log`, are no rank);
- the watchdog's timeout: `Watchdog caught collective operation timeout: WorkNCCL(SeqNum=78,
  OpType=BROADCAST, NumelIn=80, NumelOut=80, Timeout(ms)=600000) ran for 600096 milliseconds before
  timing out.` (repeated in the exception it raises: counted once per rank, group and seq);
- its group status, in each generation's words: `failure detected by watchdog at work sequence id:
  78 PG status: last enqueued work: 79, last completed work: 77`, `Exception (either an error or
  timeout) detected by watchdog at work: 78, last enqueued NCCL work: 79, last completed NCCL work:
  77.`, `Timeout at NCCL work: 78, last enqueued NCCL work: 79, last completed NCCL work: 77.`, and
  on a rank told to dump by a peer, `Received a dump signal ... Last enqueued NCCL work: 3, last
  completed NCCL work: 3.` (no sequence number: how far that rank got);
- the Flight Recorder's own lines: disabled (`... FlightRecorder is disabled ...`), a rank that
  signalled the dump or saw a peer's signal;
- gloo's `Timed out waiting 5000ms for recv operation to complete` and `Connection closed by peer`;
- the last exception line of each rank's Python traceback (any exception name, where it ends a
  `Traceback (most recent call last):` of that rank) and its innermost frame (`file:line in fn`);
  the frames' source lines are context, not failures of their own;
- torchrun's failure summary: every `[N]:` block under `Failures:` and `Root Cause (first observed
  failure):` (rank, local rank, exit code, signal, host, time; where the rank ran under torch's
  `@record`, its traceback's exception and innermost frame);
- a rank's `Some NCCL operations have failed or timed out` (its watchdog took the process down);
- the network NCCL chose and the transport settings it read from the environment, where the log
  holds NCCL's INFO lines (read by `evidence.nccl.nccl_log`, the one reader of NCCL's lines).

Values PyTorch prints where it has none are never read as numbers: an element count of 2^64-1 (the
int64 -1 of a coalesced or point-to-point work, printed unsigned) is no count, and a last completed
work of -1, or above the last enqueued one (an uninitialised value, seen printed as
76280750235782912), means that no work of the group had completed. A paste broken at a terminal's
width is joined back into its logical lines first (`evidence.wrapped`); line numbers then count
those.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.evidence.failure_lines import FailureLines
from ncclprobe.evidence.nccl.nccl_log import NcclLog, parse_nccl_log
from ncclprobe.evidence.text import clean_line, read_text_file
from ncclprobe.evidence.wrapped import unwrap
from ncclprobe.numbers import ascii_re
from ncclprobe.secrets import mask_text

_TEE = ascii_re(r"^\[[A-Za-z_][\w-]*?(?P<local>\d{1,19})\]:")
_RANK = ascii_re(r"^\[rank(?P<rank>\d{1,19})\]:")
_GLOG = ascii_re(
    r"^\[(?P<level>[IWEF])(?:(?P<md>\d{3,4}) (?P<hms>\d\d:\d\d:\d\d(?:\.\d+)?))? ?(?:\d+ )?\S+:\d+\] ?"
)
_PG_PREFIX = ascii_re(
    r"\[(?:PG ID (?P<pgid>\d{1,19}) PG GUID (?P<guid>[^\s(\]]+)(?:\((?P<desc>[^)]{0,256})\))? |PG (?P<pg>\d{1,19}) "
    r"(?:\((?P<desc2>[^)]{0,256})\) )?)?Rank (?P<rank>\d{1,19})\]"
)
_WORK = ascii_re(r"Watchdog caught collective operation timeout: WorkNCCL\((?P<fields>.{0,400})")
_WORK_FIELD = ascii_re(r"(?P<key>SeqNum|OpType|NumelIn|NumelOut|Timeout\(ms\))=(?P<value>[\w.]+)")
_RAN_FOR = ascii_re(r"ran for (?P<ms>\d{1,19}) milliseconds before timing out")
_STATUS = ascii_re(
    r"(?i)(?:(?:work sequence id|watchdog at work|Timeout at NCCL work): (?P<seq>\d{1,19})\D.{0,200}?)?"
    r"last enqueued (?:NCCL )?work: (?P<enq>\d{1,19}), last completed (?:NCCL )?work: (?P<done>-?\d{1,19})(?!\d)"
)
_FR_OFF = ascii_re(r"FlightRecorder is disabled|TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value")
_DUMP_SIGNAL = ascii_re(r"(?i)signal dumping|dump signal")
# TORCH_DISTRIBUTED_DEBUG=DETAIL (ProcessGroupWrapper, torch 2.13): every collective is checked across
# ranks before it runs; a mismatch names both ranks' calls (`SequenceNumber` counts from 0: the 4th
# collective is 3), a rank that never arrives fails the monitored barrier
_MISMATCH = ascii_re(
    r"Detected mismatch between collectives on ranks\. Rank (?P<a>\d{1,19}) is running collective: "
)
_FINGERPRINT = ascii_re(
    r"Rank (?P<rank>\d{1,19}) is running collective: CollectiveFingerPrint\(SequenceNumber=(?P<seq>\d{1,19}), "
    r"OpType=(?P<op>\w+)(?:, TensorShape=\[(?P<shape>[^\]]{0,256})\])?"
)
_BARRIER = ascii_re(
    r"Ranks? (?P<ranks>\d{1,19}(?:, ?\d{1,19})*) failed to pass monitoredBarrier in (?P<ms>\d{1,19}) ms"
)
# gloo's own check of a received message (pair.cc): a collective of another size on the peer
_GLOO_SIZE = ascii_re(
    r"op\.preamble\.length <= op\.nbytes\. (?P<got>\d{1,19}) vs (?P<expected>\d{1,19})\. Received data size doesn't "
    r"match expected size"
)
# a collective that failed because a peer went away (NCCL's ncclRemoteError, and the socket line
# under its `Last error:`): the aftermath of another rank's exit, told by the hang reading's notes
_REMOTE = ascii_re(
    r"remote process exited or there was a network error|ncclRemoteError|Connection closed by remote peer"
)
_GLOO_TIMEOUT = ascii_re(r"Timed out waiting (?P<ms>\d{1,19})ms for (?P<dir>recv|send) operation")
_PEER_CLOSED = ascii_re(
    r"Connection closed by peer \[(?P<peer>[^\]\s]+)\]:(?P<port>\d{1,19})(?!\d)"
)
_EXCEPTION = ascii_re(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)): (?P<msg>.*)$")
_FRAME = ascii_re(r'^\s+File "(?P<file>[^"]{1,400})", line (?P<line>\d{1,9}), in (?P<fn>\S{1,200})')
_RAISED = ascii_re(r"^(?P<type>[A-Za-z_][\w.]{0,200})(?::(?: (?P<msg>.*))?)?$")
_FAILURES = ascii_re(r"^\s*(?P<what>Failures|Root Cause \(first observed failure\)):\s*$")
_FAILURE_FIELD = ascii_re(
    r"^\s+(?P<key>time|host|rank|exitcode|error_file|traceback)\s*: (?P<v>.*)$"
)
_FAILURE_RANK = ascii_re(r"^(?P<rank>\d{1,19}) \(local_rank: (?P<local>\d{1,19})\)")
_EXITCODE = ascii_re(r"^(?P<code>-?\d{1,19})(?!\d)(?: \(pid: (?P<pid>\d{1,19})\))?")
# what surrounds a failure this reader reads (the watchdog's teardown, torchrun's account of the
# ranks it stopped, a traceback's header): context, not a failure of its own
_CONTEXT = ascii_re(
    r"^Traceback \(most recent call last\):|Some NCCL operations have failed or timed out"
    r"|To avoid data inconsistency, we are taking the entire process down|Stack trace of the failed collective"
    r"|terminate called after throwing an instance of 'c10::DistBackendError'"
    r"|torch[./]distributed[./]elastic[./]|elastic/multiprocessing/|ChildFailedError"
    r"|^\s*(?:exitcode|error_file|traceback)\s*:|^\s*File \"|^\S+ FAILED$"
    r"|terminate called after throwing an instance of 'gloo::EnforceNotMet'|^Last error:\s*$"
)
_OPS_FAILED = "Some NCCL operations have failed or timed out"
# what a process prints on its way out after an uncaught exception (torch's teardown warning,
# Python's resource tracker): no sign that the rank went on after its traceback
_EXITING = ascii_re(
    r"destroy_process_group\(\) was not called|process group has NOT been destroyed|resource_tracker"
    r"|leaked (?:semaphore|shared_memory)"
)
# NCCL's settings that shape how a communicator connects its ranks (`NCCL_NET`, `NCCL_NET_GDR_LEVEL`,
# `NCCL_IB_HCA`, `NCCL_SOCKET_IFNAME`, `NCCL_P2P_LEVEL`, ...): named where a first collective hangs
_TRANSPORT_VARS = ascii_re(r"^NCCL_(?:NET|IB_|SOCKET_|P2P_|SHM_|CROSS_NIC|COLLNET|NVLS_ENABLE)")
MAX_COMMS = 1024
_NO_VALUE = 1 << 63  # a printed count at or above this is an unsigned -1 (or garbage), not a count
# a rank's own file: `rank3.stderr`, `rank_3.log`, `train_rank3.txt`, `job.rank-3.out` (the word
# rank, alone or after a separator, then the number, then nothing but a log's extension)
_NAME_RANK = ascii_re(
    r"(?i)^(?:.*[_.-])?rank[_-]?(?P<rank>\d{1,9})(?:\.(?:log|stderr|stdout|err|out|txt))?$"
)
_OWN_STREAM = ("stderr.log", "stdout.log", "error.log", "stderr", "stdout")


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


def read_job_log(path: str | Path) -> JobLog:
    return parse_job_log(read_text_file(path, "job log"), str(path))


def parse_job_log(text: str, path: str = "LOG") -> JobLog:
    lines = unwrap(text.splitlines())
    nccl = parse_nccl_log(text) if "NCCL " in text else None
    comms = nccl.communicators[:MAX_COMMS] if nccl else []
    file_rank = _file_rank(path, lines, comms)
    reader = _Reader(JobLog(path=path, failure_lines=FailureLines(path)), file_rank)
    if file_rank is not None and _torchrun_stream(path) and not _says_rank(lines, file_rank):
        reader.log.local_file_rank = file_rank
    for raw in lines:
        reader.feed(raw)
    log = reader.finish()
    if nccl is not None:
        log.transport = _transport(nccl)
        log.nccl_comms = comms
    return log


def _transport(nccl: NcclLog) -> dict[str, str]:
    """The network and connection settings NCCL's own lines in the log name (first value each)."""
    out = {"network": ", ".join(sorted(nccl.networks))} if nccl.networks else {}
    out.update({k: v for k, v in nccl.env.items() if _TRANSPORT_VARS.match(k)})
    if nccl.net_plugin_missing:
        out["net_plugin_missing"] = nccl.net_plugin_missing
    return out


def _torchrun_stream(path: str) -> bool:
    """torchrun's own file of one process: `<run>/attempt_0/3/stderr.log` (3: its local rank)."""
    p = Path(path)
    return p.name in _OWN_STREAM and p.parent.name.isdigit() and len(p.parent.name) <= 9


def _says_rank(lines: list[str], rank: int) -> bool:
    """A line of the file carries torch's own `[rankN]:` prefix for this rank (the global rank)."""
    for raw in lines:
        own = _RANK.match(clean_line(raw))
        if own is not None and int(own["rank"]) == rank:
            return True
    return False


def _rank_from_name(path: str) -> int | None:
    """`rank3.stderr` -> 3; torchrun's `<run>/attempt_0/3/stderr.log` -> 3 (its local rank: see
    `JobLog.local_file_rank`); else None: only a name that is exactly a rank's file gives a rank
    (`megatron735.log`, `4rank_job.log` give none)."""
    p = Path(path)
    if _torchrun_stream(path):
        return int(p.parent.name)
    match = _NAME_RANK.match(p.name)
    return int(match["rank"]) if match else None


def _file_rank(path: str, lines: list[str], comms: list[dict]) -> int | None:
    """The rank of lines that carry none: the name's, where the file is that rank's alone. A line
    that names another rank (`[rank2]:`, `[Rank 2]`) or a launcher's tee stream (`[default2]:`, a
    console of several ranks) makes it no rank's file; so does a rank at or above every size of the
    communicators NCCL's lines show. A rank the log does not hold is never made up from its name."""
    rank = _rank_from_name(path)
    if rank is None:
        return None
    for raw in lines:
        line = clean_line(raw)
        if _TEE.match(line) and not line.startswith("[rank"):
            return None
        own = _RANK.match(line)
        prefix = _PG_PREFIX.search(line) if own is None and "Rank " in line else None
        named = own or prefix
        if named is not None and int(named["rank"]) != rank:
            return None
    sizes = [c["nranks"] for c in comms if isinstance(c.get("nranks"), int)]
    return None if sizes and rank >= max(sizes) else rank


class _Reader:
    def __init__(self, log: JobLog, file_rank: int | None):
        self.log, self.file_rank = log, file_rank
        self.unnamed: dict = {}  # rank -> index of its last timeout whose line named no group
        self.in_failures: bool | None = None  # None outside a summary; else root-cause section?
        self.failure: dict | None = None
        self.tracebacks: dict[int, str | None] = {}  # rank -> its open traceback's last frame
        self.ended: set[int] = set()  # ranks whose last traceback ended in its exception line

    def feed(self, raw: str) -> None:
        log = self.log
        log.lines += 1
        line = clean_line(raw)
        if self._summary(line):
            return
        rank, line = self._rank(line)
        glog = _GLOG.match(line)
        clock = f"{glog['md']} {glog['hms']}" if glog and glog["md"] else None
        message = line[glog.end() :] if glog else line
        prefix = _PG_PREFIX.search(message)
        if rank is None and prefix:
            rank = int(prefix["rank"])
        if rank is None:
            rank = self.file_rank
        if rank is not None:
            log.ranks.add(rank)
            if (
                rank in self.ended
                and message.strip()
                and not _CONTEXT.search(message)
                and not (_EXITING.search(message))
            ):
                log.went_on.add(rank)  # it wrote more after its traceback: that was caught
        if rank is not None and self._traceback(message, rank):
            return
        if self._message(message, rank, prefix, clock):
            log.read_lines += 1
        elif not _CONTEXT.search(message):  # not read, nor context of a failure read here
            log.failure_lines.offer(log.lines, line)

    def _traceback(self, message: str, rank: int) -> bool:
        """A rank's Python traceback: its frames (the innermost kept) and their source lines are
        context; the first unindented line after them is its exception, whatever its name (a
        `BadBatch: ...` too), kept as the rank's error and offered as a failure line."""
        if message.startswith("Traceback (most recent call last):"):
            self.tracebacks[rank] = None
            return True
        if rank not in self.tracebacks:
            return False
        frame = _FRAME.match(message)
        if frame:
            self.tracebacks[rank] = f"{frame['file']}:{frame['line']} in {frame['fn']}"
            return True
        if message[:1].isspace() or not message.strip():
            return True  # a frame's source line or its `^^^^` marks
        where = self.tracebacks.pop(rank)
        if not _RAISED.match(message.strip()):
            return False  # not an exception line: read as any other line
        self.log.errors[rank] = mask_text(message.strip())[:500]
        self.ended.add(rank)
        self.log.went_on.discard(rank)
        if where is not None:
            self.log.raised_at[rank] = where
        prefix = _PG_PREFIX.search(message)
        if not self._message(message, rank, prefix, None):  # a failure it reads (gloo's timeout)
            self.log.failure_lines.offer(self.log.lines, message)
        else:
            self.log.read_lines += 1
        return True

    def _rank(self, line: str) -> tuple[int | None, str]:
        tee = _TEE.match(line)
        if tee and not line.startswith("[rank"):
            line = line[tee.end() :]
        match = _RANK.match(line)
        if match is None:
            return None, line
        rest = line[match.end() :]
        return int(match["rank"]), rest[1:] if rest.startswith(" ") else rest  # `[rank0]: ` + text

    def _message(
        self, message: str, rank: int | None, prefix: re.Match[str] | None, clock: str | None
    ) -> bool:
        log = self.log
        group = (prefix["pgid"] or prefix["pg"]) if prefix else None
        desc = (prefix["desc"] or prefix["desc2"]) if prefix else None
        if "Watchdog caught collective operation timeout" in message:
            return self._timeout(message, rank, group, desc, clock)
        status = _STATUS.search(message) if "ast enqueued" in message else None
        if status:
            seq = int(status["seq"]) if status["seq"] else None
            enqueued, done = int(status["enq"]), int(status["done"])
            completed = done if 0 <= done <= enqueued else None  # -1 or garbage: none completed
            log.statuses.append(WatchdogStatus(rank, group, desc, seq, enqueued, completed))
            if group is not None:
                self._name_group(log.statuses[-1])
            if _DUMP_SIGNAL.search(message):
                _add(log.dump_signals, rank)
            return True
        if _OPS_FAILED in message:
            return _add(log.ops_failed, rank)
        if _FR_OFF.search(message):
            return _add(log.fr_disabled, rank)
        if _DUMP_SIGNAL.search(message):
            return _add(log.dump_signals, rank)
        if self._detail(message, rank):
            return True
        if _REMOTE.search(message):
            self.log.remote_errors.add(rank if rank is not None else -1)
            return True
        gloo = _GLOO_TIMEOUT.search(message)
        if gloo and rank is not None:
            log.gloo_timeouts.setdefault(rank, int(gloo["ms"]))
        if _PEER_CLOSED.search(message):
            _add(log.peer_closed, rank)
        exception = _EXCEPTION.match(message.strip()) if not message[:1].isspace() else None
        if exception and rank is not None:
            log.errors[rank] = mask_text(message.strip())[:500]
        return bool(gloo)  # an exception line is shown (unless it is gloo's timeout, read here)

    def _detail(self, message: str, rank: int | None) -> bool:
        """DETAIL's cross-rank check and gloo's size check: read, with every rank's numbers."""
        log = self.log
        if "Detected mismatch between collectives" in message and _MISMATCH.search(message):
            for m in _FINGERPRINT.finditer(message):
                shape = (
                    [int(x) for x in m["shape"].split(",") if x.strip().isdigit()]
                    if m["shape"]
                    else []
                )
                numel = 1
                for x in shape:
                    numel *= x
                found = Fingerprint(
                    int(m["rank"]), int(m["seq"]) + 1, m["op"], numel if shape else None
                )
                if found not in log.fingerprints:
                    log.fingerprints.append(found)
            return True
        barrier = _BARRIER.search(message) if "monitoredBarrier" in message else None
        if barrier:
            for r in barrier["ranks"].split(","):
                log.barrier_missing.setdefault(int(r), int(barrier["ms"]))
            return True
        if "successfully reached monitoredBarrier" in message:
            return True  # the peers of a rank that failed the barrier: that rank's line says which
        size = _GLOO_SIZE.search(message) if "Received data size" in message else None
        if size and rank is not None:
            log.gloo_size_mismatch.setdefault(rank, (int(size["got"]), int(size["expected"])))
            return True
        return False

    def _timeout(
        self,
        message: str,
        rank: int | None,
        group: str | None,
        desc: str | None,
        clock: str | None,
    ) -> bool:
        work = _WORK.search(message)
        fields = (
            {m["key"]: m["value"] for m in _WORK_FIELD.finditer(work["fields"])} if work else {}
        )
        number = lambda key: (  # noqa: E731
            int(fields[key])
            if fields.get(key, "").isdigit() and int(fields[key]) < _NO_VALUE
            else None
        )
        ran = _RAN_FOR.search(message)
        timeout = WatchdogTimeout(
            rank=rank,
            group=group,
            group_desc=desc,
            seq=number("SeqNum"),
            op=fields.get("OpType"),
            numel_in=number("NumelIn"),
            numel_out=number("NumelOut"),
            timeout_ms=number("Timeout(ms)"),
            ran_ms=int(ran["ms"]) if ran else None,
            time=clock,
        )
        self.log.timeouts.append(timeout)
        if (
            group is None
        ):  # `[Rank 0] Watchdog caught ...`: the status line that follows names the group
            self.unnamed[rank] = len(self.log.timeouts) - 1
        return True

    def _name_group(self, status: WatchdogStatus) -> None:
        """Give the rank's last timeout without a group the group of its status line (same seq)."""
        index = self.unnamed.pop(status.rank, None)
        if index is not None and self.log.timeouts[index].seq == status.seq:
            self.log.timeouts[index] = dataclasses.replace(
                self.log.timeouts[index], group=status.group, group_desc=status.group_desc
            )

    def finish(self) -> JobLog:
        """One timeout per rank, group, seq and op: the watchdog prints each again in its exception."""
        self._close_failure()
        kept: dict[tuple, WatchdogTimeout] = {}
        for t in self.log.timeouts:
            kept.setdefault((t.rank, t.group, t.seq, t.op), t)
        named = {(t.rank, t.seq, t.op) for t in kept.values() if t.group is not None}
        self.log.timeouts = [
            t for t in kept.values() if t.group is not None or (t.rank, t.seq, t.op) not in named
        ]
        return self.log

    def _summary(self, line: str) -> bool:
        """torchrun's `Failures:` / `Root Cause` blocks: `[N]:` then indented `key : value` lines."""
        heading = _FAILURES.match(line)
        if heading:
            self._close_failure()
            self.in_failures = heading["what"].startswith("Root")
            return True
        if self.in_failures is None:
            return False
        if re.fullmatch(r"\[\d+\]:", line.strip()):
            self._close_failure()
            self.failure = {}
            return True
        found = _FAILURE_FIELD.match(line)
        if found and self.failure is not None:
            self.failure[found["key"]] = found["v"].strip()
            return True
        if self.failure is not None and "traceback" in self.failure and line.startswith("  "):
            self.failure.setdefault("lines", []).append(line[2:])  # @record's traceback, indented
            return True
        if line.strip().startswith(("=====", "-----", "<NO_OTHER_FAILURES>")):
            self._close_failure()
            if line.strip().startswith("====="):
                self.in_failures = None
            return True
        self._close_failure()
        self.in_failures = None
        return False

    def _close_failure(self) -> None:
        f, self.failure = self.failure, None
        if not f:
            return
        ranks = _FAILURE_RANK.match(f.get("rank", ""))
        code = _EXITCODE.match(f.get("exitcode", ""))
        signal = re.search(r"\((SIG[A-Z]+)\)", f.get("traceback", "") + f.get("exitcode", ""))
        lines = f.get("lines", [])
        frames = [m for m in map(_FRAME.match, lines) if m]
        raised = [
            x.strip() for x in lines if x.strip() and not x[:1].isspace() and _RAISED.match(x)
        ]
        if raised:  # shown as any exception is, unless a reading names it (`rank_exits`)
            self.log.failure_lines.offer(self.log.lines, raised[-1])
        self.log.failures.append(
            TorchrunFailure(
                rank=int(ranks["rank"]) if ranks else None,
                local_rank=int(ranks["local"]) if ranks else None,
                exitcode=int(code["code"]) if code else None,
                signal=signal[1] if signal else None,
                pid=int(code["pid"]) if code and code["pid"] else None,
                host=f.get("host"),
                time=f.get("time"),
                root_cause=bool(self.in_failures),
                exception=mask_text(raised[-1])[:500] if raised else None,
                raised_at=f"{frames[-1]['file']}:{frames[-1]['line']} in {frames[-1]['fn']}"
                if frames
                else None,
            )
        )
        self.log.read_lines += 1


def _add(target: set, rank: int | None) -> bool:
    if rank is not None:
        target.add(rank)
    return True
