"""How the hang rules say things: a call, its dtype and where it was issued, ranks, and what a
mismatched call's completion means. One home, so every hang finding words them alike."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ncclprobe.diagnose.hang import hang as H
from ncclprobe.evidence.hang.flight_recorder import Entry
from ncclprobe.rank_ranges import ranges_text
from ncclprobe.rank_ranges import rank_word as _rank_word

MAX_STATES = 3  # rank states shown per group; the rest counted
MAX_STOPPED = 3  # stopped groups named per kind of group; the rest counted


def ranks_text(ranks: Iterable[int]) -> str:
    return ranges_text(ranks)


def differences(stuck: H.Stuck) -> list[str]:
    sigs = [c.signature for c in stuck.calls.values()]
    names = ("operation", "input sizes", "output sizes", "input dtypes", "output dtypes")
    kinds = [
        name
        for i, name in enumerate(names)
        if len({tuple(part[i] for part in sig) for sig in sigs}) > 1
    ]
    if len({len(s) for s in sigs}) > 1 and "operation" not in kinds:
        kinds.insert(0, "operation")
    return [
        k for k in kinds if not (k.startswith("output") and k.replace("output", "input") in kinds)
    ] or ["arguments"]


def done_ranks(stuck: H.Stuck) -> tuple[int, ...]:
    return tuple(r for r, c in sorted(stuck.calls.items()) if c.completed)


def completion(stuck: H.Stuck) -> str:
    done = done_ranks(stuck)
    if not done:
        return ": none of them completed it."
    if len(done) == len(stuck.calls) and not any(
        c.first.backend == "gloo" for c in stuck.calls.values()
    ):
        return (
            ": here every rank completed it, so NCCL ran the mismatched calls against each other "
            "without hanging and the results are wrong (no error is raised for this)."
        )
    if any(stuck.calls[r].first.backend == "gloo" for r in done):
        return (
            f" ({rank_word(done)}'s record marks it completed: gloo marks a collective completed "
            "also when it ended in an error)."
        )
    return f" (completed on {rank_word(done)} only)."


def call_text(call: H.Call) -> str:
    e = call.first
    sizes = ", ".join(str(list(s)) for s in e.input_sizes) or "no tensors"
    return f"{call.op} of {sizes}{dtype_text(e)}"


def dtype_text(e: Entry) -> str:
    dtypes = sorted(set(e.input_dtypes or ()))
    return f" {'/'.join(dtypes)}" if dtypes else ""


def call_json(call: H.Call) -> dict:
    e = call.first
    return {
        "op": call.op,
        "input_sizes": [list(s) for s in e.input_sizes],
        "output_sizes": [list(s) for s in e.output_sizes],
        "input_dtypes": list(e.input_dtypes or []),
        "state": e.state,
        "completed": call.completed,
        "where": e.where or None,
    }


def at(call: H.Call) -> str:
    return entry_at(call.first)


def entry_at(entry: Entry) -> str:
    return f", issued at {entry.where}" if entry.where else ""


def rank_word(ranks: Iterable[int]) -> str:
    return _rank_word(ranks)


def verb(ranks: Iterable[int], one: str, many: str) -> str:
    return one if len(list(ranks)) == 1 else many


# ---- the header: one line per kind of group, rank sets as ranges ------------------------------

_KINDS = (
    ("TP", r"\btp\b|tp_|tensor"),
    ("DP", r"\bdp\b|dp_|data|fsdp|ddp"),
    ("PP", r"\bpp\b|pp_|pipe"),
    ("EP", r"\bep\b|ep_|expert|moe"),
    ("CP", r"\bcp\b|cp_|context"),
)


def group_kind(desc: str | None, name: str) -> str:
    """What a group is for, from its description: TP/DP/PP/EP/CP where it says so, else the
    description without its trailing number (`my_group_3` -> `my_group`)."""
    text = (desc or "").strip()
    if not text or text == "undefined":
        return f"group {name}"
    if text == "default_pg":
        return text
    for kind, pattern in _KINDS:
        if re.search(pattern, text, re.IGNORECASE):
            return kind
    return re.sub(r"[_\-\s.]*\d+$", "", text) or text


def group_lines(groups: list[dict]) -> list[str]:
    """`# ` header lines: one per group, or one per kind of group where several share a kind (128
    TP groups in one line, the stopped ones named); every rank set as ranges."""
    kinds: dict[str, list[dict]] = {}
    for g in groups:
        kinds.setdefault(group_kind(g["desc"], g["group"]), []).append(g)
    lines = []
    for kind, members in kinds.items():
        if len(members) == 1:
            lines.append(f"# {_one_group(members[0])}")
            continue
        everyone = sorted({r for g in members for r in g["members"]})
        stopped = [g for g in members if g["stuck_at"] is not None]
        first, last = members[0]["label"], members[-1]["label"]
        if first == last:  # one description for all (Megatron's): their names tell them apart
            first, last = f"group {members[0]['group']}", f"group {members[-1]['group']}"
        head = f"# {len(members)} {kind} groups ({first} ... {last}, {_members(everyone)}): "
        if not stopped:
            lines.append(head + "every group finished every collective its dumps record")
            continue
        named = "; ".join(
            f"{g['label']} ({_members(g['members'])}){_stuck_text(g)}"
            for g in stopped[:MAX_STOPPED]
        )
        more = (
            f"; and {len(stopped) - MAX_STOPPED} more stopped" if len(stopped) > MAX_STOPPED else ""
        )
        lines.append(
            head + f"{len(members) - len(stopped)} finished every collective; "
            f"{len(stopped)} stopped: {named}{more}"
        )
    return lines


def _one_group(g: dict) -> str:
    states: dict[tuple[int, int], list[int]] = {}
    for r, p in g["ranks"].items():
        states.setdefault((p["enqueued"], p["completed"]), []).append(int(r))
    ordered = sorted(states.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
    parts = [f"{_rank_word(rs)} enqueued {e}, completed {c}" for (e, c), rs in ordered[:MAX_STATES]]
    if len(ordered) > MAX_STATES:
        rest = sum(len(rs) for _, rs in ordered[MAX_STATES:])
        parts.append(f"{rest} more ranks in {len(ordered) - MAX_STATES} other states")
    return (
        f"{g['label']} ({_members(g['members'])}): " + "; ".join(parts) + _lag(g) + _stuck_text(g)
    )


def _lag(g: dict) -> str:
    """Ranks whose own status said fewer collectives completed than they finished: a peer completed
    the later ones, which no member finishes alone (a dump taken as the last call finished)."""
    behind = {
        int(r): p["status_completed"]
        for r, p in g["ranks"].items()
        if p.get("status_completed", p["completed"]) < p["completed"]
    }
    if not behind:
        return ""
    return (
        f" ({_rank_word(sorted(behind))}: its own status said {min(behind.values())} completed; "
        "the later calls completed on a peer and every member enqueued them: finished, the dump "
        "was taken as they ended)"
    )


def _members(ranks: Iterable[int]) -> str:
    """`ranks 0-7` or `256 ranks: 0-255`."""
    ordered = sorted(set(ranks))
    if len(ordered) <= 8:
        return _rank_word(ordered)
    return f"{len(ordered)} ranks: {ranges_text(ordered)}"


def _stuck_text(g: dict) -> str:
    return {
        "missing": f"; stopped at #{g['stuck_at']}, which a member never entered",
        "mismatch": f"; the ranks disagree at #{g['stuck_at']}",
        "agreed": f"; every member is in #{g['stuck_at']}, unfinished",
    }.get(g["stuck_because"], "")
