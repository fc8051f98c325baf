"""Write a recommendation as something a user applies: shell exports, a tuner CSV, or JSON.

Every writer takes a `RecommendationSet` (one collective or several): the exports are the set's
combined environment, the tuner CSV holds one block of rows per collective (its `collective_type`
column), the JSON is the set's.

The tuner CSV is the configuration file of NCCL's example tuner plugin (plugins/tuner/example,
NCCL 2.27.5 and later; nccl-facts.md §4): `collective_type,min_bytes,max_bytes,algorithm,protocol,
channels,nNodes,nRanks,numPipeOps,regBuff`, bounds inclusive, `-1` a wildcard, `#` comments, the
first matching row wins and a size no row matches keeps NCCL's own choice. A row needs an
algorithm and a protocol; a measured configuration that set only one of them gets the other from
NCCL's own TUNING log in the sweep's proof, and is left out (with a comment) when that is unknown.
"""

from __future__ import annotations

import json
import math
import shlex

from ncclprobe.nccl.names import TUNER_ALGORITHMS, TUNER_COLLECTIVES, TUNER_PROTOCOLS
from ncclprobe.probes.collectives import COLLECTIVES
from ncclprobe.recommend.recommendation import Recommendation
from ncclprobe.recommend.select import NO_WINNER
from ncclprobe.records import short_label
from ncclprobe.sizes import format_size

EMIT_KINDS = ("env", "tuner-csv", "json")
TUNER_COLUMNS = (
    "collective_type",
    "min_bytes",
    "max_bytes",
    "algorithm",
    "protocol",
    "channels",
    "nNodes",
    "nRanks",
    "numPipeOps",
    "regBuff",
)
TUNER_LINE_MAX = 255  # plugin.c MAX_LINE_LENGTH 256, including the newline
TUNER_MAX_BYTES = 4294967295  # the example plugin's documented "covers all sizes" upper bound


def render(kind: str, recs) -> str:
    return {"env": env_snippet, "tuner-csv": tuner_csv, "json": json_text}[kind](recs)


def as_set(recs):
    """A RecommendationSet, from one Recommendation or a set."""
    if isinstance(recs, Recommendation):
        from ncclprobe.recommend.collectives import combine

        return combine([recs], {}, recs.min_gain)
    return recs


def json_text(recs) -> str:
    return json.dumps(as_set(recs).to_json(), indent=2, allow_nan=False) + "\n"


def env_snippet(recs) -> str:
    """A POSIX shell snippet: `source` it in the shell that launches the job."""
    recs = as_set(recs)
    first = recs.recs[0]
    names = ", ".join(f"{r.measurements.collective} ({r.measurements.mode})" for r in recs.recs)
    lines = [
        f"# ncclprobe recommend: NCCL settings for {names}, weighted by {first.workload.source}",
        f"# from: {' '.join(first.measurements.paths)}",
        f"# gains are relative to {first.against}",
    ]
    if not recs.change:
        lines.append(
            "# no change recommended: no single setting beat the baseline over this workload beyond the noise"
        )
        if any(not _is_baseline(r.config_id, rec) for rec in recs.recs for r in rec.ranges):
            lines.append(
                "# some size ranges do gain from another setting: --emit tuner-csv applies those per size"
            )
        lines += [
            f"export {name}={shlex.quote(value)}" for name, value in recs.env.items()
        ]  # a named baseline
    else:
        lines.append(f"# expected gain for this workload: {100 * recs.gain:.1f}%")
        lines += [f"export {name}={shlex.quote(value)}" for name, value in recs.env.items()]
    lines += [f"# {note}" for note in recs.conflicts + recs.notes]
    lines += ["#"] + [f"# {line}" for line in launch_notes(first)]
    return "\n".join(lines) + "\n"


def _is_baseline(cid: str, rec: Recommendation) -> bool:
    return cid in (rec.baseline_id, NO_WINNER, "default")


