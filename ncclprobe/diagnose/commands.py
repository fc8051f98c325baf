"""The next commands diagnose suggests, built from the trace's own configuration so they can be
pasted as they are."""

from __future__ import annotations

import shlex

from ncclprobe.sizes import format_size


def engine_command(config: dict, trace_out: str = "trace.json", **changes) -> str:
    """`ncclprobe run-engine` with the trace's configuration, `changes` applied (None drops a flag)."""
    flags = {"preset": config.get("preset"), "tp": config.get("tp"), "batch": config.get("batch"),
             "k": config.get("k"), "new_tokens": config.get("new_tokens"), "draft": config.get("draft"),
             "graphs": config.get("graphs")}
    flags.update(changes)
    parts = ["ncclprobe", "run-engine"]
    for name, value in flags.items():
        if value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        parts += [flag] if value is True else [flag, str(value)]
    return shlex.join(parts + ["--trace", trace_out])


def sizes_arg(sizes: list[int]) -> str:
    return ",".join(format_size(s) for s in sorted(set(sizes)))


def engine_sizes(run: dict) -> list[int]:
    return sorted({int(s["size_bytes"]) for s in (run.get("collectives") or {}).get("sizes") or []
                   if s.get("size_bytes")})
