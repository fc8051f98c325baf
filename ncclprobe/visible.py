"""Text from an input made safe to show: every character that acts instead of printing is shown
as a visible escape, so a string read from a dump, a log or another user's process can never drive
the terminal it is printed on.

What acts, and is escaped: every control character but tab and newline (ESC and so every ANSI
sequence, OSC 0 window titles and OSC 52 clipboard writes, `ESC[2J`, hidden text; CR and BS, which
overwrite what was printed; BEL; DEL; the C1 controls U+0080-U+009F, U+009B being a one-character
CSI), the Unicode format characters (the bidirectional overrides and isolates U+202A-U+202E and
U+2066-U+2069 that reorder what the eye reads, zero-width characters, the tag characters that
carry invisible text), the line and paragraph separators, and lone surrogates (which no encoder
writes: they crashed the output). Categories Cc, Cf, Zl, Zp and Cs of Unicode, as ranges
(`tests/test_trust_terminal.py` checks them against `unicodedata`): building the class from
`unicodedata` at import would cost every command a tenth of a second.

C0 controls and DEL are shown as `\\x1b`, everything else as `\\u009b` (`\\U000e0041` past the
BMP). A backslash is left as it is: paths and patterns print unchanged, and text that already reads
`\\x1b` is harmless.

One boundary applies this (`ncclprobe.cli.output.guard_streams`: stdout and stderr of every
command, so tables, CSV, notes, log lines, the error line and progress all pass through it); the
table layout calls `visible` on each cell first, so columns are measured as they print. JSON output
needs none of it: `json.dumps` escapes every one of these characters itself.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# Cc (but tab and newline), Cf, Zl, Zp and Cs, Unicode 14 (Python 3.11), plus U+13439-U+1343F
# (Egyptian hieroglyph format controls, Cf from Unicode 15)
_ACTING = (
    "\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e"
    "\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f"
)
ACTING = re.compile(f"[{_ACTING}]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    if code < 0x20 or code == 0x7F:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def visible(text: str) -> str:
    """`text` with every acting character shown as its escape; tab and newline kept."""
    return ACTING.sub(_escape, text) if ACTING.search(text) else text


class VisibleStream:
    """A text stream that passes on only what prints (`visible`): stdout and stderr of a command.
    It takes text only (so click treats it as the text stream it is) and has no `buffer` (so
    nothing reaches the bytes beneath past it). A terminal that cannot encode a character gets its
    escape (`backslashreplace`), never an exception. `control` writes the stream's own control
    characters (the progress bar's carriage return) unescaped."""

    def __init__(self, stream):
        self.stream = stream

    @property
    def encoding(self):
        return getattr(self.stream, "encoding", None) or "utf-8"

    @property
    def errors(self):
        return getattr(self.stream, "errors", None) or "strict"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def flush(self) -> None:
        self.stream.flush()

    @property
    def closed(self) -> bool:
        return self.stream.closed

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self._put(visible(text))
        return len(text)

    def control(self, text: str) -> None:
        self._put(text)

    def _put(self, text: str) -> None:
        try:
            self.stream.write(text)
        except UnicodeEncodeError:
            encoding = self.encoding
            self.stream.write(text.encode(encoding, "backslashreplace").decode(encoding))


def write_control(stream, text: str) -> None:
    """Our own control characters (a progress bar's `\\r`), past the guard when there is one."""
    (stream.control if isinstance(stream, VisibleStream) else stream.write)(text)


@contextmanager
def guarded() -> Iterator[None]:
    """stdout and stderr pass on only what prints while the block runs (a command's whole life)."""
    saved = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, VisibleStream) and sys.stdout is not None:
        sys.stdout = VisibleStream(sys.stdout)
    if not isinstance(sys.stderr, VisibleStream) and sys.stderr is not None:
        sys.stderr = VisibleStream(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
