"""Read the JSON that nccl-tests writes with `-J FILE` (versions 1-3: nccl-tests 2.17.3 to 2.19.6).

The schema, from nccl-tests src/util.cu (`jsonOutputInit`, `writeDeviceReport`,
`writeBenchmarkLine*`, `writePerIterReport`, `writeResultFooter`), checked against a file recorded
on the H200 (tests/fixtures/nccl_tests/allreduce_1x_h200_1rank_nccltests2.19.6_eager_J.json):

  version, start_time, args (argv, args[0] names the binary), env (the WHOLE environment of the
  run, "NAME=value" strings), nccl_version (NCCL_VERSION_CODE, 22809 = 2.28.9),
  config {nthreads, ngpus, minimum_bytes, maximum_bytes, step_factor|step_bytes, warmup_iters,
          iterations, aggregated_iterations, validation, graph, blocking_collectives,
          per_iter_timing, per_iter_skip, parallel_init, devices [{rank, group, pid, hostname,
          device, device_hex, device_info}]}   (MPI builds list every process's devices),
  results [{size, count, type, redop, root (a "%6i" string), out_of_place|in_place
           {time | cpu_time (with -C 1), alg_bw, bus_bw, nwrong (null with -c 0)} or null,
           out_of_place_per_iter|in_place_per_iter {min_us, max_us, avg_us, p50_us, p95_us, p99_us,
           stdev_us, cv_pct, times_us, ...} (with -I 1), actual_iterations, experiment_name}],
  out_of_bounds {count, okay}, average_bus_bandwidth {bandwidth, okay}, errors, end_time.
A double that is NaN is written as the string "nan".

Earlier versions of the format (JSON_FILE_VERSION in src/util.cu, read at each tag): 1 (nccl-tests
2.17.3-2.19.1) has no per-iteration objects, no per_iter_* config keys, and up to 2.18 spells the
footer `average_bus_bandwidith {bandwidith}`; 2 (2.19.3-2.19.5) adds the per-iteration objects
without skipped_iterations; 3 (2.19.6) adds skipped_iterations and per_iter_skip. All three read here.

Only the NCCL variables of `env` become the run's settings; the header keeps the variables that
decide what NCCL and torch do (envcheck's families), every value through envcheck's masking
(`display_value`), never the rest of the environment.
"""

from __future__ import annotations

import math
from typing import Any

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.nccl.nccl_tests_run import (
    Measurement,
    NcclTestsRun,
    Row,
    collective_of_binary,
    nccl_settings,
    nccl_version_of_code,
)
from ncclprobe.numbers import is_digits
from ncclprobe.secrets import display_value, is_relevant, mask_env
from ncclprobe.sizes import MAX_SIZE
from ncclprobe.validate import loads_json

READ_VERSIONS = (1, 2, 3)


def looks_like_json(text: str) -> bool:
    head = text.lstrip()[:4096]
    return (
        head.startswith("{")
        and '"results"' in text
        and ('"nccl_version"' in head or '"config"' in head)
    )


def parse_nccl_tests_json(text: str, source: str = "the file") -> NcclTestsRun:
    doc = loads_json(text, source)  # the one JSON policy: no NaN, no key twice, one document
    if (
        not isinstance(doc, dict)
        or not isinstance(doc.get("results"), list)
        or not isinstance(doc.get("config"), dict)
    ):
        raise UsageProblem(
            f"{source} is JSON but not nccl-tests -J output (no `config` object and `results` list)"
        )
    if doc.get("version") not in READ_VERSIONS:
        raise UsageProblem(
            f"{source}: nccl-tests JSON version {doc.get('version')!r}; this ncclprobe reads "
            f"{', '.join(map(str, READ_VERSIONS))} (nccl-tests 2.17.3 to 2.19.6)"
        )
    config = doc["config"]
    env = _environment(doc.get("env"), source)
    run = NcclTestsRun(rows=[], nranks=None, collective=None, format="json")
    run.params = _params(config)
    devices = config.get("devices") if isinstance(config.get("devices"), list) else []
    run.devices = [_device(d) for d in devices if isinstance(d, dict)]
    run.nranks = len(run.devices) or None
    run.nccl_version = _version(doc.get("nccl_version"))
    args = doc.get("args") if isinstance(doc.get("args"), list) else []
    run.collective = collective_of_binary(str(args[0])) if args else None
    run.settings = mask_env(nccl_settings(env))  # a value shaped like a secret is masked here too
    run.env = {k: display_value(k, v) for k, v in sorted(env.items()) if is_relevant(k)}
    run.rows = [_row(r, i, source) for i, r in enumerate(doc["results"])]
    out_of_bounds = doc.get("out_of_bounds")
    run.out_of_bounds = (
        _int(out_of_bounds.get("count")) if isinstance(out_of_bounds, dict) else None
    )
    average = (
        doc.get("average_bus_bandwidth") or doc.get("average_bus_bandwidith") or {}
    )  # version 1's spelling
    run.avg_busbw_gbps = (
        _float(average.get("bandwidth", average.get("bandwidith")))
        if isinstance(average, dict)
        else None
    )
    listed = doc.get("errors")
    errors = (
        [e for e in listed if isinstance(e, str) and e.strip()] if isinstance(listed, list) else []
    )
    run.notes += [f"nccl-tests reported: {e}" for e in errors]
    if not run.rows:
        raise UsageProblem(f"{source}: nccl-tests JSON without result rows")
    return run


