"""How NCCL reads a value: validation against the knowledge table, and the list syntaxes.

`validate_value` is the one place a value is checked against its row; NCCL_PROTO and NCCL_ALGO
lists are parsed once, by `token_lists` (NCCL's parseList), for everything that asks what a list
allows: the lint, recommend's safety rule, the sweep's proof and the graph-capture verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

from ncclprobe.errors import UsageProblem
from ncclprobe.nccl.knob_row import Kind, Knob
from ncclprobe.nccl.knobs import KNOBS
from ncclprobe.nccl.knobs_tooling import DEBUG_SUBSYSTEMS
from ncclprobe.nccl.names import FUNCTION_ALGORITHMS, PROTOCOL_TOKENS, TUNED_FUNCTIONS
from ncclprobe.nccl.p2p import LEGACY_P2P_LEVELS, is_legacy_level


def validate_value(name: str, value: str) -> str:
    """Return the value NCCL would act on, or raise UsageProblem naming what is wrong.

    Strict on purpose: the sweep must never measure a setting NCCL would ignore.
    """
    row = KNOBS.get(name)
    if row is None:
        return value
    if row.kind is Kind.TOKENS:
        return _validate_tokens(row, value)
    if row.kind is Kind.LEVEL:
        if value in row.values or is_legacy_level(value):
            return value
        hint = (
            f" (NCCL matches case exactly: did you mean {value.upper()}?)"
            if value.upper() in row.values
            else ""
        )
        raise UsageProblem(
            f"{name}={value!r} is not a P2P level; use one of {', '.join(row.values)}{hint}"
        )
    if (
        row.kind is Kind.CHOICE
        and not row.case_sensitive
        and value.upper() in (v.upper() for v in row.values)
    ):
        return value
    if row.kind in (Kind.BOOL, Kind.CHOICE) and row.values and value not in row.values:
        raise UsageProblem(f"{name}={value!r} is not valid; use one of {', '.join(row.values)}")
    if row.kind is Kind.INT:
        _check_integer(row, value)
    return value


def _check_integer(row: Knob, value: str) -> None:
    number = parse_integer(value)
    if number is None:
        raise UsageProblem(f"{row.name}={value!r} is not an integer")
    low, high, step = row.minimum, row.maximum, row.multiple_of
    if (low is not None and number < low) or (high is not None and number > high) or number % step:
        span = f"from {low} to {high}" if low is not None and high is not None else ""
        raise UsageProblem(
            f"{row.name}={value!r} is not one NCCL uses as given: it takes "
            f"{f'a multiple of {step} ' if step > 1 else ''}{span}".rstrip()
            + " and replaces others"
        )


def parse_integer(value: str) -> int | None:
    """An integer as NCCL_PARAM reads it (strtoll, base 0: 42, 0x2a, 052), whole value only; None otherwise.

    ASCII only: a value NCCL cannot read is never measured as if it could."""
    text = value[1:] if value[:1] in "+-" else value
    if not text or not text.isascii() or not text.isalnum():
        return None
    try:
        number = (
            int(text, 16)
            if text[:2] in ("0x", "0X")
            else int(text, 8)
            if text[:1] == "0"
            else int(text, 10)
        )
    except ValueError:
        return None
    return -number if value.startswith("-") else number


INT64_MAX = (1 << 63) - 1
_C_SPACE = " \t\n\v\f\r"
_C_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def strtoll(text: str) -> int | None:
    """C's strtoll(text, NULL, 0), which NCCL_PARAM reads every integer with (src/misc/param.cc at
    v2.13.4-1 through v2.28.9-1): leading white space, a sign, then 0x/0X hex, a leading 0 octal or
    decimal, read up to the first character that is not a digit of that base (`4M` is 4, `09` is 0,
    `abc` is 0). None where the value overflows 64 bits: errno is set, NCCL logs `Invalid value`
    and keeps its default."""
    return strtoll_rest(text)[0]


def strtoll_rest(text: str) -> tuple[int | None, str]:
    """`strtoll`, and what it left unread (C's end pointer): `("4M")` -> (4, "M"); no digits at all
    leave the whole text unread (`("true")` -> (0, "true"))."""
    whole = text
    text = text.lstrip(_C_SPACE)
    sign = -1 if text[:1] == "-" else 1
    text = text[1:] if text[:1] in "+-" else text
    base = 10
    if text[:2] in ("0x", "0X") and text[2:3].lower() in _C_DIGITS[:16] and text[2:3]:
        base, text = 16, text[2:]
    elif text[:1] == "0":
        base = 8
    digits = ""
    for char in text:
        if char.lower() not in _C_DIGITS[:base] or not char.isascii():
            break
        digits += char
    if not digits:
        return 0, whole
    number = sign * int(digits, base)
    rest = text[len(digits) :]
    return (number if -INT64_MAX - 1 <= number <= INT64_MAX else None), rest


@dataclass(frozen=True)
class NumberRead:
    """What NCCL makes of a value it reads as a number (`read_number`)."""

    number: int | None  # None: beyond 64 bits, so NCCL keeps its default
    rest: str  # the characters strtoll did not read (`M` of `4M`; the whole value when no digits)
    meaning: str | None  # what NCCL then does, from the row's `number_use`; None: not known


def read_number(name: str, value: str) -> NumberRead | None:
    """How NCCL reads `value` for a variable that holds a number (a row with `number_use`, or an
    integer read through NCCL_PARAM): strtoll's number, what it left unread and, where the row says,
    what NCCL does with it. None for other variables."""
    row = KNOBS.get(name)
    if row is None or not (row.number_use or (row.nccl_param and row.kind is Kind.INT)):
        return None
    number, rest = strtoll_rest(value)
    meaning = number_meaning(row, number) if number is not None else None
    return NumberRead(number, rest, meaning)


def number_meaning(row: Knob, number: int) -> str | None:
    """The first of the row's `number_use` tests that `number` passes: what NCCL does with it."""
    for test, meaning in row.number_use:
        if test == "else" or _passes(test, number):
            return meaning
    return None


def _passes(test: str, number: int) -> bool:
    if test == ">0":
        return number > 0
    if test == "<0":
        return number < 0
    if test == "!=0":
        return number != 0
    return number == int(test)


def as_logged(name: str, value: str) -> str:
    """The value of NCCL's `NAME set by environment to VALUE` line for a value it was given, so a
    value the workers had and the one NCCL logged compare as NCCL parsed them: integers as strtoll
    read them, printed `%lld` (`0x400000` is logged 4194304, the log's trailing period dropped),
    P2P levels as path names (`2` is PXB, names matched case-exactly), NCCL_LAUNCH_MODE in capitals
    (strcasecmp), token lists (NCCL_PROTO, NCCL_ALGO) as written (NCCL logs the string it got),
    case aside. A value NCCL could not read as an integer stays as written."""
    row = KNOBS.get(name)
    kind = row.kind if row else None
    if kind is Kind.LEVEL:
        if value[:1].isdigit() and value[:1].isascii():
            number = strtoll(value)
            if number is not None and number >= 0:
                return LEGACY_P2P_LEVELS[min(number, len(LEGACY_P2P_LEVELS) - 1)]
        return value
    if kind is Kind.TOKENS or (row is not None and kind is Kind.CHOICE and not row.case_sensitive):
        return value.strip().upper()
    integer = kind in (Kind.INT, Kind.BOOL) or (kind is None and _integer_text(value))
    if integer:
        number = strtoll(value.removesuffix(".") if _integer_text(value) else value)
        return value if number is None else str(number)
    return value.removesuffix(".") if _integer_text(value) else value


def reads_the_same(name: str, value: str, logged: str) -> bool:
    """Whether NCCL logging `logged` for `name` means it read `value` (see `as_logged`)."""
    return as_logged(name, str(value)) == as_logged(name, str(logged))


def _integer_text(value: str) -> bool:
    """A whole integer as NCCL logs or a user writes one (`42`, `-1`, `0x2a`, `42.`)."""
    text = value.strip().removesuffix(".").lstrip("+-")
    if text[:2] in ("0x", "0X"):
        text = text[2:]
        return bool(text) and text.isascii() and all(c in "0123456789abcdefABCDEF" for c in text)
    return text.isascii() and text.isdigit()


def _validate_tokens(row: Knob, value: str) -> str:
    """NCCL's parseList (src/graph/tuning.cc): strtok on `;`, `:` and `,` (empty tokens vanish), then
    strcasecmp of each whole token: a space around a name makes it unknown (`LL, Simple`: 2.24+ fails
    communicator creation, older versions silently leave Simple out)."""
    allowed = {token.lower(): token for token in row.values}
    spaced = " (NCCL compares each token whole: no spaces around names)"
    _clauses_have_functions(row, value)
    for clause in value.split(";"):
        tokens = clause.split(":", 1)[-1] if ":" in clause else clause
        prefix = clause.split(":", 1)[0] if ":" in clause else None
        if prefix is not None and prefix.lower() not in TUNED_FUNCTIONS:
            hint = spaced if prefix.strip().lower() in TUNED_FUNCTIONS else ""
            raise UsageProblem(f"{row.name}={value!r}: unknown collective {prefix!r}{hint}")
        for token in tokens.lstrip("^").split(","):
            if token and token.lower() not in allowed:
                hint = (
                    spaced
                    if token.strip().lower() in allowed
                    else f"; known: {', '.join(row.values)}"
                )
                raise UsageProblem(f"{row.name}={value!r}: unknown token {token!r}{hint}")
    return value


class ClauseWithoutFunction(UsageProblem):
    """A `;` clause after the first without `func:` (2.24+ grammar)."""


def _clauses_have_functions(row: Knob, value: str) -> None:
    """2.24+ parseList splits on `;` (strtok: empty clauses vanish) and lets only a clause that
    starts the value go without `func:`; any other is `All entries except the first must have a
    prefix`, ncclInvalidUsage (src/graph/tuning.cc). Before 2.24 `;` is no separator at all."""
    clauses = [c for c in value.split(";") if c]
    for index, clause in enumerate(clauses):
        parts = [p for p in clause.split(":") if p]  # strtok on `:` too
        if len(parts) < 2 and (index > 0 or value.startswith(";")):
            raise ClauseWithoutFunction(
                f"{row.name}={value!r}: the clause {clause!r} names no function, and only a first "
                f"clause may (`allreduce:{clause}`; NCCL: `All entries except the first must have a "
                "prefix`)"
            )


@dataclass(frozen=True)
class TokenList:
    """One clause of an NCCL_PROTO / NCCL_ALGO value: the names it lists, and whether it excludes them."""

    exclude: bool
    names: frozenset[str]  # lower case, as written

    def allows(self, name: str) -> bool:
        """NCCL's parseList: a plain list enables what it names and disables the rest; a ^ list
        disables what it names and sets every other one to 1 (on)."""
        return (name.lower() in self.names) != self.exclude


def token_lists(value: str) -> dict[str, TokenList]:
    """An NCCL_PROTO / NCCL_ALGO value per scope: "all" for a clause without a function, else the
    collective's name in lower case (2.24+ `func:list` clauses, `;`-separated)."""
    lists: dict[str, TokenList] = {}
    for clause in value.split(";"):
        scope, _, tokens = clause.rpartition(":")
        tokens = tokens.strip()
        if not tokens:
            continue
        names = frozenset(t.strip().lower() for t in tokens.lstrip("^").split(",") if t.strip())
        lists[scope.strip().lower() or "all"] = TokenList(tokens.startswith("^"), names)
    return lists


def token_list_for(value: str, collective: str) -> TokenList | None:
    """The clause that governs `collective` ("allreduce"): its own, else the one without a function."""
    lists = token_lists(value)
    return lists.get(collective, lists.get("all"))


# NCCL reads `func:list` clauses (NCCL_PROTO, NCCL_ALGO) from 2.24 (parseList's prefixes, src/graph/
# tuning.cc at v2.24.3-1; at v2.23.4-1 `;` and `:` are no separators): before, every list is job-wide.
PER_COLLECTIVE_SINCE = (2, 24, 0)


def stranded_functions(value: str) -> list[str]:
    """The tuned functions (`broadcast`, ...) an NCCL_ALGO value leaves none of the algorithms they
    can run at all (`FUNCTION_ALGORITHMS`): NCCL 2.24+ fails their calls, older versions run Ring."""
    stranded = []
    for function, runs in FUNCTION_ALGORITHMS.items():
        clause = token_list_for(value, function)
        if clause is not None and not any(clause.allows(a) for a in runs):
            stranded.append(function)
    return stranded


def protocol_states(value: str) -> dict[str, dict[str, str]]:
    """What an NCCL_PROTO value does to each protocol, per scope ("all" or a collective name).

    "forced": the setting turns it on, which for LL128 bypasses NCCL's own LL128 safety check;
    "off": the setting turns it off.
    """
    return {
        scope: {proto: ("forced" if clause.allows(proto) else "off") for proto in PROTOCOL_TOKENS}
        for scope, clause in token_lists(value).items()
    }


def forcing_ll128(value: str | None) -> list[str]:
    """The clauses of an NCCL_PROTO value that force LL128 on: they name it, or are a ^ list that
    leaves it in. Empty when the value leaves LL128 to NCCL or turns it off."""
    if value is None:
        return []
    return [
        clause.strip()
        for clause in value.split(";")
        if any(clause_.allows("LL128") for clause_ in token_lists(clause).values())
    ]


def subsystems_enabled(value: str) -> set[str]:
    """The debug subsystems an NCCL_DEBUG_SUBSYS value turns on (it replaces the default list)."""
    names = {t.strip().upper() for t in value.lstrip("^").split(",") if t.strip()}
    every = set(DEBUG_SUBSYSTEMS) - {"ALL"}
    chosen = every if "ALL" in names else names & every
    return every - chosen if value.strip().startswith("^") else chosen
