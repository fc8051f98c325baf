"""Hypotheses a server log can weigh, and what it cannot: batches without CUDA graphs, batch sizes
outside the captured ones, a graph mode the engine lowered for speculative decoding, acceptance,
and the break-even arithmetic against a baseline log. One pure function each, as in `rules`.

A log says what the scheduler did per batch; it does not show which steps inside a speculative
cycle replayed a graph. The seed case hid exactly there (decode lines said `cuda graph: True`
while the verify ran eagerly), so wherever that matters the rule asks for a profile.
"""

from __future__ import annotations

import statistics

from ncclprobe import stats
from ncclprobe.diagnose.commands import graphs_command, profile_command
from ncclprobe.diagnose.run.rules_spec_config import configuration_cause
from ncclprobe.engine_facts.vllm_cudagraph import mode as cudagraph_mode
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.run.view import EngineRun
from ncclprobe.findings import Finding, NotChecked, Outcome, RuledOut

LOW_ACCEPTANCE = 1.5  # tokens per cycle, bonus included: the drafts are rarely kept


def _logs(ev: E.Evidence) -> list[tuple[str, EngineRun, dict]]:
    """(source, run, its server log's reading) for every run read from a server log."""
    return [(src, run, run.log) for src, run in ev.all_runs() if run.log]


def log_graphs(ev: E.Evidence) -> list:
    out: list[Outcome] = []
    for src, run, log in _logs(ev):
        if src != "trace":
            continue
        if log["engine"] == "sglang" and log["graph_lines"]:
            out.append(_sglang_graphs(ev, run, log))
        out += _capture_sizes(ev, run, log)
        out += [_downgrade(ev, run, d) for d in log.get("downgrades") or []]
        if log["speculative"] and run.source == "server-log":
            out.append(
                NotChecked(
                    rule="verify-captured",
                    hypothesis="the speculative verify step runs inside a CUDA graph",
                    missing=(
                        "a profile: the log reports graphs per decode batch, which does not show whether the verify "
                        "step inside each cycle was captured (the seed case: decode lines said cuda graph: True "
                        "while verify ran eagerly)"
                    ),
                    next_command=profile_command(log["engine"]),
                )
            )
    return out


def _sglang_graphs(ev: E.Evidence, run: EngineRun, log: dict) -> Finding | RuledOut:
    share = log["graph_true"] / log["graph_lines"]
    hyp = "decode batches run without CUDA graphs"
    if share >= 0.99:
        return RuledOut(
            rule="log-graphs",
            hypothesis=hyp,
            reason=f"{log['graph_true']} of {log['graph_lines']} decode log lines say cuda graph: True "
            f"(the batch; not the verify step inside it)",
        )
    eager_sizes = sorted(
        {
            int(b)
            for b in log["batch_sizes"]
            if log["max_capture_size"] and int(b) > log["max_capture_size"]
        }
    )
    why = (
        f" at batch sizes {', '.join(map(str, eager_sizes))}, above cuda-graph-max-bs {log['max_capture_size']}"
        if eager_sizes
        else (" (CUDA graphs are disabled)" if log["graphs_disabled"] else _split_by_size(log))
    )
    return Finding(
        rule="log-graphs",
        severity="warning" if share < 0.9 else "info",
        confidence="high",
        title=f"{1 - share:.0%} of decode batches ran without CUDA graphs{why}",
        detail=(
            f"{log['graph_lines'] - log['graph_true']} of {log['graph_lines']} decode log lines report cuda "
            "graph: False: "
            "those batches launched their kernels one by one. SGLang replays a graph only for batch sizes up to "
            "--cuda-graph-max-bs."
        ),
        evidence={
            "graph_lines": log["graph_lines"],
            "graph_true": log["graph_true"],
            "batch_sizes": log["batch_sizes"],
            "max_capture_size": log["max_capture_size"],
        },
        next_command=graphs_command(ev, "decode"),
    )


def _split_by_size(log: dict) -> str:
    """Without the server arguments, the log's own lines can still show the capture limit: when
    every batch without a graph is larger than every batch with one, the largest captured size
    lies between them."""
    graphed, eager = log.get("graph_batch_sizes") or [], log.get("eager_batch_sizes") or []
    if graphed and eager and min(eager) > max(graphed):
        return (
            f" at batch sizes {', '.join(map(str, eager))}, every one above the largest batch that replayed a graph "
            f"({max(graphed)}): the batch outgrew the captured sizes"
        )
    return ""


