"""Where a rank that never entered a collective was: its main thread's Python stack at the dump.

`ncclprobe capture` dumps every thread's Python stack with the Flight Recorder (`stacks/`). The
hang rules name the rank outside the collectives; its stack names the line it was on (a sleep, a
data loader, a barrier of its own, a branch), so the user need not reproduce it under a debugger.
A stack is one moment: the line the main thread was on when the dump was asked for.
"""

from __future__ import annotations

from ncclprobe.diagnose.hang import hang as H
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.hang.py_stacks import Stacks, read_stacks, user_frame
from ncclprobe.findings import Finding

RULE = "hang-stack"


def stack_findings(ev: E.Evidence) -> list:
    if ev.capture is None or not ev.flight_recorder:
        return []
    stacks: dict[int, Stacks] = {}
    for path in ev.capture.files("stacks"):
        dump = read_stacks(path)
        if dump.rank is not None:
            stacks.setdefault(dump.rank, dump)
    if not stacks:
        return []
    out = []
    for stuck in H.build(ev.flight_recorder).stuck:
        for rank in stuck.missing:
            held = stacks.get(rank)
            thread = held.main_thread() if held else None
            if thread is None or not thread.frames:
                continue
            own = user_frame(thread)
            innermost = thread.frames[0]
            at = own.where if own else innermost.where
            inside = (
                f" (inside {innermost.name}, {innermost.file}:{innermost.line})"
                if (own and own != innermost)
                else ""
            )
            out.append(
                Finding(
                    rule=RULE,
                    severity="info",
                    confidence="high",
                    title=f"rank {rank}, which never entered collective {stuck.seq} of "
                    f"{stuck.group.label}, was at {at}{inside} when it dumped",
                    detail="Its main thread's Python stack, innermost first: "
                    + "; ".join(f.where for f in thread.frames[:6])
                    + (" ..." if len(thread.frames) > 6 else "")
                    + ". This is the line it was on while the other ranks waited.",
                    evidence={"rank": rank, "stack_file": dump.path, "at": at},
                )
            )
    return out


RULES = (stack_findings,)
