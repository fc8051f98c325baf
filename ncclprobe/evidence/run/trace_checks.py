"""What is computed over an engine trace's runs (`trace.py` is its schema, loader and view): the
self-checks any reader can rely on and run-engine's exit code from them, the verify/decode ratio
that links a speculative run to its baseline, and the merges that join several traces.

Kept apart from the loader because these are the writer's side: `engine/runner.py` assembles a
trace from the workers' reports with `finish`; `run-engine --tuned` joins the untuned and tuned
traces with `merge_tuned` and takes its exit code from `verdict`; `report --trace A --trace B`
draws several side by side with `side_by_side`. diagnose and recommend read what these wrote.
"""

from __future__ import annotations

from pathlib import Path

from ncclprobe import stats
from ncclprobe.evidence.run.modes import Label, Mode
from ncclprobe.evidence.run.trace import MODES, load_trace
from ncclprobe.nccl.values import reads_the_same
from ncclprobe.verdict import Verdict


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


def _change(before: float | None, after: float | None) -> float | None:
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
