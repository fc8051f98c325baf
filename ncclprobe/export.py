"""Our results in other tools' formats: nccl-tests' text tables, and the CSV NCCL's optimizer reads.

nccl-tests text (what people paste into issues): one table per (collective, configuration, mode,
op, dtype), in the current format (root and #wrong columns, src/util.cu `writeResultHeader`), each
opened by `# Collective test starting: NAME_perf` so a file of several tables splits back into runs,
and by one `# ncclprobe export: {...}` line holding what nccl-tests would have printed elsewhere
(rank count, mode, settings): `ncclprobe import` reads it back. Numbers use nccl-tests' widths (time
7 characters, bandwidths 6, two decimals until they do not fit). A placement not measured is `N/A`.

The performance CSV is the input of NCCL's tuner optimizer, `plugins/tuner/example/scripts/
optimize_config.py` (NVIDIA/nccl, read at 2def28be; format in its README at 1de1137c and
`sample_performance_data.csv`): `collective,size_bytes,algorithm,protocol,channels,nodes,ranks,
pipeOps,regBuff,cost_metric,bandwidth_gbps,latency_us`, lowercase names (allreduce, ring, ll128),
-1 for "any". It picks the lowest latency_us per size range by default and skips rows whose metric
is missing, so every row carries all three metrics (cost_metric = latency_us; bandwidth_gbps =
busbw). A row needs one algorithm and one protocol: from the configuration's settings, else from
NCCL's own TUNING choice in the sweep's proof; results that give neither, unchecked or not-ok
results, and configurations recommend refuses (LL128 without NVLink, gloo or --share-gpu timings)
are left out, each said on stderr.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field

from ncclprobe.nccl.names import TUNER_ALGORITHMS, TUNER_COLLECTIVES, TUNER_PROTOCOLS
from ncclprobe.probes.collectives import COLLECTIVES
from ncclprobe.probes.collectives.base import DTYPES
from ncclprobe.recommend.load import node_of
from ncclprobe.recommend.safety import SafetyPolicy, refusals, timing_caveat
from ncclprobe.records import ResultRecord, ResultsFile, Status
from ncclprobe.verdict import Verdict

PERF_COLUMNS = (
    "collective",
    "size_bytes",
    "algorithm",
    "protocol",
    "channels",
    "nodes",
    "ranks",
    "pipeOps",
    "regBuff",
    "cost_metric",
    "bandwidth_gbps",
    "latency_us",
)
TESTS_TYPES = {name: d.tests_name for name, d in DTYPES.items()}


@dataclass
class Exported:
    text: str
    left_out: list[str] = field(default_factory=list)
    rows: int = 0  # measurements exported (tables' rows, CSV rows)

    def verdict(self) -> Verdict:
        """FINDINGS when nothing could be exported (every result left out): a header alone is no
        export, and exit 0 would say it worked."""
        return Verdict.of(self.rows == 0)


def nccl_tests_text(files: list[ResultsFile]) -> Exported:
    blocks = []
    for f in files:
        groups: dict[tuple, list[ResultRecord]] = {}
        for r in f.results:
            groups.setdefault((r.collective, r.config_id, r.mode, r.op, r.dtype), []).append(r)
        configs = {c["config_id"]: c for c in f.configs}
        for key, records in groups.items():
            blocks.append(_table(f, key, records, configs.get(key[1], {})))
    return Exported("\n".join(blocks), rows=sum(len(f.results) for f in files))


def _table(f: ResultsFile, key: tuple, records: list[ResultRecord], config: dict) -> str:
    collective, cid, mode, op, dtype = key
    spec = f.header.get("spec") or {}
    params = f.header.get("params") or {}
    meta = {
        "collective": collective,
        "config_id": cid,
        "settings": records[0].settings,
        "mode": mode,
        "op": op,
        "dtype": dtype,
        "nranks": f.header.get("nranks"),
        "source": f.path,
        "kind": f.header.get("kind"),
        "status": config.get("status"),
    }
    sizes = sorted({r.size_bytes for r in records})
    iters = spec.get("iters", params.get("iters", 0))
    lines = [
        f"# ncclprobe export: {json.dumps(meta, sort_keys=True)}",
        f"# Collective test starting: {collective}_perf",
        f"# nThread 1 nGpus 1 minBytes {sizes[0]} maxBytes {sizes[-1]} step: as measured warmup iters: "
        f"{spec.get('warmup', params.get('warmup', 0))} iters: {iters} agg iters: {spec.get('agg', 1)} "
        f"validation: {int(all(_checked(r) for r in records))} "
        f"graph: {1 if mode == 'graph' else 0}",
        "#",
        "#" + " " * 62 + "out-of-place                       in-place",
        f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>7}  {'algbw':>6}  "
        f"{'busbw':>6}  {'#wrong':>6}  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}",
        f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  "
        f"{'(GB/s)':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}",
    ]
    busbw: list[float] = []
    wrong = 0
    for size in sizes:
        at = {bool(r.in_place): r for r in records if r.size_bytes == size}
        first = at.get(False) or at[True]
        redop = op if op and op != "none" else "none"
        root = first.root if first.root is not None else -1
        line = (
            f"{size:>12}  {first.count or 0:>12}  {TESTS_TYPES.get(dtype, dtype):>8}  {redop:>6}  "
            f"{root:>6}"
        )
        for in_place in (False, True):
            r = at.get(in_place)
            line += _cells(r)
            if r and r.busbw_gbps is not None:
                busbw.append(r.busbw_gbps)
                wrong += r.wrong or 0
        lines.append(line)
    average = sum(busbw) / len(busbw) if busbw else 0.0
    lines += [
        f"# {'Out of bounds values':<20} : {wrong} {'FAILED' if wrong else 'OK'}",
        f"# {'Avg bus bandwidth':<20} : {average:g}",
        "#",
        f"# Collective test concluded: {collective}_perf",
        "",
    ]
    return "\n".join(lines)


def _checked(r: ResultRecord) -> bool:
    """Whether its elements were checked (older records say so only by a `wrong` count)."""
    return r.checked if r.checked is not None else r.wrong is not None


def _cells(r: ResultRecord | None) -> str:
    if r is None or r.time_us is None:
        return f"  {'N/A':>7}  {'N/A':>6}  {'N/A':>6}  {'N/A':>6}"
    check = "N/A" if r.wrong is None else f"{r.wrong:g}"
    return (
        f"  {fit(r.time_us, 7)}  {fit(r.algbw_gbps or 0.0, 6)}  {fit(r.busbw_gbps or 0.0, 6)}"
        f"  {check:>6}"
    )


def fit(value: float, width: int) -> str:
    """nccl-tests' number cells: two decimals, fewer when they do not fit, an exponent last."""
    for form in ("{:>{w}.2f}", "{:>{w}.1f}", "{:>{w}.0f}"):
        text = form.format(value, w=width)
        if len(text) <= width:
            return text
    return (
        "{:>{w}.1e}".format(value, w=width) if width >= 7 else "{:>{w}.0e}".format(value, w=width)
    )


