"""Reading a user's file safely, and checking what is in it: the mechanism under every reader.

Each file kind has one loader that every command reading it shares (results JSONL:
`ncclprobe.records.read_results`; env-check documents: `ncclprobe.evidence.live.env_check_document`;
recommendation files: `ncclprobe.evidence.recommendation_file`; engine traces: `ncclprobe.evidence.run.trace`).
A loader reads through `read_bytes`/`read_text`/`load_json` here, which

  - refuse inputs above a size limit before reading them whole (`/dev/zero`, a wrong file), and
    a compressed input that decompresses past the same limit (a gzip bomb: `gunzip`); every limit
    is a reader's own, raised for all of them by NCCLPROBE_MAX_INPUT_MIB (`limit_of`), and each
    refusal names the limit and that variable;
  - recognise UTF-16/UTF-32 text (Windows editors and PowerShell's `>` write it) and decode it,
    and call a file binary only when it is;
  - parse JSON by the one policy every JSON reader shares (`ncclprobe.strict_json`): no NaN or
    Infinity, no overflowing number, no key twice, nothing after the document;

and then checks each field it uses with `Where(...).field(...)`, which names the file, the line
(for JSON Lines) and the field in one sentence: `sweep.jsonl line 7: field "size_bytes" must be a
whole number of at least 0, got "big"`. Every failure is a UsageProblem: exit 2, never a traceback.
"""

from __future__ import annotations

import codecs
import gzip
import io
import json
import math
import os
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path

from ncclprobe import envvars
from ncclprobe.errors import UsageProblem
from ncclprobe.strict_json import json_problem, line_of, strict_decoder

MIB = 1 << 20
DEFAULT_LIMIT = 1024 * MIB  # evidence files: logs and profiles can be large, not unbounded
JSON_LIMIT = 512 * MIB

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def limit_of(default: int) -> int:
    """A reader's byte limit, or NCCLPROBE_MAX_INPUT_MIB where that is larger (it only raises)."""
    raw = envvars.get(envvars.MAX_INPUT_MIB)
    if raw is None:
        return default
    from ncclprobe.numbers import parse_int

    return max(default, parse_int(raw, envvars.MAX_INPUT_MIB, min=1, max=1 << 20) * MIB)


def too_large(what: str, limit: int, verb: str = "is larger than") -> str:
    """The one refusal of an input past its limit: names the limit and what raises it."""
    return (
        f"{what} {verb} {limit // MIB} MiB, the most ncclprobe reads of it; is it the right file? "
        f"(set {envvars.MAX_INPUT_MIB} to raise the limit)"
    )


