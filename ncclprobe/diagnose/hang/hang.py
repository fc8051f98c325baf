"""The ranks' Flight Recorder dumps put side by side: per process group, what each member issued
at each sequence number, and where each group stopped.

A group's collectives carry a sequence number that every member counts the same way, so collective
N of a group must be the same operation, with the same sizes and dtypes, on every member. Matching
them across dumps shows the first collective a group did not finish (`Stuck`) and why: a member
never enqueued it (`missing`), the members issued different calls (`mismatch`), or every member is
in it with the same call (`agreed`: the cause is below the collectives, or in another group).

What counts as done. A collective some member completed, that every member enqueued with the same
call, is done: no member can complete it without the others (a dump taken as it finished shows the
rest still in it). A member that never enqueued it cannot have finished it however its own record
reads (gloo marks a collective that failed on a timeout "completed"). Completion is read from the
entry's state and from `pg_status.last_completed_collective` (gloo leaves every state "scheduled").

Which group an entry belongs to and which ranks belong to a group: `hang_groups` (the name, and
where a name is not enough the members or the backend's pg_id: TORCH_DISTRIBUTED_DEBUG=DETAIL
records every backend under one empty name, its own checks included, which `hang_detail` reads).
The ring buffer may have overwritten a rank's oldest entries: only sequence numbers every member
still holds are compared.

At 1,024 ranks. Each dump arrives as a table (`evidence.hang.fr_table`); a call is built from it only
where a finding needs one. Per group, each member's calls become one array of call codes by
sequence number (equal codes: the same operation, sizes and dtypes), compared member by member at C
speed, so the first sequence number where members differ, or that no member completed, is found
without building the calls before it; only there is the exact comparison made.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ncclprobe.diagnose.hang import hang_detail
from ncclprobe.diagnose.hang.hang_codes import RankCalls, candidates, compare
from ncclprobe.diagnose.hang.hang_groups import Call, Group, identify
from ncclprobe.evidence.hang.flight_recorder import Dump
from ncclprobe.evidence.hang.fr_table import NONE, EntryTable
from ncclprobe.rank_ranges import ranges_text

__all__ = ["Call", "Group", "Hang", "Stuck", "build", "groups_summary", "order_swap"]
ORDER_WINDOW = 8  # later collectives searched for a swapped pair


@dataclass(frozen=True)
class Stuck:
    """The first collective of a group that not every member finished."""

    group: Group
    seq: int
    calls: dict[int, Call]  # members that enqueued it
    missing: tuple[int, ...]  # dumped members that never enqueued it
    undumped: tuple[int, ...]  # members without a dump: unknown
    check: Group | None = None  # DETAIL's check of it ran and failed: no member issued it
    check_seq: int | None = None  # the check's last call, in `check`'s own numbering

    @property
    def mismatch(self) -> bool:
        return self.check is not None or len({c.signature for c in self.calls.values()}) > 1

    @property
    def agreed(self) -> bool:
        return not self.missing and not self.mismatch

    @property
    def because(self) -> str:
        """missing (a member never enqueued it), mismatch (members issued different calls) or
        agreed."""
        return "missing" if self.missing else "mismatch" if self.mismatch else "agreed"

    @property
    def waiting(self) -> tuple[int, ...]:
        """Members in it: every one that enqueued it while a member is missing (no completion is
        real then), else those that have not completed it."""
        return tuple(r for r, c in sorted(self.calls.items()) if self.missing or not c.completed)


@dataclass
class Hang:
    """Everything the dumps show, grouped; what the rules read."""

    dumps: list[Dump]
    groups: dict[str, Group]
    stuck: list[Stuck]
    notes: list[str] = field(default_factory=list)
    unreadable: dict[int, tuple[str, str]] = field(default_factory=dict)  # rank -> (path, why)

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(d.rank for d in self.dumps)

    def pending_elsewhere(self, rank: int, group: Group) -> Call | None:
        """The oldest collective `rank` has enqueued and not finished in a group other than `group`."""
        pending: list[Call] = []
        for g in self.groups.values():
            mine = g.calls.get(rank)
            if g is group or mine is None:
                continue
            for seq in mine.distinct():
                if seq < g.window_start or self._agreed_done(g, seq):
                    continue
                call = g.call(rank, seq)  # held: `distinct` lists the seqs it has rows of
                if call is not None and not self.finished(call):
                    pending.append(call)
        return min(pending, key=lambda c: c.first.time_created_ns or 0, default=None)

    @staticmethod
    def _agreed_done(group: Group, seq: int) -> bool:
        """Every dumped member holds the same call at `seq` and some member completed it."""
        i = seq - group.window_start
        done = max(group.completed.values(), default=0)
        return 0 <= i < len(group.agreed) and group.agreed[i] == 1 and seq <= done

    def finished(self, call: Call) -> bool:
        """Done for the group: completed here or by a peer with every member in it, and never with
        a member that did not enqueue it (a collective marked completed there ended in an error)."""
        group = self.groups[call.group]
        if self._agreed_done(group, call.seq):
            return True
        calls = [c for r in group.dumped if (c := group.call(r, call.seq)) is not None]
        if len(calls) < len(group.dumped):
            return False
        return call.completed or (
            len({c.signature for c in calls}) == 1 and any(c.completed for c in calls)
        )


# the last (dumps, Hang): the rules, the notes and the summary share one build
_BUILT: list[tuple[list[Dump], Hang]] = []


def build(dumps: list[Dump]) -> Hang:
    if _BUILT and _BUILT[0][0] is dumps:
        return _BUILT[0][1]
    hang = _build(dumps)
    _BUILT[:] = [(dumps, hang)]
    return hang


def _build(dumps: list[Dump]) -> Hang:
    found = identify(dumps)
    groups, notes = found.groups, [n for d in dumps for n in d.notes]
    for dump in dumps:
        _add_dump(groups, dump, found.rows[dump.rank])
    inferred: dict[str, list[Group]] = {}
    for group in groups.values():
        _window(group, notes)
        dumped = group.dumped
        group.top = max((group.enqueued[r] for r in dumped), default=0)
        members = {r: group.calls[r] for r in dumped}
        group.codes, group.agreed = compare(members, group.window_start, group.top + 1)
    checks = hang_detail.link(groups, dumps, found.rows)
    for group in groups.values():
        if not group.members_recorded:
            how = "every rank dumped" if group.is_default else "the dumps that mention it"
            inferred.setdefault(how, []).append(group)
    notes += hang_detail.notes(groups, found.shared, checks)
    for how, gs in inferred.items():
        if len(gs) == 1:
            notes.append(
                f"{gs[0].label}: the dumps do not record its ranks; taken as ranks "
                f"{ranges_text(gs[0].members)} ({how})"
            )
        else:
            notes.append(
                f"{len(gs)} groups ({', '.join(g.label for g in gs[:4])}{', ...' if len(gs) > 4 else ''}): "
                f"the dumps do not record their ranks; each taken as {how}"
            )
    stuck = [s for g in groups.values() if (s := _first_stuck(g)) is not None]
    for group, seq, check, check_seq in hang_detail.failed_checks(
        groups, checks, found.rows, dumps, stuck
    ):
        undumped = tuple(r for r in group.members if r not in group.dumped)
        stuck.append(Stuck(group, seq, {}, (), undumped, check=check, check_seq=check_seq))
    return Hang(
        dumps=dumps,
        groups=groups,
        stuck=stuck,
        notes=notes,
        unreadable=dict(getattr(dumps, "unreadable", {}) or {}),
    )


def _add_dump(groups: dict[str, Group], dump: Dump, rows: dict[str, list[int]]) -> None:
    """A dump's rows into its groups: collectives by sequence number, p2p apart, how far it got."""
    table = dump.table
    seq_col, is_p2p = table.collective_seq, table.is_p2p
    any_p2p = 1 in is_p2p
    for name, group in groups.items():
        mine = rows.get(name, [])
        if any_p2p:
            p2p = [i for i in mine if is_p2p[i]]
            if p2p:
                group.p2p[dump.rank] = [table.entry(i) for i in p2p]
            mine = [i for i in mine if not is_p2p[i]]
        if dump.rank not in group.members:
            continue
        pg = group.pg_id if group.pg_id is not None else _pg_of(table, rows.get(name))
        st = dump.status.get(pg) if pg is not None else None
        calls = RankCalls(table, [i for i in mine if seq_col[i] != NONE])
        last_done = st.last_completed if st and st.last_completed is not None else 0
        group.completed[dump.rank] = max([last_done, 0, *_completed_seqs(calls)])
        last = calls.last()
        group.enqueued[dump.rank] = max(
            st.last_enqueued if st and st.last_enqueued is not None else 0, last or 0
        )
        group.calls[dump.rank] = calls


