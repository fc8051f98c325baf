"""Many-rank profiler traces GENERATED from a real 2-rank recording (not recordings themselves).

The source is a real H200 recording of tests/fixtures/profiles/ranks (README there): rank 0's trace
is punctual, rank 1's is the late rank's. `write_job(dir, ranks, late, scenario, hosts, offset_us)`
writes one trace per rank: the late rank gets rank 1's events, every other rank rank 0's, each with
its own `distributedInfo` (rank, world size). Ranks are spread over `hosts` hosts in blocks; every
event's `ts` of host h is moved by h * offset_us (a clock that runs ahead, as another host's does:
`baseTimeNanoseconds` stays the recording's), and each file is named as torch's handler names it,
`host<h>_<pid>.<ms>.pt.trace.json.gz`.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

RANKS = Path(__file__).parent / "fixtures" / "profiles" / "ranks"


def _body(scenario: str, rank_file: int, shift_us: float) -> str:
    doc = json.loads(
        gzip.decompress((RANKS / f"ranks_{scenario}_rank{rank_file}.json.gz").read_bytes())
    )
    for event in doc["traceEvents"]:
        if isinstance(event.get("ts"), (int, float)) and shift_us:
            event["ts"] = round(event["ts"] + shift_us, 3)
    info = doc["distributedInfo"]
    info["rank"], info["world_size"] = "@RANK@", "@WORLD@"
    for pg in info.get("pg_config") or []:
        pg["ranks"], pg["pg_size"] = "@MEMBERS@", "@WORLD@"
    return json.dumps(doc)


def write_job(
    directory: Path,
    ranks: int,
    late: int,
    scenario: str = "host_late",
    hosts: int = 1,
    offset_us: float = 0.0,
) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    per_host = -(-ranks // hosts)
    bodies: dict[tuple[int, int], str] = {}
    members = json.dumps(list(range(ranks)))
    out = []
    for rank in range(ranks):
        host = rank // per_host
        kind = 1 if rank == late else 0
        key = (host, kind)
        if key not in bodies:
            bodies[key] = _body(scenario, kind, host * offset_us)
        text = (
            bodies[key]
            .replace('"@RANK@"', str(rank))
            .replace('"@WORLD@"', str(ranks))
            .replace('"@MEMBERS@"', members)
        )
        path = directory / f"host{host}_{10000 + rank}.1790857026000.pt.trace.json.gz"
        path.write_bytes(gzip.compress(text.encode(), compresslevel=1))
        out.append(path)
    return out
