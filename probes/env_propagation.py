"""Measure, don't assume, which ways of setting an NCCL variable reach a worker's NCCL.

For each mechanism a fresh driver process (`python -m ncclprobe.probes.env_propagation_child drive`)
starts one worker the way real launchers do (a shell, multiprocessing spawn/fork/forkserver, a
pool, torchrun, subprocess env=) or lets the worker set the variable itself. The worker reports
three views of the variable: its /proc/self/environ (what `env-check` sees from outside), its
os.environ, and C getenv through ctypes (what NCCL calls). On a GPU it also creates one-rank NCCL
communicators with NCCL_DEBUG=INFO and a log file of its own (`ncclprobe.nccl.recipes`: rank 0
in a directory per mechanism), and the parent reads NCCL's own `set by environment` lines with
the shared log parser: the fourth view.

The variables are chosen from what a one-rank communicator logs (NCCL 2.28.9 fixture
nccl_2.28.9_1x_h200_1rank_debug_subsys_all.log: only NCCL_P2P_LEVEL was reported; PROTO/ALGO are
not, because one rank runs no tuning):
  NCCL_P2P_LEVEL       read once per process (process-global ncclTopoUserP2pLevel, paths.cc);
  NCCL_TOPO_DUMP_FILE  read at every communicator creation by rank 0 (ncclTopoGetSystem, topo.cc).
Both are harmless with one GPU. A fresh driver per mechanism means no value leaks between rows
(each forkserver, pool and os.environ starts clean), and the driver's own environment has both
variables removed, so any value a worker sees came from the mechanism under test.

This module is the parent's side: it runs one driver per mechanism, reads what the worker
reported and NCCL's log, and builds the document, the table and the verdict. The driver and the
worker, which run in processes of their own, are `env_propagation_child`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ncclprobe import interrupts, tempdirs
from ncclprobe.launch import error_summary
from ncclprobe.nccl.recipes import only_shapes_the_log, proof_env, rank_log, rank_log_env
from ncclprobe.probes.env_propagation_child import MODULE, raise_disk_error
from ncclprobe.safe_output import OutputProblem, atomic_directory, describe_os_error
from ncclprobe.secrets import mask_text
from ncclprobe.verdict import Verdict

PROCESS_VAR = "NCCL_P2P_LEVEL"
COMM_VAR = "NCCL_TOPO_DUMP_FILE"
VALUE = "SYS"  # the value each mechanism tries to deliver
STALE = "PHB"  # what the forkserver or pool saw when it started, before the parent changed it
NEEDS_GPU = "needs a GPU"


@dataclass(frozen=True)
class Mechanism:
    name: str
    description: str
    variable: str = PROCESS_VAR


MECHANISMS = (
    Mechanism("shell-export", "exported in the launching shell (export VAR=...; exec python ...)"),
    Mechanism("shell-no-export", "assigned in the launching shell without export"),
    Mechanism("spawn", "parent os.environ before multiprocessing spawn"),
    Mechanism("fork", "parent os.environ before multiprocessing fork"),
    Mechanism("forkserver", "parent os.environ before the forkserver started"),
    Mechanism(
        "forkserver-after-start", f"parent os.environ after the forkserver started (it had {STALE})"
    ),
    Mechanism("pool-after-start", f"parent os.environ after a spawn Pool started (it had {STALE})"),
    Mechanism("torchrun", "exported to torchrun --standalone --nproc-per-node 1"),
    Mechanism("subprocess-env", "subprocess.Popen(env={..., VAR: value})"),
    Mechanism("worker-before-comm", "worker's own os.environ, before creating its communicator"),
    Mechanism("worker-setenv", "worker's C setenv via ctypes, before creating its communicator"),
    Mechanism(
        "worker-after-comm",
        "worker's own os.environ after its first communicator "
        "(once-per-process variable), then a second communicator",
    ),
    Mechanism(
        "worker-after-comm-percomm",
        "worker's own os.environ after its first communicator "
        "(per-communicator variable), then a second communicator",
        COMM_VAR,
    ),
)
BY_NAME = {m.name: m for m in MECHANISMS}


def run_probe(
    names: list[str] | None = None,
    *,
    nccl: bool = False,
    workdir: str | Path | None = None,
    timeout_s: float = 180.0,
    on_row=None,
) -> dict:
    """Run the mechanisms (all by default) and return the result document (schema_version 1)."""
    mechanisms = [BY_NAME[n] for n in names] if names else list(MECHANISMS)
    with _workdir(workdir) as root:
        env = driver_env(root, nccl)
        rows = []
        for mechanism in mechanisms:
            rows.append(measure(mechanism, root, env, nccl, timeout_s))
            if on_row:
                on_row(rows[-1])
    return {
        "schema_version": 1,
        "kind": "env-propagation",
        "nccl_checked": nccl,
        "variables": {"process_scope": PROCESS_VAR, "communicator_scope": COMM_VAR},
        "value": VALUE,
        "stale_value": STALE,
        "rows": rows,
        "notes": notes(nccl),
    }


@contextmanager
def _workdir(workdir: str | Path | None) -> Iterator[Path]:
    """Where the specs, results and logs go: a temporary directory, always removed; or the user's
    --output, filled beside it and renamed into place only once every mechanism ran. So Ctrl-C,
    SIGTERM or a full disk leave nothing half-written, and a write the system refused is the one
    line every command gives ("the disk is full; nothing was changed"), never a traceback."""
    if workdir is not None:
        with atomic_directory(workdir, what="--output") as root:
            yield root
        return
    try:
        with tempdirs.owned("ncclprobe-envprop-") as root:
            yield root
    except OSError as exc:
        where = exc.filename or tempfile.gettempdir()
        raise OutputProblem(describe_os_error(exc, where, "the working directory")) from None


def notes(nccl: bool) -> list[str]:
    out = [
        f"each row: a fresh driver process with {PROCESS_VAR} and {COMM_VAR} removed from its environment",
        "/proc: the worker's /proc/PID/environ (what env-check sees); getenv: C getenv via ctypes "
        "(what NCCL calls); os.environ: Python's view",
    ]
    if not nccl:
        out.append(f"read by NCCL {NEEDS_GPU}: run on a GPU machine (one GPU is enough)")
    return out


def driver_env(root: Path, nccl: bool) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (PROCESS_VAR, COMM_VAR) and not only_shapes_the_log(k)
    }
    if nccl:
        env.update(proof_env(tuning=False))
    return env


def _log_dir(root: Path, mechanism: Mechanism) -> Path:
    return root / "nccl-logs" / mechanism.name


def measure(
    mechanism: Mechanism, root: Path, env: dict[str, str], nccl: bool, timeout_s: float
) -> dict:
    value = str(root / f"topo.{mechanism.name}.xml") if mechanism.variable == COMM_VAR else VALUE
    result_path = root / f"{mechanism.name}.result.json"
    result_path.unlink(
        missing_ok=True
    )  # a kept --workdir must not lend this row an earlier run's result
    spec = {
        "mechanism": mechanism.name,
        "variable": mechanism.variable,
        "value": value,
        "stale": STALE,
        "nccl": nccl,
        "result": str(result_path),
    }
    spec_path = root / f"{mechanism.name}.spec.json"
    spec_path.write_text(json.dumps(spec))
    row = {
        "mechanism": mechanism.name,
        "description": mechanism.description,
        "variable": mechanism.variable,
        "scope": "communicator" if mechanism.variable == COMM_VAR else "process",
        "value_set": value,
    }
    if nccl:  # the mechanism's one worker is rank 0 of its own one-rank job
        log_dir = _log_dir(root, mechanism)
        log_dir.mkdir(parents=True, exist_ok=True)
        rank_log(log_dir, 0).unlink(missing_ok=True)  # nor an earlier run's NCCL log
        env = {**env, **rank_log_env(log_dir, rank=0)}
    done = _run_driver(spec_path, env, root, timeout_s)
    if done is None:
        return {
            **row,
            "status": "error",
            "reason": f"no result within {timeout_s:g} s (driver and workers killed)",
        }
    raise_disk_error(done.stderr)
    if done.returncode == 3:
        return {
            **row,
            "status": "skipped",
            "reason": mask_text(done.stderr.strip().splitlines()[-1]),
        }
    if done.returncode != 0 or not result_path.exists():
        why = error_summary(done.stderr) or "no error message"
        return {**row, "status": "error", "reason": f"driver exited {done.returncode}: {why}"}
    seen = json.loads(result_path.read_text())
    return {
        **row,
        "status": "measured",
        "reason": mask_text(seen["nccl_error"]) if seen.get("nccl_error") else None,
        "worker_pid": seen["pid"],
        "proc": seen["proc"],
        "os_environ": seen["os_environ"],
        "getenv": seen["getenv"],
        "nccl": nccl_read(rank_log(_log_dir(root, mechanism), 0), mechanism.variable)
        if nccl
        else NEEDS_GPU,
    }


def _run_driver(
    spec_path: Path, env: dict, root: Path, timeout_s: float
) -> subprocess.CompletedProcess | None:
    """Run one driver in its own session; on timeout kill the session and every descendant by pid,
    so no worker outlives it (torchrun starts its workers in sessions of their own)."""
    cmd = [sys.executable, "-m", MODULE, "drive", str(spec_path)]
    proc = None
    try:
        with interrupts.held():  # interrupted inside Popen, the driver would run on unknown to us
            proc = subprocess.Popen(
                cmd,
                env=env,
                cwd=root,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        assert proc is not None  # only communicate() times out, after Popen made it
        kill_tree(proc.pid)
        proc.communicate()
        return None
    except BaseException:  # Ctrl-C, SIGTERM: the driver's own session gets no signal of ours
        if proc is not None:
            kill_tree(proc.pid)
            proc.wait()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def kill_tree(pid: int) -> None:
    """SIGKILL process group `pid` and every descendant by pid as well: a child that started a
    session of its own (torchrun's workers do) is outside the group and would live on as an orphan."""
    import psutil

    try:
        descendants = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:  # the group is gone already
        pass
    for child in descendants:
        try:
            child.kill()  # psutil checks the pid still names the same process
        except psutil.NoSuchProcess:
            pass


def nccl_read(log: Path, variable: str) -> str | None:
    """The value NCCL reported reading in the worker's own debug file, or None."""
    from ncclprobe.evidence.nccl.nccl_log import parse_nccl_log_file

    return parse_nccl_log_file(log).env.get(variable) if log.exists() else None


def cell(observed: str | None, expected: str) -> str:
    """'yes' when the worker saw the value set, 'no' when nothing, 'no (other)' for another value."""
    if observed == NEEDS_GPU:
        return NEEDS_GPU
    if observed is None:
        return "no"
    return "yes" if observed == expected else f"no ({observed})"


def table_rows(doc: dict) -> list[dict]:
    rows = []
    for row in doc["rows"]:
        base = {"mechanism": row["mechanism"], "variable": row["variable"]}
        if row["status"] != "measured":
            rows.append(
                {
                    **base,
                    "/proc": "-",
                    "getenv": "-",
                    "os.environ": "-",
                    "read by NCCL": "-",
                    "note": f"{row['status']}: {row['reason']}",
                }
            )
            continue
        expected = row["value_set"]
        rows.append(
            {
                **base,
                "/proc": cell(row["proc"], expected),
                "getenv": cell(row["getenv"], expected),
                "os.environ": cell(row["os_environ"], expected),
                "read by NCCL": cell(row["nccl"], expected),
                "note": row.get("reason") or "",
            }
        )
    return rows


def verdict(doc: dict) -> Verdict:
    """NOTHING_HERE when no mechanism could be measured here; FINDINGS when one failed."""
    statuses = [row["status"] for row in doc["rows"]]
    if statuses and all(s != "measured" for s in statuses):
        return Verdict.NOTHING_HERE
    return Verdict.of("error" in statuses)
