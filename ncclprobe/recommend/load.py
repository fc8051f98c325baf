"""Read sweep and imported nccl-tests results into one curve per configuration.

A configuration is excluded, with the reason a user can act on, when its config record says it
hung, errored, gave wrong results, was skipped or was ignored (the settings did not take effect),
or when any of its result records is wrong (any wrong element), ignored, hung or errored -- at any size
or collective: a setting that corrupts data once is not a candidate anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.nccl.node import NodeFacts
from ncclprobe.records import ResultRecord, ResultsFile, Status, config_id, read_results
from ncclprobe.sizes import format_size
from ncclprobe.stats import Point, merge

BAD_CONFIG_STATUSES = (Status.HANG, Status.ERROR, Status.WRONG, Status.IGNORED, Status.SKIPPED)
BAD_RESULT_STATUSES = (Status.WRONG, Status.IGNORED, Status.HANG, Status.ERROR)


@dataclass(frozen=True)
class Exclusion:
    """A configuration that is not a candidate, and why."""

    config_id: str
    settings: dict
    status: Status  # wrong | hang | error | ignored | skipped
    reason: str


@dataclass
class Curve:
    """One eligible configuration: its points by size and what its correctness checks showed."""

    config_id: str
    settings: dict
    points: dict[int, Point] = field(default_factory=dict)
    correctness_checked: bool = False  # every record reported wrong == 0 (not merely unchecked)
    tuning: list[dict] = field(default_factory=list)  # NCCL's own algo/proto per size (proof)


@dataclass
class Measurements:
    """Everything recommend and report need from the results files."""

    paths: list[str]
    headers: list[dict]
    collective: str
    mode: str
    curves: dict[str, Curve]
    excluded: list[Exclusion]
    nvlink: bool | None  # False if any file's topology says no NVLink; None if unknown
    node: NodeFacts | None  # what the files agree on about the GPUs (LL128's rule), None if unknown
    nranks: int | None
    nccl_version: str | None
    marks: dict[str, dict[int, str]] = field(default_factory=dict)  # config -> size -> bad status
    excluded_curves: dict[str, Curve] = field(
        default_factory=dict
    )  # what excluded configs measured fine
    dtype: str | None = None
    op: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def default(self) -> Curve | None:
        return self.curves.get("default")


def load_measurements(
    paths: list[str | Path],
    *,
    collective: str = "all_reduce",
    mode: str | None = None,
    dtype: str | None = None,
    op: str | None = None,
    files: list[ResultsFile] | None = None,
) -> Measurements:
    """Read every file, merge configurations across files, keep `collective` in `mode` (eager when
    measured, else graph, unless given), for one dtype and reduction op (the most measured unless given)."""
    if not paths:
        raise UsageProblem(
            "no results files given: pass one or more files written by `ncclprobe sweep` or `ncclprobe import`"
        )
    files = files or [read_results(p) for p in paths]
    _same_rank_count(files, paths)
    configs = _config_records(files)
    results = [r for f in files for r in f.results]
    mode = mode or _pick_mode(results, collective)
    mine = [r for r in results if r.collective == collective and r.mode == mode]
    dtype, op, notes = _pick(mine, "dtype", dtype, "float32"), _pick(mine, "op", op, "sum"), []
    for key, chosen in (("dtype", dtype), ("op", op)):
        others = sorted({str(getattr(r, key)) for r in mine} - {str(chosen), "None"})
        if others:
            notes.append(
                f"{collective} was measured with {key} {', '.join(others)} too; this uses {chosen} "
                f"(pass --{key} to choose)"
            )
    results = [r for r in results if not _other_case(r, collective, dtype, op)]
    excluded = _exclusions(configs, results)
    bad = {e.config_id for e in excluded}
    curves = _curves(configs, results, collective, mode)
    excluded_curves = {cid: c for cid, c in curves.items() if cid in bad}
    curves = {cid: c for cid, c in curves.items() if cid not in bad}
    if not curves and not excluded:
        raise UsageProblem(
            f"no {collective} results in {mode} mode in {', '.join(map(str, paths))}"
        )
    return Measurements(
        paths=[str(p) for p in paths],
        headers=[f.header for f in files],
        collective=collective,
        mode=mode,
        curves=curves,
        excluded=excluded,
        nvlink=nvlink_of(files),
        node=node_of(files),
        marks=_marks(results, collective, mode),
        excluded_curves=excluded_curves,
        nranks=_first(f.header.get("nranks") for f in files),
        nccl_version=_first((f.header.get("versions") or {}).get("nccl") for f in files),
        dtype=dtype,
        op=op,
        notes=notes,
    )


def _pick(records: list[ResultRecord], key: str, given: str | None, preferred: str) -> str | None:
    """The value of `key` to use: the one given, else `preferred` when measured, else the most measured."""
    if given is not None:
        return given
    counts: dict = {}
    for r in records:
        counts[getattr(r, key)] = counts.get(getattr(r, key), 0) + 1
    if preferred in counts or not counts:
        return preferred if counts else None
    return max(counts, key=lambda v: (counts[v], str(v)))


def _other_case(record: ResultRecord, collective: str, dtype: str | None, op: str | None) -> bool:
    """A result of this collective measured with another dtype or op: not part of these curves (records
    written before ops were measured carry no op: they count as sum)."""
    if record.collective != collective:
        return False
    rec_op = record.op or ("sum" if (record.redop or "sum") == "sum" else record.redop)
    return (dtype is not None and record.dtype != dtype) or (op is not None and rec_op != op)


def _same_rank_count(files: list[ResultsFile], paths) -> None:
    """Curves merge by configuration across files, so every file must measure the same rank count:
    a 2-rank and an 8-rank "default" averaged together describe neither job."""
    counts = {f.header.get("nranks") for f in files} - {None}
    if len(counts) > 1:
        listing = ", ".join(f"{p} ({f.header.get('nranks')} ranks)" for p, f in zip(paths, files))
        raise UsageProblem(
            f"the results measure different rank counts: {listing}; recommend one setup at a time"
        )


def _config_records(files: list[ResultsFile]) -> dict[str, dict]:
    """config_id -> its config record; results without one get a synthetic ok record."""
    configs: dict[str, dict] = {}
    for f in files:
        for record in f.configs:
            cid = record.get("config_id") or config_id(record.get("settings") or {})
            previous = configs.get(cid)
            if (
                previous is None or previous.get("status") == Status.OK
            ):  # a bad status anywhere wins
                configs[cid] = record
        for result in f.results:
            configs.setdefault(
                result.config_id,
                {"config_id": result.config_id, "status": Status.OK, "settings": result.settings},
            )
    return configs


def _pick_mode(results: list[ResultRecord], collective: str) -> str:
    modes = {r.mode for r in results if r.collective == collective}
    named = sorted(m for m in modes if m)  # a result without a mode names none
    return "eager" if "eager" in modes or not named else named[0]


def _exclusions(configs: dict[str, dict], results: list[ResultRecord]) -> list[Exclusion]:
    out = []
    for cid, record in configs.items():
        settings = record.get("settings") or {}
        status = record.get("status") or Status.OK
        if status in BAD_CONFIG_STATUSES:
            out.append(
                Exclusion(
                    cid,
                    settings,
                    Status(status),
                    _config_reason(Status(status), record.get("reason")),
                )
            )
            continue
        bad = [r for r in results if r.config_id == cid and _result_is_bad(r)]
        if bad:
            out.append(Exclusion(cid, settings, _result_status(bad[0]), _result_reason(bad)))
    return sorted(out, key=lambda e: e.config_id)


def _result_is_bad(record: ResultRecord) -> bool:
    return record.status in BAD_RESULT_STATUSES or (record.wrong or 0) > 0


def _result_status(record: ResultRecord) -> Status:
    """The status a bad result (`_result_is_bad`) stands for: wrong where it counted wrong ones."""
    if (record.wrong or 0) > 0 or record.status is None:
        return Status.WRONG
    return record.status


def _config_reason(status: Status, reason: str | None) -> str:
    lead = {
        Status.IGNORED: "the settings did not take effect",
        Status.SKIPPED: "not measured",
        Status.HANG: "hung",
        Status.ERROR: "failed",
        Status.WRONG: "wrong results",
    }[status]
    return f"{lead}: {reason}" if reason else lead


def _result_reason(bad: list[ResultRecord]) -> str:
    """`wrong results at 64K (12 wrong elements), 1M (3 wrong elements)`; `hung at 4M: ...`."""
    first = bad[0]
    status = _result_status(first)
    where = ", ".join(_where(r) for r in bad[:4]) + (
        f" and {len(bad) - 4} more" if len(bad) > 4 else ""
    )
    lead = {
        Status.WRONG: "wrong results at",
        Status.IGNORED: "settings did not take effect at",
        Status.HANG: "hung at",
        Status.ERROR: "failed at",
    }[status]
    tail = f": {first.reason}" if status != Status.WRONG and first.reason else ""
    return f"{lead} {where}{tail}"


def _where(record: ResultRecord) -> str:
    size = format_size(record.size_bytes) if record.size_bytes else "?"
    label = f"{record.collective or '?'} {size} {record.mode}".strip()
    wrong = record.wrong or 0
    return f"{label} ({wrong} wrong elements)" if wrong else label


def _curves(
    configs: dict[str, dict], results: list[ResultRecord], collective: str, mode: str
) -> dict[str, Curve]:
    grouped: dict[str, dict[int, list[Point]]] = {}
    checked: dict[str, bool] = {}
    for r in results:
        cid = r.config_id
        if r.status != Status.OK:
            continue
        checked[cid] = checked.get(cid, True) and r.wrong == 0
        if r.collective != collective or r.mode != mode or not r.time_us:
            continue
        grouped.setdefault(cid, {}).setdefault(r.size_bytes, []).append(_point(r, r.time_us))
    return {
        cid: Curve(
            config_id=cid,
            settings=configs[cid].get("settings") or {},
            points={size: merge(pts) for size, pts in sorted(by_size.items())},
            correctness_checked=checked.get(cid, False),
            tuning=_tuning(configs[cid].get("proof")),
        )
        for cid, by_size in sorted(grouped.items())
    }


def _marks(results: list[ResultRecord], collective: str, mode: str) -> dict[str, dict[int, str]]:
    """Where measurements went bad, for the report's heatmap: config -> size -> status."""
    marks: dict[str, dict[int, str]] = {}
    for r in results:
        if r.collective == collective and r.mode == mode and _result_is_bad(r):
            marks.setdefault(r.config_id, {})[r.size_bytes or 0] = _result_status(r)
    return marks


