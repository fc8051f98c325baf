"""The capture's own record of a run: `processes.json` and `manifest.json` (layout and reader:
`evidence.live.capture_dir`). The manifest says per kind of evidence what was collected and, where
nothing was, why: a missing file is evidence about the job too (NCCL never loaded, a worker whose
environment lost the capture's variables, a job that ended before its profiling window)."""

from __future__ import annotations

from pathlib import Path

from ncclprobe.capture.environment import JobEnvironment
from ncclprobe.capture.job import Ending
from ncclprobe.evidence.live import capture_dir as D
from ncclprobe.safe_output import write_json
from ncclprobe.secrets import mask_argv, mask_text

TRACE_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")


def files(directory: Path, folder: str, *, traces: bool = False) -> list[str]:
    """Non-empty files of `folder`, relative to `directory`, temporary ones left out."""
    root = directory / folder
    if not root.is_dir():
        return []
    found = [
        p
        for p in sorted(root.rglob("*"))
        if p.is_file()
        and p.stat().st_size
        and not p.name.startswith(".")
        and not p.name.endswith(".tmp")
        and (not traces or p.name.endswith(TRACE_SUFFIXES))
    ]
    return [str(p.relative_to(directory)) for p in found]


def write_processes(directory: Path, root: int, rows: list[dict]) -> None:
    write_json(
        directory / D.PROCESSES,
        {
            "schema_version": D.SCHEMA_VERSION,
            "kind": D.KIND_PROCESSES,
            "root_pid": root,
            "nccl_loaded": any(r["libnccl"] for r in rows),
            "processes": rows,
        },
    )


def collected(directory: Path) -> dict[str, list[str]]:
    return {
        "job_log": [D.JOB_LOG] if (directory / D.JOB_LOG).is_file() else [],
        "nccl_logs": files(directory, D.NCCL_LOGS),
        "flight_recorder": files(directory, D.FLIGHT_RECORDER),
        "profiles": files(directory, D.PROFILES, traces=True),
        "engine_profiles": files(directory, D.ENGINE_PROFILES, traces=True),
        "stacks": files(directory, D.STACKS),
        "injob": files(directory, D.INJOB),
    }


def missing(found: dict[str, list[str]], rows: list[dict], ending: Ending, profile: dict) -> dict:
    """Why each kind that holds nothing holds nothing, from what the capture saw."""
    nccl = any(r["libnccl"] for r in rows)
    ranked = [r for r in rows if r["rank"] is not None]
    lost = [r for r in rows if "NCCL_DEBUG_FILE" in r["capture_missing"] and r["libnccl"]]
    why = {
        "nccl_logs": (
            "no process of the job loaded NCCL (gloo, or no collective ran): there was nothing to log"
            if not nccl
            else "NCCL_DEBUG_FILE never reached the processes that loaded NCCL: "
            + ", ".join(f"pid {r['pid']}" for r in lost)
            if lost
            else "the processes that loaded NCCL wrote no log (they ended before NCCL initialised)"
        ),
        "flight_recorder": (
            "no process of the job created a process group (torch.distributed was not used)"
            if not ranked
            else "the ranks wrote no dump (they ended before one was asked for or their "
            "collectives were never recorded)"
        ),
        "profiles": _why_no_profile(profile, rows),
        "engine_profiles": "no SGLang or vLLM server was profiled through its endpoints",
        "stacks": "the processes ended before they could dump"
        if ending.ended_by in ("hang", "interrupt")
        else "no dump was asked for: the job ended by itself"
        if ending.ended_by == "exit"
        else "no dump was asked for: the capture ended the server once its load was done",
        "injob": "no Python process of the job loaded the in-job module",
    }
    return {kind: reason for kind, reason in why.items() if not found.get(kind)}


def _why_no_profile(profile: dict, rows: list[dict]) -> str:
    mode = profile.get("mode")
    if mode == "off":
        return "profiling was off (--profile off)"
    if mode == "control":
        return "the profiler was never started (SIGUSR2 to the capture starts and stops it)"
    if not any(r["injob"] for r in rows):
        return "the in-job module ran in no process, so nothing could start the profiler"
    return (
        f"no process reached step {profile.get('start')} (a step is one top-level nn.Module "
        "forward; a job that runs no nn.Module, or fewer steps, is not profiled this way: record "
        "torch.profiler around its loop yourself, or give --profile FIRST-LAST steps that it reaches)"
    )


def write_manifest(
    directory: Path,
    argv: list[str],
    env: JobEnvironment,
    ending: Ending,
    rows: list[dict],
    profile: dict,
    notes: list[str],
    server: dict | None,
) -> None:
    found = collected(directory)
    write_json(
        directory / D.MANIFEST,
        {
            "schema_version": D.SCHEMA_VERSION,
            "kind": D.KIND_MANIFEST,
            "command": " ".join(mask_argv(argv)),
            "exit_code": ending.exit_code,
            "ended_by": ending.ended_by,
            "signals": ending.signals,
            "killed": ending.killed,
            "settings": env.masked(env.settings),
            "added": {k: mask_text(v) for k, v in sorted(env.added.items())},  # ours, not secrets
            "replaced": env.masked(env.replaced),
            "profile": profile,
            "collected": found,
            "missing": missing(found, rows, ending, profile),
            "notes": notes,
            "server": server,
        },
    )
