"""What `ncclprobe capture` saw of the job's processes: a setting the job was started with that never
reached a worker, named with the worker's command line and the parent that still had it.

A worker is a process that can run a collective: Python, or one that mapped libnccl. The settings
followed are the user's (NCCL, torch.distributed, NVSHMEM and the CUDA variables the display policy
knows; not the per-worker ones a launcher sets itself, `capture.environment.PER_WORKER`). A worker's
environment is read from /proc as it appears, which is what it was exec'd with; NCCL's log of that
process (where it has one) can still show the setting read: set in-process (os.environ) before NCCL
started, which /proc cannot show. Then it arrived, and that is said instead.

Severity: an error where the worker loaded NCCL (its NCCL ran with the default, not the user's
value); a warning where no process of the job loaded NCCL: the setting had no effect in this run,
and will not reach that worker when the job does use NCCL.
"""

from __future__ import annotations

from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.live.capture_dir import CapturedProcess, CaptureRecord
from ncclprobe.findings import Finding, NotChecked, RuledOut
from ncclprobe.nccl.recipes import only_shapes_the_log

RULE = "capture-settings"
HYPOTHESIS = "a setting of the job never reached one of its workers"
MECHANISM = (
    "the worker was started by a step that builds its environment anew (an allow-list of "
    "variables, `env -i`, subprocess.run(env=...), a container or ssh boundary), or by a process "
    "started before the setting was made"
)


def capture_findings(ev: E.Evidence) -> list:
    record = ev.capture
    if record is None:
        return []
    workers = [p for p in record.processes if p.worker and p.readable and not p.empty_block]
    if not record.settings:
        return [
            NotChecked(
                rule=RULE,
                hypothesis=HYPOTHESIS,
                missing="the job was started with no NCCL, torch.distributed or CUDA setting to "
                "follow (set them in the shell that runs `ncclprobe capture`)",
            )
        ]
    if not workers:
        return [
            NotChecked(
                rule=RULE,
                hypothesis=HYPOTHESIS,
                missing="the capture read no worker's environment (none was Python or loaded "
                "NCCL, or /proc could not be read)",
            )
        ]
    out: list = []
    for variable, value in sorted(record.settings.items()):
        lacking = [p for p in workers if variable in p.missing]
        if lacking:
            out += _lost(record, workers, variable, value, lacking)
    out += _changed(record, workers)
    if not any(isinstance(o, Finding) and o.severity != "info" for o in out):
        out.append(
            RuledOut(
                rule=RULE,
                hypothesis=HYPOTHESIS,
                reason=f"each of the job's {len(workers)} worker process(es) had the "
                f"{len(record.settings)} setting(s) it was started with "
                f"({', '.join(sorted(record.settings))}), read from /proc as each appeared",
            )
        )
    return out


def _lost(
    record: CaptureRecord,
    workers: list[CapturedProcess],
    variable: str,
    value: str,
    lacking: list[CapturedProcess],
) -> list[Finding]:
    arrived = [p for p in lacking if variable in p.nccl_read]
    lost = [p for p in lacking if variable not in p.nccl_read]
    out = []
    if arrived:
        out.append(
            Finding(
                rule=RULE,
                severity="info",
                confidence="high",
                title=f"{variable} arrived in-process in {_pids(arrived)}: /proc lacks it, NCCL "
                "read it",
                detail=f"{_who(arrived[0], record)} was started without {variable}, but its NCCL log "
                f"shows `{variable} set by environment to {arrived[0].nccl_read[variable]}`: the "
                "process set it itself (os.environ) before NCCL started, which /proc cannot show.",
                evidence={"variable": variable, "pids": [p.pid for p in arrived]},
            )
        )
    if not lost:
        return out
    nccl_here = [p for p in lost if p.libnccl]
    log_only = only_shapes_the_log(variable)
    severity = "error" if nccl_here and not log_only else "warning"
    effect = (
        f"Those workers' NCCL ran with its default for {variable}, not {value}"
        + (
            ": the ranks of one communicator no longer agree on it"
            if len(lost) < len(workers)
            else ""
        )
        if nccl_here
        else f"NCCL is not loaded in this run (no process of the job mapped libnccl), so {variable} "
        "had no effect here; it will not reach these workers when the job uses NCCL either"
        if not record.nccl_loaded
        else f"These workers did not load NCCL in this run, so {variable} had no effect on them here"
    )
    out.append(
        Finding(
            rule=RULE,
            severity=severity,
            confidence="high",
            title=f"{variable}={value} never reached {len(lost)} of {len(workers)} worker "
            f"process(es): {_pids(lost)}",
            detail=" ".join(_who(p, record, variable) + "." for p in lost)
            + f" Likely: {MECHANISM}. {effect}.",
            evidence={
                "variable": variable,
                "value": value,
                "lost": [_row(p, record, variable) for p in lost],
                "workers": len(workers),
                "nccl_loaded": record.nccl_loaded,
            },
            next_command="# pass the variable on where this worker is started (or set it in the "
            "worker's own code before NCCL starts), then capture again:\n"
            f"ncclprobe capture -- {record.command}",
        )
    )
    return out


def _changed(record: CaptureRecord, workers: list[CapturedProcess]) -> list[Finding]:
    out = []
    for variable in sorted({v for p in workers for v in p.changed if v.startswith("NCCL_")}):
        here = [p for p in workers if variable in p.changed]
        values = ", ".join(f"pid {p.pid}: {p.changed[variable]['here']}" for p in here)
        out.append(
            Finding(
                rule=RULE,
                severity="info",
                confidence="high",
                title=f"{variable} was changed for {len(here)} worker(s): the job set "
                f"{record.settings.get(variable)}, they had {values}",
                detail="A launcher or wrapper between the shell and these workers set its own "
                f"value; NCCL in them reads theirs. {_who(here[0], record)}.",
                evidence={"variable": variable, "pids": [p.pid for p in here]},
            )
        )
    return out


def _pids(procs: list[CapturedProcess]) -> str:
    return ", ".join(
        f"pid {p.pid}" + (f" (rank {p.rank})" if p.rank is not None else "") for p in procs
    )


def _who(proc: CapturedProcess, record: CaptureRecord, variable: str | None = None) -> str:
    """`pid 123 (rank 2) \\`python train.py\\`, started by pid 100 \\`python train.py\\`, which had
    it`: the worker, and whether the process that started it had the variable."""
    parent = record.by_pid().get(proc.ppid) if proc.ppid is not None else None
    rank = f" (rank {proc.rank})" if proc.rank is not None else ""
    text = f"pid {proc.pid}{rank} `{proc.command}`"
    if parent is not None:
        if variable is None:
            had = ""
        elif not parent.readable or parent.empty_block:
            had = ", whose environment could not be read"
        else:
            had = ", which lacked it too" if variable in parent.missing else ", which had it"
        text += f", started by pid {parent.pid} `{parent.command}`{had}"
    return text


def _row(proc: CapturedProcess, record: CaptureRecord, variable: str) -> dict:
    parent = record.by_pid().get(proc.ppid) if proc.ppid is not None else None
    return {
        "pid": proc.pid,
        "rank": proc.rank,
        "command": proc.command,
        "libnccl": proc.libnccl,
        "parent_pid": proc.ppid,
        "parent_command": parent.command if parent else None,
        "parent_has": (variable not in parent.missing) if parent and parent.readable else None,
    }


RULES = (capture_findings,)
