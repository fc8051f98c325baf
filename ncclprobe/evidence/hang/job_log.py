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
from pathlib import Path

from ncclprobe.evidence.failure_lines import FailureLines
from ncclprobe.evidence.hang.job_log_records import (
    Fingerprint,
    JobLog,
    WatchdogStatus,
    WatchdogTimeout,
)
from ncclprobe.evidence.hang.log_rank import (
    PG_PREFIX,
    file_rank,
    line_rank,
    says_rank,
    torchrun_stream,
)
from ncclprobe.evidence.hang.torchrun_summary import FRAME, RAISED, TorchrunSummary
from ncclprobe.evidence.nccl.nccl_log import NcclLog, parse_nccl_log
from ncclprobe.evidence.text import clean_line, read_text_file
from ncclprobe.evidence.wrapped import unwrap
from ncclprobe.numbers import ascii_re
from ncclprobe.secrets import mask_text

_GLOG = ascii_re(
    r"^\[(?P<level>[IWEF])(?:(?P<md>\d{3,4}) (?P<hms>\d\d:\d\d:\d\d(?:\.\d+)?))? ?(?:\d+ )?\S+:\d+\] ?"
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


def read_job_log(path: str | Path) -> JobLog:
    return parse_job_log(read_text_file(path, "job log"), str(path))


def parse_job_log(text: str, path: str = "LOG") -> JobLog:
    lines = unwrap(text.splitlines())
    nccl = parse_nccl_log(text) if "NCCL " in text else None
    comms = nccl.communicators[:MAX_COMMS] if nccl else []
    own_rank = file_rank(path, lines, comms)
    reader = _Reader(JobLog(path=path, failure_lines=FailureLines(path)), own_rank)
    if own_rank is not None and torchrun_stream(path) and not says_rank(lines, own_rank):
        reader.log.local_file_rank = own_rank
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


class _Reader:
    def __init__(self, log: JobLog, file_rank: int | None):
        self.log, self.file_rank = log, file_rank
        self.unnamed: dict = {}  # rank -> index of its last timeout whose line named no group
        self.summary = TorchrunSummary(log)
        self.tracebacks: dict[int, str | None] = {}  # rank -> its open traceback's last frame
        self.ended: set[int] = set()  # ranks whose last traceback ended in its exception line

    def feed(self, raw: str) -> None:
        log = self.log
        log.lines += 1
        line = clean_line(raw)
        if self.summary.feed(line):
            return
        rank, line = line_rank(line)
        glog = _GLOG.match(line)
        clock = f"{glog['md']} {glog['hms']}" if glog and glog["md"] else None
        message = line[glog.end() :] if glog else line
        prefix = PG_PREFIX.search(message)
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
        frame = FRAME.match(message)
        if frame:
            self.tracebacks[rank] = f"{frame['file']}:{frame['line']} in {frame['fn']}"
            return True
        if message[:1].isspace() or not message.strip():
            return True  # a frame's source line or its `^^^^` marks
        where = self.tracebacks.pop(rank)
        if not RAISED.match(message.strip()):
            return False  # not an exception line: read as any other line
        self.log.errors[rank] = mask_text(message.strip())[:500]
        self.ended.add(rank)
        self.log.went_on.discard(rank)
        if where is not None:
            self.log.raised_at[rank] = where
        prefix = PG_PREFIX.search(message)
        if not self._message(message, rank, prefix, None):  # a failure it reads (gloo's timeout)
            self.log.failure_lines.offer(self.log.lines, message)
        else:
            self.log.read_lines += 1
        return True

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
        self.summary.close()
        kept: dict[tuple, WatchdogTimeout] = {}
        for t in self.log.timeouts:
            kept.setdefault((t.rank, t.group, t.seq, t.op), t)
        named = {(t.rank, t.seq, t.op) for t in kept.values() if t.group is not None}
        self.log.timeouts = [
            t for t in kept.values() if t.group is not None or (t.rank, t.seq, t.op) not in named
        ]
        return self.log


def _add(target: set, rank: int | None) -> bool:
    if rank is not None:
        target.add(rank)
    return True
