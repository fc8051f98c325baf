"""Sweep results as tables: one per message size, each configuration's time and busbw beside
its speedup against the all-default configuration measured the same way.

On gloo and with --share-gpu no configuration is ranked: their times do not show what the
settings would do on the real links.
Only a configuration whose results are `ok` (exact elements, settings confirmed) can be `best`;
a wrong or ignored one is shown with its status and never ranked.
"""

from __future__ import annotations

from dataclasses import dataclass

from ncclprobe.records import ResultsFile, Status, short_label
from ncclprobe.sizes import format_size
from ncclprobe.sweep.cost_split import issue_notes
from ncclprobe.sweep.cost_split import notes as cost_split_notes
from ncclprobe.sweep.host_merge import notes as host_notes

SCHEMA_VERSION = 1


def _same_measurement(record: dict) -> tuple:
    return (
        record["collective"],
        record.get("op"),
        record["mode"],
        record["in_place"],
        record["dtype"],
        record["size_bytes"],
    )


def annotate(results: list[dict], *, ranked: bool = True) -> list[dict]:
    """Each result plus `speedup_vs_default` (default time / this time) and `best` per measurement.

    `ranked=False` (gloo: NCCL settings cannot change its numbers) leaves both empty, so noise
    is never presented as the effect of a setting."""
    if not ranked:
        return [{**r, "speedup_vs_default": None, "best": False} for r in results]
    defaults = {
        _same_measurement(r): r["time_us"]
        for r in results
        if r["config_id"] == "default" and r["status"] == Status.OK
    }
    best: dict[tuple, dict] = {}
    for r in results:
        key = _same_measurement(r)
        if (
            r["status"] == Status.OK
            and r.get("time_us")
            and (key not in best or r["time_us"] < best[key]["time_us"])
        ):
            best[key] = r
    out = []
    for r in results:
        base = defaults.get(_same_measurement(r))
        speedup = (
            base / r["time_us"] if base and r["status"] == Status.OK and r.get("time_us") else None
        )
        out.append(
            {**r, "speedup_vs_default": speedup, "best": best.get(_same_measurement(r)) is r}
        )
    return out


def can_rank(backend: str | None, share_gpu: bool = False) -> bool:
    """Whether configurations can be ranked: not on gloo, which NCCL settings do not affect, nor
    with ranks sharing one GPU, whose times are socket and GPU time-slicing, not the real links."""
    return backend != "gloo" and not share_gpu


def rows_by_size(results: list[dict], *, ranked: bool = True) -> dict[tuple[str, int], list[dict]]:
    """Table rows grouped by (collective, size), fastest first within an (op, dtype, mode,
    placement) block; without `ranked` the speedup and best columns are left out."""
    grouped: dict[tuple[str, int], list[dict]] = {}
    order = {name: i for i, name in enumerate(dict.fromkeys(r["collective"] for r in results))}
    several = {key: len({r.get(key) for r in results}) > 1 for key in ("op", "dtype")}
    ordered = sorted(
        results,
        key=lambda r: (
            order[r["collective"]],
            r["size_bytes"],
            str(r.get("op")),
            r["dtype"],
            r["mode"],
            not r["in_place"],
            r["status"] != Status.OK,
            r.get("time_us") or float("inf"),
        ),
    )
    for r in ordered:
        grouped.setdefault((r["collective"], r["size_bytes"]), []).append(
            table_row(r, ranked=ranked, show=several)
        )
    return grouped


def table_row(r: dict, *, ranked: bool = True, show: dict | None = None) -> dict:
    """The terminal row: median, the per-iteration p50 and p99, the host issue time per call."""
    it = r.get("iter") or {}
    row = {"size": format_size(r["size_bytes"]), "config": short_label(r["settings"])}
    row.update({key: r.get(key) for key in ("op", "dtype") if (show or {}).get(key)})
    # in order of importance: a narrow terminal leaves out the last columns, never the status
    row.update(
        {
            "mode": r["mode"],
            "place": "in" if r["in_place"] else "out",
            "status": r["status"] + (" WRONG" if r.get("wrong") else ""),
            "time_us": r.get("time_us"),
            "busbw_gbps": _sig(r.get("busbw_gbps")),
            "speedup": r.get("speedup_vs_default"),
            "best": "*" if r.get("best") else "",
            "p50_us": it.get("p50_us"),
            "p99_us": it.get("p99_us"),
            "cpu_us": r.get("cpu_issue_us"),
        }
    )
    if not ranked:
        del row["speedup"], row["best"]
    return row


def _sig(value: float | None) -> str | None:
    """Three significant digits: CPU bandwidths are far below the 0.01 a fixed format shows."""
    return None if value is None else f"{value:.3g}"


def csv_row(r: dict) -> dict:
    """The machine-readable row: raw units, no formatting."""
    keys = (
        "size_bytes",
        "config_id",
        "collective",
        "op",
        "mode",
        "in_place",
        "dtype",
        "nranks",
        "time_us",
        "time_us_p10",
        "time_us_p90",
        "rank_spread_us",
        "cpu_issue_us",
        "algbw_gbps",
        "busbw_gbps",
        "speedup_vs_default",
        "wrong",
        "status",
        "best",
    )
    it = r.get("iter") or {}
    split = r.get("cost_split") or {}
    return {
        **{key: r.get(key) for key in keys},
        **{key: split.get(key) for key in SPLIT_COLUMNS},
        **{
            f"iter_{k}": it.get(k)
            for k in ("min_us", "p50_us", "p95_us", "p99_us", "max_us", "cv_pct")
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


def failed_measurements(results: list[dict], limit: int = 5) -> list[str]:
    """One line per measurement a worker could not make (the rest of its configuration ran)."""
    failed = [
        r
        for r in results
        if r.get("status") == Status.ERROR and r.get("reason", "").startswith("rank ")
    ]
    lines = [
        f"measurement failed: {r['collective']} {r.get('op')} {r['dtype']} {r['config_id']} {r['mode']} "
        f"{'in' if r['in_place'] else 'out of'} place {format_size(r['size_bytes'])}: {_first_line(r['reason'])}"
        for r in failed[:limit]
    ]
    return lines + (
        [f"... and {len(failed) - limit} more failed measurement(s)"] if len(failed) > limit else []
    )


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:200] if text and text.strip() else ""


def document(results_file: ResultsFile) -> dict:
    """The JSON document of `ncclprobe sweep --format json`."""
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
        "results": annotate(
            results_file.results,
            ranked=can_rank(header.get("backend"), header.get("share_gpu", False)),
        ),
        "summary": summary,
    }


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

    def csv_rows(self) -> list[dict]:
        return [csv_row(r) for r in self.document["results"]]

    def tables(self) -> dict[tuple[str, int], list[dict]]:
        doc = self.document
        return rows_by_size(doc["results"], ranked=can_rank(doc["backend"], doc["share_gpu"]))


def report(results_file: ResultsFile, shortfalls: list[str]) -> Report:
    doc = document(results_file)
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
    return Report(document=doc, notes=notes + ([summary] if summary else []))