def gunzip(data: bytes, label: str, limit: int) -> bytes:
    """A gzip stream decompressed, at most `limit` bytes of it (`limit_of` applied): a gzip bomb is
    refused after `limit` bytes rather than expanded until memory runs out."""
    limit = limit_of(limit)
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as handle:
            out = handle.read(limit + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise UsageProblem(f"{label} is not readable gzip: {exc}") from None
    if len(out) > limit:
        raise UsageProblem(too_large(label, limit, "decompresses to more than"))
    return out


def open_input(path: str | Path, what: str):
    """A user's input file opened for reading: a regular file only. Opened without blocking (a
    FIFO without a writer blocked `open()` forever) and checked on the open descriptor (no race
    between a check and the open): a directory, a FIFO, a device or a socket is refused in one
    line (`/dev/zero` was read 64 KiB before; `<(cmd)` is a pipe too: save its output first)."""
    path = Path(path)
    named = f"{what} {str(path)!r}".lstrip()  # `what` may be empty: the path alone
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except IsADirectoryError:
        raise UsageProblem(f"{named} is a directory, not a file") from None
    except OSError as exc:
        raise UsageProblem(f"cannot read {named}: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else _KINDS.get(stat.S_IFMT(mode), "special")
        raise UsageProblem(
            f"{named} is {kind}, not a regular file"
            + (
                ""
                if stat.S_ISDIR(mode)
                else "; ncclprobe reads files: save the output to one first"
            )
        )
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


_KINDS = {
    stat.S_IFIFO: "a FIFO (a named or anonymous pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def read_bytes(
    path: str | Path, what: str, *, limit: int | None = None, text: bool = False
) -> bytes:
    """The file's bytes, at most `limit` (`limit_of` applied): a larger file, or an endless one (a
    device, a pipe), is refused with its name and the limit rather than read until memory runs
    out. With `text`, a start that is binary (`/dev/zero`) is refused after its first 64 KiB."""
    path = Path(path)
    limit = limit_of(DEFAULT_LIMIT if limit is None else limit)
    try:
        with open_input(path, what) as handle:
            info = os.fstat(handle.fileno())
            if info.st_size > limit:
                raise UsageProblem(_too_large(path, what, limit))
            data = handle.read(min(limit + 1, 65536))
            if text and _binary(data):
                raise UsageProblem(f"{what} {str(path)!r} is a binary file, not text")
            if len(data) == 65536:
                data += handle.read(limit + 1 - len(data))
    except IsADirectoryError:
        raise UsageProblem(f"{what} {str(path)!r} is a directory, not a file") from None
    except OSError as exc:
        raise UsageProblem(f"cannot read {what} {str(path)!r}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise UsageProblem(_too_large(path, what, limit))
    return data


def decode_text(data: bytes, path: str | Path, what: str, *, errors: str = "replace") -> str:
    """Text in UTF-8 (the default), or UTF-16/32 with a byte-order mark or the zero-byte pattern of
    UTF-16 without one; a file with zero bytes in any other pattern is binary."""
    encoding, skip = text_encoding(data, path, what)
    return _decode(data[skip:], encoding, path, what, errors)


def text_encoding(start: bytes, path: str | Path, what: str) -> tuple[str, int]:
    """(encoding, length of its byte-order mark) of text that starts with `start` (its first 64
    KiB are enough); a UsageProblem when the start is binary."""
    for bom, encoding in _BOMS:
        if start.startswith(bom):
            return encoding, len(bom)
    utf16 = _bomless_utf16(start)
    if utf16:
        return utf16, 0
    if b"\x00" in start[:65536]:
        raise UsageProblem(f"{what} {str(path)!r} is a binary file, not text")
    return "utf-8", 0


def read_text(
    path: str | Path, what: str, *, limit: int | None = None, errors: str = "replace"
) -> str:
    return decode_text(read_bytes(path, what, limit=limit, text=True), path, what, errors=errors)


def _binary(start: bytes) -> bool:
    """Zero bytes in a pattern no text encoding makes (UTF-16/32 put them in every other byte)."""
    return (
        b"\x00" in start
        and not any(start.startswith(bom) for bom, _ in _BOMS)
        and _bomless_utf16(start) is None
    )


def loads_json(text: str, label: str):
    """One JSON document by the one policy; a UsageProblem naming `label` and where otherwise."""
    try:
        return strict_decoder().decode(text)
    except json.JSONDecodeError as exc:
        raise UsageProblem(
            f"{label} is not JSON ({json_problem(exc)} at line {exc.lineno} column {exc.colno})"
        ) from None
    except (ValueError, RecursionError) as exc:
        problem = json_problem(exc)
        if problem is None:
            raise
        raise UsageProblem(f"{label}: {problem}{line_of(exc, text)}") from None


def load_json(path: str | Path, what: str, *, limit: int = JSON_LIMIT):
    """A whole file as one strict JSON document."""
    text = read_text(path, what, limit=limit, errors="strict")
    if not text.strip():
        raise UsageProblem(f"{what} {str(path)!r} is empty")
    return loads_json(text, f"{what} {str(path)!r}")


@dataclass(frozen=True)
class Where:
    """A place in a file, for messages: `Where("s.jsonl", 7)` -> `'s.jsonl' line 7`; `.at("runs[0]")`
    narrows it to a part of the document."""

    path: str
    line: int | None = None
    inside: str = ""

    def at(self, part: str | int) -> Where:
        step = f"[{part}]" if isinstance(part, int) else (f".{part}" if self.inside else part)
        return Where(self.path, self.line, self.inside + step)

    def __str__(self) -> str:
        text = repr(str(self.path)) + (f" line {self.line}" if self.line is not None else "")
        return text + (f" in {self.inside}" if self.inside else "")

    def fail(self, message: str) -> UsageProblem:
        return UsageProblem(f"{self}: {message}")

    def object(self, value, what: str = "a JSON object") -> dict:
        if not isinstance(value, dict):
            raise self.fail(f"expected {what}, got {_kind(value)}")
        return value

    def field(
        self,
        doc: dict,
        name: str,
        kind: str,
        *,
        required: bool = True,
        nullable: bool = False,
        min: float | None = None,
        max: float | None = None,
        choices=None,
        default=None,
    ):
        """`doc[name]` checked to be `kind`: "str", "int", "number", "bool", "dict", "list", or
        "str-map" (a dict of str to str). Numbers must be finite; bools are not numbers."""
        if name not in doc or (doc[name] is None and not required and not nullable):
            if required:
                raise self.fail(f'field "{name}" is missing')
            return default
        value = doc[name]
        if value is None and nullable:
            return None
        problem = _check(value, kind, min, max, choices)
        if problem:
            raise self.fail(f'field "{name}" must be {problem}, got {_shown(value)}')
        return value

    def list_of(
        self,
        doc: dict,
        name: str,
        kind: str,
        *,
        required: bool = True,
        min: float | None = None,
        max: float | None = None,
    ) -> list | None:
        """`doc[name]` as a list whose every item is `kind` (null or absent allowed unless `required`)."""
        items = self.field(doc, name, "list", required=required, nullable=not required)
        for index, item in enumerate(items or []):
            problem = _check(item, kind, min, max, None)
            if problem:
                raise self.fail(f'field "{name}"[{index}] must be {problem}, got {_shown(item)}')
        return items


def _check(value, kind: str, low, high, choices) -> str | None:
    """What `value` should have been, or None when it is fine."""
    if kind == "str":
        if not isinstance(value, str):
            return "a string"
        if choices is not None and value not in choices:
            return "one of " + ", ".join(map(repr, choices))
        return None
    if kind in ("int", "number"):
        is_int = isinstance(value, int) and not isinstance(value, bool)
        is_num = is_int or (isinstance(value, float) and math.isfinite(value))
        if not (is_int if kind == "int" else is_num) or (is_int and abs(value) >= 2**63):
            # past 64 bits no count is meant, and float() of 400 digits overflows downstream
            return ("a whole number" if kind == "int" else "a finite number") + _range_text(
                low, high
            )
        if (low is not None and value < low) or (high is not None and value > high):
            return ("a whole number" if kind == "int" else "a number") + _range_text(low, high)
        return None
    if kind == "bool":
        return None if isinstance(value, bool) else "true or false"
    if kind == "dict":
        return None if isinstance(value, dict) else "a JSON object"
    if kind == "list":
        return None if isinstance(value, list) else "a JSON list"
    if kind == "str-map":
        ok = isinstance(value, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        )
        return None if ok else "an object of string values"
    raise ValueError(f"unknown field kind {kind!r}")


def _range_text(low, high) -> str:
    if low is not None and high is not None:
        return f" from {low} to {high}"
    if low is not None:
        return f" of at least {low}"
    return f" of at most {high}" if high is not None else ""


def _kind(value) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
    }.get(type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def shown(value) -> str:
    """A value from a file as a message quotes it: JSON, at most 60 characters (a 1 MB string or a
    list nested 900 deep is named by its start)."""
    if isinstance(value, int) and value.bit_length() > 10000:  # str() fails past 4300 digits
        return f"a whole number of about {int(value.bit_length() * 0.30103)} digits"
    try:
        text = (
            json.dumps(value, default=str)
            if not isinstance(value, float) or math.isfinite(value)
            else str(value)
        )
    except (ValueError, RecursionError):  # a number of 4,300 digits or a list 1,000 deep inside
        return f"{_kind(value)} holding a number too long or a nesting too deep to quote"
    return text if len(text) <= 60 else text[:57] + "..."


_shown = shown


def _too_large(path: Path, what: str, limit: int) -> str:
    return too_large(f"{what} {str(path)!r}", limit)


def _bomless_utf16(data: bytes) -> str | None:
    """UTF-16 text without a BOM has a zero in every other byte where the text is ASCII."""
    sample = data[:4096]
    if len(sample) < 4 or b"\x00" not in sample:
        return None
    pairs = len(sample) // 2
    even_zero = sum(1 for i in range(0, pairs * 2, 2) if sample[i] == 0)
    odd_zero = sum(1 for i in range(1, pairs * 2, 2) if sample[i] == 0)
    if odd_zero >= 0.6 * pairs and even_zero <= 0.05 * pairs:
        return "utf-16-le"
    if even_zero >= 0.6 * pairs and odd_zero <= 0.05 * pairs:
        return "utf-16-be"
    return None


def _decode(data: bytes, encoding: str, path, what: str, errors: str) -> str:
    try:
        text = data.decode(encoding, errors=errors)
    except UnicodeDecodeError as exc:
        raise UsageProblem(
            f"{what} {str(path)!r} is not valid {encoding.upper()} text (byte {exc.start})"
        ) from None
    if "\x00" in text[:65536]:
        raise UsageProblem(f"{what} {str(path)!r} is a binary file, not text")
    return text
