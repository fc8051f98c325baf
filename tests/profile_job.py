"""Many-rank profiler traces GENERATED from a real 2-rank recording (not recordings themselves).

The source is a real H200 recording of tests/fixtures/profiles/ranks (README there): rank 0's trace
is punctual, rank 1's is the late rank's; or, with `recording="gloo_ddp2"`, the real CPU-only gloo
job of tests/fixtures/profiles/gloo (README there), whose late rank its truth file names.
`write_job(dir, ranks, late, scenario, hosts, offset_us, recording)` writes one trace per rank: the
late rank gets the late rank's events, every other rank the punctual one's, each with
its own `distributedInfo` (rank, world size). Ranks are spread over `hosts` hosts in blocks; every
event's `ts` of host h is moved by h * offset_us (a clock that runs ahead, as another host's does:
`baseTimeNanoseconds` stays the recording's), and each file is named as torch's handler names it,
`host<h>_<pid>.<ms>.pt.trace.json.gz`.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

PROFILES = Path(__file__).parent / "fixtures" / "profiles"
RANKS = PROFILES / "ranks"


def _sources(recording: str, scenario: str) -> tuple[Path, Path]:
    """The recording's (punctual, late) rank traces."""
    if recording == "ranks":
        return tuple(RANKS / f"ranks_{scenario}_rank{r}.json.gz" for r in (0, 1))
    folder = PROFILES / recording.split("_")[0]
    late = json.loads((folder / f"{recording}_{scenario}.truth.json").read_text())["late_rank"]
    return tuple(folder / f"{recording}_{scenario}_rank{r}.json.gz" for r in (1 - late, late))


def _body(source: Path, shift_us: float) -> str:
    doc = json.loads(gzip.decompress(source.read_bytes()))
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
    recording: str = "ranks",
) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    per_host = -(-ranks // hosts)
    bodies: dict[tuple[int, int], str] = {}
    members = json.dumps(list(range(ranks)))
    sources = _sources(recording, scenario)
    out = []
    for rank in range(ranks):
        host = rank // per_host
        kind = 1 if rank == late else 0
        key = (host, kind)
        if key not in bodies:
            bodies[key] = _body(sources[kind], host * offset_us)
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