def _capture_sizes(ev: E.Evidence, run: EngineRun, log: dict) -> list[Outcome]:
    """Logged batch sizes against the largest captured graph, in the unit the engine captures in:
    SGLang's cuda_graph_bs are batch sizes (requests); vLLM's cudagraph_capture_sizes count tokens,
    and with speculative decoding a decode step runs each request's 1 + k tokens
    (gpu_model_runner's uniform_decode_query_len), so requests x (1 + k) must fit."""
    sizes, top = log.get("capture_sizes"), log.get("max_capture_size")
    if not top or not log["batch_sizes"]:
        return []
    hyp = "batch sizes fall outside the captured graphs"
    per_request, unit = 1, "requests"
    if log["engine"] == "vllm" and log["speculative"]:
        k = log.get("num_spec_tokens")
        if not k:
            return [
                NotChecked(
                    rule="capture-sizes",
                    hypothesis=hyp,
                    missing="the number of speculative tokens: vLLM captures graphs by tokens, and a "
                    "speculative decode step runs 1 + k tokens per request (the start-up lines name "
                    "num_spec_tokens)",
                )
            ]
        per_request, unit = 1 + int(k), f"tokens (requests x {1 + int(k)}: 1 + k={k} per request)"
    steps = {int(b): int(b) * per_request for b in log["batch_sizes"]}
    above = {b: n for b, n in log["batch_sizes"].items() if steps[int(b)] > top}
    if not above:
        largest = max(steps, key=lambda batch: steps[batch])
        return [
            RuledOut(
                rule="capture-sizes",
                hypothesis=hyp,
                reason=f"every logged batch (up to {largest} requests"
                + (f", {steps[largest]} {unit}" if per_request > 1 else "")
                + f") is within the largest captured size {top}",
            )
        ]
    total = sum(log["batch_sizes"].values())
    word = unit.split(" ")[0]
    batches = ", ".join(
        f"{b} requests" + (f" ({steps[int(b)]} {word})" if per_request > 1 else "")
        for b in sorted(above, key=int)
    )
    return [
        Finding(
            rule="capture-sizes",
            severity="warning",
            confidence="medium",
            title=f"{sum(above.values())} of {total} logged intervals ran batches above the largest "
            f"captured graph ({top} {word})",
            detail=(
                f"Batches of {batches} exceed the captured sizes"
                + (f" {sizes}" if sizes else "")
                + ": those steps run without a graph. Raise the largest capture size "
                "(SGLang --cuda-graph-max-bs; vLLM compilation config max_cudagraph_capture_size) or cap "
                "the running batch."
            ),
            evidence={
                "batch_sizes": log["batch_sizes"],
                "capture_sizes": sizes,
                "max_capture_size": top,
                "capture_unit": unit,
                "step_sizes": {b: steps[int(b)] for b in log["batch_sizes"]},
            },
        )
    ]


def _downgrade(ev: E.Evidence, run: EngineRun, downgrade: dict) -> Finding:
    """What the lowered mode captures, from vLLM's own table (`engine_facts.vllm_cudagraph`): a
    mode that keeps decode steps in full graphs is no loss for them; one that runs their attention
    outside (PIECEWISE) or runs no graph (NONE) is."""
    to = downgrade.get("to") or "?"
    known = cudagraph_mode(to)
    decode_lost = known is None or known.decode != "FULL"
    severity = "error" if to == "NONE" else "warning" if decode_lost else "info"
    what = (
        known.captures
        if known
        else "a mode vLLM's table does not name: what it captures is not known"
    )
    return Finding(
        rule="cudagraph-mode",
        severity=severity,
        confidence="high" if known else "low",
        title=f"vLLM lowered cudagraph_mode to {to}",
        detail=(
            f"The server log says vLLM changed the CUDA-graph mode at start-up to {to}: {what}"
            + (
                ""
                if decode_lost
                else " (decode and verify steps keep their full graphs: only prefill and mixed "
                "batches lose theirs)"
            )
            + f". Its words: {downgrade.get('line')}"
        ),
        evidence={
            "cudagraph_mode": to,
            "decode_mode": known.decode if known else None,
            "mixed_mode": known.mixed if known else None,
            "line": downgrade.get("line"),
        },
        next_command=graphs_command(ev, "verify") if decode_lost else "",
    )


def log_acceptance(ev: E.Evidence) -> list:
    out: list[Outcome] = []
    for src, run, log in _logs(ev):
        acc = run.acceptance
        if src == "trace" and (acc is None or acc.mean_length is None) and log.get("speculative"):
            out.append(
                NotChecked(
                    rule="acceptance",
                    hypothesis="the drafts are rarely accepted",
                    missing=(
                        "tokens kept per cycle: the log prints no mean acceptance length and no "
                        "number of speculative tokens to compute it from"
                    ),
                )
            )
        if src != "trace" or acc is None or acc.mean_length is None:
            continue
        per_pos = ", ".join(f"{p:.2f}" for p in acc.per_position)
        if acc.mean_length < LOW_ACCEPTANCE:
            cause = configuration_cause(ev, log)
            out.append(
                Finding(
                    rule="acceptance",
                    severity="warning",
                    confidence="high",
                    title=f"the drafts are rarely accepted: {acc.mean_length:.2f} tokens per cycle (bonus included)"
                    + (f"; {cause.rule} names the cause" if cause else ""),
                    detail=(
                        "Each cycle keeps few of its drafted tokens, so speculation pays a draft and a "
                        "verify for little more than the one token a plain decode step gives. "
                        + _acceptance_levers(cause)
                    )
                    + (f" Per position: {per_pos}." if per_pos else ""),
                    evidence={
                        "mean_acceptance_length": round(acc.mean_length, 3),
                        "per_position": list(acc.per_position),
                    },
                )
            )
        else:
            out.append(
                RuledOut(
                    rule="acceptance",
                    hypothesis="the drafts are rarely accepted",
                    reason=f"{acc.mean_length:.2f} tokens per cycle"
                    + (f" (per position {per_pos})" if per_pos else ""),
                )
            )
    return out


