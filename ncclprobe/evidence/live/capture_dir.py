"""A capture directory (`ncclprobe capture -- CMD`): its layout, and what it holds, typed.

The layout is this module's, the one home both the capture that writes a directory and diagnose
that reads one use. Every file of the job's own evidence sits in a folder of its kind; two files
are the capture's own record:
- `manifest.json`: the command (masked), how it ended (its exit code, by itself, for a hang, on
  Ctrl-C), the environment the capture added (and any value of the user's it replaced), and per
  kind of evidence what was collected and what could not be, with the reason;
- `processes.json`: every process of the job as the capture saw it appear: command line, parent,
  role, whether it mapped libnccl, whether capture's in-job module ran there, its rank, and which
  of the settings the job was started with it lacked or had with another value (masked values),
  and when the in-job profiler ran there (its start to its trace written: the capture's own pause).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.validate import load_json

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
PROCESSES = "processes.json"
JOB_LOG = "job.log"  # the job's stdout and stderr, interleaved as they came, secrets masked
NCCL_LOGS = "nccl"  # NCCL_DEBUG_FILE=<dir>/nccl/ + nccl.recipes.USER_LOG_NAME, one per process
FLIGHT_RECORDER = "fr"  # TORCH_FR_DUMP_TEMP_FILE=<dir>/fr/nccl_trace_rank_
FR_PREFIX = "nccl_trace_rank_"
PROFILES = "profiles"  # the in-job module's torch.profiler traces
ENGINE_PROFILES = "engine-profiles"  # SGLANG_TORCH_PROFILER_DIR, VLLM_TORCH_PROFILER_DIR
STACKS = "stacks"  # every thread's Python stack per process, at a dump
INJOB = "injob"  # one record per process the in-job module ran in
PROGRESS = "progress"  # steps per process, as the in-job module counts them
CONTROL = "control"  # the capture's requests to the in-job module
PRIVATE = ".capture"  # the generated sitecustomize and its configuration
DIAGNOSIS = "diagnosis.txt"
DIAGNOSIS_JSON = "diagnosis.json"
KIND_MANIFEST = "capture-manifest"
KIND_PROCESSES = "capture-processes"


@dataclass(frozen=True)
class CapturedProcess:
    pid: int
    ppid: int | None
    command: str  # masked
    role: str
    python: bool
    libnccl: str | None  # the mapped libnccl's path, when this process loaded NCCL
    injob: bool  # capture's in-job module ran here
    rank: int | None
    readable: bool
    empty_block: bool  # /proc showed an empty environment (setproctitle, env -i)
    missing: tuple[str, ...]  # settings of the job this process's environment lacked
    changed: dict[str, dict]  # {variable: {"job": value, "here": value}}, masked
    capture_missing: tuple[str, ...]  # variables the capture set that never reached it
    nccl_read: dict[str, str] = field(default_factory=dict)  # what its NCCL log says it read
    # the capture's in-job profiler in this process: (began starting, trace written), wall clock s
    profiler_spans: tuple[tuple[float, float], ...] = ()

    @property
    def worker(self) -> bool:
        """A process that can run a collective: Python, or one that loaded NCCL."""
        return self.python or self.libnccl is not None or self.injob


@dataclass(frozen=True)
class CaptureRecord:
    directory: str
    command: str  # masked
    exit_code: int | None
    ended_by: str  # exit | hang | interrupt | terminated | server-done
    settings: dict[str, str]  # the user's settings the job started with (masked values)
    added: dict[str, str]  # what the capture set (masked values)
    replaced: dict[str, str]  # the user's values the capture replaced (masked)
    collected: dict[str, list[str]]  # kind -> files, relative to the directory
    missing: dict[str, str]  # kind -> why it could not be collected
    notes: tuple[str, ...]
    processes: tuple[CapturedProcess, ...]
    nccl_loaded: bool  # any process of the job mapped libnccl
    server: dict | None = None  # engine, url, requests sent, profile endpoints used

    def files(self, kind: str) -> list[Path]:
        return [Path(self.directory) / name for name in self.collected.get(kind, [])]

    def by_pid(self) -> dict[int, CapturedProcess]:
        return {p.pid: p for p in self.processes}

    def profiler_spans(self) -> dict[int, list[tuple[float, float]]]:
        """Per rank, when the capture's own profiler ran there, from its start to its trace
        written: the job's host is slowed (stacks recorded) or stopped (the trace built and
        written) by the capture then, not by the job."""
        spans: dict[int, list[tuple[float, float]]] = {}
        for process in self.processes:
            if process.rank is not None and process.profiler_spans:
                spans.setdefault(process.rank, []).extend(process.profiler_spans)
        return spans


def is_capture(path: str | Path) -> bool:
    return (Path(path) / MANIFEST).is_file()


def load_capture(path: str | Path) -> CaptureRecord:
    """The capture directory's record; UsageProblem naming the file for anything not a capture."""
    directory = Path(path)
    if not directory.is_dir():
        raise UsageProblem(f"--capture {path}: not a directory")
    if not is_capture(directory):
        raise UsageProblem(
            f"--capture {path}: no {MANIFEST}: not a directory `ncclprobe capture` finished "
            "(a capture cut short leaves its temporary `.NAME.*.tmp` directory instead)"
        )
    manifest = _document(directory / MANIFEST, KIND_MANIFEST)
    processes = _document(directory / PROCESSES, KIND_PROCESSES)
    try:
        return CaptureRecord(
            directory=str(directory),
            command=str(manifest["command"]),
            exit_code=_int_or_none(manifest.get("exit_code")),
            ended_by=str(manifest["ended_by"]),
            settings=_str_dict(manifest.get("settings")),
            added=_str_dict(manifest.get("added")),
            replaced=_str_dict(manifest.get("replaced")),
            collected={str(k): [str(f) for f in v] for k, v in manifest["collected"].items()},
            missing=_str_dict(manifest.get("missing")),
            notes=tuple(str(n) for n in manifest.get("notes") or ()),
            processes=tuple(_process(p) for p in processes["processes"]),
            nccl_loaded=bool(processes.get("nccl_loaded")),
            server=manifest.get("server") if isinstance(manifest.get("server"), dict) else None,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageProblem(
            f"--capture {path}: {MANIFEST} or {PROCESSES} is malformed ({type(exc).__name__}: "
            f"{exc})"
        ) from None


def _document(path: Path, kind: str) -> dict:
    doc = load_json(path, "capture record")
    if not isinstance(doc, dict) or doc.get("kind") != kind:
        raise UsageProblem(f"{path}: not a {kind} document")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise UsageProblem(
            f"{path}: schema version {doc.get('schema_version')!r}, this ncclprobe reads "
            f"{SCHEMA_VERSION}"
        )
    return doc


def _process(doc: dict) -> CapturedProcess:
    return CapturedProcess(
        pid=int(doc["pid"]),
        ppid=_int_or_none(doc.get("ppid")),
        command=str(doc["command"]),
        role=str(doc.get("role") or "process"),
        python=bool(doc.get("python")),
        libnccl=str(doc["libnccl"]) if doc.get("libnccl") else None,
        injob=bool(doc.get("injob")),
        rank=_int_or_none(doc.get("rank")),
        readable=bool(doc.get("readable")),
        empty_block=bool(doc.get("empty_block")),
        missing=tuple(str(v) for v in doc.get("missing") or ()),
        changed={str(k): dict(v) for k, v in (doc.get("changed") or {}).items()},
        capture_missing=tuple(str(v) for v in doc.get("capture_missing") or ()),
        nccl_read=_str_dict(doc.get("nccl_read")),
        profiler_spans=tuple(_span(s) for s in doc.get("profiler") or ()),
    )


def _span(doc: dict) -> tuple[float, float]:
    """(began starting, trace written); a span cut short ends at its last time recorded."""
    times = [float(doc[k]) for k in ("start", "started", "stop", "written") if k in doc]
    if not times or any(t != t or t < 0 for t in times):
        raise ValueError(f"not a profiler span: {doc!r}")
    return times[0], max(times)


def _int_or_none(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"not an integer: {value!r}")
    return value


def _str_dict(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"not an object: {value!r}")
    return {str(k): str(v) for k, v in value.items()}


@dataclass(frozen=True)
class CaptureInputs:
    """The capture's files, as diagnose takes them one by one."""

    profiles: tuple[str, ...]
    server_logs: tuple[str, ...]
    flight_recorder: tuple[str, ...]
    logs: tuple[str, ...]
    nccl_logs: tuple[str, ...]


def capture_inputs(record: CaptureRecord) -> CaptureInputs:
    """Profiles (the in-job module's, else the engine's own), the job's log as a distributed job's
    log (where a process had a rank, or the job hung) and, for an SGLang or vLLM server, as its
    server log, the Flight Recorder folder, each NCCL log."""
    profiles = record.files("profiles") or record.files("engine_profiles")
    engine = (record.server or {}).get("engine")
    job_log = record.files("job_log")
    distributed = record.ended_by == "hang" or any(p.rank is not None for p in record.processes)
    return CaptureInputs(
        profiles=tuple(map(str, profiles)),
        server_logs=tuple(map(str, job_log)) if engine in ("sglang", "vllm") else (),
        flight_recorder=(str(Path(record.directory) / FLIGHT_RECORDER),)
        if record.collected.get("flight_recorder")
        else (),
        logs=tuple(map(str, job_log)) if distributed else (),
        nccl_logs=tuple(map(str, record.files("nccl_logs"))),
    )