def launch_notes(
    rec: Recommendation, *, recommendation_file: str = "recommendation.json"
) -> list[str]:
    """How to apply the settings to SGLang and vLLM servers and check that the workers got them."""
    return [
        "Export these before launching: every NCCL worker process must inherit them, and NCCL reads",
        "most of them when the process creates its first communicator (some once per process).",
        "SGLang: source this file, then `python -m sglang.launch_server --tp N ...` in the same shell.",
        "vLLM: source this file, then `vllm serve MODEL --tensor-parallel-size N` in the same shell;",
        "  with Ray, set them on every node (ray start inherits the environment) or use runtime_env.",
        f"Verify the running workers: ncclprobe recommend ... --emit json --output {recommendation_file}",
        f"  then: ncclprobe env-check --pid SERVER_PID --expect-from {recommendation_file}",
    ]


def tuner_rows(rec: Recommendation) -> tuple[list[list[str]], list[str]]:
    """The CSV rows for every non-default size range, and comments for ranges left out."""
    rows, skipped = [], []
    coll = TUNER_COLLECTIVES.get(rec.measurements.collective)
    nranks = (
        str(rec.measurements.nranks) if rec.measurements.nranks and not _multi_node(rec) else "-1"
    )
    nnodes = "-1" if _multi_node(rec) else "1"
    bounds = _range_bounds([(r.min_size_bytes, r.max_size_bytes) for r in rec.ranges])
    for r, (lo, hi) in zip(rec.ranges, bounds):
        if r.config_id in ("default", NO_WINNER):
            continue
        span = f"{format_size(r.min_size_bytes)}..{format_size(r.max_size_bytes)}"
        choice = _algo_proto(rec, r.config_id, r.min_size_bytes, r.max_size_bytes)
        if coll is None or isinstance(choice, str):
            skipped.append(
                f"{span} {r.config_id}: {choice if coll else 'the tuner has no ' + rec.measurements.collective}"
            )
            continue
        rows.append(
            [coll, str(lo), str(hi), choice[0], choice[1], "-1", nnodes, nranks, "-1", "-1"]
        )
    return rows, skipped


def tuner_csv(recs) -> str:
    recs = as_set(recs)
    rows, skipped = [], []
    for rec in recs.recs:
        r, s = tuner_rows(rec)
        rows += r
        skipped += [
            f"{line} ({rec.measurements.collective})" if len(recs.recs) > 1 else line for line in s
        ]
    rec = recs.recs[0]
    measured = ", ".join(f"{r.measurements.collective} {r.measurements.mode}" for r in recs.recs)
    head = [
        "# NCCL example tuner plugin configuration, written by ncclprobe recommend",
        f"# measured: {measured}, {rec.measurements.nranks} ranks "
        + (
            "from a torchrun plan (node and rank counts not recorded: rows use -1)"
            if _multi_node(rec)
            else "on one node"
        )
        + f"; NCCL {rec.measurements.nccl_version or 'version unknown'}",
        "# Format: NCCL 2.27.5 and later (plugins/tuner/example; 10 fields, 8 and 9 also accepted).",
        "# Older NCCL ships an example plugin without a config file (2.21-2.26 only force ring/simple).",
        "# Load it: build libnccl-tuner-example.so from NCCL's plugins/tuner/example (make), then",
        "#   export NCCL_TUNER_PLUGIN=/path/to/libnccl-tuner-example.so",
        "#   export NCCL_TUNER_CONFIG_FILE=/path/to/this.csv   (default: nccl_tuner.conf in the CWD)",
        "# Bounds are inclusive bytes; -1 = any; the first matching row wins; sizes without a row keep",
        "# NCCL's own algorithm and protocol. Do not also set NCCL_PROTO/NCCL_ALGO to values that exclude",
        "# a row's choice: an excluded algorithm/protocol is IGNORE in the cost table and the row is skipped.",
        "# CAUTION channels: the example plugin's code (plugin.c, 2.28 and 2.30 trees) sets nChannels=1 before",
        "# matching, and NCCL caps the collective at a non-zero plugin value -- for rows with channels -1 and",
        "# for sizes no row matches alike (its README says -1 keeps NCCL's count; the code does not).",
        "# With NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING check 'TUNER/ExamplePlugin: Loaded config' and the",
        "# channel{Lo..Hi} ranges, and re-measure large sizes with the plugin loaded before keeping it.",
        "# " + ",".join(TUNER_COLUMNS),
    ]
    if not any(r.config_id not in ("default", NO_WINNER) for rec in recs.recs for r in rec.ranges):
        head.append("# no size range beat the baseline beyond the noise: no rows")
    elif not rows:
        head.append("# no row could be written: see why below")
    head += [f"# left out {line}" for line in skipped]
    # the plugin reads lines with fgets into 256 bytes: the rest of a longer comment would come
    # back as a separate, non-comment line and be parsed as a config
    lines = [
        line if len(line) < TUNER_LINE_MAX else line[: TUNER_LINE_MAX - 4] + "..." for line in head
    ]
    return "\n".join(lines + [",".join(row) for row in rows]) + "\n"


