"""torchrun's failure summary in a job's log: every `[N]:` block under `Failures:` and `Root Cause
(first observed failure):`, read into `TorchrunFailure` records.

It lives apart from the line reader (`job_log`) because the summary is a block of its own, read
with its own state, and not attributed to a rank by any line prefix. The traceback line patterns
(`FRAME`, `RAISED`) are shared with the reader of a rank's own traceback.
"""

from __future__ import annotations

import re

from ncclprobe.evidence.hang.job_log_records import JobLog, TorchrunFailure
from ncclprobe.numbers import ascii_re
from ncclprobe.secrets import mask_text

FRAME = ascii_re(r'^\s+File "(?P<file>[^"]{1,400})", line (?P<line>\d{1,9}), in (?P<fn>\S{1,200})')
RAISED = ascii_re(r"^(?P<type>[A-Za-z_][\w.]{0,200})(?::(?: (?P<msg>.*))?)?$")
_FAILURES = ascii_re(r"^\s*(?P<what>Failures|Root Cause \(first observed failure\)):\s*$")
_FAILURE_FIELD = ascii_re(
    r"^\s+(?P<key>time|host|rank|exitcode|error_file|traceback)\s*: (?P<v>.*)$"
)
_FAILURE_RANK = ascii_re(r"^(?P<rank>\d{1,19}) \(local_rank: (?P<local>\d{1,19})\)")
_EXITCODE = ascii_re(r"^(?P<code>-?\d{1,19})(?!\d)(?: \(pid: (?P<pid>\d{1,19})\))?")


class TorchrunSummary:
    """The summary block being read (state across lines), filling `log.failures`."""

    def __init__(self, log: JobLog):
        self.log = log
        self.in_failures: bool | None = None  # None outside a summary; else root-cause section?
        self.failure: dict | None = None

    def feed(self, line: str) -> bool:
        """torchrun's `Failures:` / `Root Cause` blocks: `[N]:` then indented `key : value` lines."""
        heading = _FAILURES.match(line)
        if heading:
            self.close()
            self.in_failures = heading["what"].startswith("Root")
            return True
        if self.in_failures is None:
            return False
        if re.fullmatch(r"\[\d+\]:", line.strip()):
            self.close()
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
            self.close()
            if line.strip().startswith("====="):
                self.in_failures = None
            return True
        self.close()
        self.in_failures = None
        return False

    def close(self) -> None:
        f, self.failure = self.failure, None
        if not f:
            return
        ranks = _FAILURE_RANK.match(f.get("rank", ""))
        code = _EXITCODE.match(f.get("exitcode", ""))
        signal = re.search(r"\((SIG[A-Z]+)\)", f.get("traceback", "") + f.get("exitcode", ""))
        lines = f.get("lines", [])
        frames = [m for m in map(FRAME.match, lines) if m]
        raised = [x.strip() for x in lines if x.strip() and not x[:1].isspace() and RAISED.match(x)]
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
