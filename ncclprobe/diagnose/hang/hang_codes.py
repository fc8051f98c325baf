"""A group's calls as codes, compared at C speed: what makes 1,024 ranks' dumps cheap to put side by
side (`hang.py`).

Each member's collectives in a group (`RankCalls`: row numbers of its dump's table, by sequence
number) become one array of call codes over the sequence numbers every member still holds, equal
codes meaning the same operation, sizes and dtypes (`CallCodes`). Arrays that are equal compare in
C; where two differ, halving slices finds the indices (`differences`). `agreed[i]` is 1 where every
dumped member holds the same call, so the first sequence number a group did not finish is among
the indices where they disagree or past the last one completed (`candidates`), and only there is a
call built and compared exactly.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence

from ncclprobe.evidence.hang.fr_table import EntryTable

ABSENT = -1  # a member's code where it holds no call of that sequence number


class RankCalls:
    """One member's collectives in one group: row numbers of its dump's table, by sequence number
    (rows that share one are a coalesced call)."""

    def __init__(self, table: EntryTable, rows: list[int]):
        seq = table.collective_seq
        rows.sort(key=seq.__getitem__)
        self.table = table
        self.rows = array("l", rows)
        self.seqs = array("q", (seq[i] for i in rows))
        self.count = len(set(self.seqs))

    def __len__(self) -> int:
        """How many distinct sequence numbers."""
        return self.count

    def distinct(self) -> list[int]:
        return sorted(set(self.seqs))

    def first(self) -> int | None:
        return self.seqs[0] if self.seqs else None

    def last(self) -> int | None:
        return self.seqs[-1] if self.seqs else None

    def rows_of(self, seq: int) -> list[int]:
        lo, hi = bisect_left(self.seqs, seq), bisect_right(self.seqs, seq)
        return list(self.rows[lo:hi])

    def codes(self, start: int, stop: int, code_of: CallCodes) -> array[int]:
        """One code per sequence number in [start, stop): the call's code, or ABSENT."""
        out = array("l", [ABSENT]) * max(0, stop - start)
        seqs, rows, table = self.seqs, self.rows, self.table
        n = len(seqs)
        if n and seqs[-1] - seqs[0] + 1 == n:  # one entry per seq, none missing: most dumps
            lo, hi = max(start, seqs[0]), min(stop, seqs[-1] + 1)
            if lo < hi:
                local, call = code_of.local(table), table.call
                picked = rows[lo - seqs[0] : hi - seqs[0]]
                out[lo - start : hi - start] = array("l", [local[call[r]] for r in picked])
            return out
        i = bisect_left(seqs, start)
        while i < n and seqs[i] < stop:
            j = i + 1
            while j < n and seqs[j] == seqs[i]:
                j += 1
            out[seqs[i] - start] = code_of(table, rows[i:j])
            i = j
        return out


class CallCodes:
    """Call codes: one integer per distinct call (its entries' operations, sizes and dtypes)."""

    def __init__(self) -> None:
        self.ids: dict[tuple, int] = {}
        self.by_table: dict[int, list[int]] = {}

    def local(self, table: EntryTable) -> list[int]:
        """The code of each of a table's distinct calls (entry i's: local[table.call[i]])."""
        found = self.by_table.get(id(table))
        if found is None:
            found = self.by_table[id(table)] = [
                self.ids.setdefault(table.signature_of(c), len(self.ids))
                for c in range(len(table.calls))
            ]
        return found

    def __call__(self, table: EntryTable, rows: Sequence[int]) -> int:
        local = self.local(table)
        if len(rows) == 1:
            return local[table.call[rows[0]]]
        key = tuple(("coalesced", *(local[table.call[r]] for r in rows)))
        return self.ids.setdefault(key, len(self.ids))


def compare(
    members: dict[int, RankCalls], start: int, stop: int
) -> tuple[dict[int, array[int]], bytearray]:
    """Each member's codes over [start, stop), and `agreed`: 1 where every member holds the same
    call (the first member is the reference; a member equal to it costs one C compare)."""
    code_of = CallCodes()
    codes = {r: calls.codes(start, stop, code_of) for r, calls in members.items()}
    if not codes:
        return codes, bytearray()
    agreed = bytearray(b"\x01") * max(0, stop - start)
    ranks = list(codes)
    ref = codes[ranks[0]]
    for i, c in enumerate(ref):
        if c == ABSENT:
            agreed[i] = 0
    for r in ranks[1:]:
        mine = codes[r]
        if mine != ref:
            for i in differences(mine, ref):
                agreed[i] = 0
    return codes, agreed


def differences(a: array[int], b: array[int], lo: int = 0) -> Iterator[int]:
    """Indices where two equal-length arrays differ, found by halving slices (C-speed compares)."""
    hi = len(a)
    if a[lo:hi] == b[lo:hi]:
        return
    stack = [(lo, hi)]
    while stack:
        lo, hi = stack.pop()
        if a[lo:hi] == b[lo:hi]:
            continue
        if hi - lo <= 64:
            yield from (i for i in range(lo, hi) if a[i] != b[i])
            continue
        mid = (lo + hi) // 2
        stack.append((mid, hi))
        stack.append((lo, mid))


def candidates(agreed: bytearray, start: int, done: int) -> Iterator[int]:
    """Indices (seq - start) that could be where a group stopped, in order: every index where the
    dumped members do not all hold one call, then every index past `done`, the last sequence number
    a member completed (an index where all hold one call that a member completed is done)."""
    n = len(agreed)
    first_open = min(n, max(0, done + 1 - start))
    i = agreed.find(0, 0, first_open)
    while 0 <= i < first_open:
        yield i
        i = agreed.find(0, i + 1, first_open)
    yield from range(first_open, n)
