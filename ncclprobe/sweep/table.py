"""Sweep results as tables: one per message size, each configuration's time and busbw beside
its speedup against the all-default configuration measured the same way.

On gloo and with --share-gpu no configuration is ranked: their times do not show what the
settings would do on the real links.
Only a configuration whose results are `ok` (exact elements, settings confirmed) can be `best`;
a wrong or ignored one is shown with its status and never ranked.
"""

from __future__ import annotations

from dataclasses import dataclass

from ncclprobe.records import ResultRecord, ResultsFile, Status, short_label
from ncclprobe.sizes import format_size
from ncclprobe.sweep.cost_split import issue_notes
from ncclprobe.sweep.cost_split import notes as cost_split_notes
from ncclprobe.sweep.host_merge import notes as host_notes

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Ranked:
    """A result as the tables show it: the record, its speedup against the all-default
    configuration measured the same way (default time / this time), and whether it is the best."""

    record: ResultRecord
    speedup_vs_default: float | None = None
    best: bool = False

    def to_json(self) -> dict:
        """The record as written, plus the two: one result of `sweep --format json`."""
        return {
            **self.record.to_record(),
            "speedup_vs_default": self.speedup_vs_default,
            "best": self.best,
        }


def _same_measurement(record: ResultRecord) -> tuple:
    return (
        record.collective,
        record.op,
        record.mode,
        record.in_place,
        record.dtype,
        record.size_bytes,
    )


def annotate(results: list[ResultRecord], *, ranked: bool = True) -> list[Ranked]:
    """Each result with its speedup against the default and whether it is the best per measurement.

    `ranked=False` (gloo: NCCL settings cannot change its numbers) leaves both empty, so noise
    is never presented as the effect of a setting."""
    if not ranked:
        return [Ranked(r) for r in results]
    timed = [r for r in results if r.status == Status.OK and r.time_us]
    defaults = {_same_measurement(r): r.time_us for r in timed if r.config_id == "default"}
    best: dict[tuple, ResultRecord] = {}
    for r in timed:
        key = _same_measurement(r)
        if key not in best or _time(r) < _time(best[key]):
            best[key] = r
    out = []
    for r in results:
        base = defaults.get(_same_measurement(r))
        speedup = base / r.time_us if base and r.status == Status.OK and r.time_us else None
        out.append(Ranked(r, speedup, best.get(_same_measurement(r)) is r))
    return out


def _time(record: ResultRecord) -> float:
    return record.time_us if record.time_us is not None else float("inf")


def can_rank(backend: str | None, share_gpu: bool = False) -> bool:
    """Whether configurations can be ranked: not on gloo, which NCCL settings do not affect, nor
    with ranks sharing one GPU, whose times are socket and GPU time-slicing, not the real links."""
    return backend != "gloo" and not share_gpu


def rows_by_size(rows: list[Ranked], *, ranked: bool = True) -> dict[tuple[str, int], list[dict]]:
    """Table rows grouped by (collective, size), fastest first within an (op, dtype, mode,
    placement) block; without `ranked` the speedup and best columns are left out."""
    grouped: dict[tuple[str, int], list[dict]] = {}
    order = {name: i for i, name in enumerate(dict.fromkeys(r.record.collective for r in rows))}
    several = {
        "op": len({r.record.op for r in rows}) > 1,
        "dtype": len({r.record.dtype for r in rows}) > 1,
    }
    ordered = sorted(
        rows,
        key=lambda row: (
            order[row.record.collective],
            row.record.size_bytes,
            str(row.record.op),
            str(row.record.dtype),
            row.record.mode,
            not row.record.in_place,
            row.record.status != Status.OK,
            row.record.time_us or float("inf"),
        ),
    )
    for row in ordered:
        grouped.setdefault((str(row.record.collective), row.record.size_bytes), []).append(
            table_row(row, ranked=ranked, show=several)
        )
    return grouped