def _pg_of(table: EntryTable, rows: list[int] | None) -> int | None:
    """The pg_id of a group's rows in one dump (its last row's), None where absent."""
    if not rows:
        return None
    pg = table.pg_id[rows[-1]]
    return None if pg == NONE else pg


def _completed_seqs(mine: RankCalls) -> list[int]:
    """The highest sequence number all of whose entries read completed (the others are below)."""
    state, seqs, rows = mine.table.state, mine.seqs, mine.rows
    done: dict[int, bool] = {}
    for k in range(len(seqs) - 1, -1, -1):
        done[seqs[k]] = done.get(seqs[k], True) and state[rows[k]] == 2
        if k == 0 or seqs[k - 1] != seqs[k]:
            if done[seqs[k]]:
                return [seqs[k]]
    return []


def _window(group: Group, notes: list[str]) -> None:
    """Only seqs every dumped member still holds can be compared (the ring buffer drops the oldest)."""
    firsts = [f for c in group.calls.values() if (f := c.first()) is not None]
    group.window_start = max(firsts, default=1)
    if group.window_start > 1 and any(f < group.window_start for f in firsts):
        notes.append(
            f"{group.label}: collectives before {group.window_start} are no longer in every rank's "
            "buffer (it is a ring): they are not compared"
        )


