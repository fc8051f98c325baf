"""run-engine's engine trace as a table and its notes (`ncclprobe run-engine`'s output), beside
the trace's schema (`trace.py`): one row per run, the columns in order of importance; the notes
give the configuration, the loop-efficiency arithmetic with the run's own numbers, the prompts and
what each mode generated, what --tuned applied, whether the settings reached every worker and what
NCCL read, the greedy check. The CLI renders these; it reads no key of the trace itself.
"""

from __future__ import annotations

import json


def _median(run: dict, phase: str) -> float | None:
    return (run["phases"].get(phase) or {}).get("median_ms")


def table_rows(doc: dict) -> list[dict]:
    """One row per run, the columns in order of importance (a narrow terminal keeps the first)."""
    rows = []
    for run in doc["runs"]:
        spread = (run.get("repeats") or {}).get("spread")
        rows.append(
            {
                "label": run["label"],
                "mode": run["mode"],
                "tokens_per_s": run["tokens_per_s"],
                "tok_s_spread": f"{spread:.0%}" if spread is not None else None,
                "accept_len": run["acceptance"]["mean_length"],
                "verify_decode": run["verify_decode_ratio"],
                "decode_ms": _median(run, "decode"),
                "verify_ms": _median(run, "verify"),
                "draft_ms": _median(run, "draft"),
                "loop_eff": (run.get("loop") or {}).get("efficiency"),
                "graph_coverage": run["graph_coverage"],
                "coll_share": run["collective_share"],
                "ms_per_token": run["ms_per_token"],
                "coll_per_token": run["collectives"]["per_token_count"],
                "coll_bytes_per_token": run["collectives"]["per_token_bytes"],
                "ideal_tok_s": (run.get("loop") or {}).get("ideal_tokens_per_s"),
            }
        )
    return rows


def loop_note(run: dict) -> str:
    """The loop-efficiency arithmetic with the run's own numbers, so a reader can check it."""
    loop = run["loop"]
    parts = " + ".join(f"{name} {ms:.3f}" for name, ms in loop["phase_ms_per_cycle"].items())
    return (
        f"{run['label']} loop: ideal = batch {loop['batch']} x {loop['mean_acceptance_length']:.2f} tokens/cycle / "
        f"({parts} = {loop['cycle_ms']:.3f} ms/cycle) = {loop['ideal_tokens_per_s']:.1f} tok/s; measured "
        f"{loop['measured_tokens_per_s']:.1f} -> efficiency {loop['efficiency']:.2f} = cycle time share "
        f"{loop['cycle_time_share']:.2f} (prefill {loop['prefill_ms']:.1f} ms and host {loop['host_ms']:.1f} ms "
        f"outside {loop['cycles']} cycles) x token yield {loop['token_yield']:.2f} (tokens past --new-tokens, "
        f"finished sequences)"
    )


TEXT_SHOWN = 4  # sequences whose text the table shows (the JSON holds every one)
TEXT_CHARS = 400


def _quoted(text: str) -> str:
    quoted = json.dumps(text, ensure_ascii=False)
    return quoted if len(quoted) <= TEXT_CHARS else quoted[:TEXT_CHARS] + '..."'


def text_notes(doc: dict) -> list[str]:
    """The prompts and what each mode generated, as text (newlines escaped), for the first few
    sequences of the first label's runs: a mode whose text equals the baseline's says so."""
    runs = [
        run for run in doc["runs"] if run.get("text") and run["label"] == doc["runs"][0]["label"]
    ]
    if not runs:
        return []
    prompts = doc["config"].get("prompts") or []
    notes = []
    for index in range(min(TEXT_SHOWN, len(runs[0]["text"]))):
        if index < len(prompts) and prompts[index].get("text") is not None:
            notes.append(f"prompt {index + 1}: {_quoted(prompts[index]['text'])}")
        first = runs[0]["text"][index]
        for run in runs:
            same = run is not runs[0] and run["text"][index] == first
            notes.append(
                f"  {run['mode']} {index + 1}: "
                + (f"same as {runs[0]['mode']}" if same else _quoted(run["text"][index]))
            )
    hidden = len(runs[0]["text"]) - TEXT_SHOWN
    return notes + (
        [f"text of {hidden} more sequence(s) in --format json and the trace"] if hidden > 0 else []
    )