def table_row(row: Ranked, *, ranked: bool = True, show: dict[str, bool] | None = None) -> dict:
    """The terminal row: median, the per-iteration p50 and p99, the host issue time per call."""
    r, it = row.record, row.record.iter
    out: dict = {"size": format_size(r.size_bytes), "config": short_label(r.settings)}
    out.update({key: getattr(r, key) for key in ("op", "dtype") if (show or {}).get(key)})
    # in order of importance: a narrow terminal leaves out the last columns, never the status
    out.update(
        {
            "mode": r.mode,
            "place": "in" if r.in_place else "out",
            "status": f"{r.status}" + (" WRONG" if r.wrong else ""),
            "time_us": r.time_us,
            "busbw_gbps": _sig(r.busbw_gbps),
            "speedup": row.speedup_vs_default,
            "best": "*" if row.best else "",
            "p50_us": it.p50_us if it else None,
            "p99_us": it.p99_us if it else None,
            "cpu_us": r.cpu_issue_us,
        }
    )
    if not ranked:
        del out["speedup"], out["best"]
    return out


def _sig(value: float | None) -> str | None:
    """Three significant digits: CPU bandwidths are far below the 0.01 a fixed format shows."""
    return None if value is None else f"{value:.3g}"


def csv_row(row: Ranked) -> dict:
    """The machine-readable row: raw units, no formatting."""
    r, it, split = row.record, row.record.iter, row.record.cost_split
    return {
        "size_bytes": r.size_bytes,
        "config_id": r.config_id,
        "collective": r.collective,
        "op": r.op,
        "mode": r.mode,
        "in_place": r.in_place,
        "dtype": r.dtype,
        "nranks": r.nranks,
        "time_us": r.time_us,
        "time_us_p10": r.time_us_p10,
        "time_us_p90": r.time_us_p90,
        "rank_spread_us": r.rank_spread_us,
        "cpu_issue_us": r.cpu_issue_us,
        "algbw_gbps": r.algbw_gbps,
        "busbw_gbps": r.busbw_gbps,
        "speedup_vs_default": row.speedup_vs_default,
        "wrong": r.wrong,
        "status": r.status,
        "best": row.best,
        **{key: getattr(split, key) if split else None for key in SPLIT_COLUMNS},
        **{
            f"iter_{key}": getattr(it, key) if it else None
            for key in ("min_us", "p50_us", "p95_us", "p99_us", "max_us", "cv_pct")
        },
    }


SPLIT_COLUMNS = ("nccl_us", "path_us", "torch_dispatch_us", "events_us")  # cost_split's figures


def config_problems(configs: list[dict]) -> list[str]:
    """One line per configuration that is not plainly ok, for the notes and stderr."""
    return [
        f"{c['config_id']}: {c['status']}"
        + (f" ({_first_line(c.get('reason'))})" if c.get("reason") else "")
        for c in configs
        if c["status"] != Status.OK
    ]


PROOF_LEVELS = (
    "read and chosen",
    "read, not chosen",
    "read",
    "not read",
    "not observable here",
    "not applicable",
)


def proof_notes(configs: list[dict], backend: str | None) -> list[str]:
    """What NCCL's log proved, worded as proven (`proof.proven`): one line on gloo, else one per
    configuration that sets something: each setting read and chosen, read only (its choice not
    observable here), not observable here, or not read, with the ranks that disagree."""
    proven = [c for c in configs if (c.get("proof") or {}).get("proven")]
    if backend != "nccl":
        return (
            [
                "proof: gloo does not use NCCL; every rank's environment matched its configuration, and nothing "
                "NCCL read or chose is observable here"
            ]
            if proven
            else []
        )
    lines = []
    for config in proven:
        proof = config["proof"]
        parts = [
            f"{name}={config['settings'].get(name)} {_level(text)}"
            for name, text in sorted(proof["proven"].items())
        ]
        disagree = proof.get("rank_disagreements") or []
        lines.append(
            f"proof {config['config_id']}: "
            + "; ".join(parts)
            + (f"; {len(disagree)} rank disagreement(s): {disagree[0]}" if disagree else "")
        )
    return lines


