"""An imported nccl-tests run as the records the sweep writes (`ncclprobe.records`), so recommend,
report, diagnose and export read it unchanged.

Settings: what the file itself shows (NCCL's `set by environment` lines, `NAME=value` on its
command line, the `env` of a -J file) plus the user's label (`import --settings K=V,...`), which
may add to the file's but never contradicts it. The config record says where each came from:
a label is the user's word, not NCCL's.
"""

from __future__ import annotations

from datetime import datetime, timezone

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.nccl.nccl_tests_run import DTYPES, Measurement, NcclTestsRun, Row
from ncclprobe.records import SCHEMA_VERSION, Status, config_id
from ncclprobe.secrets import mask_argv

REDUCING = ("all_reduce", "reduce_scatter", "reduce")


def label_settings(run: NcclTestsRun, labels: dict[str, str]) -> dict[str, str]:
    """The run's settings with the user's labels added; a label contradicting the file is refused."""
    for name, value in labels.items():
        shown = run.settings.get(name)
        if shown is not None and shown != value:
            raise UsageProblem(
                f"--settings {name}={value} contradicts the file, which shows {name}={shown}"
            )
    return {**run.settings, **labels}


def to_records(
    run: NcclTestsRun,
    *,
    source_file: str,
    argv: list[str] | None = None,
    collective: str | None = None,
    labels: dict[str, str] | None = None,
) -> list[dict]:
    """A header (kind "nccl-tests"), one config, then one result per row x placement measured."""
    name = collective or run.collective or "unknown"
    labels = labels or {}
    settings = label_settings(run, labels)
    cid = config_id(settings)
    header = {
        "record": "header",
        "schema_version": SCHEMA_VERSION,
        "kind": "nccl-tests",
        "argv": mask_argv(argv or []),
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "source_file": source_file,
        "hostname": run.devices[0]["host"] if run.devices else None,
        "versions": {"nccl": run.nccl_version, "nccl_tests": run.nccl_tests_version},
        "gpus": [
            {"rank": d["rank"], "name": d["name"], "host": d["host"], "device": d["device"]}
            for d in run.devices
        ],
        "env": dict(run.env) or dict(settings),
        "backend": "nccl",
        "nranks": run.nranks,
        "topology": None,
        "collective": name,
        "params": dict(run.params),
        "avg_busbw_gbps": run.avg_busbw_gbps,
        "format": run.format,
        "notes": list(run.notes),
    }
    results = [
        _result(row, m, in_place, cid, settings, run, name)
        for row in run.rows
        for in_place, m in row.measurements()
        if m is not None
    ]
    config = {
        "record": "config",
        "config_id": cid,
        "settings": settings,
        "pool": 0,
        "status": Status.OK if not run.out_of_bounds else Status.WRONG,
        "reason": None
        if not run.out_of_bounds
        else f"nccl-tests counted {run.out_of_bounds} wrong values",
        "results_expected": len(results),
        "proof": {
            "set_by_environment": dict(run.settings),
            "labelled": dict(labels),
            "source": "nccl-tests -J env" if run.format == "json" else "nccl-tests output",
        },
    }
    return [header, config, *results]


def _result(
    row: Row,
    m: Measurement,
    in_place: bool,
    cid: str,
    settings: dict,
    run: NcclTestsRun,
    collective: str,
) -> dict:
    wrong = m.wrong
    checked = run.params.get("validation", 1) != 0 and wrong is not None
    return {
        "record": "result",
        "config_id": cid,
        "settings": dict(settings),
        "collective": collective,
        "op": row.redop if collective in REDUCING else "none",
        "mode": "graph" if run.params.get("graph") else "eager",
        "in_place": in_place,
        "dtype": DTYPES.get(row.dtype, row.dtype),
        "redop": row.redop,
        "root": row.root,
        "size_bytes": row.size_bytes,
        "count": row.count,
        "nranks": run.nranks,
        "status": Status.WRONG if wrong else Status.OK,
        "reason": f"{wrong} wrong elements" if wrong else None,
        "time_us": m.time_us,
        "time_us_p10": None,
        "time_us_p90": None,
        "iter": m.iteration,
        "cpu_issue_us": m.cpu_time_us,
        "algbw_gbps": m.algbw_gbps,
        "busbw_gbps": m.busbw_gbps,
        "wrong": wrong,
        "checked": checked,
        "rank_spread_us": None,
        "trials": 1,
        "iters": run.params.get("iters"),
        "agg": run.params.get("agg", 1),
        "path": "nccl-tests",
        "source": "nccl-tests",
    }
