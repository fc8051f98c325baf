"""What SGLang's and vLLM's server log lines say: each engine's lines read into one dict of
statistics (acceptance, throughput per batch size, graph use, capture sizes, when it served), which
`serverlog` turns into the normalized view.

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

Every line is matched by fixed-prefix searches and linear-time patterns, whatever its length; a
logged number is read strictly (`ncclprobe.numbers`), so `1²0` or `nan` is no number.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence

from ncclprobe.engine_facts.spec_logs import (
    SGLANG_ACCEPT_LEN,
    SGLANG_RUNNING,
    VLLM_ACCEPTED,
    VLLM_DRAFTED,
    VLLM_MEAN,
    aggregate,
)
from ncclprobe.errors import UsageProblem
from ncclprobe.numbers import is_digits, parse_float

_NUM = r"[0-9]{1,19}(?:\.[0-9]{1,19})?"  # bounded: int() fails past 4300 digits
_VLLM_TPUT = re.compile(
    r"Avg generation throughput: (" + _NUM + r") tokens/s, Running: ([0-9]{1,19}) reqs"
)
_VLLM_MEAN = re.compile(re.escape(VLLM_MEAN) + r": (" + _NUM + ")")
_VLLM_RATE = re.compile(r"(?:Avg )?Draft acceptance rate: (" + _NUM + ")(%?)")
# V0 (vLLM <= 0.7) prints cumulative counts; 0.5.x doubled the word: `Number of draft tokens tokens: 42272`
_V0_COUNT = re.compile(
    r"Number of (speculative|accepted|draft|emitted) tokens(?: tokens)?: ([0-9]{1,19})"
)
# V1 from 0.8 prints counts per logging interval: `Accepted: 262 tokens, Drafted: 295 tokens`
_V1_COUNT = re.compile(rf"\b({VLLM_ACCEPTED}|{VLLM_DRAFTED}): ([0-9]{{1,19}}) tokens\b")
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
_SG_DRAFT = re.compile(r"\bspeculative_draft_model_path='([^']{1,512})'")
# vLLM's `non-default args: {... 'speculative_config': {'method': 'eagle', 'model': '...', ...}}`
_VLLM_SPEC_CONFIG = re.compile(r"'speculative_config': \{([^{}]{0,2048})\}")
_VLLM_SPEC_FIELD = re.compile(r"'(method|model|num_speculative_tokens)': '?([^',}]{1,512})'?")
# when a line was logged: SGLang `[2025-10-22 10:27:56 TP0]` / `2025-12-04 20:35:53 INFO`, vLLM
# `INFO 09-09 11:51:35 [metrics.py:96]` (month and day only: the year is not in vLLM's lines)
_FULL_STAMP = re.compile(r"(?<![0-9])([0-9]{4}-[0-9]{2}-[0-9]{2}) ([0-9]{2}:[0-9]{2}:[0-9]{2})\b")
_VLLM_STAMP = re.compile(
    r"\b(?:DEBUG|INFO|WARNING|ERROR) ([0-9]{2}-[0-9]{2}) ([0-9]{2}:[0-9]{2}:[0-9]{2})\b"
)


def sglang_stats(lines: list[str], path: str) -> dict:
    batches, args, capture, stamps = [], {}, None, []
    for line in lines:
        at = line.find("Decode batch")
        if at >= 0:
            batches.append(_fields(line[at + len("Decode batch") + 1 :]))
            stamps.append(stamp(line))
            continue
        if "cuda_graph" in line or "speculative_" in line:
            args.update(dict(_SG_ARG.findall(line)))
            draft = _SG_DRAFT.search(line)
            if draft:
                args["speculative_draft_model_path"] = draft.group(1)
            bs = _SG_BS.search(line)
            if bs:
                capture = as_ints(bs.group(1))
    running = [as_int(b.get(SGLANG_RUNNING)) for b in batches]
    graph = [b.get("cuda graph") for b in batches if "cuda graph" in b]
    by_graph = {
        flag: sorted(
            {r for r, b in zip(running, batches) if r is not None and b.get("cuda graph") == flag}
        )
        for flag in ("True", "False")
    }
    accepted = [
        (length, as_int(b.get(SGLANG_RUNNING)))
        for b in batches
        if (length := as_number(b.get(SGLANG_ACCEPT_LEN))) is not None
    ]
    accept = [a for a, _ in accepted]
    # each line's `accept len` covers its own interval: weighed by the requests it ran
    # (engine_facts.spec_logs), never a plain mean of the lines
    acceptance = aggregate(accept, [r for _, r in accepted], "running requests")
    # the first decode interval holds the server's warm-up (SGLang's first request, its graphs'
    # first replays): it counts for no throughput figure when others follow
    measured = batches[1:] if len(batches) > 1 else batches
    tput = _numbers(b.get("gen throughput (token/s)") for b in measured)
    max_bs = as_int(args.get("cuda_graph_max_bs"))
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
        "tokens_per_cycle": acceptance.value,
        "tokens_per_cycle_values": len(accept),
        "tokens_per_cycle_weighted_by": acceptance.weighted_by,
        "tokens_per_cycle_plain_mean": acceptance.plain_mean,
        "accept_rate": _mean(_numbers(b.get("accept rate") for b in batches)),
        "per_position": [],
        "gen_tokens_per_s": _median(tput),
        **_throughputs(
            running[len(batches) - len(measured) :],
            [as_number(b.get("gen throughput (token/s)")) for b in measured],
        ),
        "speculative_algorithm": args.get("speculative_algorithm", "").strip("'") or None,
        "speculative_num_steps": as_int(args.get("speculative_num_steps")),
        "speculative_eagle_topk": as_int(args.get("speculative_eagle_topk")),
        "speculative_num_draft_tokens": as_int(args.get("speculative_num_draft_tokens")),
        "speculative_draft_model_path": args.get("speculative_draft_model_path"),
        "tp": as_int(args.get("tp_size")),
        "downgrades": [],
        "logged_span": _span(stamps),
    }


def vllm_stats(lines: list[str], path: str) -> dict:
    tput, running, means, positions, rates, downgrades = [], [], [], [], [], []
    weights: list[int | None] = []  # each interval's drafted tokens (its weight)
    stages, stamps = [], []
    mode = sizes = spec = tp = eager = None
    spec_config: dict[str, str] = {}
    v0 = None  # the last V0 line's cumulative counts (the whole run so far)
    interval = {
        VLLM_ACCEPTED: 0,
        VLLM_DRAFTED: 0,
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
            drafted = dict(_V1_COUNT.findall(line)).get(VLLM_DRAFTED)
            weight = int(drafted) if drafted is not None else None
            if m:
                means.append(float(m.group(1)))
                weights.append(weight)
            rates_at = _per_position(line)
            if rates_at:
                positions.append((rates_at, weight))
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
        if "'speculative_config'" in line:
            found = _VLLM_SPEC_CONFIG.search(line)
            spec_config = dict(_VLLM_SPEC_FIELD.findall(found.group(1))) if found else spec_config
        if (
            "cudagraph_mode" in line
            or "num_spec_tokens" in line
            or "cudagraph_capture_sizes" in line
        ):
            mode = _first(_VLLM_MODE, line) or mode
            found = _VLLM_SIZES.search(line)
            sizes = as_ints(found.group(1)) if found else sizes
            spec = as_int(_first(_VLLM_SPEC, line)) or spec
            tp = as_int(_first(_VLLM_TP, line)) or tp
            eager = _first(_VLLM_EAGER, line) or eager
    per_position = _per_position_rates(positions)
    spec = spec or (v0["speculative"] if v0 else None)
    # each line's mean covers its own interval: weighed by its drafts (engine_facts.spec_logs)
    acceptance = aggregate(means, weights, "drafted tokens")
    accept_len, accept_values, how = acceptance.value, len(means), None
    if accept_len is None and v0 and v0["draft"]:
        # tokens per verify step: emitted / (drafted / k), the bonus token included (V0's counts are cumulative)
        accept_len, accept_values, how = (
            v0["emitted"] * v0["speculative"] / v0["draft"],
            1,
            "V0 counts",
        )
    elif accept_len is None and interval[VLLM_DRAFTED] and spec:
        accept_len, accept_values, how = (
            1.0 + interval[VLLM_ACCEPTED] * spec / interval[VLLM_DRAFTED],
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
        "tokens_per_cycle_weighted_by": acceptance.weighted_by,
        "tokens_per_cycle_plain_mean": acceptance.plain_mean,
        "accept_rate": _mean(rates),
        "per_position": per_position,
        "gen_tokens_per_s": _median(tput),
        **_throughputs(running, tput),
        "num_spec_tokens": spec or as_int(spec_config.get("num_speculative_tokens")),
        "speculative_algorithm": spec_config.get("method"),
        "speculative_draft_model_path": spec_config.get("model"),
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
        value = as_number(item.strip())  # nan, inf, `0.9²` end the list too
        if value is None:
            break
        values.append(value)
    return values


def _per_position_rates(positions: list[tuple[list[float], int | None]]) -> list[float]:
    """Each draft position's acceptance rate over the run: every interval's rate weighed by its
    drafts, as the acceptance length is (`engine_facts.spec_logs`), so that 1 + the rates' sum is
    that length; the plain mean only where an interval's count is missing, as there. Positions
    only some intervals print (k changed mid-log) are left out: no rate of the whole run exists."""
    if not positions:
        return []
    depth = min(len(rates) for rates, _ in positions)
    weights = [weight for _, weight in positions]
    return [
        value
        for i in range(depth)
        if (value := aggregate([rates[i] for rates, _ in positions], weights, "drafts").value)
        is not None
    ]


def _throughputs(running: Sequence[int | None], values: Sequence[float | None]) -> dict:
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


def as_ints(text: str) -> list[int]:
    return [int(x) for x in text.replace(" ", "").split(",") if is_digits(x)]


def as_int(text: object) -> int | None:
    if isinstance(text, int):
        return text
    text = str(text or "").strip("'")
    return int(text) if is_digits(text) else None  # ASCII only: `²`.isdigit() is true


def as_number(text: str | None) -> float | None:
    """A logged field's number, strictly (`ncclprobe.numbers`); None for anything else (`1²0`)."""
    try:
        return None if text is None else parse_float(text, "a logged value", min=0)
    except UsageProblem:
        return None


def _numbers(texts: Iterable[str | None]) -> list[float]:
    return [v for v in map(as_number, texts) if v is not None]


def _first(pattern: re.Pattern[str], line: str) -> str | None:
    m = pattern.search(line)
    return m.group(1) if m else None


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _clip(line: str) -> str:
    return line.strip()[:300]
