"""Point-to-point operations across the dumps: every send must meet a receive of the same size.

The sends from rank a to rank b (in a's dump) and the receives on b from a (in b's dump) are paired
in order; a send or receive left without a partner is the finding, whatever its own record says:
after the watchdog aborts a communicator NCCL reports the aborted work as completed (seen on the
H200: the hung send of the recorded p2p job reads "completed" in the dump taken after the abort,
with `pg_status` still one behind). Pairing in order needs both ranks' whole p2p history: where a
ring buffer has dropped a rank's oldest entries (its first record id is not 0), only operations
still pending are compared with the peer's pending ones.
"""

from __future__ import annotations

from ncclprobe.diagnose.hang import hang as H
from ncclprobe.diagnose.hang import hang_words as W
from ncclprobe.evidence.hang.flight_recorder import Entry
from ncclprobe.findings import Finding


def p2p_findings(hang: H.Hang) -> list[Finding]:
    out = []
    whole = {d.rank for d in hang.dumps if not d.entries or d.entries[0].record_id in (0, None)}
    for group in hang.groups.values():
        for (src, dst), (sends, recvs) in sorted(_pairs(group, hang).items()):
            lonely = (
                _unpaired(sends, recvs) if {src, dst} <= whole else _pending_unmatched(sends, recvs)
            )
            for entry, other in lonely:
                rank, peer = (src, dst) if entry.op == "send" else (dst, src)
                out.append(_finding(hang, group, entry, rank, peer, other))
    return out


def pending(hang: H.Hang) -> bool:
    """Any send or receive not completed, or without its partner."""
    return bool(p2p_findings(hang)) or any(
        e.state != "completed" for g in hang.groups.values() for es in g.p2p.values() for e in es
    )


def _pairs(group: H.Group, hang: H.Hang) -> dict[tuple[int, int], tuple[list, list]]:
    """(global src, global dst) -> (the sends on src, the receives on dst), each in order."""
    members = sorted(group.members)
    pairs: dict[tuple[int, int], tuple[list, list]] = {}
    for rank, entries in group.p2p.items():
        for e in entries:
            if e.op not in ("send", "recv") or e.src is None or e.dst is None:
                continue
            if max(e.src, e.dst) >= len(members):
                continue
            src, dst = members[e.src], members[e.dst]
            if rank != (src if e.op == "send" else dst):
                continue  # a record that names another rank as its own side: not ours to pair
            sends, recvs = pairs.setdefault((src, dst), ([], []))
            (sends if e.op == "send" else recvs).append(e)
    return {k: v for k, v in pairs.items() if k[0] in hang.ranks and k[1] in hang.ranks}


def _unpaired(sends: list, recvs: list) -> list[tuple]:
    """[(the first op left without a partner of its size, the peer's op at its place or None)]."""
    for i in range(max(len(sends), len(recvs))):
        send = sends[i] if i < len(sends) else None
        recv = recvs[i] if i < len(recvs) else None
        if send is not None and recv is not None and _numel(send) == _numel(recv):
            continue
        return [(send, recv) if send is not None else (recv, None)]
    return []


def _pending_unmatched(sends: list, recvs: list) -> list[tuple]:
    """Without the whole history: the first pending op whose peer has no pending partner of its size."""
    open_sends = [e for e in sends if e.state != "completed"]
    open_recvs = [e for e in recvs if e.state != "completed"]
    for mine, theirs in ((open_sends, open_recvs), (open_recvs, open_sends)):
        for i, e in enumerate(mine):
            other = theirs[i] if i < len(theirs) else None
            if other is None or _numel(other) != _numel(e):
                return [(e, other)]
    return []


def _numel(e: Entry) -> int:
    return e.numel_in or e.numel_out


def _finding(
    hang: H.Hang, group: H.Group, entry: Entry, rank: int, peer: int, other: Entry | None
) -> Finding:
    want = "receive" if entry.op == "send" else "send"
    direction = f"to rank {peer}" if entry.op == "send" else f"from rank {peer}"
    size = f"{_numel(entry):,} elements" + W.dtype_text(entry)
    if other is not None:
        their = f"rank {peer}'s {other.op} at the same place is of another size ({_numel(other):,} elements)"
    else:
        their = (
            f"rank {peer} has no {want} {'from' if entry.op == 'send' else 'to'} rank {rank} for it"
        )
        elsewhere = hang.pending_elsewhere(peer, group)
        if elsewhere is not None:
            their += f"; it waits in {hang.groups[elsewhere.group].label} #{elsewhere.seq} ({elsewhere.op})"
    state = (
        " Its own record reads completed: NCCL reports work the watchdog aborted as completed."
        if entry.state == "completed"
        else ""
    )
    return Finding(
        rule="hang-p2p",
        severity="error",
        confidence="high",
        title=f"rank {rank}'s {entry.op} {direction} ({size}, p2p #{entry.p2p_seq} of {group.label}) "
        f"has no matching {want} on rank {peer}",
        detail=(
            f"Rank {rank} posted {entry.op} {direction} in {group.label}{W.entry_at(entry)}; {their}. "
            f"A point-to-point transfer completes only when both sides post it with the same size.{state}"
        ),
        evidence={
            "group": group.name,
            "rank": rank,
            "peer": peer,
            "op": entry.op,
            "p2p_seq": entry.p2p_seq,
            "numel": _numel(entry),
            "state": entry.state,
            "peer_op": other.op if other is not None else None,
            "peer_numel": _numel(other) if other is not None else None,
        },
    )
