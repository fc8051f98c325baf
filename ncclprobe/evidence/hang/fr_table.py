"""One rank's Flight Recorder entries as a compact table: columns of machine integers, with the
few distinct calls (operation, sizes, dtypes), groups and call sites stored once.

A 1,024-rank job with 2,000 entries per rank is two million entries; as Python objects with their
stack frames that is gigabytes, as these columns about 100 bytes an entry. Each rank's dump is
reduced to its table in a reader worker (`read_pool`), the table travels back as a few arrays,
and an `Entry` is built only where an analysis asks for one (`table.entry(i)`).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar, overload

NONE = -(2**63)  # an absent integer field (the reader admits |value| < 2**63 only)
STATES = ("scheduled", "started", "completed")
_STATE = {s: i for i, s in enumerate(STATES)}
_INTS = (
    "record_id",
    "pg_id",
    "collective_seq",
    "p2p_seq",
    "op_id",
    "time_created_ns",
    "time_started_ns",
    "time_completed_ns",
    "timeout_ms",
)
Shapes = tuple[tuple[int, ...], ...]
Dtypes = tuple[str, ...] | None
# a distinct call: ((backend, op, src, dst, input sizes, output sizes), input dtypes, output dtypes)
CallKey = tuple[tuple[str, str, int | None, int | None, Shapes, Shapes], Dtypes, Dtypes]
GroupKey = tuple[str, str | None]  # (name, desc)
Key = TypeVar("Key")


@dataclass(frozen=True)
class Entry:
    """One operation a rank's process group issued, as the Flight Recorder recorded it."""

    record_id: int | None
    pg_id: int | None
    group: str  # the group's name ("0" for the default group), or str(pg_id) before 2.0
    group_desc: str | None  # "default_pg", a user's `group_desc`; None before 2.0
    collective_seq: int | None  # collective_seq_id (seq_id before 2.0); 0 for p2p ops
    p2p_seq: int | None
    op_id: int | None
    backend: str  # the profiling name's prefix: nccl, gloo, ...
    op: str  # all_reduce, broadcast, send, recv, coalesced, ...
    src: int | None  # send/recv: group ranks from the profiling name ("send 0->1", "recv 1<-0")
    dst: int | None
    is_p2p: bool
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...] | None
    output_dtypes: tuple[str, ...] | None
    state: str  # scheduled | started | completed
    retired: bool | None  # retired but not completed: the watchdog gave up on it (timed out)
    time_created_ns: int | None
    time_started_ns: int | None
    time_completed_ns: int | None
    timeout_ms: int | None
    duration_ms: float | None
    where: str = ""  # the user's own frame that issued it (the first outside torch)

    @property
    def numel_in(self) -> int:
        return sum(_numel(s) for s in self.input_sizes)

    @property
    def numel_out(self) -> int:
        return sum(_numel(s) for s in self.output_sizes)

    @property
    def signature(self) -> tuple:
        """What must be equal on every member at one sequence number."""
        return (self.op, self.input_sizes, self.output_sizes, self.input_dtypes, self.output_dtypes)