def _point(record: ResultRecord, time_us: float) -> Point:
    """A measured record (`time_us`, its median) as a point of its curve."""
    time_us = float(time_us)
    p10, p90 = record.time_us_p10, record.time_us_p90
    return Point(
        size_bytes=record.size_bytes,
        time_us=time_us,
        p10_us=float(p10) if p10 is not None else time_us,
        p90_us=float(p90) if p90 is not None else time_us,
        busbw_gbps=record.busbw_gbps,
        trials=int(record.trials or 1),
    )


def nvlink_of(files: list[ResultsFile]) -> bool | None:
    """False if any file's topology says no NVLink, True if all say NVLink, None if unknown."""
    seen = [(f.header.get("topology") or {}).get("nvlink") for f in files]
    if any(v is False for v in seen):
        return False
    return True if seen and all(v is True for v in seen) else None


def node_of(files: list[ResultsFile]) -> NodeFacts | None:
    """What the files agree on about the GPUs (LL128's rule)."""
    return NodeFacts.merge([_node(f.header) for f in files])


def _node(header: dict) -> NodeFacts:
    """A sweep's header holds the GPUs' facts (`topology.node`); older files only whether NVLink was seen."""
    topology = header.get("topology") or {}
    return NodeFacts.from_json(
        topology.get("node") or topology, over_network=bool(header.get("share_gpu"))
    )


def _first(values):
    return next((v for v in values if v is not None), None)


def _tuning(proof) -> list:
    """The proof's record of NCCL's choices (a list), or none: a file another tool wrote may hold
    anything there, and no choice is better than a wrong one."""
    tuning = proof.get("tuning") if isinstance(proof, dict) else None
    return list(tuning) if isinstance(tuning, list) else []
