"""Peer access per GPU pair in words: which pairs the driver lets access each other, which it refuses,
which one way only, and which the file does not say (a paste cut in the middle of the
`Device=i CAN|CANNOT Access Peer Device=j` lines, which p2pBandwidthLatencyTest prints for every
ordered pair, device by device, before it measures anything)."""

from __future__ import annotations


def access_notes(access: dict[tuple[int, int], bool], count: int) -> list[str]:
    """Every GPU pair's peer access as the driver answered (or the connectivity matrix shows it):
    the pairs that can, those refused, those allowed one way only, those not in the file."""
    if not access:
        return []
    total = count * (count - 1)
    if len(access) == total and all(access.values()):
        return [
            f"peer access: every GPU pair can access its peer ({total} of {total} ordered pairs)"
        ]
    groups: dict[str, list[str]] = {"can": [], "refused": [], "one way only": [], "unknown": []}
    one_way = False  # a pair of which the file holds the answer for one direction only
    for i in range(count):
        for j in range(i + 1, count):
            said = {access[p] for p in ((i, j), (j, i)) if p in access}
            if said == {True, False}:  # allowed one way: name the way
                groups["one way only"].append(f"{i}->{j}" if access[(i, j)] else f"{j}->{i}")
                continue
            group = "unknown" if not said else "can" if True in said else "refused"
            half = len(said) == 1 and ((i, j) in access) != ((j, i) in access)
            one_way = one_way or half
            groups[group].append(f"{i}-{j}" if half else f"{i}<->{j}")
    unknown = groups.pop("unknown")
    parts = [f"{label}: {_listed(pairs)}" for label, pairs in groups.items() if pairs]
    notes = [
        "peer access (the driver's answer per GPU pair): "
        + "; ".join(parts)
        + (
            " (a pair written a-b: the answer for one direction only is in the file)"
            if one_way
            else ""
        )
    ]
    if unknown:
        notes.append(
            f"peer access not in the file for {len(unknown)} GPU pair(s): {_listed(unknown)}"
            + _where_lines_end(access, count)
        )
    return notes


def _listed(pairs: list[str], limit: int = 16) -> str:
    more = f" and {len(pairs) - limit} more" if len(pairs) > limit else ""
    return ", ".join(pairs[:limit]) + more


def _where_lines_end(access: dict[tuple[int, int], bool], count: int) -> str:
    sources = {i for i, _ in access}
    last = max(sources)
    if sources == set(range(last + 1)) and last < count - 1:
        return f" (the CAN/CANNOT lines end after Device={last}'s)"
    return ""
