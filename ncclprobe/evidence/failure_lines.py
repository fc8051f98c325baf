"""Lines that look like a failure and that no reader explained: the one mechanism every reader uses
to show what it does not understand, instead of dropping it (issue 36 §3).

A reader feeds every line it did not read as its own healthy content to a `FailureLines`; the lines
that look like a failure are kept (verbatim, masked by the one secrets policy, control characters
escaped, each distinct line once with its count) and become one finding, `not-explained`, which
every report carries the same way (`not_explained_finding`). A reader that explains a line (a known
failure class, `evidence/nccl/nccl_failures.py`) says so and the line is not repeated here.

What looks like a failure was built from real logs (NCCL and nccl-tests output, torchrun and
PyTorch's watchdog, vLLM/SGLang servers, collect-env and P2P tools): the words `fail`/`failed`/
`failure`, `error`/`Error`/`ERROR` (and exception names ending in Error or Exception), NCCL's `WARN`
level, `abort`, `illegal`, `unavailable`, `Traceback`, `fatal`, `timed out`, `refused`, `No route to
host`, `out of memory`, `Segmentation fault`, `core dumped`, `Connection closed`/`reset`, `terminate
called`. Healthy lines that carry those words are
not failures: NCCL's INFO lines (the level says so), the words `NCCL_DEBUG=WARN` and `... set by
environment to WARN` (the rest of such a line is still read: `NCCL error: invalid usage (run with
NCCL_DEBUG=WARN for details)` is a failure), counts of zero (`0 errors`, `errors: 0`, `Out of
bounds values : 0 OK`, `#wrong`),
torchrun's `error_file: <N/A>`, C++ stack frames (`frame #0: c10::Error::Error...`: the failure is
the line above them), lscpu's `Vulnerability Tsx async abort:` lines, deprecation notices
(`FutureWarning: ...`, `... is deprecated; use ...`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ncclprobe.findings import Finding
from ncclprobe.numbers import ascii_re
from ncclprobe.secrets import mask_text

LIMIT = 20  # distinct lines kept per source; the rest are counted
WIDTH = 400  # characters shown of one line

_FAILURE = ascii_re(
    r"(?i:\b(?:fail(?:s|ed|ure|ures)?|errors?|abort(?:s|ed|ing)?|illegal|unavailable|traceback"
    r"|fatal|timed out|refused|no route to host|out of memory|segmentation fault|core dumped"
    r"|unreachable|connection (?:closed|reset)|terminate called)\b)"
    r"|\b\w+(?:Error|Exception)\b|\bWARN\b|\bFAILED\b"
)
_HEALTHY = ascii_re(
    r"\bNCCL (?:INFO|TRACE)\b"  # NCCL's own level: an INFO line is not a failure
    r"|(?i:\b0 (?:errors?|failures?|failed)\b|\b(?:errors?|failures?|failed)\s*[:=]\s*0\b)"
    r"|Out of bounds values\s*:\s*0 OK"
    r"|\berror_file\s*:\s*<N/A>"
    r"|(?i:\bis deprecated\b|\bdeprecated\b.*\buse\b)"
    r"|\b(?:Deprecation|PendingDeprecation|Future)Warning: "
    r"|^\s*#\s+size\s+count\b"  # nccl-tests' header (`#wrong`)
    r"|^\s*frame #\d+: "  # a C++ stack's frames: the failure is the line above them
    r"|^\s*Vulnerability [\w ]+:"  # lscpu's list of CPU vulnerabilities (`Tsx async abort`)
)
# a mention of NCCL's WARN level is not a failure word, but the rest of its line may hold one:
# NCCL's own error strings end `(run with NCCL_DEBUG=WARN for details)` (ncclGetErrorString, 2.18+)
_MENTIONS = ascii_re(r"NCCL_DEBUG\s*[=:]?\s*WARN|set by environment to WARN")
_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0, 9), *range(11, 32), 127]}


def looks_like_failure(line: str) -> bool:
    """A line with a failure word that is not one of the healthy lines that carry one."""
    text = _MENTIONS.sub(" ", line) if "WARN" in line else line
    return bool(_FAILURE.search(text)) and not _HEALTHY.search(text)


def shown(line: str) -> str:
    """The line as it may be printed: masked (`ncclprobe.secrets`), control characters escaped (a
    terminal escape in a log must not reach the terminal), cut to WIDTH characters."""
    text = mask_text(line.rstrip("\r\n")).translate(_CONTROL)
    return text if len(text) <= WIDTH else text[: WIDTH - 1] + "…"


@dataclass(frozen=True)
class FailureLine:
    source: str  # the file it was read from
    number: int  # its line number there (1-based; the first time it was seen)
    text: str  # as shown: masked, escaped, cut
    count: int = 1  # how many times the same line was seen

    def to_json(self) -> dict:
        return {"source": self.source, "line": self.number, "text": self.text, "count": self.count}


@dataclass
class FailureLines:
    """What one reader saw of one source that looks like a failure and that it did not explain."""

    source: str
    lines: list[FailureLine] = field(default_factory=list)
    total: int = 0  # every such line, repeats and those past LIMIT included
    _index: dict[str, int] = field(default_factory=dict, repr=False)

    def offer(self, number: int, line: str, source: str | None = None) -> bool:
        """Keep `line` (line `number` of `source`, else of this collection's source) when it looks
        like a failure; True when kept."""
        if not looks_like_failure(line):
            return False
        self.total += 1
        text = shown(line.strip())
        index = self._index.get(text)
        if index is not None:
            old = self.lines[index]
            self.lines[index] = FailureLine(old.source, old.number, old.text, old.count + 1)
        elif len(self.lines) < LIMIT:
            self._index[text] = len(self.lines)
            self.lines.append(FailureLine(source or self.source, number, text))
        return True

    def forget(self, explained: Iterable[str]) -> None:
        """Drop lines a reader explained after it saw them (a known failure class)."""
        gone = {shown(line.strip()) for line in explained}
        kept = [line for line in self.lines if line.text not in gone]
        self.total -= sum(line.count for line in self.lines if line.text in gone)
        self.lines = kept
        self._index = {line.text: i for i, line in enumerate(kept)}

    @property
    def more(self) -> int:
        """Lines seen but not kept (past LIMIT distinct lines)."""
        return self.total - sum(line.count for line in self.lines)

    def __bool__(self) -> bool:
        return self.total > 0

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "lines": [line.to_json() for line in self.lines],
            "total": self.total,
            "not_shown": self.more,
        }


def from_json(doc: dict) -> FailureLines:
    """A collection as `FailureLines.to_json` wrote it (readers that keep plain dicts)."""
    found = FailureLines(doc["source"])
    found.lines = [
        FailureLine(line["source"], line["line"], line["text"], line["count"])
        for line in doc["lines"]
    ]
    found.total = doc["total"]
    found._index = {line.text: i for i, line in enumerate(found.lines)}
    return found


def scan(lines: Iterable[str], source: str) -> FailureLines:
    """Every line of a text that looks like a failure (for readers that explain none of them)."""
    found = FailureLines(source)
    for number, line in enumerate(lines, 1):
        found.offer(number, line)
    return found


def not_explained_finding(collections: Iterable[FailureLines]) -> Finding | None:
    """The one finding every report carries for failure lines no reader explained: each line
    verbatim (masked) with its source and line number. A warning: the job may have failed in a way
    ncclprobe cannot name, so it is never a clean verdict (exit 1)."""
    found = [c for c in collections if c]
    if not found:
        return None
    total = sum(c.total for c in found)
    shown_lines = [line for c in found for line in c.lines]
    more = sum(c.more for c in found)
    listing = "; ".join(
        f"{line.source}:{line.number}: {line.text}"
        + (f" (x{line.count})" if line.count > 1 else "")
        for line in shown_lines
    )
    return Finding(
        rule="not-explained",
        severity="warning",
        confidence="high",
        title=f"{total} line(s) look like a failure that ncclprobe does not explain",
        detail=f"Shown as they are, not explained: {listing}"
        + (f"; and {more} more" if more else "")
        + ". Read them first: the run may have failed for a reason no rule here knows.",
        evidence={
            "not_explained": [c.to_json() for c in found],
            "lines": total,
        },
    )
