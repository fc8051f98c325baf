"""ncclprobe's engine trace (`run-engine --trace FILE`, docs/DESIGN.md "Engine trace"): its schema
constants, its one loader with validation, and its view.

`load_trace` is the only reader, used by diagnose, recommend, report and probe graph-capture;
`to_runs` turns a trace into the normalized view (`ncclprobe.evidence.run.view`) that the
diagnose rules read. What is computed over a trace's runs (the self-checks and the exit code they
give, the verify/decode link, the merges) is `trace_checks`: the writer's side, which `engine/runner.py`,
`run-engine --tuned` and `report --trace A --trace B` call, while every reader needs only this.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.run.modes import Mode
from ncclprobe.evidence.run.view import (
    ENGINE_PHASE_KIND,
    Acceptance,
    Collective,
    EngineRun,
    Phase,
    Worker,
)
from ncclprobe.secrets import mask_env_value, mask_provenance, mask_text
from ncclprobe.validate import Where, load_json, shown

SCHEMA_VERSION = 1
KIND = "engine-trace"
MODES = Mode.values()
LATER_ENV_KEYS = ("env_after_comm_init", "env_at_exit", "env_at_end", "env_now")
MAX_BYTES = 512 * 1024 * 1024  # an engine trace is kilobytes; anything this large is not one


# ---- loading and validation -------------------------------------------------------------------


def load_trace(path: str | Path) -> dict:
    """Read and validate an engine trace; a UsageProblem names the file and the first bad field."""
    doc: dict = _read_json(path)
    validate(doc, str(path))  # an object: it is refused otherwise
    if isinstance(
        doc.get("provenance"), dict
    ):  # masked on read (ncclprobe.secrets): any writer's trace
        doc["provenance"] = mask_provenance(doc["provenance"])
    _mask_workers(doc)
    return doc


def _mask_workers(doc: dict) -> None:
    """Each worker's environments and NCCL warnings, masked as read like the provenance: diagnose
    quotes them in its reasons, and a masked value compares equal wherever the raw one did (both
    sides are masked)."""
    keys = ("settings", "env_at_comm_init", "nccl_read", "env_after_init", *LATER_ENV_KEYS)
    for run in doc.get("runs") or []:
        holders = [run, *(run.get("workers") or [])] if isinstance(run, dict) else []
        for holder in holders:
            for key in keys:
                if isinstance(holder, dict) and isinstance(holder.get(key), dict):
                    holder[key] = {
                        name: mask_env_value(str(name), value) if isinstance(value, str) else value
                        for name, value in holder[key].items()
                    }
            if isinstance(holder, dict) and isinstance(holder.get("nccl_warnings"), list):
                holder["nccl_warnings"] = [
                    mask_text(w) if isinstance(w, str) else w for w in holder["nccl_warnings"]
                ]


def is_engine_trace(doc: object) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == KIND


def _read_json(path: str | Path) -> Any:
    """Size limit, UTF-16 recognised, no NaN, /dev/zero refused: `ncclprobe.validate`."""
    return load_json(path, "engine trace", limit=MAX_BYTES)


def validate(doc: Any, where: str) -> None:
    if not is_engine_trace(doc):
        raise UsageProblem(
            f'{where!r} is not an engine trace (expected "kind": "engine-trace"; '
            "write one with `ncclprobe run-engine ... --trace FILE`)"
        )
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise UsageProblem(
            f"{where!r} has trace schema version {shown(doc.get('schema_version'))}; "
            f"this ncclprobe reads version {SCHEMA_VERSION}"
        )
    if not isinstance(doc.get("config"), dict):
        raise UsageProblem(f'{where}: "config" must be an object')
    _validate_config(doc["config"], Where(where).at("config"))
    runs = doc.get("runs")
    if not isinstance(runs, list) or not runs:
        raise UsageProblem(f"{where!r} holds no runs")
    for i, run in enumerate(runs):
        _validate_run(run, f"{where}: runs[{i}]")


# the run's settings the analyses read, with the types run-engine writes (absent or null: unknown)
_CONFIG_FIELDS = (
    *((name, "int", 1) for name in ("tp", "batch", "k", "new_tokens", "prompt_len", "repeats")),
    *((name, "int", 0) for name in ("seed", "prompts_given")),
    *((name, "str", None) for name in ("engine", "device", "backend", "preset", "dtype", "graphs")),
    *(
        (name, "str", None) for name in ("checkpoint", "draft", "compile")
    ),  # next commands quote them
    ("prompts", "list", None),
    ("prompt_options", "list", None),
    ("capture_batches", "list", None),
    ("chat", "bool", None),
    ("model", "dict", None),
)


def _validate_config(config: dict, where: Where) -> None:
    for name, kind, low in _CONFIG_FIELDS:
        where.field(config, name, kind, required=False, nullable=True, min=low)


def _validate_run(run: Any, at: str) -> None:
    if not isinstance(run, dict):
        raise UsageProblem(f"{at} is not an object")
    if run.get("mode") not in MODES:
        raise UsageProblem(
            f"{at}.mode is {shown(run.get('mode'))}, expected baseline or speculative"
        )
    for key in (
        "tokens_per_s",
        "ms_per_token",
        "wall_s",
        "collective_share",
        "graph_coverage",
        "verify_decode_ratio",
        "new_tokens",
    ):
        _number(run.get(key), f"{at}.{key}", optional=True)
    for key, kind in (("settings", "dict"), ("graphs", "list"), ("repeats", "dict")):
        if run.get(key) is not None and not isinstance(run[key], dict if kind == "dict" else list):
            raise UsageProblem(f"{at}.{key} must be {'an object' if kind == 'dict' else 'a list'}")
    phases = run.get("phases")
    if not isinstance(phases, dict):
        raise UsageProblem(f"{at}.phases must be an object")
    for name, rec in phases.items():
        if not isinstance(rec, dict):
            raise UsageProblem(f"{at}.phases.{name} is not an object")
        for key in ("count", "total_ms", "median_ms", "p90_ms"):
            _number(rec.get(key), f"{at}.phases.{name}.{key}", optional=key != "count")
        if name != "host" and rec.get("count") and rec.get("median_ms") is None:
            # the engine times every step it counts; only the baseline's host time is a total alone
            raise UsageProblem(f"{at}.phases.{name}.median_ms is missing for {rec['count']} steps")
    sizes = (
        (run.get("collectives") or {}).get("sizes")
        if isinstance(run.get("collectives"), dict)
        else None
    )
    if run.get("collectives") is not None and not isinstance(run.get("collectives"), dict):
        raise UsageProblem(f"{at}.collectives must be an object")
    for key, value in (("collectives.sizes", sizes), ("workers", run.get("workers"))):
        if value is not None and not isinstance(value, list):
            raise UsageProblem(f"{at}.{key} must be a list")
    for j, entry in enumerate(sizes or []):
        if not isinstance(entry, dict):
            raise UsageProblem(f"{at}.collectives.sizes[{j}] is not an object")
        for key in ("size_bytes", "count"):
            _number(entry.get(key), f"{at}.collectives.sizes[{j}].{key}")
    for j, worker in enumerate(run.get("workers") or []):
        if not isinstance(worker, dict):
            raise UsageProblem(f"{at}.workers[{j}] is not an object")
        for key in ("env_at_comm_init", "env_at_exit", "nccl_read"):
            if worker.get(key) is not None and not isinstance(worker.get(key), dict):
                raise UsageProblem(f"{at}.workers[{j}].{key} must be an object")
    if run.get("settings") is not None and not isinstance(run.get("settings"), dict):
        raise UsageProblem(f"{at}.settings must be an object")
    histogram = (
        (run.get("acceptance") or {}).get("histogram")
        if isinstance(run.get("acceptance"), dict)
        else None
    )
    if histogram is not None and not (
        isinstance(histogram, list)
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in histogram)
    ):
        raise UsageProblem(
            f"{at}.acceptance.histogram must be a list of counts, got {str(histogram)[:60]}"
        )
    repeats = run.get("repeats")
    if repeats is not None:
        if not isinstance(repeats, dict) or not isinstance(repeats.get("tokens_per_s"), list):
            raise UsageProblem(f"{at}.repeats must be an object with a tokens_per_s list")
        for j, value in enumerate(repeats["tokens_per_s"]):
            _number(value, f"{at}.repeats.tokens_per_s[{j}]")


def _number(value: object, at: str, optional: bool = False) -> None:
    if value is None and optional:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (isinstance(value, int) and value >= 2**63)  # isfinite() of 400 digits overflows
        or not math.isfinite(value)
        or value < 0
    ):
        raise UsageProblem(f"{at} must be a finite non-negative number, got {shown(value)}")


# ---- the view ---------------------------------------------------------------------------------


def to_runs(doc: dict, path: str = "") -> list[EngineRun]:
    """Every run of a (validated) trace as the normalized view."""
    config = doc.get("config") or {}
    gpu = config.get("device") == "cuda"
    return [_run_view(run, path, gpu, _groups(config)) for run in doc["runs"]]


def _groups(config: dict) -> int:
    """How many batches a run decoded one after another: with more prompts than --batch each run
    record covers them all, and its `new_tokens` is per batch (engine/spec.py RunSpec.groups)."""
    prompts, batch = config.get("prompts"), config.get("batch") or 1
    if not isinstance(prompts, list) or isinstance(batch, bool) or not isinstance(batch, int):
        return 1  # the config is the engine's own record: a value of another type tells nothing
    return max(1, len(prompts) // batch) if prompts and batch > 0 else 1


def _run_view(run: dict, path: str, gpu: bool, groups: int = 1) -> EngineRun:
    coll = run.get("collectives") or {}
    acceptance = run.get("acceptance") or {}
    return EngineRun(
        label=str(run.get("label", "?")),
        mode=run.get("mode"),
        source=KIND,
        path=path,
        engine="ncclprobe",
        phases={name: _phase(name, rec) for name, rec in (run.get("phases") or {}).items()},
        collectives=[
            Collective(
                op=s.get("op", "all_reduce"),
                size_bytes=int(s["size_bytes"]),
                count=float(s["count"]),
                dtype=s.get("dtype"),
                phase=s.get("phase"),
                graph=s.get("graph"),
            )
            for s in coll.get("sizes") or []
        ],
        acceptance=Acceptance(
            mean_length=acceptance.get("mean_length"),
            histogram=tuple(acceptance.get("histogram") or ()),
            source="engine",
        )
        if run.get("mode") == Mode.SPECULATIVE
        else None,
        tokens_per_s=run.get("tokens_per_s"),
        ms_per_token=run.get("ms_per_token"),
        new_tokens=run["new_tokens"] * groups if run.get("new_tokens") else None,
        wall_s=run.get("wall_s"),
        tokens_per_s_repeats=tuple((run.get("repeats") or {}).get("tokens_per_s") or ()),
        collective_share=run.get("collective_share"),
        graph_coverage=run.get("graph_coverage"),
        verify_decode_ratio=run.get("verify_decode_ratio"),
        settings=dict(run.get("settings") or {}),
        workers=[_worker(w) for w in run.get("workers") or []],
        graphs=list(run.get("graphs") or []),
        per_token_count=coll.get("per_token_count"),
        per_token_bytes=coll.get("per_token_bytes"),
        notes=[] if gpu else ["a CPU run: no CUDA graphs, and every phase time is host time"],
    )


def _phase(name: str, rec: dict) -> Phase:
    return Phase(
        name=name,
        kind=ENGINE_PHASE_KIND.get(name, "other"),
        count=int(rec.get("count") or 0),
        total_ms=float(rec.get("total_ms") or 0.0),
        median_ms=rec.get("median_ms"),
        p90_ms=rec.get("p90_ms"),
        graphed=bool(rec.get("graphed", False)),
        tokens_per_seq=None,
        found_by="engine phase timer",
    )


def _worker(w: dict) -> Worker:
    later = {k: str(v) for key in LATER_ENV_KEYS for k, v in (w.get(key) or {}).items()}
    return Worker(
        rank=w.get("rank"),
        pid=w.get("pid"),
        env_at_comm_init=w.get("env_at_comm_init"),
        later_env=later,
        nccl_read=dict(w.get("nccl_read") or {}),
        nccl_version=w.get("nccl_version"),
    )