class EntryTable:
    """Columns of one rank's entries, in record order (see the module docstring)."""

    # the integer columns, one per name in _INTS (set there by name; NONE where absent)
    record_id: array[int]
    pg_id: array[int]
    collective_seq: array[int]
    p2p_seq: array[int]
    op_id: array[int]
    time_created_ns: array[int]
    time_started_ns: array[int]
    time_completed_ns: array[int]
    timeout_ms: array[int]

    def __init__(self) -> None:
        for name in _INTS:
            setattr(self, name, array("q"))
        self.duration_ms = array("d")
        self.state = bytearray()  # index into STATES
        self.retired = bytearray()  # 0 False, 1 True, 2 absent
        self.is_p2p = bytearray()
        self.call = array("l")  # index into calls: (backend, op, src, dst, sizes, dtypes)
        self.group = array("l")  # index into groups: (name, desc)
        self.site = array("l")  # index into sites: the `where` text
        self.calls: list[CallKey] = []
        self.groups: list[GroupKey] = []
        self.sites: list[str] = []
        self._index: dict[tuple[int, object], int] = {}
        self._int_columns = [getattr(self, name) for name in _INTS]

    def __len__(self) -> int:
        return len(self.state)

    def add(self, e: Entry) -> None:
        self.add_row(
            tuple(getattr(e, name) for name in _INTS),
            e.duration_ms,
            _STATE[e.state],
            2 if e.retired is None else int(e.retired),
            int(e.is_p2p),
            (
                (e.backend, e.op, e.src, e.dst, e.input_sizes, e.output_sizes),
                e.input_dtypes,
                e.output_dtypes,
            ),
            (e.group, e.group_desc),
            e.where,
        )

    def add_row(
        self,
        ints: Sequence[int | None],
        duration: float | None,
        state: int,
        retired: int,
        is_p2p: int,
        call: CallKey,
        group: GroupKey,
        site: str,
    ) -> None:
        """One entry: its integer fields in `_INTS` order (None where absent), its codes, and its
        call (((backend, op, src, dst, input sizes, output sizes), input dtypes, output dtypes)),
        group ((name, desc)) and call site, each stored once in its list."""
        for column, value in zip(self._int_columns, ints):
            column.append(NONE if value is None else value)
        self.duration_ms.append(math.nan if duration is None else duration)
        self.state.append(state)
        self.retired.append(retired)
        self.is_p2p.append(is_p2p)
        self.call.append(self._stored(self.calls, call))
        self.group.append(self._stored(self.groups, group))
        self.site.append(self._stored(self.sites, site))

    def _stored(self, values: list[Key], key: Key) -> int:
        """Where `key` is in `values`, appended the first time it is seen."""
        found = self._index.get((id(values), key))
        if found is None:
            found = self._index[(id(values), key)] = len(values)
            values.append(key)
        return found

    def show_strings(self, group_name: Callable[[str], str], text: Callable[[str], str]) -> None:
        """Every string the table holds as it is shown: each distinct group's name through
        `group_name`, its description, each call's backend, operation and dtypes through `text`
        (the reader's masking, `fr_entries.masked`); once the table is complete, each distinct
        string once."""

        def each(values: Dtypes) -> Dtypes:
            return values if values is None else tuple(text(v) for v in values)

        self.groups = [(group_name(n), text(d) if d else d) for n, d in self.groups]
        self.calls = [
            ((text(backend), text(op), src, dst, ins, outs), each(in_dt), each(out_dt))
            for (backend, op, src, dst, ins, outs), in_dt, out_dt in self.calls
        ]
        self._index = {}  # keyed by the strings as read: nothing is added after this

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_index"] = {}
        del state["_int_columns"]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._int_columns = [getattr(self, name) for name in _INTS]

    def entry(self, i: int) -> Entry:
        (backend, op, src, dst, ins, outs), in_dt, out_dt = self.calls[self.call[i]]
        name, desc = self.groups[self.group[i]]
        ints = {n: (None if (v := getattr(self, n)[i]) == NONE else v) for n in _INTS}
        duration = self.duration_ms[i]
        retired = self.retired[i]
        return Entry(
            group=name,
            group_desc=desc,
            backend=backend,
            op=op,
            src=src,
            dst=dst,
            is_p2p=bool(self.is_p2p[i]),
            input_sizes=ins,
            output_sizes=outs,
            input_dtypes=in_dt,
            output_dtypes=out_dt,
            state=STATES[self.state[i]],
            retired=None if retired == 2 else bool(retired),
            duration_ms=None if math.isnan(duration) else duration,
            where=self.sites[self.site[i]],
            **ints,
        )

    def signature(self, i: int) -> tuple:
        """Entry i's operation, sizes and dtypes: what must match on every member."""
        return self.signature_of(self.call[i])

    def signature_of(self, call: int) -> tuple:
        (_, op, _, _, ins, outs), in_dt, out_dt = self.calls[call]
        return (op, ins, outs, in_dt, out_dt)

    def timed_out(self) -> bool:
        """An entry retired but not completed, outside gloo: the watchdog gave up on it (gloo
        retires what failed on its own timeout, and marks it completed)."""
        gloo = {c for c, ((backend, *_), _, _) in enumerate(self.calls) if backend == "gloo"}
        return any(
            r == 1 and s != 2 and self.call[i] not in gloo
            for i, (r, s) in enumerate(zip(self.retired, self.state))
        )


class Entries(Sequence[Entry]):
    """A table's entries as a read-only sequence of `Entry`, each built when asked for."""

    def __init__(self, table: EntryTable) -> None:
        self._table = table

    def __len__(self) -> int:
        return len(self._table)

    @overload
    def __getitem__(self, i: int) -> Entry: ...

    @overload
    def __getitem__(self, i: slice) -> list[Entry]: ...

    def __getitem__(self, i: int | slice) -> Entry | list[Entry]:
        if isinstance(i, slice):
            return [self._table.entry(j) for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._table.entry(i)

    def __iter__(self) -> Iterator[Entry]:
        return (self._table.entry(i) for i in range(len(self)))


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
