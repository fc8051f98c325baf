"""SGLang and vLLM server logs as the normalized view (`load_server_logs`), or as what they add to
a profile of the same run (`add_log_to_profile`: acceptance and throughput).

Lines read (formats from real logs, tests/fixtures/server_logs/ has the sources):
- SGLang, per logging interval of decode batches: `Decode batch. #running-req: 1, #token: 108,
  token usage: 0.00, accept len: 2.17, accept rate: 0.54, cuda graph: True, gen throughput
  (token/s): 178.86, #queue-req: 0` (older versions print fewer fields), behind a `[date TP0]` or
  `date INFO pid [scheduler_metrics_mixin.py:287]` prefix; the server arguments
  (`cuda_graph_max_bs=`, `cuda_graph_bs=[...]`, `disable_cuda_graph=`, `speculative_algorithm=`).
- vLLM: `Engine 000: Avg prompt throughput: .., Avg generation throughput: 26.9 tokens/s, Running:
  1 reqs, ...`; `SpecDecoding metrics: Mean acceptance length: 2.71, ..., Per-position acceptance
  rate: 0.919, 0.788, Avg Draft acceptance rate: 85.4%`; the engine config (`'cudagraph_mode':
  <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>`, `'cudagraph_capture_sizes': [1, 2, 4]`,
  `num_spec_tokens=2`); and the warnings that lower `cudagraph_mode` (`... not supported with
  spec-decode for attention backend ...; setting cudagraph_mode=PIECEWISE`).

What a log cannot prove is part of the view's notes: SGLang's `cuda graph: True` describes the
decode batch the scheduler ran, not that the speculative verify inside it was captured.
Every line is matched by fixed-prefix searches and linear-time patterns, whatever its length.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.run.view import Acceptance, EngineRun, Phase, RunSet
from ncclprobe.numbers import is_digits, parse_float
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
_NUM = r"[0-9]{1,19}(?:\.[0-9]{1,19})?"  # bounded: int() fails past 4300 digits
_VLLM_TPUT = re.compile(
    r"Avg generation throughput: (" + _NUM + r") tokens/s, Running: ([0-9]{1,19}) reqs"
)
_VLLM_MEAN = re.compile(r"Mean acceptance length: (" + _NUM + ")")
_VLLM_RATE = re.compile(r"(?:Avg )?Draft acceptance rate: (" + _NUM + ")(%?)")
# V0 (vLLM <= 0.7) prints cumulative counts; 0.5.x doubled the word: `Number of draft tokens tokens: 42272`
_V0_COUNT = re.compile(
    r"Number of (speculative|accepted|draft|emitted) tokens(?: tokens)?: ([0-9]{1,19})"
)
# V1 from 0.8 prints counts per logging interval: `Accepted: 262 tokens, Drafted: 295 tokens`
_V1_COUNT = re.compile(r"\b(Accepted|Drafted): ([0-9]{1,19}) tokens\b")
# V0's spec_decode_worker.py: `SpecDecodeWorker stage times: average_time_per_proposal_tok_ms=4.96
# scoring_time_ms=54.92 verification_time_ms=1.20`, averages over a logging interval: the draft's time
# per proposed token, the target's scoring (verify) forward, the rejection sampler
_V0_STAGES = re.compile(
    r"average_time_per_proposal_tok_ms=(" + _NUM + r") scoring_time_ms=(" + _NUM + r") "
    r"verification_time_ms=(" + _NUM + ")"
)
_VLLM_MODE = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.([A-Z_]+)")
# the engine config prints a Python dict (0.10+: `'cudagraph_capture_sizes': [1, 2]`); earlier V1 versions
# printed the compilation config as JSON (`"cudagraph_capture_sizes":[512,504]`)
_VLLM_SIZES = re.compile(r"""['"]cudagraph_capture_sizes['"]: ?\[([0-9, ]*)\]""")
_VLLM_SPEC = re.compile(r"num_spec_tokens=([0-9]{1,19})")
_VLLM_TP = re.compile(r"tensor_parallel_size=([0-9]{1,19})")
_VLLM_EAGER = re.compile(r"enforce_eager=(True|False)")
_VLLM_DOWNGRADE = re.compile(
    r"setting cudagraph_mode=([A-Z_]+)|Overriding cudagraph_mode (?:from [A-Z_]+ )?to ([A-Z_]+)"
)
_SG_ARG = re.compile(
    r"\b(cuda_graph_max_bs|disable_cuda_graph|speculative_algorithm|speculative_num_steps|"
    r"speculative_num_draft_tokens|speculative_eagle_topk|tp_size)=('?[A-Za-z0-9_.]*'?)"
)
_SG_BS = re.compile(r"\bcuda_graph_bs=\[([0-9, ]*)\]")
# when a line was logged: SGLang `[2025-10-22 10:27:56 TP0]` / `2025-12-04 20:35:53 INFO`, vLLM
# `INFO 09-09 11:51:35 [metrics.py:96]` (month and day only: the year is not in vLLM's lines)
_FULL_STAMP = re.compile(r"(?<![0-9])([0-9]{4}-[0-9]{2}-[0-9]{2}) ([0-9]{2}:[0-9]{2}:[0-9]{2})\b")
_VLLM_STAMP = re.compile(
    r"\b(?:DEBUG|INFO|WARNING|ERROR) ([0-9]{2}-[0-9]{2}) ([0-9]{2}:[0-9]{2}:[0-9]{2})\b"
)


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
        return _sglang(lines, str(path))
    if vllm:
        return _vllm(lines, str(path))
    engine = detect_engine("".join(lines[:200]))
    what = (
        f"a {engine} log without any batch or throughput line"
        if engine
        else "not an SGLang or vLLM server log"
    )
    raise UsageProblem(
        f"{path}: {what} (no 'Decode batch', 'Avg generation throughput' or engine start-up lines); "
        "give the log of the server that ran the requests"
    )