def _multi_node(rec: Recommendation) -> bool:
    """Results collected from a `sweep --torchrun-dir` plan ran on however many nodes the user
    launched; their headers record neither that nor the real world size, so tuner rows must not
    claim nNodes 1 or the planning host's rank count (rows that never match do nothing)."""
    return any("collected_at" in header for header in rec.measurements.headers)


def _range_bounds(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Measured ranges -> contiguous byte bounds: split between neighbours at the geometric mean,
    open the first range down to 0 and the last up to the plugin's maximum."""
    bounds: list[tuple[int, int]] = []
    for i, (_lo, hi) in enumerate(spans):
        start = 0 if i == 0 else bounds[-1][1] + 1
        end = TUNER_MAX_BYTES if i == len(spans) - 1 else int(math.sqrt(hi * spans[i + 1][0]))
        bounds.append((start, max(start, end)))
    return bounds


def _algo_proto(rec: Recommendation, cid: str, lo: int, hi: int) -> tuple[str, str] | str:
    """(algorithm, protocol) for the tuner, or the reason it cannot be told."""
    curve = rec.measurements.curves[cid]
    algo = _single(curve.settings.get("NCCL_ALGO"), TUNER_ALGORITHMS)
    proto = _single(curve.settings.get("NCCL_PROTO"), TUNER_PROTOCOLS)
    coll = COLLECTIVES.get(rec.measurements.collective)
    size = (
        (lambda t: coll.tuning_size(_tuning_bytes(t), rec.measurements.nranks or 1))
        if coll
        else _tuning_bytes
    )
    seen = [t for t in curve.tuning if lo <= size(t) <= hi and _same_collective(t, rec)]
    algo = algo or _agreed([TUNER_ALGORITHMS.get(str(t.get("algo", "")).lower()) for t in seen])
    proto = proto or _agreed([TUNER_PROTOCOLS.get(str(t.get("proto", "")).lower()) for t in seen])
    if algo and proto:
        return algo, proto
    missing = " and ".join(name for name, v in (("algorithm", algo), ("protocol", proto)) if not v)
    return (
        f"{short_label(curve.settings)} does not fix one {missing} and the sweep's proof has no "
        "single TUNING choice for these sizes"
    )


def _tuning_bytes(entry: dict) -> int:
    """The sweep's proof says `size_bytes`; the log parser's own entries say `bytes`."""
    return int(entry.get("size_bytes", entry.get("bytes")) or 0)


def _single(value: str | None, names: dict[str, str]) -> str | None:
    """`LL` -> `ll`; lists, exclusions and per-collective forms are not one choice."""
    if not value or any(ch in value for ch in ",^;:"):
        return None
    return names.get(value.strip().lower())


def _agreed(values: list[str | None]) -> str | None:
    distinct = set(values)
    return distinct.pop() if len(distinct) == 1 and None not in distinct else None


def _same_collective(entry: dict, rec: Recommendation) -> bool:
    name = str(entry.get("collective") or "").lower().replace("_", "")
    return not name or name == rec.measurements.collective.replace("_", "")