def _first_stuck(group: Group) -> Stuck | None:
    dumped = group.dumped
    done = max((group.completed[r] for r in dumped), default=0)
    start = group.window_start
    for i in candidates(group.agreed, group.window_start, done):
        seq = start + i
        calls = {r: c for r in dumped if (c := group.call(r, seq)) is not None}
        missing = tuple(r for r in dumped if r not in calls and group.enqueued[r] < seq)
        if not calls:
            continue  # seqs whose entries every rank has lost (or never had: p2p-only stretches)
        stuck = Stuck(
            group=group,
            seq=seq,
            calls=calls,
            missing=missing,
            undumped=tuple(r for r in group.members if r not in dumped),
        )
        if stuck.missing or stuck.mismatch:
            return stuck
        if any(c.completed for c in calls.values()):
            continue  # done, or done by some member with every member in it: done
        return stuck
    return None


def order_swap(stuck: Stuck) -> tuple[int, int, int] | None:
    """Two ranks that issued the same calls in a different order: (rank a, rank b, the seq at which
    b issued a's call at `stuck.seq`), when a's call there appears later on b and b's later on a.
    One rank stands for each distinct call (the lowest), so many ranks cost little."""
    group, seq = stuck.group, stuck.seq
    by_sig: dict[tuple, int] = {}
    for r in sorted(stuck.calls):
        by_sig.setdefault(stuck.calls[r].signature, r)
    ranks = sorted(by_sig.values())
    for a in ranks:
        for b in ranks:
            if a >= b:
                continue
            later_b = _find(group, b, stuck.calls[a].signature, seq)
            later_a = _find(group, a, stuck.calls[b].signature, seq)
            if later_b is not None and later_a is not None:
                return a, b, later_b
    return None


def _find(group: Group, rank: int, signature: tuple, after: int) -> int | None:
    for seq in range(after + 1, after + 1 + ORDER_WINDOW):
        call = group.call(rank, seq)
        if call is not None and call.signature == signature:
            return seq
    return None


def _done_by(group: Group, rank: int, stuck: Stuck | None) -> int:
    """The last collective `rank` finished, as the module docstring counts done: its own record's,
    or a later one it enqueued that a peer completed before the group's first unfinished call (a
    dump taken as the call finished: gloo's status at exit lags its last call)."""
    done = max((group.completed[r] for r in group.dumped), default=0)
    if stuck is not None:
        done = min(done, stuck.seq - 1)
    return max(group.completed[rank], min(group.enqueued[rank], done))


def _rank_state(group: Group, rank: int, stuck: Stuck | None) -> dict:
    """Enqueued and completed; `status_completed` too where the rank's own record said less."""
    state = {"enqueued": group.enqueued[rank], "completed": _done_by(group, rank, stuck)}
    if state["completed"] != group.completed[rank]:
        state["status_completed"] = group.completed[rank]
    return state


def groups_summary(dumps: list[Dump]) -> list[dict]:
    """Per group, for output: members, each dumped rank's last enqueued and completed collective,
    and the first collective not every member finished (None: none)."""
    hang = build(dumps)
    stuck = {s.group.name: s for s in hang.stuck}
    return [
        {
            "group": g.name,
            "desc": g.desc,
            "label": g.label,
            "members": list(g.members),
            "members_recorded": g.members_recorded,
            "ranks": {str(r): _rank_state(g, r, stuck.get(g.name)) for r in g.dumped},
            "stuck_at": stuck[g.name].seq if g.name in stuck else None,
            "stuck_because": stuck[g.name].because if g.name in stuck else None,
        }
        for g in hang.groups.values()
    ]
