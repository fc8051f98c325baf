"""Which process group each entry of each dump belongs to: a group's identity across the ranks and
its members.

torch names a group once for the whole job, so the name an entry records (`process_group`) matches
one group across the ranks' dumps, as PyTorch's analyzer matches them (`fr_trace`,
`build_groups_memberships`, torch 2.13: the name plus the ranks the rank's own `pg_config` records
for it). A name alone is not enough twice:
- one name for groups of different members: disjoint groups that a torch version named alike (the
  analyzer's "multiple PGs with the same pg_guid"): the members each rank's `pg_config` records
  are part of the identity;
- one name for several backends of one process: with `TORCH_DISTRIBUTED_DEBUG=DETAIL` torch wraps
  each backend (`_create_process_group_wrapper`) and names only the wrapper, so every backend
  records the empty name, and each wrapper's own gloo backend, which checks every collective,
  records beside the job's groups under that same name. There the entry's `pg_id` (the backend's
  uid, counted per process in creation order) tells them apart; across ranks the same pg_id is
  the same group where every rank created the same backends in the same order (the default group
  and DETAIL's own always are), which a note says. The analyzer keys by name and members only and
  reads these dumps as one group of no member (tests/test_flight_recorder_gpu_fixtures.py).
`pg_config` names a group's members only where its name identifies it; otherwise they are inferred:
the default group is every rank, another group the ranks whose dumps mention it (said in a note).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from ncclprobe.diagnose.hang.hang_codes import RankCalls
from ncclprobe.evidence.hang.flight_recorder import Dump, Entry
from ncclprobe.evidence.hang.fr_table import EntryTable
from ncclprobe.rank_ranges import ranges_text

DEFAULT_GROUP_DESC = "default_pg"


@dataclass(frozen=True)
class Call:
    """What one rank issued as one collective of a group: one entry, or the entries of a
    coalesced call (they share the sequence number)."""

    group: str
    rank: int
    seq: int
    entries: tuple[Entry, ...]
    completed: bool

    @property
    def op(self) -> str:
        ops = [e.op for e in self.entries if e.op != "coalesced"]
        return "+".join(ops) if ops else self.entries[0].op

    @property
    def signature(self) -> tuple:
        return tuple(e.signature for e in self.entries)

    @property
    def first(self) -> Entry:
        return self.entries[0]


@dataclass
class Group:
    """One process group across the dumps."""

    name: str  # its identity in this job: the recorded name, with members or pg_id where needed
    desc: str | None
    members: tuple[int, ...]
    members_recorded: bool  # pg_config named them; else inferred (see the module docstring)
    recorded_name: str = ""  # the name its entries record
    pg_id: int | None = None  # where the name is not enough: the backend's uid (DETAIL)
    checks: str | None = None  # DETAIL's check backend: the label of the group it checks
    calls: dict[int, RankCalls] = field(default_factory=dict)  # rank -> its collectives
    p2p: dict[int, list[Entry]] = field(default_factory=dict)  # rank -> its send/recv entries
    enqueued: dict[int, int] = field(default_factory=dict)  # rank -> last collective seq enqueued
    completed: dict[int, int] = field(default_factory=dict)  # rank -> last collective seq completed
    window_start: int = 1  # the first seq every dumped member still holds
    # filled by `hang._build` (hang_codes.compare): per member its codes over [window_start, top];
    # agreed[i]: every dumped member holds the same call there
    codes: dict[int, array] = field(default_factory=dict, repr=False)
    agreed: bytearray = field(default_factory=bytearray, repr=False)
    top: int = 0

    @property
    def label(self) -> str:
        if self.checks is not None:
            return f"DETAIL's checks of {self.checks} ({self.name})"
        return self.desc if self.desc and self.desc != "undefined" else f"group {self.name}"

    @property
    def is_default(self) -> bool:
        """The job's default group: so described, named "0", or (names stripped) the first backend."""
        if self.desc == DEFAULT_GROUP_DESC or self.recorded_name == "0":
            return True
        return self.pg_id == 0 and not self.recorded_name

    @property
    def dumped(self) -> tuple[int, ...]:
        return tuple(r for r in self.members if r in self.enqueued)

    def call(self, rank: int, seq: int) -> Call | None:
        mine = self.calls.get(rank)
        rows = mine.rows_of(seq) if mine is not None else []
        if mine is None or not rows:
            return None
        table = mine.table
        return Call(
            group=self.name,
            rank=rank,
            seq=seq,
            entries=tuple(table.entry(i) for i in rows),
            completed=seq <= self.completed[rank],
        )

    def last_seq(self, rank: int) -> int | None:
        mine = self.calls.get(rank)
        return mine.last() if mine is not None else None

    def call_count(self) -> int:
        return sum(len(c) for c in self.calls.values())


