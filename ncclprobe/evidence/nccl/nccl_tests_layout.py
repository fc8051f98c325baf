"""The column layout of an nccl-tests result table: from its header line, or from the rows alone.

Users often paste only the tail of a run (the last rows and the footer, NVIDIA/nccl-tests#119):
no `#  size  count ...` header says which columns the rows hold. The rows still say it, because
every generation prints them the same way (src/util.cu `writeBenchmarkLine*`, common.cu before
2.13): size and count (integers), nccl-tests' type name, then the redop name where the test
reduces, the root where it has one (v2.13+: every test; before, broadcast and reduce), and four
cells per placement (time, algbw, busbw, and `#wrong` (an integer count, v2.13+) or `error`
(the max error, printed `%le`, before)); `-I 1` adds four more per placement. nccl-tests 1.x
(before 2019) printed the time in ms with three decimals, later versions in µs with at most two. A row is read only
when its token count fits one layout exactly, its type is one nccl-tests prints and its check cells
are all of one kind; the layout most rows share is the table's. What the rows cannot tell is said
by the caller: `-C 1` (the time column then holds the host's issue time) and the collective.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from ncclprobe.evidence.nccl.nccl_tests_run import DTYPES, NcclTestsRun
from ncclprobe.numbers import ascii_re, is_digits

# every nccl-tests reduction operator name (`test_opnames`; `none` in the tables of tests that
# do not reduce, v2.17+)
REDOPS = frozenset(("sum", "prod", "max", "min", "avg", "mulsum", "premulsum", "none"))
# nccl-tests' type names: ncclprobe's table, and the names older versions printed
TYPE_NAMES = frozenset(DTYPES) | frozenset(("int", "uint", "char", "fp8_e4m3", "fp8_e5m2"))
_INTEGER = ascii_re(r"^\d{1,19}$")
_ERROR = ascii_re(r"^\d(?:\.\d{1,19})?e[+-]\d{1,3}$")  # `%le`: the old max-error column
_MS = ascii_re(r"^\d{1,19}\.\d{3}$")
_NUMBER = ascii_re(r"^-?\d{1,19}(?:\.\d*)?(?:[eE][+-]?\d{1,19})?$")


@dataclass(frozen=True)
class Columns:
    redop: bool  # a redop column (every test since v2.13; before, the reducing ones and alltoall)
    root: bool  # a root column (every test since v2.13; before, broadcast and reduce)
    check: str  # "#wrong" (v2.13+) or "error" (the max error, before)
    cputime: bool  # -C 1: the time column is the host's issue time
    per_iter: bool  # -I 1: i_min i_max i_p99 i_cv% after each placement
    time_ms: bool = False  # before 2019 (`bytes N type op ... res`): the time column is in ms


def layout_of_row(tokens: list[str]) -> Columns | None:
    """The layout one header-less row fits, or None when it fits none exactly."""
    if len(tokens) < 11 or not is_digits(tokens[0]) or not is_digits(tokens[1]):
        return None
    if tokens[2] not in TYPE_NAMES:
        return None
    redop = tokens[3] in REDOPS
    rest = tokens[3 + redop :]
    for per in (4, 8):
        for root in (False, True):
            if len(rest) != root + 2 * per:
                continue
            if root and not is_digits(rest[0].removeprefix("-")):
                continue
            cells = rest[root:]
            if not all(_NUMBER.match(c) or c == "N/A" for c in cells):
                continue
            checks = [c for c in (cells[3], cells[per + 3]) if c != "N/A"]
            if not checks:  # -c 0: no check; the root column tells the generation
                check = "#wrong" if root else "error"
            elif all(_INTEGER.match(c) for c in checks):
                check = "#wrong"
            elif all(_ERROR.match(c) for c in checks):
                check = "error"
            else:
                continue
            # nccl-tests 1.x printed the time in ms with three decimals (`%7.3f`); later versions
            # print µs with at most two (util.cu `getFloatStr`)
            in_ms = check == "error" and all(_MS.match(c) for c in (cells[0], cells[per]))
            return Columns(redop, root, check, cputime=False, per_iter=per == 8, time_ms=in_ms)
    return None


def infer_layout(lines: list[str]) -> Columns | None:
    """The layout most header-less rows share; None when no line is a row of any layout. A `#wrong`
    layout without a root column cannot be (v2.13 added both at once): no such layout is chosen."""
    found = Counter(
        layout
        for line in lines
        if not line.lstrip().startswith("#")
        for layout in [layout_of_row(line.split())]
        if layout is not None and (layout.root or layout.check == "error")
    )
    return found.most_common(1)[0][0] if found else None


def headerless_rows(run: NcclTestsRun, lines: list[str], data_row: Callable) -> None:
    """Rows pasted without the table header (the tail of a run): read in the layout they fit."""
    columns = infer_layout(lines)
    if columns is None:
        return
    run.rows = [
        row
        for line in lines
        if not line.lstrip().startswith("#")
        for row in [data_row(line.split(), columns)]
        if row is not None
    ]
    run.format = "current" if columns.check == "#wrong" else "old"
    run.header = tuple(name for name in ("redop", "root") if getattr(columns, name))
    time = "time(ms, nccl-tests 1.x)" if columns.time_ms else "time"
    layout = " ".join(("size count type", *run.header, time, "algbw busbw", columns.check))
    run.notes.append(
        f"no table header in the file: its rows read as `{layout}` per placement, the layout "
        "they fit; the time column read as each call's completion time (with -C 1 it would be "
        "the host's issue time)"
    )