def _sglang(lines: list[str], path: str) -> dict:
    batches, args, capture, stamps = [], {}, None, []
    for line in lines:
        at = line.find("Decode batch")
        if at >= 0:
            batches.append(_fields(line[at + len("Decode batch") + 1 :]))
            stamps.append(stamp(line))
            continue
        if "cuda_graph" in line or "speculative_" in line:
            args.update(dict(_SG_ARG.findall(line)))
            bs = _SG_BS.search(line)
            if bs:
                capture = _ints(bs.group(1))
    running = [_int(b.get("#running-req")) for b in batches]
    graph = [b.get("cuda graph") for b in batches if "cuda graph" in b]
    by_graph = {
        flag: sorted(
            {r for r, b in zip(running, batches) if r is not None and b.get("cuda graph") == flag}
        )
        for flag in ("True", "False")
    }
    accept = _numbers(b.get("accept len") for b in batches)
    # the first decode interval holds the server's warm-up (SGLang's first request, its graphs'
    # first replays): it counts for no throughput figure when others follow
    measured = batches[1:] if len(batches) > 1 else batches
    tput = _numbers(b.get("gen throughput (token/s)") for b in measured)
    max_bs = _int(args.get("cuda_graph_max_bs"))
    speculative = bool(accept) or args.get("speculative_algorithm", "None").strip("'") not in (
        "None",
        "",
    )
    return {
        "engine": "sglang",
        "path": path,
        "decode_lines": len(batches),
        "speculative": speculative,
        "graph_lines": len(graph),
        "graph_true": graph.count("True"),
        "graph_batch_sizes": by_graph["True"],
        "eager_batch_sizes": by_graph["False"],
        "batch_sizes": dict(Counter(r for r in running if r is not None)),
        "capture_sizes": capture,
        "max_capture_size": max_bs or (max(capture) if capture else None),
        "graphs_disabled": args.get("disable_cuda_graph") == "True",
        "tokens_per_cycle": _mean(accept),
        "tokens_per_cycle_values": len(accept),
        "accept_rate": _mean(_numbers(b.get("accept rate") for b in batches)),
        "per_position": [],
        "gen_tokens_per_s": _median(tput),
        **_throughputs(
            running[len(batches) - len(measured) :],
            [_number(b.get("gen throughput (token/s)")) for b in measured],
        ),
        "speculative_algorithm": args.get("speculative_algorithm", "").strip("'") or None,
        "tp": _int(args.get("tp_size")),
        "downgrades": [],
        "logged_span": _span(stamps),
    }