@dataclass
class Identities:
    """Every group of the job, and per dump (by rank) its rows by group name, in record order."""

    groups: dict[str, Group]
    rows: dict[int, dict[str, list[int]]]
    shared: set[str]  # recorded names that several backends of one process carry (DETAIL)


def identify(dumps: list[Dump]) -> Identities:
    """Each dump's rows by the group they belong to (see the module docstring)."""
    sets = {d.rank: _row_sets(d.table) for d in dumps}
    shared: set[str] = set()
    for d in dumps:
        pgs: dict[str, set[int]] = {}
        for g, pg in sets[d.rank]:
            pgs.setdefault(d.table.groups[g][0], set()).add(pg)
        shared |= {name for name, ids in pgs.items() if len(ids) > 1}
    recorded: dict[str, set[tuple[int, ...]]] = {}
    for d in dumps:
        for name, config in d.groups.items():
            if config.ranks and name:
                recorded.setdefault(name, set()).add(config.ranks)
    world = {d.rank for d in dumps} | {r for sets_ in recorded.values() for s in sets_ for r in s}
    groups: dict[str, Group] = {}
    rows: dict[int, dict[str, list[int]]] = {}
    seen: dict[str, set[int]] = {}
    for d in dumps:
        mine = rows[d.rank] = {}
        for (g, pg), found in sets[d.rank].items():
            name, desc = d.table.groups[g]
            ranks = _members(d, name, recorded)
            key = _key(name, ranks if len(recorded.get(name, ())) > 1 else None, pg, shared)
            mine.setdefault(key, []).extend(found)
            seen.setdefault(key, set()).add(d.rank)
            if key not in groups:
                groups[key] = Group(
                    name=key,
                    desc=desc,
                    members=(),
                    members_recorded=False,
                    recorded_name=name,
                    pg_id=pg if name in shared else None,
                )
            if ranks and name not in shared:
                groups[key].members, groups[key].members_recorded = ranks, True
    for key, group in groups.items():
        rows_sorted = [mine[key] for mine in rows.values() if key in mine]
        for found in rows_sorted:
            found.sort()
        if not group.members_recorded:
            group.members = tuple(sorted(world if group.is_default else seen[key]))
    return Identities(groups=groups, rows=rows, shared=shared)


def _row_sets(table: EntryTable) -> dict[tuple[int, int], list[int]]:
    """(group index, pg_id) -> the rows of a table, in record order."""
    n = len(table)
    if not n:
        return {}
    pg_ids = table.pg_id
    if len(table.groups) == 1 and pg_ids.count(pg_ids[0]) == n:  # most dumps: one group
        return {(0, pg_ids[0]): list(range(n))}
    out: dict[tuple[int, int], list[int]] = {}
    for i, key in enumerate(zip(table.group, pg_ids)):
        out.setdefault(key, []).append(i)
    return out


def _members(
    dump: Dump, name: str, recorded: dict[str, set[tuple[int, ...]]]
) -> tuple[int, ...] | None:
    """The members this dump's pg_config records for `name`, else the one recorded set that holds
    this rank (a split name), else None."""
    config = dump.groups.get(name)
    if config is not None and config.ranks and name:
        return config.ranks
    holding = [s for s in recorded.get(name, ()) if dump.rank in s]
    if len(recorded.get(name, ())) == 1:
        return next(iter(recorded[name]))
    return holding[0] if len(holding) == 1 else None


def _key(name: str, split_members: tuple[int, ...] | None, pg: int, shared: set[str]) -> str:
    """The name; with the members where one name spans groups of different members; with the
    pg_id where one process records several backends under it."""
    key = f"{name} ranks {ranges_text(split_members)}" if split_members else name
    if name in shared:
        return f"{key} pg_id {pg}" if key else f"pg_id {pg}"
    return key
