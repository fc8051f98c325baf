"""ncclprobe's engine trace (`run-engine --trace FILE`, docs/DESIGN.md "Engine trace"): its one
loader with validation, its merges, its self-checks and the exit code they give, and its view.

`engine/runner.py` assembles a trace from the workers' reports with `finish`; `run-engine
--tuned` joins the untuned and tuned traces with `merge_tuned`; `report --trace A --trace B`
draws several side by side with `side_by_side`; `load_trace` is the only reader, used by
diagnose, recommend, report and probe graph-capture. `to_runs` turns a trace into the
normalized view (`ncclprobe.evidence.run.view`) that the diagnose rules read.
"""

from __future__ import annotations

import math
from pathlib import Path

from ncclprobe import stats
from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.run.modes import Label, Mode
from ncclprobe.evidence.run.view import (
    ENGINE_PHASE_KIND,
    Acceptance,
    Collective,
    EngineRun,
    Phase,
    Worker,
)
from ncclprobe.nccl.values import reads_the_same
from ncclprobe.secrets import mask_env_value, mask_provenance, mask_text
from ncclprobe.validate import Where, load_json, shown
from ncclprobe.verdict import Verdict

SCHEMA_VERSION = 1
KIND = "engine-trace"
MODES = Mode.values()
LATER_ENV_KEYS = ("env_after_comm_init", "env_at_exit", "env_at_end", "env_now")
MAX_BYTES = 512 * 1024 * 1024  # an engine trace is kilobytes; anything this large is not one


# ---- loading and validation -------------------------------------------------------------------


def load_trace(path: str | Path) -> dict:
    """Read and validate an engine trace; a UsageProblem names the file and the first bad field."""
    doc = _read_json(path)
    validate(doc, str(path))
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


def is_engine_trace(doc) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == KIND


def _read_json(path: str | Path):
    """Size limit, UTF-16 recognised, no NaN, /dev/zero refused: `ncclprobe.validate`."""
    return load_json(path, "engine trace", limit=MAX_BYTES)


def validate(doc, where: str) -> None:
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
    ("prompts", "list", None),
    ("model", "dict", None),
)


def _validate_config(config: dict, where: Where) -> None:
    for name, kind, low in _CONFIG_FIELDS:
        where.field(config, name, kind, required=False, nullable=True, min=low)


def _validate_run(run, at: str) -> None:
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
    sizes = (
        (run.get("collectives") or {}).get("sizes")
        if isinstance(run.get("collectives"), dict)
        else None
    )
    if run.get("collectives") is not None and not isinstance(run.get("collectives"), dict):
        raise UsageProblem(f"{at}.collectives must be an object")
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


def _number(value, at: str, optional: bool = False) -> None:
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


# ---- assembly, merges and self-checks ---------------------------------------------------------


def finish(doc: dict) -> dict:
    """Link each speculative run's verify to its baseline's decode and compute the self-checks."""
    link_verify_to_decode(doc["runs"])
    doc["checks"] = checks(doc["config"]["temperature"], doc["runs"])
    return doc


def merge_tuned(first: dict, second: dict) -> dict:
    """`run-engine --tuned`: one trace holding the untuned then the tuned runs, checks recomputed,
    and the tuned-against-untuned comparison per mode."""
    merged = dict(first)
    merged["runs"] = first["runs"] + second["runs"]
    finish(merged)
    merged["comparison"] = compare_tuned(merged["runs"], device=merged["config"].get("device"))
    return merged


def side_by_side(paths: list[str | Path]) -> dict:
    """Several traces drawn side by side (`--graphs decode` next to `--graphs all`, untuned and
    tuned): the first trace's config, every run, each label naming what differs between the
    traces' configs (`graphs=decode`), or the file name when nothing does."""
    traces = [load_trace(p) for p in paths]
    if len(traces) == 1:
        return traces[0]
    configs = [t.get("config") or {} for t in traces]
    differ = [k for k in configs[0] if k != "model" and len({str(c.get(k)) for c in configs}) > 1]
    tags = _unique(
        [
            " ".join(f"{k}={c.get(k)}" for k in differ) or Path(p).stem
            for p, c in zip(paths, configs)
        ],
        [Path(p).stem for p in paths],
    )
    runs = [
        {**run, "label": f"{run.get('label', '')} {tag}".strip()}
        for tag, trace in zip(tags, traces)
        for run in trace["runs"]
    ]
    return {**traces[0], "runs": runs, "merged_from": [str(p) for p in paths]}


def _unique(tags: list[str], stems: list[str]) -> list[str]:
    """Tags that tell every trace apart: one shared by several traces gets the file's name, then
    its position, so no two traces' runs carry one label (their bars would be drawn as one)."""
    if len(set(tags)) < len(tags):
        tags = [
            f"{tag} ({stem})" if tags.count(tag) > 1 and tag != stem else tag
            for tag, stem in zip(tags, stems)
        ]
    if len(set(tags)) < len(tags):
        tags = [f"{tag} #{i + 1}" if tags.count(tag) > 1 else tag for i, tag in enumerate(tags)]
    return tags