def _vllm(lines: list[str], path: str) -> dict:
    tput, running, means, positions, rates, downgrades = [], [], [], [], [], []
    stages, stamps = [], []
    mode = sizes = spec = tp = eager = None
    v0 = None  # the last V0 line's cumulative counts (the whole run so far)
    interval = {
        "Accepted": 0,
        "Drafted": 0,
        "lines": 0,
    }  # V1 lines without a mean acceptance length
    for line in lines:
        if "Avg generation throughput" in line:
            m = _VLLM_TPUT.search(line)
            if m and float(m.group(1)) > 0:
                tput.append(float(m.group(1)))
                running.append(int(m.group(2)))
                stamps.append(stamp(line))
        elif "SpecDecoding metrics" in line or "Speculative metrics" in line:
            m = _VLLM_MEAN.search(line)
            if m:
                means.append(float(m.group(1)))
            rates_at = _per_position(line)
            if rates_at:
                positions.append(rates_at)
            r = _VLLM_RATE.search(line)
            if r:
                rates.append(float(r.group(1)) / (100.0 if r.group(2) else 1.0))
            counts = {k.lower(): int(v) for k, v in _V0_COUNT.findall(line)}
            if {"speculative", "draft", "emitted"} <= counts.keys():
                v0 = counts
            elif not m:
                for key, value in _V1_COUNT.findall(line):
                    interval[key] += int(value)
                interval["lines"] += 1
        elif "SpecDecodeWorker stage times" in line:
            m = _V0_STAGES.search(line)
            if m:
                stages.append(tuple(float(v) for v in m.groups()))
        elif "cudagraph_mode" in line and (
            "setting cudagraph_mode" in line or "Overriding cudagraph_mode" in line
        ):
            m = _VLLM_DOWNGRADE.search(line)
            downgrades.append(
                {"to": (m.group(1) or m.group(2)) if m else None, "line": _clip(line)}
            )
        if (
            "cudagraph_mode" in line
            or "num_spec_tokens" in line
            or "cudagraph_capture_sizes" in line
        ):
            mode = _first(_VLLM_MODE, line) or mode
            found = _VLLM_SIZES.search(line)
            sizes = _ints(found.group(1)) if found else sizes
            spec = _int(_first(_VLLM_SPEC, line)) or spec
            tp = _int(_first(_VLLM_TP, line)) or tp
            eager = _first(_VLLM_EAGER, line) or eager
    per_position = [statistics.fmean(col) for col in zip(*positions)] if positions else []
    spec = spec or (v0["speculative"] if v0 else None)
    accept_len, accept_values, how = _mean(means), len(means), None
    if accept_len is None and v0 and v0["draft"]:
        # tokens per verify step: emitted / (drafted / k), the bonus token included (V0's counts are cumulative)
        accept_len, accept_values, how = (
            v0["emitted"] * v0["speculative"] / v0["draft"],
            1,
            "V0 counts",
        )
    elif accept_len is None and interval["Drafted"] and spec:
        accept_len, accept_values, how = (
            1.0 + interval["Accepted"] * spec / interval["Drafted"],
            interval["lines"],
            "accepted and drafted counts",
        )
    if v0:
        rates = rates[-1:]  # cumulative: the last line holds the whole run
    speculative = bool(means) or bool(spec) or bool(rates) or v0 is not None or bool(stages)
    return {
        "engine": "vllm",
        "path": path,
        "decode_lines": len(tput),
        "speculative": speculative,
        "graph_lines": 0,
        "graph_true": 0,
        "batch_sizes": dict(Counter(running)),
        "capture_sizes": sizes,
        "max_capture_size": max(sizes) if sizes else None,
        "graphs_disabled": eager == "True" or mode == "NONE",
        "cudagraph_mode": mode,
        "tokens_per_cycle": accept_len,
        "tokens_per_cycle_values": accept_values,
        "tokens_per_cycle_from": how,
        "accept_rate": _mean(rates),
        "per_position": per_position,
        "gen_tokens_per_s": _median(tput),
        **_throughputs(running, tput),
        "num_spec_tokens": spec,
        "tp": tp,
        "downgrades": downgrades,
        "stage_times": (
            {
                "lines": len(stages),
                "draft_ms_per_token": _median([s[0] for s in stages]),
                "verify_ms": _median([s[1] for s in stages]),
                "accept_ms": _median([s[2] for s in stages]),
            }
            if stages
            else None
        ),
        "logged_span": _span(stamps),
    }