def _level(wording: str) -> str:
    """`read and chosen`, `read (its choice is not observable here)`, ... from the proof's wording."""
    level = next((lvl for lvl in PROOF_LEVELS if wording.startswith(lvl)), wording)
    if level == "read":
        return "read (its choice is not observable here)"
    return level


def failed_measurements(results: list[ResultRecord], limit: int = 5) -> list[str]:
    """One line per measurement a worker could not make (the rest of its configuration ran)."""
    failed = [
        r for r in results if r.status == Status.ERROR and (r.reason or "").startswith("rank ")
    ]
    lines = [
        f"measurement failed: {r.collective} {r.op} {r.dtype} {r.config_id} {r.mode} "
        f"{'in' if r.in_place else 'out of'} place {format_size(r.size_bytes)}: {_first_line(r.reason)}"
        for r in failed[:limit]
    ]
    return lines + (
        [f"... and {len(failed) - limit} more failed measurement(s)"] if len(failed) > limit else []
    )


def _first_line(text: str | None) -> str:
    return text.strip().splitlines()[0][:200] if text and text.strip() else ""


def document(results_file: ResultsFile, rows: list[Ranked] | None = None) -> dict:
    """The JSON document of `ncclprobe sweep --format json` (`rows`: its results, ranked where
    they can be, as `ranked_rows` gives them)."""
    header = results_file.header
    summary = results_file.summaries[-1] if results_file.summaries else None
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "sweep-results",
        "results_path": results_file.path,
        "backend": header.get("backend"),
        "nranks": header.get("nranks"),
        "topology": header.get("topology"),
        "versions": header.get("versions"),
        "notes": header.get("notes", []),
        "lint": header.get("lint", []),
        "share_gpu": header.get("share_gpu", False),
        "configs": results_file.configs,
        "results": [row.to_json() for row in (ranked_rows(results_file) if rows is None else rows)],
        "summary": summary,
    }


def rankable(results_file: ResultsFile) -> bool:
    """Whether the file's configurations can be ranked (`can_rank` of its header)."""
    header = results_file.header
    return can_rank(header.get("backend"), header.get("share_gpu", False))


def ranked_rows(results_file: ResultsFile) -> list[Ranked]:
    return annotate(results_file.results, ranked=rankable(results_file))


def summary_note(summary: dict | None) -> str | None:
    if not summary:
        return None
    saved = summary.get("pool_reuse_saved_s_est")
    ran = f"{summary['configs_run']} configuration(s) ran in {summary['pools_run']} worker pool(s)"
    if saved is None or not summary.get("pools_avoided"):
        return ran
    return (
        f"{ran}; pool reuse saved an estimated {saved:.1f} s (not measured: a measured pool start of "
        f"{summary['pool_start_s_mean']:.2f} s x {summary['pools_avoided']} avoided pools)"
    )


@dataclass
class Report:
    """What `ncclprobe sweep` prints: the JSON document (with the missed thresholds), the notes
    of its table view (the header's notes, the proof, configurations and measurements that went
    wrong, the thresholds, the pools), the CSV rows and the tables per collective and size."""

    document: dict
    notes: list[str]
    rows: list[Ranked]
    ranked: bool

    def csv_rows(self) -> list[dict]:
        return [csv_row(row) for row in self.rows]

    def tables(self) -> dict[tuple[str, int], list[dict]]:
        return rows_by_size(self.rows, ranked=self.ranked)


def report(results_file: ResultsFile, shortfalls: list[str]) -> Report:
    rows = ranked_rows(results_file)
    doc = document(results_file, rows)
    doc["shortfalls"] = shortfalls
    notes = (
        list(doc["notes"])
        + proof_notes(results_file.configs, doc["backend"])
        + config_problems(results_file.configs)
        + failed_measurements(results_file.results)
        + issue_notes(results_file.results)
        + cost_split_notes(results_file.results)
        + host_notes((doc["summary"] or {}).get("hosts"))
        + shortfalls
    )
    summary = summary_note(doc["summary"])
    notes += [summary] if summary else []
    return Report(document=doc, notes=notes, rows=rows, ranked=rankable(results_file))
