"""A many-rank torchrun log GENERATED from the real recording's (not a recording itself):
tests/fixtures/flight_recorder/nccl/skip/torchrun.log, where rank 0 times out waiting in the 4th
all_reduce and rank 1 never entered it. Every rank but `culprit` gets rank 0's lines, the culprit
rank 1's, each with its own `[defaultL]:[rankN]:` prefix and `Rank N` inside, as torchrun interleaves
them (line by line, rank after rank); torchrun's failure summary stays as it was recorded."""

from __future__ import annotations

import re
from pathlib import Path

SOURCE = Path(__file__).parent / "fixtures" / "flight_recorder" / "nccl" / "skip" / "torchrun.log"
_PREFIX = re.compile(r"^\[default(\d+)\]:")


def write_log(path: Path, ranks: int, culprit: int, per_host: int = 8) -> Path:
    by_rank: dict[int, list[str]] = {0: [], 1: []}
    tail: list[str] = []
    for line in SOURCE.read_text().splitlines():
        m = _PREFIX.match(line)
        if m and int(m[1]) in by_rank:
            by_rank[int(m[1])].append(line[m.end() :])
        else:
            tail.append(line)
    own = {}
    for rank in range(ranks):
        src = 1 if rank == culprit else 0
        local = rank % per_host
        own[rank] = [
            f"[default{local}]:"
            + text.replace(f"[rank{src}]:", f"[rank{rank}]:")
            .replace(f"Rank {src}]", f"Rank {rank}]")
            .replace(f"[Rank {src}]", f"[Rank {rank}]")
            for text in by_rank[src]
        ]
    lines = []
    for i in range(max(len(v) for v in own.values())):
        lines += [own[r][i] for r in range(ranks) if i < len(own[r])]
    path.write_text("\n".join(lines + tail) + "\n")
    return path