def _acceptance_levers(cause: Finding | None) -> str:
    """A weak draft's levers, only where no configuration error explains the low acceptance: a
    draft run wrongly says nothing yet about how good it is."""
    if cause is None:
        return "A draft trained on this model's own outputs, or fewer speculative tokens, are the levers."
    return (
        f"The configuration is the first thing to fix ({cause.rule}: {cause.title}): until the "
        "draft runs as it was made to, this acceptance says nothing about how good the draft is: "
        "fix that, then read the acceptance again."
    )


def log_breakeven(ev: E.Evidence) -> list:
    """Speculative against baseline throughput from their logs, at the batch sizes both ran, and
    the acceptance that would break even: tokens per cycle × baseline / speculative throughput."""
    spec = [
        (run, log) for src, run, log in _logs(ev) if src == "trace" and run.mode == "speculative"
    ]
    base = [
        (run, log) for src, run, log in _logs(ev) if src == "baseline" and run.mode == "baseline"
    ]
    if not spec:
        return []
    hyp = "speculative slower than the baseline"
    if not base:
        return [
            NotChecked(
                rule="speculative-slower",
                hypothesis=hyp,
                missing="a baseline: the same server's log without speculative decoding (--baseline-server-log)",
            )
        ]
    (s, s_log), (_, b_log) = spec[0], base[0]
    common = sorted(set(s_log["tokens_per_s_by_batch"]) & set(b_log["tokens_per_s_by_batch"]))
    if common:
        batch = max(common, key=lambda n: s_log["batch_sizes"].get(n, 0))
        s_values, b_values, where = (
            s_log["tokens_per_s_values_by_batch"][batch],
            b_log["tokens_per_s_values_by_batch"][batch],
            f"at batch {batch}",
        )
    else:
        s_values, b_values, where = (
            s_log["tokens_per_s_values"],
            b_log["tokens_per_s_values"],
            "over the whole logs (no batch size in common)",
        )
    s_values, b_values = [v for v in s_values if v > 0], [v for v in b_values if v > 0]
    if not s_values or not b_values:
        return [
            NotChecked(
                rule="speculative-slower",
                hypothesis=hyp,
                missing="generation throughput in both logs",
            )
        ]
    # every logging interval is one measurement of the throughput: the noise rule weighs them
    verdict = stats.compare(
        stats.Sample.of_rates(s_values), stats.Sample.of_rates(b_values), single="gpu"
    )
    s_tput, b_tput = statistics.median(s_values), statistics.median(b_values)
    speedup = s_tput / b_tput
    figures = (
        f"{s_tput:.1f} against {b_tput:.1f} tok/s {where} ({speedup:.2f}x; medians of "
        f"{len(s_values)} and {len(b_values)} logging intervals)"
    )
    tpc = s.acceptance.mean_length if s.acceptance else None
    breakeven = tpc / speedup if tpc else None
    if verdict.verdict == stats.FASTER:
        return [
            RuledOut(
                rule="speculative-slower",
                hypothesis=hyp,
                reason=f"speculative is faster beyond the noise: {figures}; {verdict.describe()}",
            )
        ]
    if verdict.verdict == stats.WITHIN_NOISE:
        return [
            NotChecked(
                rule="speculative-slower",
                hypothesis=hyp,
                missing=f"a difference beyond the noise: {figures} ({verdict.describe()}); logs of "
                "longer runs at the same batch size would settle it",
            )
        ]
    return [
        Finding(
            rule="speculative-slower",
            severity="warning",
            confidence="medium",
            title=f"speculative {s_tput:.1f} tok/s is slower than the baseline's {b_tput:.1f} tok/s {where} "
            "beyond the noise",
            detail=(
                f"With {tpc:.2f} tokens per cycle the speculative server reaches {speedup:.2f}x the "
                "baseline, so a cycle "
                f"costs {tpc / speedup:.2f} baseline decode steps: it must yield {breakeven:.2f} tokens to break even. "
                if tpc
                else f"The speculative server reaches {speedup:.2f}x the baseline. "
            )
            + f"Slower {verdict.describe()}. "
            + "The log cannot say where the cycle's time goes (draft, verify, graphs or not): a profile can.",
            evidence={
                "speculative_tokens_per_s": s_tput,
                "baseline_tokens_per_s": b_tput,
                "speedup": round(speedup, 3),
                "tokens_per_cycle": tpc,
                "breakeven_tokens_per_cycle": breakeven,
                "noise_rule": {**verdict.to_json(), "intervals": [len(s_values), len(b_values)]},
            },
            next_command=profile_command(s.engine),
        )
    ]


RULES = (log_graphs, log_acceptance, log_breakeven)