def _environment(entries: object, source: str) -> dict[str, str]:
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise UsageProblem(f"{source}: `env` is not a list of NAME=value strings")
    env = {}
    for entry in entries:
        if isinstance(entry, str) and "=" in entry:
            name, _, value = entry.partition("=")
            env[name] = value
    return env


def _params(config: dict) -> dict:
    keys = {
        "nthreads": "threads",
        "ngpus": "gpus",
        "minimum_bytes": "min",
        "maximum_bytes": "max",
        "warmup_iters": "warmup",
        "iterations": "iters",
        "aggregated_iterations": "agg",
        "validation": "validation",
        "graph": "graph",
    }
    out = {
        short: _int(config.get(key))
        for key, short in keys.items()
        if _int(config.get(key)) is not None
    }
    if str(config.get("per_iter_timing")).lower() == "true":
        out["per_iter"] = 1
    return out


def _device(d: dict) -> dict:
    return {
        "rank": _int(d.get("rank")),
        "pid": _int(d.get("pid")),
        "host": str(d.get("hostname") or ""),
        "device": _int(d.get("device")),
        "bus_id": str(d.get("device_hex") or ""),
        "name": str(d.get("device_info") or "").strip(),
    }


def _version(code: object) -> str | None:
    """NCCL_VERSION_CODE -> "2.28.9" (X*10000 + Y*100 + Z since 2.9, X*1000 + Y*100 + Z before)."""
    code = _int(code)
    return None if code is None else nccl_version_of_code(code)


def _row(r: Any, index: int, source: str) -> Row:
    size, count = (
        (_int(r.get("size")), _int(r.get("count"))) if isinstance(r, dict) else (None, None)
    )
    if size is None or count is None:
        raise UsageProblem(f"{source}: results[{index}] has no integer size and count")
    root = _int(str(r.get("root", "")).strip())
    if not 0 <= size <= MAX_SIZE or not 0 <= count <= MAX_SIZE:
        raise UsageProblem(
            f"{source}: results[{index}] has size {_shown(size)} and count {_shown(count)}: "
            f"not a message nccl-tests measures (0 to 2**48 bytes)"
        )
    where = f"{source}: results[{index}]"
    return Row(
        size,
        count,
        str(r.get("type")),
        str(r.get("redop")),
        root,
        _measurement(r.get("out_of_place"), r.get("out_of_place_per_iter"), size, where),
        _measurement(r.get("in_place"), r.get("in_place_per_iter"), size, where),
    )


def _measurement(
    m: object, per_iter: object, size: int, where: str = "the file"
) -> Measurement | None:
    if not isinstance(m, dict):
        return None
    algbw, busbw = _float(m.get("alg_bw")), _float(m.get("bus_bw"))
    if algbw is None or busbw is None:
        return None
    nwrong = _float(m.get("nwrong"))
    time_us, cpu = _float(m.get("time")), _float(m.get("cpu_time"))
    for name, value in (
        ("time", time_us),
        ("cpu_time", cpu),
        ("alg_bw", algbw),
        ("bus_bw", busbw),
        ("nwrong", nwrong),
    ):
        if value is not None and value < 0:  # recommend would refuse the imported file later
            raise UsageProblem(f"{where}: {name} {value} is negative; no measurement is")
    if (
        time_us is None and cpu is not None and algbw > 0
    ):  # -C 1: the bandwidths still come from completion
        time_us = size / (algbw * 1e3)
    return Measurement(
        time_us,
        algbw,
        busbw,
        None if nwrong is None else int(nwrong),
        None,
        cpu,
        _iteration(per_iter),
    )


def _iteration(p: object) -> dict | None:
    if not isinstance(p, dict):
        return None
    keys = ("min_us", "p50_us", "p95_us", "p99_us", "max_us")
    out: dict[str, float | int | str | None] = {k: _float(p.get(k)) for k in keys}
    out.update(
        {
            "mean_us": _float(p.get("avg_us")),
            "cv_pct": _float(p.get("cv_pct")),
            "samples": len(p["times_us"]) - (_int(p.get("skipped_iterations")) or 0)
            if isinstance(p.get("times_us"), list)
            else None,
            "clock": "nccl-tests -I (CUDA events per iteration)",
        }
    )
    return out


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None  # "nan" (nccl-tests writes NaN as a string), null, or junk
    if isinstance(value, int) and abs(value) >= 2**63:
        return None  # 400 digits: no measurement, and float() would overflow
    return float(value) if math.isfinite(value) else None


def _shown(value: int) -> str:
    return str(value) if abs(value) < 10**30 else f"of {len(str(abs(value)))} digits"


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and is_digits(value.strip().removeprefix("-")):  # ASCII, <= 19
        return int(value.strip())
    return None
