"""Hand-written Flight Recorder dumps of the schema versions no machine here writes (torch 2.13
writes 2.10), built from the writer's own fields at each version (see the docstring of
ncclprobe.evidence.hang.flight_recorder). Every dump made here is HAND-WRITTEN test data, not a
recording; the recorded ones are under tests/fixtures/flight_recorder/.

`job(version, calls)` builds one dump per rank from a compact description: per rank a list of
(op, numel, state) for the default group, optionally (op, numel, state, group) for another.
"""

from __future__ import annotations

import pickle
from pathlib import Path

T0 = 1_796_150_000_000_000_000  # ns since the epoch, a Dec 2026 moment like the recorded dumps'


def entry(version: str, rank: int, seq: int, op: str, numel: int, state: str, group="0", **extra):
    """One entry as the writer of `version` lays it out."""
    major, minor = (int(x) for x in version.split("."))
    pg_id = int(group)
    e = {
        "pg_id": pg_id,
        "profiling_name": f"nccl:{op}",
        "time_created_ns": T0 + seq * 1_000_000 + rank,
        "input_sizes": [[numel]],
        "output_sizes": [[numel]],
        "state": state,
        "time_discovered_started_ns": T0 + seq * 1_000_000 + 500 if state != "scheduled" else None,
        "time_discovered_completed_ns": T0 + seq * 1_000_000 + 900
        if state == "completed"
        else None,
        "retired": state == "completed",
        "frames": [
            {
                "name": "all_reduce",
                "filename": "/x/torch/distributed/distributed_c10d.py",
                "line": 1,
            },
            {"name": "step", "filename": "/job/train.py", "line": 40 + seq},
        ],
    }
    if major == 1:
        e["seq_id"] = seq
        if minor >= 4:
            e.update(record_id=seq - 1, op_id=seq)
        return {**e, **extra}
    e.update(
        record_id=seq - 1,
        op_id=seq,
        process_group=(group, "default_pg" if group == "0" else f"group_{group}"),
        collective_seq_id=seq,
        p2p_seq_id=0,
        input_dtypes=["Float"],
        output_dtypes=["Float"],
        timeout_ms=10000,
        is_p2p=False,
    )
    if (major, minor) >= (2, 10):
        e.update(thread_id="140000000000000", thread_name="python")
    return {**e, **extra}


def dump(version: str, rank: int, calls: list[tuple], world: int = 2) -> dict:
    """A whole dump: entries numbered per group, pg_config and pg_status as `version` writes them."""
    major, minor = (int(x) for x in version.split("."))
    entries, seqs = [], {}
    for call in calls:
        op, numel, state, *rest = call
        group = rest[0] if rest else "0"
        seqs[group] = seqs.get(group, 0) + 1
        entries.append(entry(version, rank, seqs[group], op, numel, state, group))
    out = {"version": version, "entries": entries}
    if major == 1:
        if minor >= 4:
            out["pg_config"] = {int(g): list(range(world)) for g in seqs or {"0": 0}}
        return out
    out["pg_config"] = {
        g: {
            "name": g,
            "desc": "default_pg" if g == "0" else f"group_{g}",
            "ranks": str(list(range(world))),
        }
        for g in seqs or {"0": 0}
    }
    if (major, minor) >= (2, 3):
        out["pg_status"] = {
            str(int(g)): {
                "last_enqueued_collective": n,
                "last_started_collective": -1,
                "last_completed_collective": max(
                    [0]
                    + [
                        e["collective_seq_id"]
                        for e in entries
                        if e["state"] == "completed" and e["process_group"][0] == g
                    ]
                ),
            }
            for g, n in seqs.items()
        }
    if (2, 7) <= (major, minor) < (2, 10):
        out["nccl_version"] = "2.21.5"
    elif (major, minor) >= (2, 10):
        out["comm_lib_version"] = "2.28.9"
    return out


def write_job(directory: Path, version: str, calls_per_rank: dict[int, list[tuple]]) -> Path:
    """One pickle per rank, named as torch names them (nccl_trace_rank_<rank>)."""
    directory.mkdir(parents=True, exist_ok=True)
    world = len(calls_per_rank)
    for rank, calls in calls_per_rank.items():
        data = pickle.dumps(dump(version, rank, calls, world), protocol=2)
        (directory / f"nccl_trace_rank_{rank}").write_bytes(data)
    return directory
