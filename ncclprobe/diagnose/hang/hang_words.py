"""How the hang rules say things: a call, its dtype and where it was issued, ranks, and what a
mismatched call's completion means. One home, so every hang finding words them alike."""

from __future__ import annotations

from ncclprobe.diagnose.hang import hang as H


def ranks_text(ranks) -> str:
    return ", ".join(str(r) for r in ranks)


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


def dtype_text(e) -> str:
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


def entry_at(entry) -> str:
    return f", issued at {entry.where}" if entry.where else ""


def rank_word(ranks) -> str:
    ranks = list(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ranks_text(ranks)


def verb(ranks, one: str, many: str) -> str:
    return one if len(list(ranks)) == 1 else many
