"""The one JSON policy of every reader (issue 29): what JSON ncclprobe reads, and how a refusal says why.

The standard library's C scanner with hooks: `NaN` and `Infinity` are not JSON and a float that
overflows (`1e400`) is no number, so they are refused like any typo; so are a key given twice in one
object (which value would the writer have meant?), data after the document (a second document, a
torn concatenation), an integer past the 4300 digits `int()` reads and nesting past Python's
recursion limit. Each reader then bounds its numbers by what they mean (a size, a count).
`validate.loads_json` applies it to a whole document, the profile stream to one event at a time
(`strict_decoder().scan_once`); `json_problem` words any of its failures.
"""

from __future__ import annotations

import json
import re
import sys


def strict_decoder() -> json.JSONDecoder:
    """The one JSON policy (module docstring): the standard library's C scanner with hooks that
    refuse what is not a number, or not one document. Its failures are explained by `json_problem`."""
    return json.JSONDecoder(
        parse_constant=_refuse_constant,
        parse_float=_finite_float,
        object_pairs_hook=_unique_keys,
    )


def json_problem(exc: BaseException) -> str | None:
    """What a failure of `strict_decoder` means, in words (no position: the caller adds where);
    None for an exception that is not about the JSON."""
    if isinstance(exc, _Refused):
        return str(exc)
    if isinstance(exc, json.JSONDecodeError):
        if exc.msg == "Extra data":
            return "data after the end of the JSON document (a second document?)"
        return exc.msg
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply"
    if isinstance(exc, ValueError) and "digits" in str(exc):  # int() past its digit limit
        return f"an integer of more than {sys.get_int_max_str_digits()} digits"
    return None


def line_of(exc: BaseException, text: str) -> str:
    """` at line N` for a refused value the hooks could not place (they see no position): its
    first appearance outside a string, found again in the text."""
    token = getattr(exc, "token", None)
    if not token:
        return ""
    found = re.search(rf'(?<![\w."]){re.escape(token)}(?![\w."])', text)
    return f" at line {text.count(chr(10), 0, found.start()) + 1}" if found else ""


class _Refused(ValueError):
    """A value the JSON policy refuses; its message says which and why, `token` is its text."""

    def __init__(self, message: str, token: str = ""):
        super().__init__(message)
        self.token = token


def _refuse_constant(name: str):
    raise _Refused(f"{name} is not a JSON number (JSON has no NaN or Infinity)", name)


def _finite_float(text: str) -> float:
    value = float(text)
    if value - value != 0:  # inf (NaN never gets here): faster than math.isfinite's lookup
        raise _Refused(
            f"{_cut(text)} is beyond the range of a number (overflows to infinity)", text
        )
    return value


def _unique_keys(pairs: list) -> dict:
    doc = dict(pairs)
    if len(doc) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"the key {_cut(key)!r} is given twice in one object")
            seen.add(key)
    return doc


def _cut(text: str) -> str:
    return text if len(text) <= 30 else text[:27] + "..."