def perf_csv(
    files: list[ResultsFile], *, mode: str = "eager", allow_ll128: bool = False
) -> Exported:
    """Rows for NCCL's optimize_config.py, out of place (nccl-tests' usual figure), one mode."""
    headers = [f.header for f in files]
    policy = SafetyPolicy(
        node=node_of(files), allow_ll128=allow_ll128, timing_caveat=timing_caveat(headers)
    )
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(PERF_COLUMNS)
    left_out: dict[str, None] = {}
    written = 0
    for f in files:
        tuning: dict[str, list] = {}
        for c in f.configs:  # one config record per configuration, but merge if a file repeats one
            tuning.setdefault(c["config_id"], []).extend((c.get("proof") or {}).get("tuning") or [])
        nodes = "-1" if "collected_at" in f.header else "1"
        for r in f.results:
            row = _perf_row(r, tuning.get(r.config_id, []), nodes, policy, mode, left_out)
            if row:
                writer.writerow(row)
                written += 1
    return Exported(buf.getvalue(), list(left_out), rows=written)


def _perf_row(
    r: ResultRecord,
    tuning: list,
    nodes: str,
    policy: SafetyPolicy,
    mode: str,
    left_out: dict[str, None],
) -> list | None:
    coll = TUNER_COLLECTIVES.get(r.collective or "")
    if r.mode != mode or r.in_place:
        return None
    why = None
    if coll is None:
        why = f"{r.collective}: NCCL's tuner does not choose for it (point-to-point)"
    elif r.status != Status.OK or not r.time_us or r.wrong is None:
        why = f"{r.config_id}: results that are not ok and checked"
    else:
        reasons = refusals(r.settings, correctness_checked=(r.wrong == 0), policy=policy)
        why = f"{r.config_id}: {reasons[0]}" if reasons else None
    if why:
        left_out.setdefault(why, None)
        return None
    choice = _choice(r, tuning)
    if isinstance(choice, str):
        left_out.setdefault(choice, None)
        return None
    settings = r.settings
    channels = (
        settings.get("NCCL_MAX_NCHANNELS")
        if settings.get("NCCL_MAX_NCHANNELS") == settings.get("NCCL_MIN_NCHANNELS")
        else None
    )
    return [
        coll,
        r.size_bytes,
        choice[0],
        choice[1],
        channels or "-1",
        nodes,
        r.nranks or -1,
        "-1",
        "-1",
        f"{r.time_us:.6g}",
        f"{r.busbw_gbps or 0.0:.6g}",
        f"{r.time_us:.6g}",
    ]


def _choice(r: ResultRecord, tuning: list) -> tuple[str, str] | str:
    """(algorithm, protocol): the settings' single values, else NCCL's TUNING choice at this size."""
    settings = r.settings
    algo = TUNER_ALGORITHMS.get(str(settings.get("NCCL_ALGO", "")).strip().lower())
    proto = TUNER_PROTOCOLS.get(str(settings.get("NCCL_PROTO", "")).strip().lower())
    coll, n = COLLECTIVES.get(r.collective or ""), r.nranks or 1
    seen = [
        t
        for t in tuning
        if coll
        and _same(t, coll.nccl_name)
        and coll.tuning_size(int(t.get("size_bytes") or t.get("bytes") or -1), n) == r.size_bytes
    ]
    algo = algo or _one({TUNER_ALGORITHMS.get(str(t.get("algo", "")).lower()) for t in seen})
    proto = proto or _one({TUNER_PROTOCOLS.get(str(t.get("proto", "")).lower()) for t in seen})
    if algo and proto:
        return algo, proto
    missing = " and ".join(
        name for name, value in (("algorithm", algo), ("protocol", proto)) if not value
    )
    return (
        f"{r.config_id} ({r.collective}): no single {missing} known (its settings fix none, and "
        "NCCL logged no TUNING choice at its sizes: one rank, or a log without TUNING)"
    )


def _same(entry: dict, nccl_name: str) -> bool:
    """A TUNING entry of this collective (2.20-2.22 lines name none: they count for any)."""
    name = str(entry.get("collective") or "")
    return not name or name.lower() == nccl_name.lower()


def _one(values: set) -> str | None:
    return values.pop() if len(values) == 1 and None not in values else None