def stamp(line: str) -> str | None:
    """When the engine logged `line`: `2025-10-22 10:27:56`, or `09-09 11:51:35` where the line
    names no year (vLLM); None without a time."""
    head = line[:120]
    full = _FULL_STAMP.search(head)
    if full:
        return f"{full.group(1)} {full.group(2)}"
    short = _VLLM_STAMP.search(head)
    return f"{short.group(1)} {short.group(2)}" if short else None


def _span(stamps: list[str | None]) -> dict | None:
    """The first and last time the engine logged a decode (or throughput) line: when it served."""
    known = [s for s in stamps if s]
    return {"first": known[0], "last": known[-1], "lines": len(known)} if known else None


def load_server_logs(paths) -> RunSet:
    logs = [read_log(p) for p in paths]
    engines = {log["engine"] for log in logs}
    if len(engines) > 1:
        raise UsageProblem(
            "these server logs come from different engines (SGLang and vLLM); give one run's logs"
        )
    runs = [to_run(log) for log in logs]
    config = {"engine": logs[0]["engine"], "tp": logs[0].get("tp"), "device": "cuda"}
    k = logs[0].get("num_spec_tokens") or _int(logs[0].get("speculative_num_steps"))
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
    if log["engine"] == "vllm" and log.get("cudagraph_mode"):
        notes.append(
            f"vLLM's engine config says cudagraph_mode {log['cudagraph_mode']}: the mode it started with; "
            "which steps replayed a graph is not in the log"
        )
    return notes


def add_log_to_profile(runset: RunSet, paths) -> None:
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


def _fields(text: str) -> dict[str, str]:
    """`#running-req: 1, #token: 108, cuda graph: True, ...` as a dict (split, never backtracked)."""
    out = {}
    for part in text.split(","):
        key, sep, value = part.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _per_position(line: str) -> list[float]:
    """vLLM's `Per-position acceptance rate: 0.919, 0.788, Avg ...`: the numbers up to the next field."""
    at = line.find("Per-position acceptance rate:")
    if at < 0:
        return []
    values = []
    for item in line[at + len("Per-position acceptance rate:") :].split(","):
        value = _number(item.strip())  # nan, inf, `0.9²` end the list too
        if value is None:
            break
        values.append(value)
    return values


def _throughputs(running, values) -> dict:
    """Generation throughput per logging interval, by batch size: the median (what the log ran at)
    and every interval's value (its repeats, which the noise rule weighs), plus all of them."""
    groups: dict[int, list[float]] = {}
    for r, v in zip(running, values):
        if r is not None and v is not None:
            groups.setdefault(r, []).append(float(v))
    return {
        "tokens_per_s_by_batch": {r: statistics.median(v) for r, v in sorted(groups.items())},
        "tokens_per_s_values_by_batch": dict(sorted(groups.items())),
        "tokens_per_s_values": [float(v) for v in values if v is not None],
    }


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.replace(" ", "").split(",") if is_digits(x)]


def _int(text) -> int | None:
    if isinstance(text, int):
        return text
    text = str(text or "").strip("'")
    return int(text) if is_digits(text) else None  # ASCII only: `²`.isdigit() is true


def _number(text: str | None) -> float | None:
    """A logged field's number, strictly (`ncclprobe.numbers`); None for anything else (`1²0`)."""
    try:
        return None if text is None else parse_float(text, "a logged value", min=0)
    except UsageProblem:
        return None


def _numbers(texts) -> list[float]:
    return [v for v in map(_number, texts) if v is not None]


def _first(pattern, line):
    m = pattern.search(line)
    return m.group(1) if m else None


def _mean(values):
    return statistics.fmean(values) if values else None


def _median(values):
    return statistics.median(values) if values else None


def _clip(line: str) -> str:
    return line.strip()[:300]
