"""Loading the evidence diagnose reasons over, and small accessors that keep the rules short.

An engine trace follows the schema in docs/DESIGN.md ("Engine trace"); a sweep results file is the
JSONL of `ncclprobe.records`; an env-check document is `ncclprobe env-check --format json` output.
Everything but the trace is optional: a rule whose evidence is missing says so (NotChecked)
instead of guessing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.errors import UsageProblem

PHASES = ("decode", "draft", "verify", "accept", "draft_extend", "host")
OVERHEAD_PHASES = ("accept", "draft_extend", "host")


@dataclass
class Evidence:
    trace: dict
    trace_path: str = "TRACE"
    baseline: dict | None = None               # --baseline TRACE: another run to compare against
    baseline_path: str | None = None
    sweep: list[dict] = field(default_factory=list)   # sweep result records
    sweep_path: str | None = None
    env_check: dict | None = None
    env_check_path: str | None = None

    @property
    def config(self) -> dict:
        return self.trace.get("config") or {}

    @property
    def runs(self) -> list[dict]:
        return self.trace.get("runs") or []

    def all_runs(self) -> list[tuple[str, dict]]:
        """Every run with the name of the trace it came from ("trace" or "baseline")."""
        out = [("trace", run) for run in self.runs]
        if self.baseline:
            out += [("baseline", run) for run in self.baseline.get("runs") or []]
        return out


def load_evidence(trace: str | Path, *, sweep: str | Path | None = None, env_check: str | Path | None = None,
                  baseline: str | Path | None = None) -> Evidence:
    ev = Evidence(trace=load_trace(trace), trace_path=str(trace))
    if baseline:
        ev.baseline, ev.baseline_path = load_trace(baseline), str(baseline)
    if sweep:
        ev.sweep, ev.sweep_path = load_sweep(sweep), str(sweep)
    if env_check:
        ev.env_check, ev.env_check_path = _load_json(env_check, "env-check document"), str(env_check)
    return ev


def load_trace(path: str | Path) -> dict:
    doc = _load_json(path, "engine trace")
    if not isinstance(doc, dict) or doc.get("kind") != "engine-trace":
        raise UsageProblem(f"{str(path)!r} is not an engine trace (expected \"kind\": \"engine-trace\"; "
                           "write one with `ncclprobe run-engine ... --trace FILE`)")
    if doc.get("schema_version") != 1:
        raise UsageProblem(f"{str(path)!r} has trace schema version {doc.get('schema_version')!r}; "
                           "this ncclprobe reads version 1")
    if not isinstance(doc.get("runs"), list) or not doc["runs"]:
        raise UsageProblem(f"{str(path)!r} holds no runs")
    return doc


def load_sweep(path: str | Path) -> list[dict]:
    from ncclprobe.records import read_results
    results = read_results(path)
    return [r for r in results.results if r.get("status") == "ok" and r.get("time_us") is not None]


def _load_json(path: str | Path, what: str):
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageProblem(f"cannot read {what} {str(path)!r}: {exc.strerror or exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageProblem(f"{str(path)!r} is not JSON ({exc.msg} at line {exc.lineno}); expected an {what}") from exc


# ---- accessors over one run ------------------------------------------------------------------

def phase(run: dict, name: str) -> dict | None:
    """The phase's record when it ran at least once, else None."""
    rec = (run.get("phases") or {}).get(name)
    return rec if rec and rec.get("count") else None


def cycles(run: dict) -> int:
    """Speculative cycles: one verify per cycle."""
    verify = phase(run, "verify")
    return int(verify["count"]) if verify else 0


def per_cycle_ms(run: dict, name: str) -> float | None:
    rec, n = phase(run, name), cycles(run)
    return rec["total_ms"] / n if rec and n else None


def per_token_ms(run: dict, total_ms: float) -> float | None:
    tokens = run.get("new_tokens") or 0
    return total_ms / tokens if tokens else None


def tokens_per_cycle(run: dict) -> float | None:
    """Mean tokens a cycle yields per sequence: accepted drafts plus the bonus token."""
    hist = (run.get("acceptance") or {}).get("histogram") or []
    total = sum(hist)
    if total:
        return sum(i * n for i, n in enumerate(hist)) / total + 1.0
    return None


def find_run(runs: list[dict], *, mode: str, label: str | None = None) -> dict | None:
    for run in runs:
        if run.get("mode") == mode and (label is None or run.get("label") == label):
            return run
    return None


def baseline_decode(ev: Evidence, label: str | None) -> tuple[dict | None, str]:
    """The decode phase a speculative run should be compared with: the baseline run of the same
    label in this trace, else of any label, else the --baseline trace's. Returns (phase, source)."""
    for source, runs in (("this trace", ev.runs), ("--baseline", (ev.baseline or {}).get("runs") or [])):
        for lab in (label, None):
            run = find_run(runs, mode="baseline", label=lab)
            if run and phase(run, "decode"):
                return phase(run, "decode"), f"{source}, {run.get('label')} baseline"
    return None, ""


def nccl_env(worker: dict, key: str = "env_at_comm_init") -> dict[str, str]:
    return {k: str(v) for k, v in (worker.get(key) or {}).items() if k.startswith("NCCL_")}


def effective_settings(run: dict) -> dict[str, str] | None:
    """The NCCL_* variables every worker had when it created its communicator (the settings in
    force at creation, hence at capture); None when the workers disagree or none reported."""
    workers = run.get("workers") or []
    envs = [nccl_env(w) for w in workers if w.get("env_at_comm_init") is not None]
    if not envs:
        return None
    first = envs[0]
    return dict(first) if all(env == first for env in envs[1:]) else None


def captured_graphs(run: dict) -> set[str]:
    sizes = (run.get("collectives") or {}).get("sizes") or []
    return {s["graph"] for s in sizes if s.get("graph")}


def run_name(source: str, run: dict) -> str:
    prefix = "" if source == "trace" else "baseline trace: "
    return f"{prefix}{run.get('label', '?')} {run.get('mode', '?')}"
