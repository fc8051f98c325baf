"""Many-rank Flight Recorder jobs GENERATED from a real recording (not recordings themselves).

The template is the real NCCL recording `tests/fixtures/flight_recorder/nccl/skip` (torch 2.11's
writer, version 2.10): its completed all_reduce entry, its frames, its pg_config and pg_status
layout. `write_job(dir, ranks, calls)` writes one pickle per rank, as torch names them
(`nccl_trace_rank_<r>`): every rank issues `calls` all_reduces of the default group and completes
them; every rank but `culprit` then enqueues one more and waits in it (started), the culprit never
enters it (it stays in host code), as in the recorded `skip` scenario. With `tp > 1` the job also
has tensor-parallel groups (`tp_group_<i>`, desc `TP`) of `tp` consecutive ranks, each issuing one
all_gather per step before the default group's all_reduce.

Strings are shared between entries, as torch's pickler memoizes them; every entry has its own
dicts and lists, as torch writes them. The bytes per entry match the real dump's (about 260 per
entry with six frames).
"""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

from ncclprobe.evidence.hang.safe_pickle import loads_data

TEMPLATE = (
    Path(__file__).parent
    / "fixtures"
    / "flight_recorder"
    / "nccl"
    / "skip"
    / "dumps"
    / "nccl_trace_rank_0"
)
STEP_NS = 2_000_000  # 2 ms between calls


def template() -> dict:
    return loads_data(TEMPLATE.read_bytes(), "template")


def rank_dump(base: dict, rank: int, ranks: int, calls: int, culprit: int, tp: int = 1) -> dict:
    """One rank's dump: `calls` completed steps, then the hang (see the module docstring)."""
    model = base["entries"][0]  # a completed all_reduce of the real recording
    t0 = model["time_created_ns"]
    entries, seqs, record = [], {}, 0
    groups = {"0": ("0", "default_pg", list(range(ranks)))}
    if tp > 1:
        first = rank - rank % tp
        name = str(1 + rank // tp)
        groups[name] = (name, "TP", list(range(first, first + tp)))
        for i in range(ranks // tp):
            groups.setdefault(str(1 + i), (str(1 + i), "TP", list(range(i * tp, i * tp + tp))))

    def add(group: str, op: str, step: int, state: str) -> None:
        nonlocal record
        seqs[group] = seqs.get(group, 0) + 1
        e = copy.deepcopy({k: v for k, v in model.items() if k != "frames"})
        e["frames"] = [dict(f) for f in model["frames"]]
        created = t0 + step * STEP_NS + (rank % 97) * 1000 + (500 if op == "all_reduce" else 0)
        e.update(
            record_id=record,
            op_id=record + 1,
            pg_id=int(group),
            collective_seq_id=seqs[group],
            process_group=(group, groups[group][1]),
            profiling_name=f"nccl:{op}",
            state=state,
            retired=state == "completed",
            time_created_ns=created,
            time_discovered_started_ns=created + 10_000,
            time_discovered_completed_ns=created + 900_000 if state == "completed" else None,
        )
        if op == "all_gather":
            e.update(input_sizes=[[4096]], output_sizes=[[4096 * tp]])
        entries.append(e)
        record += 1

    for step in range(calls):
        if tp > 1:
            add(str(1 + rank // tp), "all_gather", step, "completed")
        add("0", "all_reduce", step, "completed")
    if rank != culprit:
        if tp > 1:
            add(str(1 + rank // tp), "all_gather", calls, "completed")
        add("0", "all_reduce", calls, "started")
    elif tp > 1:
        add(str(1 + rank // tp), "all_gather", calls, "completed")
    # strings shared as torch's pickler memoizes them
    strings: dict[str, str] = {}
    for e in entries:
        for f in e["frames"]:
            for k in ("filename", "name"):
                f[k] = strings.setdefault(f[k], f[k])
    status = {}
    for group in groups:
        if rank not in groups[group][2]:
            continue
        mine = [e for e in entries if e["process_group"][0] == group]
        done = [e["collective_seq_id"] for e in mine if e["state"] == "completed"]
        status[str(int(group))] = {
            "last_enqueued_collective": max((e["collective_seq_id"] for e in mine), default=0),
            "last_started_collective": max((e["collective_seq_id"] for e in mine), default=0),
            "last_completed_collective": max(done, default=0),
        }
    return {
        "version": base["version"],
        "pg_config": {
            g: {"name": name, "desc": desc, "ranks": str(members)}
            for g, (name, desc, members) in groups.items()
        },
        "comm_lib_version": base["comm_lib_version"],
        "pg_status": status,
        "entries": entries,
    }


def write_job(
    directory: Path, ranks: int, calls: int, culprit: int, *, tp: int = 1, missing=(), jobs=1
) -> Path:
    """One pickle per rank (but `missing`), protocol 2 as torch writes them."""
    directory.mkdir(parents=True, exist_ok=True)
    base = template()
    todo = [r for r in range(ranks) if r not in set(missing)]
    if jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs) as pool:
            list(
                pool.map(
                    _write_one, [(directory, base, r, ranks, calls, culprit, tp) for r in todo]
                )
            )
    else:
        for r in todo:
            _write_one((directory, base, r, ranks, calls, culprit, tp))
    return directory


def _write_one(args) -> None:
    directory, base, rank, ranks, calls, culprit, tp = args
    doc = rank_dump(base, rank, ranks, calls, culprit, tp)
    (directory / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(doc, protocol=2))
