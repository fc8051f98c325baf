"""Hand-made results files whose right recommendation is known, written with the real writer.

`write_set(path, configs, ...)` takes, per configuration, its settings and a time per size as
(median, p10, p90) microseconds; `wrong` marks sizes with wrong elements, `status` a config-level
status, `tuning` the TUNING proof entries. Sizes default to 1K..1M (x4).
"""

from __future__ import annotations

from ncclprobe.records import config_id
from ncclprobe.records_writer import ResultWriter

SIZES = [1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20]


def config(
    settings: dict,
    times: dict,
    *,
    status: str = "ok",
    reason=None,
    wrong: dict | None = None,
    checked: bool = True,
    tuning: list | None = None,
    collective: str = "all_reduce",
) -> dict:
    return {
        "settings": settings,
        "times": times,
        "status": status,
        "reason": reason,
        "wrong": wrong or {},
        "checked": checked,
        "tuning": tuning or [],
        "collective": collective,
    }


def write_set(
    path,
    configs: list[dict],
    *,
    nvlink: bool | None = False,
    nranks: int = 2,
    kind: str = "sweep",
    mode: str = "eager",
    trials: int = 5,
    backend: str = "nccl",
    env: dict | None = None,
    node: dict | None = None,
    nccl: str | None = "2.28.9",
) -> str:
    header = {
        "kind": kind,
        "argv": ["test"],
        "started_at": "2026-11-29T09:00:00+00:00",
        "hostname": "testhost",
        "versions": {
            "ncclprobe": "0",
            "python": "3.11",
            "torch": "2",
            "nccl": nccl,
            "cuda": None,
        },
        "gpus": ["Test GPU"] * nranks,
        "env": env or {},
        "backend": backend,
        "nranks": nranks,
        "topology": {"nvlink": nvlink, "gpu_count": nranks, **({"node": node} if node else {})},
    }
    with ResultWriter(path, header) as writer:
        for cfg in configs:
            cid = config_id(cfg["settings"])
            writer.write(
                {
                    "record": "config",
                    "config_id": cid,
                    "settings": cfg["settings"],
                    "pool": 0,
                    "status": cfg["status"],
                    "reason": cfg["reason"],
                    "proof": {"seen_env": cfg["settings"], "tuning": cfg["tuning"]},
                }
            )
            for size, (median, p10, p90) in cfg["times"].items():
                writer.write(_result(cid, cfg, size, median, p10, p90, nranks, mode, trials))
        writer.write({"record": "summary", "wall_s": 1.0})
    return str(path)


def _result(cid, cfg, size, median, p10, p90, nranks, mode, trials) -> dict:
    wrong = cfg["wrong"].get(size, 0) if cfg["checked"] else None
    algbw = size / median / 1e3
    return {
        "record": "result",
        "config_id": cid,
        "settings": cfg["settings"],
        "collective": cfg["collective"],
        "mode": mode,
        "in_place": False,
        "dtype": "float32",
        "size_bytes": size,
        "count": size // 4,
        "nranks": nranks,
        "status": "wrong" if wrong else "ok",
        "reason": None,
        "time_us": median,
        "time_us_p10": p10,
        "time_us_p90": p90,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * 2 * (nranks - 1) / nranks,
        "wrong": wrong,
        "rank_spread_us": 0.5,
        "trials": trials,
        "source": "sweep",
    }


def curve(base_us: float, per_kib_us: float, spread: float = 0.01) -> dict:
    """A latency + bandwidth curve over SIZES with +/- `spread` relative p10/p90."""
    out = {}
    for size in SIZES:
        t = base_us + per_kib_us * size / 1024
        out[size] = (t, t * (1 - spread), t * (1 + spread))
    return out


def scaled(
    times: dict, factor_small: float, factor_large: float, split: int = 1 << 16, spread=None
) -> dict:
    """`times` with sizes <= split multiplied by factor_small and larger ones by factor_large."""
    out = {}
    for size, (t, lo, hi) in times.items():
        f = factor_small if size <= split else factor_large
        if spread is None:
            out[size] = (t * f, lo * f, hi * f)
        else:
            out[size] = (t * f, t * f * (1 - spread), t * f * (1 + spread))
    return out


def engine_trace(sizes_counts: dict[int, int], *, op: str = "all_reduce") -> dict:
    """A minimal engine trace (docs/DESIGN.md schema) whose speculative run issued these collectives."""
    run = {
        "label": "untuned",
        "mode": "speculative",
        "settings": {},
        "tokens_per_s": 100.0,
        "ms_per_token": 10.0,
        "new_tokens": 32,
        "wall_s": 0.32,
        "phases": {
            "draft": {
                "count": 10,
                "total_ms": 40.0,
                "median_ms": 4.0,
                "p90_ms": 5.0,
                "graphed": False,
            },
            "verify": {
                "count": 10,
                "total_ms": 120.0,
                "median_ms": 12.0,
                "p90_ms": 13.0,
                "graphed": True,
            },
            "accept": {
                "count": 10,
                "total_ms": 5.0,
                "median_ms": 0.5,
                "p90_ms": 0.6,
                "graphed": False,
            },
            "host": {
                "count": 10,
                "total_ms": 15.0,
                "median_ms": 1.5,
                "p90_ms": 2.0,
                "graphed": False,
            },
        },
        "verify_decode_ratio": 1.4,
        "acceptance": {"mean_length": 2.1, "histogram": [2, 3, 4, 1]},
        "collectives": {
            "per_token_count": 4.0,
            "per_token_bytes": 65536.0,
            "sizes": [
                {
                    "op": op,
                    "size_bytes": s,
                    "dtype": "bfloat16",
                    "count": c,
                    "phase": "verify",
                    "graph": None,
                }
                for s, c in sizes_counts.items()
            ],
        },
        "collective_share": 0.3,
        "graph_coverage": 0.5,
        "workers": [],
        "tokens": [[1, 2, 3]],
    }
    baseline = dict(
        run,
        mode="baseline",
        tokens_per_s=60.0,
        ms_per_token=16.6,
        phases={
            "decode": {
                "count": 32,
                "total_ms": 500.0,
                "median_ms": 15.0,
                "p90_ms": 17.0,
                "graphed": True,
            },
            "host": {
                "count": 32,
                "total_ms": 30.0,
                "median_ms": 1.0,
                "p90_ms": 1.2,
                "graphed": False,
            },
        },
        acceptance={"mean_length": None, "histogram": [0, 0, 0, 0]},
        collectives={
            "per_token_count": 4.0,
            "per_token_bytes": 4096.0,
            "sizes": [
                {
                    "op": op,
                    "size_bytes": 1 << 20,
                    "dtype": "bfloat16",
                    "count": 1000,
                    "phase": "decode",
                    "graph": None,
                }
            ],
        },
    )
    tuned = dict(
        run, label="tuned", settings={"NCCL_PROTO": "LL"}, tokens_per_s=120.0, ms_per_token=8.3
    )
    return {
        "schema_version": 1,
        "kind": "engine-trace",
        "provenance": {"versions": {"torch": "2"}},
        "config": {
            "preset": "tiny",
            "tp": 2,
            "batch": 1,
            "k": 3,
            "prompt_len": 16,
            "new_tokens": 32,
            "temperature": 0.0,
            "seed": 0,
            "graphs": "none",
            "draft_tp": False,
            "dtype": "float32",
            "device": "cpu",
            "backend": "gloo",
            "model": {"hidden": 64, "layers": 2, "vocab": 256, "moe": False},
        },
        "runs": [baseline, run, tuned],
    }
