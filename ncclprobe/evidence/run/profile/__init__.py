"""PyTorch profiler (Kineto) traces of any engine as the normalized view: `load_profiles`.

One file per rank (`--profile FILE` repeated). Each is streamed once (`stream`, `timeline`), its
steps found and measured (`steps`), grouped into phases with its collectives (`summary`). With
several ranks the slowest rank decides every phase's figures (a step is done when its slowest
rank is); the ranks' collective calls are matched call by call (`align`: who arrived last, how
long the others waited, how long the data moved), and the spread of their step times is kept as
`rank_skew` for profiles without collectives to match. Files that cannot belong to one job
(different world sizes, the same rank twice, time windows far apart) are refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.run.profile import align, host
from ncclprobe.evidence.run.profile.rank_view import rank_view
from ncclprobe.evidence.run.profile.timeline import Timeline, read_timeline
from ncclprobe.evidence.run.view import SPECULATIVE_KINDS, EngineRun, Phase, RunSet
from ncclprobe.rank_ranges import rank_word

SAME_JOB_WINDOW_S = 600.0  # ranks of one job are profiled within minutes of each other


def load_profiles(paths: Sequence[str | Path]) -> RunSet:
    per_rank, timelines = _read(paths)
    check_same_job(timelines)
    check_same_engine(per_rank)
    run = combine(per_rank, timelines)
    run.new_tokens, run.wall_s = _tokens_and_time(per_rank)
    if run.new_tokens and run.wall_s:
        run.ms_per_token = run.wall_s * 1000.0 / run.new_tokens
    config = _config(timelines, run)
    notes = _notes(timelines, run)
    run.notes = notes
    return RunSet(
        runs=[run],
        config=config,
        kind="profile",
        inputs={"profile": [str(p) for p in paths]},
        notes=notes,
    )


def _read(paths: Sequence[str | Path]) -> tuple[list[dict], list[Timeline]]:
    """Each rank's view and timeline: read here for a few ranks, in reader workers for many, each
    reduced there (`profile_dir.read_ranks`)."""
    from ncclprobe.evidence.run.profile_dir import POOL_FROM, read_ranks

    if len(paths) >= POOL_FROM:
        per_rank = read_ranks([str(p) for p in paths])
        return per_rank, [rv["timeline"] for rv in per_rank]
    timelines = [read_timeline(str(p)) for p in paths]
    return [rank_view(tl) for tl in timelines], timelines


def check_same_job(timelines: list[Timeline]) -> None:
    """Refuse files that cannot be the ranks of one job."""
    if len(timelines) < 2:
        return
    sizes = {tl.world_size for tl in timelines if tl.world_size is not None}
    if len(sizes) > 1:
        listing = ", ".join(f"{Path(tl.path).name}: {tl.world_size}" for tl in timelines)
        raise UsageProblem(
            f"these profiles come from different jobs: their world sizes differ ({listing})"
        )
    ranks = [tl.rank for tl in timelines if tl.rank is not None]
    if len(ranks) != len(set(ranks)):
        dup = sorted({r for r in ranks if ranks.count(r) > 1})
        raise UsageProblem(
            f"rank {dup[0]} appears in more than one profile: give one profile per rank of one job"
        )
    windows = [w for w in map(_wall_window, timelines) if w is not None]
    if len(windows) > 1:
        earliest = min(w[0] for w in windows)
        latest = max(w[0] for w in windows)
        if (latest - earliest) / 1e6 > SAME_JOB_WINDOW_S:
            raise UsageProblem(
                f"these profiles come from different jobs: they were recorded "
                f"{(latest - earliest) / 1e6 / 60:.0f} minutes apart"
            )


def check_same_engine(per_rank: list[dict]) -> None:
    """Ranks of one job run one engine: profiles whose step annotations name different engines
    (SGLang's `step[...]` in one, vLLM's `execute_...` in another) cannot be combined, whatever
    their headers lack."""
    engines = {rv["engine"] for rv in per_rank if rv["engine"] not in ("unknown", "torch")}
    if len(engines) > 1:
        listing = ", ".join(f"{Path(rv['timeline'].path).name}: {rv['engine']}" for rv in per_rank)
        raise UsageProblem(
            f"these profiles come from different jobs: their steps are annotated by different engines "
            f"({listing})"
        )


def _wall_window(tl: Timeline) -> tuple[float, float] | None:
    base = tl.header.get("baseTimeNanoseconds")
    window = tl.time_range()
    if not isinstance(base, (int, float)) or window is None:
        return None
    # Kineto's ts are µs on a monotonic clock; baseTimeNanoseconds is that clock's zero on the epoch
    return base / 1000.0 + window[0], base / 1000.0 + window[1]


def combine(per_rank: list[dict], timelines: list[Timeline]) -> EngineRun:
    """One run from the ranks: per phase the slowest rank's figures (the job's pace), the ranks'
    collectives aligned call by call, and the collectives as the rank that waited least saw them:
    its kernel time is the closest to the transfer (every other rank's includes waiting for it)."""
    slowest: dict[str, Phase] = {}
    ranks = []
    from ncclprobe.evidence.run.profile_dir import sample

    chosen, sampled = sample(per_rank)
    alignment = align.align([per_rank[i].get("track") or timelines[i] for i in chosen])
    if alignment is not None:
        alignment.sampled = sampled
    totals = _totals_by_position(alignment, chosen, len(per_rank))
    for index, rv in enumerate(per_rank):
        tl = rv["timeline"]
        rank = tl.rank if tl.rank is not None else index
        entry = {
            "rank": rank,
            "path": tl.path,
            "found_by": rv["how"],
            "phases": {name: p.median_ms for name, p in rv["phases"].items()},
            "collective_share": rv["share"],
        }
        if alignment is not None and rank in alignment.clock_shifts_us:
            entry["clock_shift_ms"] = round(alignment.clock_shifts_us[rank] / 1000.0, 3)
        row = totals[index] if totals else None
        if row is not None:
            entry.update(
                arrived_last=row.last,
                calls=row.calls,
                wait_ms=round(row.wait_us / 1000.0, 3),
                transfer_ms=round(row.transfer_us / 1000.0, 3),
            )
        ranks.append(entry)
        for name, phase in rv["phases"].items():
            if name not in slowest or (phase.median_ms or 0) > (slowest[name].median_ms or 0):
                slowest[name] = phase
    for entry in ranks:
        entry["slowest_for"] = sorted(
            n for n, p in slowest.items() if entry["phases"].get(n) == p.median_ms
        )
    first = per_rank[0]
    # every rank issues the same collectives; their kernel times differ by the waiting
    if totals:
        aligned = {i: row for i, row in enumerate(totals) if row is not None}
        reported = per_rank[min(aligned, key=lambda i: aligned[i].wait_us)]
    else:  # nothing aligned: the slowest rank's, as before
        reported = max(per_rank, key=lambda rv: sum(p.total_ms for p in rv["phases"].values()))
    kinds = {p.kind for p in slowest.values() if p.count}
    mode = (
        "speculative"
        if kinds & set(SPECULATIVE_KINDS)
        else ("baseline" if "decode" in kinds else None)
    )
    shares = [rv["share"] for rv in per_rank if rv["share"] is not None]
    coverages = [rv["coverage"] for rv in per_rank if rv["coverage"] is not None]
    return EngineRun(
        label=first["label"],
        mode=mode,
        source="profile",
        path=", ".join(tl.path for tl in timelines),
        engine=first["engine"],
        phases=slowest,
        collectives=reported["collectives"],
        collective_share=max(shares) if shares else None,
        graph_coverage=min(coverages) if coverages else None,
        ranks=ranks,
        alignment=alignment,
        host=_host(per_rank),
    )


def _host(per_rank: list[dict]) -> tuple[host.HostReport, int] | None:
    """The host work behind the gaps of the rank with the most of it per step (the ranks of one
    job run the same host code; the one that waits longest shows it best), with its rank."""
    reports = [
        (rv["host"], rv["timeline"].rank if rv["timeline"].rank is not None else i)
        for i, rv in enumerate(per_rank)
        if rv["host"] is not None
    ]
    return max(reports, key=lambda item: item[0].gap_ms_per_step, default=None)


def _totals_by_position(
    alignment: align.Alignment | None, chosen: list[int], count: int
) -> list[align.RankTotals | None]:
    """The alignment's per-rank totals at every rank's position (None: a rank not aligned)."""
    if alignment is None:
        return []
    out: list[align.RankTotals | None] = [None] * count
    for pos, row in zip(chosen, alignment.totals()):
        out[pos] = row
    return out


def _tokens_and_time(per_rank: list[dict]) -> tuple[float | None, float | None]:
    """Tokens each sequence kept over the profiled steps (None: a step's are unknown) and the
    steps' time (the slowest rank's): a profile's own tokens per second."""
    tokens = None
    steps = per_rank[0]["steps"]
    if steps and all(s.kept is not None for s in steps):
        tokens = sum(s.kept for s in steps) or None
    walls = [sum(s.span_ms() for s in rv["steps"]) / 1000.0 for rv in per_rank if rv["steps"]]
    return tokens, max(walls) if walls else None


def rank_skew(run: EngineRun) -> dict[str, float]:
    """Per phase: (slowest − fastest) / slowest of the ranks' median step times."""
    out = {}
    for name in run.phases:
        values = [r["phases"][name] for r in run.ranks if r["phases"].get(name)]
        if len(values) > 1 and max(values) > 0:
            out[name] = (max(values) - min(values)) / max(values)
    return out


def _config(timelines: list[Timeline], run: EngineRun) -> dict:
    tl = timelines[0]
    config = {
        "engine": run.engine,
        "tp": tl.world_size or len(timelines),
        "device": "cuda" if tl.gpu else "cpu",
        "backend": tl.distributed.get("backend"),
        "nccl_version": tl.distributed.get("nccl_version"),
        "gpus": tl.gpu_names,
        "rocm": tl.rocm,
        "ranks_given": len(timelines),
        "record_shapes": bool(tl.header.get("record_shapes")),
    }
    decode = run.first_of_kind("decode")
    verify = run.first_of_kind("verify")
    if decode and decode.batch:
        config["batch"] = decode.batch
    if verify and verify.tokens_per_seq and verify.tokens_per_seq > 1:
        config["k"] = int(round(verify.tokens_per_seq)) - 1
    return config


def _notes(timelines: list[Timeline], run: EngineRun) -> list[str]:
    """What this profile cannot tell, in words."""
    tl = timelines[0]
    notes = []
    if not tl.gpu:
        notes.append(
            "no GPU events (a CPU-only profile, or recorded without CUDA activity): the device time, the GPU "
            "idle time, graph replays and NCCL kernels cannot be known; times are host times"
        )
    if not run.phases:
        notes.append(
            "no steps found: the profile has no step annotations and no bursts of GPU work to split"
        )
    else:
        how = {r["found_by"] for r in run.ranks if r["found_by"]}
        notes.append("steps from " + "; ".join(sorted(how)))
    kinds = {p.kind for p in run.phases.values()}
    if run.phases and not (kinds & {"decode", "verify", "draft", "prefill"}):
        notes.append(
            "decode and verify steps cannot be told apart: no engine annotation names them and no "
            "token-embedding lookup with its input shape is in the profile (record_shapes=True records "
            "it; a step without an embedding lookup is not read this way)"
            + (
                "; this profile holds no host ops at all: record ProfilerActivity.CPU with the CUDA "
                "activity"
                if tl.gpu and not any(t.cpu_ops for t in timelines)
                else ""
            )
        )
    if any(c.size_bytes is None and not c.graph for c in run.collectives):
        notes.append(
            "some collectives' sizes are unknown: neither their kernels' arguments nor a host "
            "record with recorded shapes (record_shapes=True) gives them"
        )
    if any(c.size_bytes is None and c.graph for c in run.collectives):
        notes.append(
            "some collectives were replayed from CUDA graphs whose capture the profile does not hold: their "
            "sizes are unknown (profile the capture too, or read them from the engine's own records)"
        )
    others = sorted({c.library for c in run.collectives if c.library} - {"NCCL", "RCCL"})
    if others:
        notes.append(
            f"communication that is not NCCL's ran: {', '.join(others)} (counted as communication; "
            "NCCL settings do not act on it)"
        )
    if any(c.algo for c in run.collectives):
        notes.append(
            "algorithm and protocol are read from the NCCL kernel names: the kernel NCCL launched, which can run "
            "another algorithm or protocol inside it (NCCL_DEBUG_SUBSYS=TUNING logs NCCL's choice per call)"
        )
    notes.extend(_alignment_notes(timelines, run))
    for skipped in (t for t in timelines if t.malformed):
        notes.append(
            f"{Path(skipped.path).name}: {skipped.malformed} event(s) skipped whose fields are not "
            f"what Kineto writes; the first, {skipped.malformed_first}" + _skipped_steps(skipped)
        )
    if len(timelines) == 1 and (tl.world_size or 1) > 1:
        notes.append(
            f"one rank of {tl.world_size} given: the slowest rank cannot be found and the rank skew is unknown "
            "(give every rank's profile)"
        )
    return notes


def _skipped_steps(skipped: Timeline) -> str:
    """What the skipped events took from the step times: the steps malformed annotations marked."""
    if not skipped.malformed_steps:
        return ""
    first = (
        ""
        if skipped.malformed_step_first == skipped.malformed_first
        else f" (the first, {skipped.malformed_step_first})"
    )
    return (
        f"; {skipped.malformed_steps} of them step annotation(s){first}: the steps they marked "
        "are missing from the step times"
    )


def _alignment_notes(timelines: list[Timeline], run: EngineRun) -> list[str]:
    """How the ranks were lined up, and what the alignment could not pair."""
    if len(timelines) < 2:
        return []
    al = run.alignment
    if al is None:
        return [
            "the ranks' collectives could not be matched (no collective kernel on two ranks): waiting "
            "cannot be told from transfer, and the rank skew compares step times only"
        ]
    notes = [
        f"{len(al.calls) + len(al.opening)} collective calls matched across ranks by {al.method}; "
        f"clocks: {al.clock}"
    ]
    if al.sampled:
        notes.append(al.sampled)
    unmatched = {r: n for r, n in al.unmatched.items() if n}
    if unmatched or al.mismatched:
        by_count: dict[int, list[int]] = {}
        for r, n in sorted(unmatched.items()):
            by_count.setdefault(n, []).append(r)
        listing = ", ".join(
            f"{rank_word(rs)}: {n}" + (" each" if len(rs) > 1 else "")
            for n, rs in sorted(by_count.items(), key=lambda kv: kv[1][0])
        )
        notes.append(
            "collective kernels left unpaired"
            + (f" ({listing})" if listing else "")
            + (f"; {al.mismatched} disagreed in operation or size" if al.mismatched else "")
            + ": outside the other ranks' windows, or another group's"
        )
    if al.opening:
        worst = max(c.spread for c in al.opening) / 1000.0
        notes.append(
            f"the first matched call waited {worst:.3f} ms for the rank whose profiling began last: "
            "it is where the windows meet, and is left out of the waits"
        )
    return notes
