"""One rank's profile reduced to what the job's reading needs: `rank_view`.

Its own module because both readers build it: `profile` for a few ranks in the CLI's process and
`profile_dir` in its reader workers for many (a home in either would make the two import each other).
"""

from __future__ import annotations

from ncclprobe.evidence.run.profile import host, summary
from ncclprobe.evidence.run.profile import steps as S
from ncclprobe.evidence.run.profile.timeline import Timeline


def rank_view(tl: Timeline) -> dict:
    """The rank's steps (and how they were found), phases, collectives, collective share, graph
    coverage, engine and host time, beside its timeline."""
    steps, how = S.find_steps(tl)
    phases = summary.phases_of(tl, steps)
    engine = steps[0].engine if steps else "unknown"
    return {
        "timeline": tl,
        "steps": steps,
        "how": how,
        "phases": phases,
        "collectives": summary.collectives_of(tl, steps),
        "share": summary.collective_share(tl, steps),
        "coverage": summary.graph_coverage(tl, steps),
        "engine": engine,
        "label": f"{engine} profile" if engine not in ("unknown", "torch") else "profile",
        "host": host.host_time(tl.host_spans, tl.python, steps, tl.kernels),
    }
