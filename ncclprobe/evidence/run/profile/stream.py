"""Read a Chrome-trace JSON (a PyTorch profiler export, `.json` or `.json.gz`) one event at a time.

A trace of a few hundred megabytes does not fit `json.load` within a sensible memory budget: the
parsed dicts take five to ten times the text. This reader decompresses and decodes the file in
chunks and hands each element of `traceEvents` to a callback as soon as it is parsed, so only one
event (plus one chunk of text) is in memory at a time; the caller keeps what it needs. The other
top-level keys (`deviceProperties`, `distributedInfo`, ...) are small and returned whole.

The parsing itself is the standard library's C scanner (`json.JSONDecoder.scan_once`) under the one
JSON policy of every reader (`validate.strict_decoder`: no NaN/Infinity, no overflowing number, no
key given twice), applied at each element's start; the reader only finds the starts (skipping
whitespace in blocks, and commas) and refills the buffer when an element runs past its end. Every
malformed input is a UsageProblem naming the file, the character and what is wrong: not gzip or
not JSON, a truncated stream, an object that is not a trace, data after the trace.

Limits, so that no file exhausts memory (a 36 MB gzip bomb of kernel events once reached 6 GB):
at most DEFAULT_LIMIT (1 GiB) of text, decompressed, and MAX_EVENTS events, each raised by its
variable (NCCLPROBE_MAX_INPUT_MIB, NCCLPROBE_MAX_PROFILE_EVENTS), which the refusal names.
"""

from __future__ import annotations

import codecs
import gzip
import json
import re
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ncclprobe import envvars
from ncclprobe.errors import UsageProblem
from ncclprobe.numbers import parse_int
from ncclprobe.strict_json import json_problem, strict_decoder
from ncclprobe.validate import DEFAULT_LIMIT, limit_of, open_input, too_large

CHUNK = 1 << 20
MAX_EVENT_CHARS = 64 << 20  # a single event this large is not a profiler event
# a 1 GiB trace holds a few million events; diagnose peaks at ~450 bytes per kernel event it keeps
# (measured: 1M kernel events, 450 MB), so 3M events of kernels stay under 1.5 GB
MAX_EVENTS = 3_000_000
_BLANKS = re.compile(r"[ \t\r\n]*")
# the C scanner of json.JSONDecoder: (text, position) -> (value, end)
Scan = Callable[[str, int], tuple[Any, int]]


def max_events() -> int:
    raw = envvars.get(envvars.MAX_PROFILE_EVENTS)
    return MAX_EVENTS if raw is None else parse_int(raw, envvars.MAX_PROFILE_EVENTS, min=1)


class _Source:
    """Text in chunks from a plain or gzipped file, with errors named after the file."""

    def __init__(self, path: Path):
        self.path = path
        raw = open_input(path, "profile")
        magic = raw.read(2)
        raw.seek(0)
        self.gzipped = magic == b"\x1f\x8b"
        self.file = gzip.GzipFile(fileobj=raw, mode="rb") if self.gzipped else raw
        self._raw = raw
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.done = False
        self.limit, self.read_bytes = limit_of(DEFAULT_LIMIT), 0

    def read(self) -> str:
        if self.done:
            return ""
        try:
            data = self.file.read(CHUNK)
        except EOFError:
            raise UsageProblem(
                f"{self.path}: the gzip stream is truncated (the file ends before gzip's end marker); "
                "copy the trace again"
            ) from None
        except (gzip.BadGzipFile, zlib.error, OSError) as exc:
            raise UsageProblem(f"{self.path}: not a readable gzip file ({exc})") from None
        self.read_bytes += len(data)
        if self.read_bytes > self.limit:
            verb = "decompresses to more than" if self.gzipped else "is larger than"
            raise UsageProblem(too_large(f"profile {str(self.path)!r}", self.limit, verb))
        try:
            text = self.decoder.decode(data, final=not data)
        except UnicodeDecodeError:
            raise UsageProblem(
                f"{self.path} is not UTF-8 text, so not a profiler trace (JSON)"
            ) from None
        if not data:
            self.done = True
        return text

    def close(self) -> None:
        self.file.close()
        self._raw.close()


