"""SGLang and vLLM server logs as the normalized view (`load_server_logs`), or as what they add to
a profile of the same run (`add_log_to_profile`: acceptance and throughput).

Which engine wrote a log is told by its lines' markers; what each engine's lines say is read in
`serverlog_lines` (the formats are listed there). What a log cannot prove is part of the view's
notes: SGLang's `cuda graph: True` describes the decode batch the scheduler ran, not that the
speculative verify inside it was captured.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.failure_lines import scan
from ncclprobe.evidence.run.serverlog_lines import as_int, sglang_stats, vllm_stats
from ncclprobe.evidence.run.view import Acceptance, EngineRun, Phase, RunSet
from ncclprobe.validate import read_text

SGLANG_MARKERS = ("Decode batch", "Prefill batch", "server_args=ServerArgs(")
VLLM_MARKERS = (
    "Avg generation throughput",
    "SpecDecoding metrics",
    "Speculative metrics:",
    "V1 LLM engine",
    "setting cudagraph_mode",
    "Overriding cudagraph_mode",
    "[gpu_model_runner.py",
    "SpecDecodeWorker stage times",
)
MAX_LINE = 1 << 16  # longer lines are not log lines we read; only their head is looked at


def detect_engine(text_head: str) -> str | None:
    if "Decode batch" in text_head or "Prefill batch" in text_head or "sglang" in text_head.lower():
        return "sglang"
    if (
        "Engine 000:" in text_head
        or "SpecDecoding metrics" in text_head
        or "[loggers.py" in text_head
        or "vllm" in text_head.lower()
        or "V1 LLM engine" in text_head
    ):
        return "vllm"
    return None


def read_log(path: str | Path) -> dict:
    """Parse one server log into its statistics; UsageProblem when it is neither SGLang's nor vLLM's."""
    # size limit, devices (/dev/zero), binary files, UTF-16: the one input reader (ncclprobe.validate)
    lines = [line[:MAX_LINE] for line in read_text(path, "server log").splitlines(keepends=True)]
    sglang = sum(1 for line in lines if any(m in line for m in SGLANG_MARKERS))
    vllm = sum(1 for line in lines if any(m in line for m in VLLM_MARKERS))
    if sglang >= vllm and sglang:
        return _with_failures(sglang_stats(lines, str(path)), lines, path)
    if vllm:
        return _with_failures(vllm_stats(lines, str(path)), lines, path)
    engine = detect_engine("".join(lines[:200]))
    if engine and scan(
        lines, str(path)
    ):  # the engine's log of a server that failed: read, not refused
        stats = sglang_stats if engine == "sglang" else vllm_stats
        return _with_failures(stats(lines, str(path)), lines, path)
    what = (
        f"a {engine} log without any batch or throughput line"
        if engine
        else "not an SGLang or vLLM server log"
    )
    raise UsageProblem(
        f"{path}: {what} (no 'Decode batch', 'Avg generation throughput' or engine start-up lines); "
        "give the log of the server that ran the requests"
    )


def _with_failures(log: dict, lines: list[str], path: str | Path) -> dict:
    """The log's lines that look like a failure (an engine's ERROR lines, a traceback, CUDA out of
    memory): none of them is read here, so every one is shown (`evidence.failure_lines`)."""
    log["not_explained"] = scan(lines, str(path)).to_json()
    return log


def load_server_logs(paths: Iterable[str | Path]) -> RunSet:
    logs = [read_log(p) for p in paths]
    engines = {log["engine"] for log in logs}
    if len(engines) > 1:
        raise UsageProblem(
            "these server logs come from different engines (SGLang and vLLM); give one run's logs"
        )
    runs = [to_run(log) for log in logs]
    config = {"engine": logs[0]["engine"], "tp": logs[0].get("tp"), "device": "cuda"}
    k = logs[0].get("num_spec_tokens") or as_int(logs[0].get("speculative_num_steps"))
    if k:
        config["k"] = k
    return RunSet(
        runs=runs,
        config=config,
        kind="server-log",
        inputs={"server_log": [str(p) for p in paths]},
        notes=runs[0].notes,
    )


def to_run(log: dict) -> EngineRun:
    acceptance = (
        Acceptance(
            mean_length=log["tokens_per_cycle"],
            per_position=tuple(log["per_position"]),
            source=f"{log['engine']} log",
        )
        if log["tokens_per_cycle"] is not None
        else None
    )
    return EngineRun(
        label=Path(log["path"]).name,
        mode="speculative" if log["speculative"] else "baseline",
        source="server-log",
        path=log["path"],
        engine=log["engine"],
        acceptance=acceptance,
        tokens_per_s=log["gen_tokens_per_s"],
        phases=_stage_phases(log),
        log=log,
        notes=log_notes(log),
    )


def _stage_phases(log: dict) -> dict[str, Phase]:
    """vLLM V0's stage times as per-step phases: the scoring forward is the verify step; the draft
    time is per proposed token (one draft step each). Each line is an interval's average, so the
    count is the number of lines, the time per step their median; graphs and GPU time are unknown."""
    stages = log.get("stage_times")
    if not stages:
        return {}
    found_by = "vLLM V0 SpecDecodeWorker stage times"
    n = stages["lines"]
    return {
        name: Phase(
            name=name,
            kind=name,
            count=n,
            total_ms=stages[key] * n,
            median_ms=stages[key],
            found_by=found_by,
        )
        for name, key in (("draft", "draft_ms_per_token"), ("verify", "verify_ms"))
    }


def log_notes(log: dict) -> list[str]:
    stages = log.get("stage_times")
    notes = [
        (
            f"vLLM V0's SpecDecodeWorker stage times give per-step times (median of {stages['lines']} "
            f"line(s)): verify (scoring) {stages['verify_ms']:.2f} ms, draft {stages['draft_ms_per_token']:.2f} "
            f"ms per proposed token, acceptance (verification) {stages['accept_ms']:.2f} ms; "
            "the log holds no kernels and no collectives: it cannot show which steps ran from CUDA "
            "graphs or what the collectives cost"
        )
        if stages
        else "a server log holds no per-step times, no kernels and no collectives: it cannot show which steps ran "
        "from CUDA graphs or what the collectives cost"
    ]
    if log["engine"] == "sglang" and log["speculative"]:
        notes.append(
            "SGLang's 'cuda graph: True' describes the decode batch the scheduler ran, not that the speculative "
            "verify inside it was captured"
        )
    if log["speculative"] and log["tokens_per_cycle"] is None:
        notes.append(
            "the log shows speculative decoding but not how many tokens a cycle kept: "
            + (
                "this vLLM version prints no mean acceptance length, and the number of speculative tokens is "
                "not in the log (give the start-up lines with num_spec_tokens, or a newer vLLM's log)"
                if log["engine"] == "vllm"
                else "its decode lines have no 'accept len' field"
            )
        )
    elif log.get("tokens_per_cycle_from"):
        notes.append(
            f"mean acceptance length {log['tokens_per_cycle']:.2f} tokens per cycle computed from the log's "
            f"{log['tokens_per_cycle_from']} (this vLLM version does not print it)"
        )
    values, weighted = (
        log.get("tokens_per_cycle_values") or 0,
        log.get("tokens_per_cycle_weighted_by"),
    )
    if log["tokens_per_cycle"] is not None and values > 1 and not log.get("tokens_per_cycle_from"):
        plain = log.get("tokens_per_cycle_plain_mean")
        notes.append(
            f"acceptance {log['tokens_per_cycle']:.2f} tokens per cycle over {values} log intervals, "
            + (
                f"each weighed by its {weighted} (the plain mean of the lines is {plain:.2f})"
                if weighted
                else "a plain mean of the lines: they do not say how many cycles each counted"
            )
        )
    if log["engine"] == "vllm" and log.get("cudagraph_mode"):
        notes.append(
            f"vLLM's engine config says cudagraph_mode {log['cudagraph_mode']}: the mode it started with; "
            "which steps replayed a graph is not in the log"
        )
    return notes


def add_log_to_profile(runset: RunSet, paths: Iterable[str | Path]) -> None:
    """Acceptance and throughput from the server log of the profiled run, into the profile's run."""
    logs = [read_log(p) for p in paths]
    run = runset.runs[0]
    log = logs[0]
    if log["tokens_per_cycle"] is not None:
        run.acceptance = Acceptance(
            mean_length=log["tokens_per_cycle"],
            per_position=tuple(log["per_position"]),
            source=f"{log['engine']} log",
        )
        if run.mode is None:
            run.mode = "speculative"
    run.log = log
    run.tokens_per_s = run.tokens_per_s or log["gen_tokens_per_s"]
    runset.inputs["server_log"] = [str(p) for p in paths]
    runset.notes.append(
        f"acceptance and throughput from the {log['engine']} log {Path(log['path']).name}"
    )