def tuning_notes(doc: dict) -> list[str]:
    """What --tuned applied, then untuned against tuned. When the tuned run changed nothing that
    NCCL acts on (an empty recommendation, or gloo), its difference is run-to-run noise: say so,
    rather than let a percentage pass for the effect of tuning."""
    tuning = doc.get("tuning")
    if tuning is None:
        return []
    applied = ", ".join(f"{k}={v}" for k, v in sorted((tuning.get("settings") or {}).items()))
    if not applied:
        notes = [
            "tuned: the recommendation changes no setting, so the tuned runs repeat the untuned ones and "
            "the difference below is run-to-run noise"
        ]
    elif doc["config"].get("backend") == "gloo":
        notes = [
            f"tuned settings: {applied}; gloo does not use NCCL settings, so the difference below is "
            f"run-to-run noise"
        ]
    else:
        notes = [f"tuned settings: {applied}"]
    return notes + [
        f"tuned vs untuned, {row['mode']}: {row['untuned_tokens_per_s']:.1f} -> "
        f"{row['tuned_tokens_per_s']:.1f} tokens/s ({row['change_pct']:+.1f}%: "
        f"{(row.get('noise_rule') or {}).get('verdict', 'not judged')}, by the "
        f"{(row.get('noise_rule') or {}).get('basis', 'noise rule')})"
        for row in doc.get("comparison", [])
    ]


def speed_note(repeats: int) -> str:
    if repeats > 1:
        return (
            f"tokens_per_s and the phases are the median of {repeats} timed runs per mode; tok_s_spread = "
            "(fastest - slowest) / median: a difference inside it is noise"
        )
    return (
        "one timed run per mode: tokens_per_s has no spread and is no verdict on a shared machine "
        "(--repeats 3 gives median and spread)"
    )


def table_notes(doc: dict) -> list[str]:
    cfg = doc["config"]
    model = cfg["model"].get("name")
    notes = [
        f"{model}: tp={cfg['tp']} batch={cfg['batch']} k={cfg['k']} prompt={cfg['prompt_len']} "
        f"new={cfg['new_tokens']} T={cfg['temperature']} graphs={cfg['graphs']}"
        + (
            f" (batches {','.join(map(str, cfg['capture_batches']))})"
            if cfg.get("capture_batches")
            else ""
        )
        + (f" compiled ({cfg['compile']})" if cfg.get("compile") else "")
        + f" {cfg['dtype']} on {cfg['device']}",
        *(
            [
                f"batch {cfg['batch']} is not in the capture list: every step ran eagerly (graph coverage 0)"
            ]
            if cfg.get("capture_batches") and cfg["batch"] not in cfg["capture_batches"]
            else []
        ),
        "phase columns are medians in ms; accept_len = tokens per sequence per cycle (drafts kept + 1); "
        "loop_eff = tokens/s over the ideal from acceptance and phase times",
        speed_note(cfg.get("repeats") or 1),
    ]
    if cfg.get("weights"):
        notes.append(
            f"weights: {quantized_summary(cfg['weights'])}: the logits are the quantized model's"
        )
    notes += text_notes(doc)
    for run in doc["runs"]:
        if run["acceptance"]["histogram"]:
            notes.append(
                f"{run['label']} acceptance histogram (0..k drafts kept): {run['acceptance']['histogram']}"
            )
        if run.get("loop"):
            notes.append(loop_note(run))
    checks = doc["checks"]
    notes += tuning_notes(doc)
    for check in checks["settings"]:
        missing = [k for k, ok in check["received_by_every_worker"].items() if not ok]
        unread = [k for k, ok in check["read_by_nccl"].items() if ok is False]
        notes.append(
            f"{check['label']}/{check['mode']} settings: "
            + (
                f"NOT in every worker's environment: {', '.join(missing)}"
                if missing
                else "in every worker's environment"
            )
            + (
                f"; NCCL did NOT read: {', '.join(unread)}"
                if unread
                else (
                    "; NCCL reported reading them"
                    if any(v for v in check["read_by_nccl"].values())
                    else ""
                )
            )
        )
    if checks["greedy_match"] is not None:
        notes.append(
            "greedy speculative output equals the baseline: "
            + (
                "yes"
                if checks["greedy_match"]
                else f"NO (identical for the first {100 * checks['greedy_matched_prefix']:.0f}% of tokens)"
            )
        )
    if not checks["ranks_agree"]:
        notes.append("ranks produced DIFFERENT tokens")
    return notes


def quantized_summary(record: dict) -> str:
    """One line saying which weights were dequantized from which type, for tables and logs."""

    def short(name: str) -> str:
        return name.removeprefix("self_attn.").removeprefix("mlp.")

    parts = [
        f"{kind}{' (as stored)' if kind == 'F32' else ''} {', '.join(map(short, info['weights']))} "
        f"({info['tensors']} tensor{'' if info['tensors'] == 1 else 's'})"
        for kind, info in sorted(
            record["tensor_types"].items(), key=lambda item: -item[1]["tensors"]
        )
    ]
    return f"{record['file_name']} dequantized to float32 from " + "; ".join(parts)


def all_notes(doc: dict) -> list[str]:
    """The notes run-engine prints: the table's, then what the run was warned about before it ran."""
    return table_notes(doc) + [f"warning: {warning}" for warning in doc["warnings"]]