class _Buffer:
    """A sliding window over the text from `pos` on, refilled by `fill`."""

    def __init__(self, source: _Source):
        self.source, self.text, self.pos, self.consumed = source, "", 0, 0

    def fill(self, double: bool = False) -> bool:
        """Read on; with `double`, until the text past `pos` has doubled: a value longer than a
        chunk is then rescanned log(n) times, not n/CHUNK times (a 64 MB string took seconds)."""
        if self.pos > CHUNK:
            self.consumed += self.pos
            self.text, self.pos = self.text[self.pos :], 0
        chunks, wanted = [], len(self.text) - self.pos if double else 0
        while True:
            chunk = self.source.read()
            if not chunk:
                break
            chunks.append(chunk)
            wanted -= len(chunk)
            if wanted <= 0:
                break
        if not chunks:
            return False
        self.text += "".join(chunks)
        return True

    def skip_ws(self) -> str:
        """The next non-blank character ('' at the end of the file), left unconsumed."""
        while True:
            blanks = _BLANKS.match(self.text, self.pos)  # a block at a time, in C
            assert blanks is not None  # it matches anywhere: the empty string at least
            self.pos = blanks.end()
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.fill():
                return ""

    def next_item(self, close: str, where: str) -> bool:
        """Skip blanks and commas: False at `close` (consumed), True before the next item."""
        while True:
            char = self.skip_ws()
            if char == close:
                self.pos += 1
                return False
            if char == ",":
                self.pos += 1
                continue
            if not char:
                raise self.error(f"the file ends inside {where} (truncated?)")
            return True

    def expect(self, char: str, what: str) -> None:
        got = self.skip_ws()
        if got != char:
            raise self.error(
                f"expected {what}" + (f", found {got!r}" if got else ", found the end of the file")
            )
        self.pos += 1

    def value(self, scan: Scan) -> Any:
        """Parse one JSON value at the current position, refilling while it is incomplete."""
        self.skip_ws()
        last_error = None
        while True:
            try:
                obj, end = scan(self.text, self.pos)
            except StopIteration as stop:
                # no value starts at the index it names, or only part of one (`tr` of `true`, or a
                # nested value cut at the buffer's end: the C scanner lets StopIteration escape)
                where = stop.value if isinstance(stop.value, int) else self.pos
                if self.source.done or len(self.text) - where > 16:
                    raise self.error("invalid JSON (no value where one is expected)") from None
                obj, end = None, -1
            except json.JSONDecodeError as exc:
                # incomplete text fails too: refill and retry; the same failure after a refill is real
                genuine = (exc.pos, exc.msg) == last_error and not exc.msg.startswith(
                    "Unterminated string"
                )
                if genuine or self.source.done:
                    raise self.error(f"invalid JSON ({exc.msg})") from None
                last_error, obj, end = (exc.pos, exc.msg), None, -1
            except (ValueError, RecursionError) as exc:  # the policy's refusals: whole values only
                problem = json_problem(exc)
                if problem is None:
                    raise
                raise self.error(problem) from None
            if (end if end >= 0 else len(self.text)) - self.pos > MAX_EVENT_CHARS:
                raise self.error("an element longer than 64 MB; not a profiler trace")
            if end >= 0 and (end < len(self.text) or self.source.done):
                self.pos = end
                return obj
            if not self.fill(double=True):
                if end >= 0:
                    self.pos = end
                    return obj
                raise self.error("the file ends inside a JSON value (truncated?)")

    def error(self, what: str) -> UsageProblem:
        offset = self.consumed + self.pos
        return UsageProblem(
            f"{self.source.path}: {what} at character {offset}; expected a PyTorch profiler trace "
            "(Chrome-trace JSON with traceEvents)"
        )


def read_events(path: str | Path, on_event: Callable[[dict], None]) -> dict:
    """Call `on_event` for every element of `traceEvents`; return the other top-level keys.

    Raises UsageProblem when the file is not a Chrome-trace JSON object with a `traceEvents` list."""
    source = _Source(Path(path))
    try:
        return _read(_Buffer(source), on_event)
    finally:
        source.close()


def _read(buf: _Buffer, on_event: Callable[[dict], None]) -> dict:
    scan = strict_decoder().scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__
    first = buf.skip_ws()
    if first != "{":
        if first == "[":
            raise buf.error(
                "a JSON array at the top (the bare-array Chrome-trace form is not a PyTorch profiler export)"
            )
        raise buf.error("not JSON" if first else "an empty file")
    buf.pos += 1
    header, seen_events = {}, False
    while buf.next_item("}", "the top-level object"):
        if buf.skip_ws() != '"':
            raise buf.error("expected a key")
        key = buf.value(scan)
        if key in header or (key == "traceEvents" and seen_events):
            raise buf.error(f"the key {key[:40]!r} is given twice")
        buf.expect(":", "':' after a key")
        if key == "traceEvents":
            _read_array(buf, scan, on_event)
            seen_events = True
        else:
            header[key] = buf.value(scan)
    if buf.skip_ws():
        raise buf.error("data after the end of the trace (a second document?)")
    if not seen_events:
        raise UsageProblem(
            f'{buf.source.path} is JSON but has no "traceEvents": not a PyTorch profiler trace'
            + (
                " (it looks like an ncclprobe engine trace: give it as --trace)"
                if header.get("kind") == "engine-trace"
                else ""
            )
        )
    return header


def _read_array(buf: _Buffer, scan: Scan, on_event: Callable[[dict], None]) -> None:
    buf.expect("[", "'[' starting traceEvents")
    index, limit = 0, max_events()
    while buf.next_item("]", "traceEvents"):
        if index == limit:
            raise UsageProblem(
                f"profile {str(buf.source.path)!r} has more than {limit} events, the most ncclprobe "
                f"reads of one trace (set {envvars.MAX_PROFILE_EVENTS} to raise the limit)"
            )
        event = buf.value(scan)
        if not isinstance(event, dict):
            raise buf.error(f"traceEvents[{index}] is not an object")
        on_event(event)
        index += 1