def compare_tuned(runs: list[dict], device: str | None = None) -> list[dict]:
    """Per mode: untuned against tuned tokens/s and verify/decode ms, with the change in percent,
    and the noise rule's verdict on the tokens/s (`ncclprobe.stats.compare`: the repeats' spreads,
    else the noise floor of one run on this device)."""
    by = {(r["label"], r["mode"]): r for r in runs}
    rows = []
    for mode in MODES:
        before, after = by.get((Label.UNTUNED, mode)), by.get((Label.TUNED, mode))
        if not before or not after:
            continue
        row = {
            "mode": mode,
            "untuned_tokens_per_s": before["tokens_per_s"],
            "tuned_tokens_per_s": after["tokens_per_s"],
            "change_pct": _change(before["tokens_per_s"], after["tokens_per_s"]),
        }
        if before["tokens_per_s"] and after["tokens_per_s"]:
            row["noise_rule"] = stats.compare(
                _rates(after),
                _rates(before),
                single="gpu" if device == "cuda" else "cpu",
            ).to_json()
        for phase in ("decode", "verify"):
            b, a = (
                (before["phases"].get(phase) or {}).get("median_ms"),
                (after["phases"].get(phase) or {}).get("median_ms"),
            )
            if b and a:
                row[f"{phase}_ms_change_pct"] = _change(b, a)
        rows.append(row)
    return rows


def _rates(run: dict) -> stats.Sample:
    """A run record's tokens/s as the noise rule's sample: its repeats, else its one measurement."""
    return stats.Sample.of_rates(
        (run.get("repeats") or {}).get("tokens_per_s") or [run["tokens_per_s"]]
    )


def _change(before, after) -> float | None:
    return 100.0 * (after - before) / before if before and after is not None else None


def link_verify_to_decode(runs: list[dict]) -> None:
    """verify/decode ratio: the speculative run's median verify over the baseline's median decode
    under the same label (the seed case's 29 ms vs 12 ms)."""
    decode = {
        r["label"]: r["phases"].get("decode", {}).get("median_ms")
        for r in runs
        if r["mode"] == Mode.BASELINE
    }
    for run in runs:
        verify = run["phases"].get("verify", {}).get("median_ms")
        if run["mode"] == Mode.SPECULATIVE and verify and decode.get(run["label"]):
            run["verify_decode_ratio"] = verify / decode[run["label"]]


def checks(temperature: float, runs: list[dict]) -> dict:
    """Self-checks any reader can rely on: ranks agree; greedy speculative equals the baseline.

    `greedy_matched_prefix` is the share of tokens before the first difference: a bug shows up
    at once, while in bf16 a verify and a decode step (different kernel shapes) may round a
    near-tie differently and diverge late, which is not a bug."""
    greedy_match, prefix = None, None
    if temperature == 0:
        by_label: dict[str, dict] = {}
        for run in runs:
            by_label.setdefault(run["label"], {})[run["mode"]] = run["tokens"]
        pairs = [modes for modes in by_label.values() if len(modes) == 2]
        if pairs:
            greedy_match = all(m[Mode.BASELINE] == m[Mode.SPECULATIVE] for m in pairs)
            prefix = min(_matched_prefix(m[Mode.BASELINE], m[Mode.SPECULATIVE]) for m in pairs)
    return {
        "ranks_agree": all(r["ranks_agree"] for r in runs),
        "greedy_match": greedy_match,
        "greedy_matched_prefix": prefix,
        "settings": [settings_check(run) for run in runs if run["settings"]],
    }


def _matched_prefix(a: list[list[int]], b: list[list[int]]) -> float:
    total = matched = 0
    for x, y in zip(a, b):
        same = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
        matched, total = matched + same, total + len(x)
    return matched / total if total else 1.0


def settings_check(run: dict) -> dict:
    """Did every worker have each requested setting when it created its communicator, and did
    NCCL report reading it? (`read` is None without an NCCL log, e.g. on gloo.)"""
    received, read = {}, {}
    workers = run["workers"]
    for key, value in run["settings"].items():
        received[key] = bool(workers) and all(
            w["env_at_comm_init"].get(key) == value for w in workers
        )
        logs = [w["nccl_read"] for w in workers if w["nccl_read"]]
        read[key] = (
            all(key in log and reads_the_same(key, value, str(log[key])) for log in logs)
            if logs and key.startswith("NCCL_")
            else None
        )
    return {
        "label": run["label"],
        "mode": run["mode"],
        "received_by_every_worker": received,
        "read_by_nccl": read,
    }


def verdict(doc: dict) -> Verdict:
    """run-engine's verdict: FINE when ranks agree, float32 greedy output equals the baseline
    (bf16 near-ties may diverge late: reported, not failed), every setting reached every worker
    and, where NCCL logged it, NCCL read it; FINDINGS otherwise."""
    result = doc["checks"]
    received = all(all(c["received_by_every_worker"].values()) for c in result["settings"])
    read = all(v is not False for c in result["settings"] for v in c["read_by_nccl"].values())
    exact = doc["config"]["dtype"] == "float32"
    greedy_ok = result["greedy_match"] is not False or not exact
    return Verdict.of(not (result["ranks_agree"] and greedy_ok and received and read))


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
