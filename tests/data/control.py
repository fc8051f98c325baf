"""Control characters planted in inputs (issue 40 §1): the inputs of tests/test_trust_terminal.py
and examples/bench_terminal_walk.py.

`PAYLOAD` holds one of every class that acts on a terminal: ESC with OSC 0 (window title), OSC 52
(clipboard write), `ESC[2J` (clear), `ESC[8m` (hidden text); CR and BS (overwrite), BEL, VT, FF,
DEL, the C1 controls NEL (U+0085) and CSI (U+009B), bidi overrides and isolates (U+202E, U+2066),
zero-width (U+200B), BOM (U+FEFF), the line separator (U+2028) and an invisible tag character
(U+E0041). JSON inputs also get NUL (a text file with one is binary, refused before reading).
"""

from __future__ import annotations

import json
import re

from ncclprobe.visible import ACTING

PAYLOAD = (  # what splits a line last (CR, VT, FF, NEL, U+2028): readers may cut a value there
    "\u202eRLO\u2066\u200b\ufeff\U000e0041\x9b31m\x07\bBS\x7f"
    "\x1b]0;PWNED\x07\x1b]52;c;SGVsbG8=\x07\x1b[2J\x1b[8mhidden\x1b[0m"
    "\rCR\x0b\x0c\x85\u2028"
)
JSON_PAYLOAD = PAYLOAD + "\x00"
SHOWN = "\\u202eRLO"  # how the bidi override prints once escaped (readers may strip ESC sequences)
# an enum, a number as text, a version, a rank list: what a reader checks against a vocabulary
_IDENTIFIER = re.compile(r"[A-Za-z0-9_.:+\-\[\], ]{0,24}")


def raw_controls(text: str) -> list[str]:
    """Every acting character left raw in `text` (what must be empty)."""
    return sorted({f"U+{ord(c):04X}" for c in ACTING.findall(text)})


def slots(doc) -> list[tuple[object, object]]:
    """Every (container, key) whose value is a string."""
    found, stack = [], [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            if isinstance(value, str):
                found.append((node, key))
            elif isinstance(value, (dict, list)):
                stack.append(value)
    return found


def plant_doc(doc, *, keep_identifiers: bool, only=None) -> int:
    """Append the payload to string values of `doc` (in place): all of them, or all but the
    identifier-like ones (enums, versions, numbers as text: the reader's happy path stays), or the
    `only` slots; returns how many."""
    chosen = only if only is not None else slots(doc)
    count = 0
    for container, key in chosen:
        value = container[key]  # type: ignore[index]
        if keep_identifiers and _IDENTIFIER.fullmatch(value):
            continue
        container[key] = value + JSON_PAYLOAD  # type: ignore[index]
        count += 1
    return count


def plant_json_text(text: str, *, keep_identifiers: bool) -> str | None:
    """A JSON document or JSON Lines text with the payload planted; None when it is not JSON."""
    stripped = text.strip()
    try:
        doc = json.loads(stripped)
        plant_doc(doc, keep_identifiers=keep_identifiers)
        return json.dumps(doc)
    except ValueError:
        pass
    try:
        docs = [json.loads(line) for line in stripped.splitlines() if line.strip()]
    except ValueError:
        return None
    for doc in docs:
        plant_doc(doc, keep_identifiers=keep_identifiers)
    return "".join(json.dumps(doc) + "\n" for doc in docs)


def plant_lines(text: str, how: str) -> str:
    """The payload in every line of a text: `word` after each line's last word, `value` inside the
    first value of each line that has one (after `=` or `: `), `line` as a line of its own."""
    out = []
    for index, line in enumerate(text.splitlines()):
        if how == "word" and line.strip():
            line = f"{line} {PAYLOAD}"
        elif how == "value":
            line = re.sub(r"(=|: )(\S+)", lambda m: m[1] + m[2] + PAYLOAD, line, count=1)
        elif how == "line" and index % 7 == 3:
            out.append(f"{PAYLOAD} {line}")
        out.append(line)
    return "\n".join(out) + "\n"


TEXT_WAYS = ("word", "value", "line")
