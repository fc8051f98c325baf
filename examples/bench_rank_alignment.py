"""How long matching the ranks' collectives takes (`evidence.run.profile.align`) against their number.

Reads the two-rank H200 recording with a late rank (tests/fixtures/profiles/ranks/ranks_host_late_*:
480 NCCL kernels and 2670 kernels per rank), then repeats each rank's kernels 1x, 10x and 100x, each
copy shifted by the recording's span, and times `align` and the straggler's lateness on them. The
alignment must stay linear in the kernels (issue 26: the reader's bound is a 200 MB trace in 20 s).

  python examples/bench_rank_alignment.py [--repeats 1,10,100]
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

from ncclprobe.evidence.run.profile import align
from ncclprobe.evidence.run.profile.timeline import read_timeline

RANKS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "profiles" / "ranks"


def repeated(tl, times: int, span: float):
    out = copy.copy(tl)
    out.kernels = []
    for n in range(times):
        for k in tl.kernels:
            k2 = copy.copy(k)
            k2.ts = k.ts + n * span
            out.kernels.append(k2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", default="1,10,100")
    args = parser.parse_args()
    tls = [read_timeline(str(RANKS / f"ranks_host_late_rank{r}.json.gz")) for r in (0, 1)]
    span = max(k.end for tl in tls for k in tl.kernels) - min(
        k.ts for tl in tls for k in tl.kernels
    )
    for times in (int(x) for x in args.repeats.split(",")):
        big = [repeated(tl, times, span + 1000.0) for tl in tls]
        t0 = time.perf_counter()
        al = align.align(big)
        t1 = time.perf_counter()
        late = al.lateness()[0]
        t2 = time.perf_counter()
        kernels = sum(len(tl.kernels) for tl in big)
        print(
            f"x{times}: {kernels} kernels, {len(al.calls)} calls matched: align {t1 - t0:.3f} s, "
            f"lateness {t2 - t1:.3f} s (rank {late.rank}, {late.calls} late calls)"
        )


if __name__ == "__main__":
    main()
