"""ncclprobe capture's module inside the job's own Python processes.

`ncclprobe capture` puts a generated `sitecustomize.py` first on the job's PYTHONPATH; Python imports
it at start-up in every process of the job that inherits the environment, and it loads this file by
path (the job's interpreter need not have ncclprobe installed) and calls `install(config_path)`.
Nothing of the user's code is edited. This module imports only the standard library at start-up,
and torch only once the job has imported it; every action is wrapped so that nothing of it can
raise into the job.

What it adds to each process, all into the capture directory:
- `injob/<pid>.json`: that it ran here (pid, parent, command line, rank once known): the manifest's
  proof of where the hooks were, and where they were not; and the profiler's spans (when it began
  starting, started, began stopping, wrote its trace), the time the capture itself held the process;
- `progress/<pid>`: the count of top-level forward passes (one per step of a training loop or of
  `generate()`), which the capture reads as progress when it watches for a hang;
- on the capture's dump request (a hang), when a collective of this process fails (an uncaught
  exception once a process group exists; the peers are told through the job's own store and dump
  too: the way NCCL's watchdog signals them), and at exit: the Flight Recorder's dump (gloo has no
  dump on timeout of its own; NCCL's watchdog still writes its own on a timeout) into the prefix the
  capture gave torch, and every thread's Python stack (`faulthandler`, which reads a thread blocked
  inside a collective; a signal handler could not run there until the call returned);
- torch.profiler over a window of steps, or between the capture's start and stop requests: started
  and stopped in the thread that runs the model (the profiler records only the thread that started
  it), each step marked `ProfilerStep#N` (torch 2.13's own `profile.step()` writes no such mark into
  a CPU-only trace), with shapes and Python stacks, one trace per process.
A step is one top-level `nn.Module` forward: global forward hooks (skipped while torch.compile
traces) count nesting per thread, so a model's submodules do not count.
"""

from __future__ import annotations

import atexit
import faulthandler
import json
import os
import socket
import sys
import threading
import time
from typing import Any

POLL_S = 0.25  # how often the watcher looks at the control files and the peers' signal
STORE_POLL_S = 1.0  # how often it asks the job's store whether a peer failed
PEER_KEY = "ncclprobe_capture/dump"  # the store key a failing rank sets for its peers
HOST = socket.gethostname().split(".", 1)[0]


class _State:
    def __init__(self, config: dict):
        self.dir = config["dir"]
        self.fr_prefix = config.get("fr_prefix") or os.path.join(self.dir, "fr", "nccl_trace_rank_")
        profile = config.get("profile") or {}
        self.profile_mode = profile.get("mode", "off")  # off | steps | control
        self.window = (int(profile.get("start", 0)), int(profile.get("stop", 0)))
        self.budget = int(profile.get("budget", 6))  # steps a `control` start profiles at most
        self.peer_grace_s = float(config.get("peer_grace_s", 3.0))
        self.steps = 0
        self.written_steps = -1
        self.rank: int | None = None
        self.backend: str | None = None
        self.dumped = False
        self.lock = threading.Lock()
        self.control: dict[str, str] = {}
        self.control_lock = threading.Lock()
        self.want_profile = False
        self.profiler: Any = None  # torch.profiler.profile while a window runs
        self.profiled_steps = 0
        self.step_mark: Any = None  # the open record_function of the profiled step
        self.hooks_installed = False
        self.local = threading.local()
        self.events: list[str] = []
        # when this process's profiler began starting, and when its trace was written (the capture's
        # own pause of the job: a late rank's lateness inside it is the capture's, not the job's)
        self.profiler_spans: list[dict[str, float]] = []


# set once by install() before any hook or handler of this module can run; None only before
_state: _State = None  # type: ignore[assignment]


def install(config_path: str) -> None:
    """Called by the generated sitecustomize: read the capture's configuration and start."""
    global _state
    try:
        with open(config_path, encoding="utf-8") as handle:
            config = json.load(handle)
        if not os.path.isdir(config["dir"]):
            return  # the capture is over (its directory moved): a late process does nothing
        _respell(config)
        _state = _State(config)
        _record("started")
        previous = sys.excepthook
        sys.excepthook = lambda kind, value, tb: _on_uncaught(previous, kind, value, tb)
        atexit.register(_at_exit)
        os.register_at_fork(after_in_child=_after_fork)
        _start_watcher()
    except Exception as exc:  # never into the job
        _say(f"in-job module not started: {type(exc).__name__}: {exc}")


def _respell(config: dict, environ=os.environ, version: str | None = None) -> None:
    """Where the capture could not tell the job's torch before it ran, it set the newer Flight
    Recorder names; a process whose torch (its installed metadata, torch not imported) is older
    than `below` reads only the older ones: they are added here, before torch reads them."""
    respell = config.get("fr_respell") or {}
    if not respell:
        return
    if version is None:
        from importlib import metadata

        try:
            version = metadata.version("torch")
        except metadata.PackageNotFoundError:
            return
    parts = version.split("+", 1)[0].split(".")[:2]
    if len(parts) < 2 or not all(p.isdigit() for p in parts):
        return
    if (int(parts[0]), int(parts[1])) >= tuple(respell["below"]):
        return
    for new, old in respell["names"].items():
        if new in environ and old not in environ:
            environ[old] = environ[new]


# ---- files -------------------------------------------------------------------------------------


def _path(*parts: str) -> str:
    return os.path.join(_state.dir, *parts)


def _write(path: str, data: bytes | str) -> None:
    """Whole or not at all: a temporary file beside, then renamed."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "wb") as handle:
        handle.write(data.encode() if isinstance(data, str) else data)
    os.replace(temporary, path)


def _record(event: str) -> None:
    _state.events.append(f"{time.time():.3f} {event}")
    doc = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "host": HOST,
        "argv": list(sys.argv),
        "executable": sys.executable,
        "rank": _state.rank,
        "backend": _state.backend,
        "steps": _state.steps,
        "events": _state.events[-50:],
        "profiler": _state.profiler_spans[-20:],
    }
    _write(_path("injob", f"{os.getpid()}.json"), json.dumps(doc))


def _say(text: str) -> None:
    try:
        sys.stderr.write(f"ncclprobe capture (pid {os.getpid()}): {text}\n")
    except Exception:
        pass


# ---- the watcher thread ------------------------------------------------------------------------


def _start_watcher() -> None:
    threading.Thread(target=_watch, name="ncclprobe-capture", daemon=True).start()


def _after_fork() -> None:
    """A forked child (a multiprocessing worker) is its own process: record it, watch again."""
    try:
        _state.steps, _state.written_steps, _state.dumped = 0, -1, False
        _state.profiler, _state.step_mark, _state.events = None, None, []
        _state.profiler_spans = []
        _state.local = threading.local()
        _record("forked")
        _start_watcher()
    except Exception:
        pass


def _watch() -> None:
    next_store_poll = 0.0
    while True:
        try:
            _install_hooks_once()
            _note_process_group()
            _write_progress()
            _read_control()
            now = time.monotonic()
            if now >= next_store_poll and _state.rank is not None:
                next_store_poll = now + STORE_POLL_S
                if _peer_failed():
                    _dump("a peer's collective failed")
        except Exception as exc:
            _say(f"watcher: {type(exc).__name__}: {exc}")
            time.sleep(5 * POLL_S)
        time.sleep(POLL_S)


def _write_progress() -> None:
    if _state.steps != _state.written_steps:
        _state.written_steps = _state.steps
        _write(_path("progress", str(os.getpid())), f"{_state.steps}\n")


def _read_control(names=("dump", "profile"), first: int | None = None) -> None:
    """The capture's requests: `control/dump` and `control/profile` hold `<generation> <word>`; a
    new generation is a new request. The watcher reads both; every top-level forward reads the
    profile's too, so a start or stop takes effect at the first step after it, however late the
    watcher runs on a loaded host (`first`: the step a start read there begins with, the one about
    to run)."""
    for name in names:
        try:
            with open(_path("control", name), encoding="utf-8") as handle:
                text = handle.read().strip()
        except OSError:
            continue
        with _state.control_lock:
            if not text or _state.control.get(name) == text:
                continue
            _state.control[name] = text
        word = text.split()[-1]
        if name == "dump":
            _dump(f"the capture asked ({word})")
        elif name == "profile" and _state.profile_mode == "control":
            _state.want_profile = word == "start"
            if word == "start":  # the next `budget` steps at most: a trace stays small enough
                begin = _state.steps + 1 if first is None else first
                _state.window = (begin, begin + _state.budget - 1)


def _distributed():
    module = sys.modules.get("torch.distributed")
    if module is None or _importing("torch.distributed") or not module.is_available():
        return None
    return module


def _note_process_group() -> None:
    dist = _distributed()
    if dist is None or _state.rank is not None:
        return
    if dist.is_initialized():
        _state.rank = dist.get_rank()
        _state.backend = str(dist.get_backend())
        _record(f"process group: rank {_state.rank}, backend {_state.backend}")


def _store():
    dist = _distributed()
    if dist is None or not dist.is_initialized():
        return None
    return dist.distributed_c10d._get_default_store()


def _peer_failed() -> bool:
    store = _store()
    if store is None:
        return False
    try:
        return bool(store.check([PEER_KEY]))
    except Exception:
        return False


# ---- dumps -------------------------------------------------------------------------------------


def _dump(why: str) -> None:
    """The Flight Recorder's dump (first one of this rank kept) and every thread's Python stack."""
    with _state.lock:
        _stacks(why)
        if _state.rank is None and os.environ.get("RANK", "").isdigit():
            _state.rank = int(os.environ["RANK"])
        if _state.rank is not None and not _state.dumped:
            _flight_recorder()
        _record(f"dumped: {why}")


def _stacks(why: str) -> None:
    rank = f"rank{_state.rank}." if _state.rank is not None else ""
    path = _path("stacks", f"{rank}{HOST}.{os.getpid()}.txt")
    temporary = f"{path}.tmp"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(f"# pid {os.getpid()} at {time.time():.3f}: {why}\n")
        handle.flush()
        faulthandler.dump_traceback(file=handle, all_threads=True)
    os.replace(temporary, path)


def _flight_recorder() -> None:
    torch_c = sys.modules.get("torch._C")
    c10d = getattr(torch_c, "_distributed_c10d", None) if torch_c else None
    if c10d is None:
        return
    own = ("_dump_nccl_trace",) if _state.backend == "nccl" else ()
    call = next((getattr(c10d, n) for n in (*own, "_dump_fr_trace") if hasattr(c10d, n)), None)
    if call is None:
        return
    target = f"{_state.fr_prefix}{_state.rank}"
    if os.path.exists(target):  # NCCL's own dump on its timeout came first: keep it
        _state.dumped = True
        return
    data = call()
    _write(target, data if isinstance(data, bytes) else str(data).encode())
    _state.dumped = True


def _on_uncaught(previous, kind, value, traceback) -> None:
    """A collective that failed here (or any error once a process group exists): dump, tell the
    peers through the job's store, give them a moment to dump, then fail as the job would."""
    try:
        _note_process_group()
        if _state.rank is not None and not issubclass(kind, KeyboardInterrupt):
            _dump(f"uncaught {kind.__name__}")
            store = _store()
            if store is not None:
                try:
                    store.set(PEER_KEY, str(_state.rank))
                    time.sleep(_state.peer_grace_s)
                except Exception:
                    pass
    except Exception:
        pass
    previous(kind, value, traceback)


def _at_exit() -> None:
    """The profile's end, and the Flight Recorder's dump of a rank that used torch.distributed:
    its rank from the process group if the watcher saw it, else from RANK (a short job can create
    and destroy its group between two looks; the recorder keeps its entries after that)."""
    try:
        _stop_profiler("the process exited")
        dist = _distributed()
        if dist is not None:
            _note_process_group()
            if _state.rank is None and os.environ.get("RANK", "").isdigit():
                _state.rank = int(os.environ["RANK"])
            with _state.lock:
                if not _state.dumped and _state.rank is not None:
                    _flight_recorder()
        _write_progress()
        _record("exited")
    except Exception:
        pass


# ---- steps and the profiler --------------------------------------------------------------------


def _install_hooks_once() -> None:
    if _state.hooks_installed:
        return
    modules = sys.modules.get("torch.nn.modules.module")
    if modules is None or _importing("torch") or _importing("torch.nn.modules.module"):
        return  # not imported yet, or still being imported (its functions not all defined)
    _state.hooks_installed = True
    modules.register_module_forward_pre_hook(_pre_forward)
    try:
        modules.register_module_forward_hook(_post_forward, always_call=True)
    except TypeError:  # older torch: no always_call (a forward that raises leaves the depth high)
        modules.register_module_forward_hook(_post_forward)
    _record("step hooks installed")


def _importing(name: str) -> bool:
    spec = getattr(sys.modules.get(name), "__spec__", None)
    return spec is None or bool(getattr(spec, "_initializing", False))


def _capturing() -> bool:
    cuda = sys.modules.get("torch.cuda")
    try:
        return bool(cuda and cuda.is_available() and cuda.is_current_stream_capturing())
    except Exception:
        return False


def _compiling() -> bool:
    compiler = sys.modules.get("torch.compiler")
    return bool(compiler and compiler.is_compiling())


def _pre_forward(module, args):
    if _compiling():
        return None
    local = _state.local
    depth = getattr(local, "depth", 0)
    local.depth = depth + 1
    if depth == 0:
        _state.steps += 1
        _step_boundary()
    return None


def _post_forward(module, args, output):
    if _compiling():
        return None
    local = _state.local
    local.depth = max(0, getattr(local, "depth", 1) - 1)
    return None


def _profile_wanted() -> bool:
    start, stop = _state.window
    if _state.profile_mode == "steps":
        return start <= _state.steps <= stop
    return _state.profile_mode == "control" and _state.want_profile and _state.steps <= stop


def _step_boundary() -> None:
    """At the start of a top-level forward, in the model's thread: end the last step's mark, start
    or stop the profiler, open this step's mark."""
    try:
        if _capturing():
            return  # inside a CUDA graph's capture: no profiler or mark may start or stop there
        if _state.step_mark is not None:
            _state.step_mark.__exit__(None, None, None)
            _state.step_mark = None
        if _state.profile_mode == "control":
            _read_control(("profile",), first=_state.steps)
        wanted = _profile_wanted()
        if wanted and _state.profiler is None:
            _start_profiler()
        elif not wanted and _state.profiler is not None:
            _stop_profiler(f"the window ended at step {_state.steps - 1}")
        if _state.profiler is not None:
            import torch

            _state.profiled_steps += 1
            _state.step_mark = torch.profiler.record_function(f"ProfilerStep#{_state.steps}")
            _state.step_mark.__enter__()
    except Exception as exc:
        _state.profile_mode = "off"
        _say(f"profiler off: {type(exc).__name__}: {exc}")


def _start_profiler() -> None:
    import torch

    span = {"start": round(time.time(), 3)}
    _state.profiler_spans.append(span)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    profiler = torch.profiler.profile(activities=activities, record_shapes=True, with_stack=True)
    profiler.start()
    span["started"] = round(time.time(), 3)
    _state.profiler, _state.profiled_steps = profiler, 0
    _record(f"profiler started at step {_state.steps}")


def _stop_profiler(why: str) -> None:
    profiler = _state.profiler
    if profiler is None:
        return
    _state.profiler = None
    if _state.step_mark is not None:
        _state.step_mark.__exit__(None, None, None)
        _state.step_mark = None
    span = _state.profiler_spans[-1] if _state.profiler_spans else {}
    span["stop"] = round(time.time(), 3)
    profiler.stop()
    _record(f"profiler stopped after {_state.profiled_steps} steps ({why}): writing the trace")
    rank = f".rank{_state.rank}" if _state.rank is not None else ""
    name = f"{HOST}.{os.getpid()}{rank}.trace.json.gz"
    os.makedirs(_path("profiles"), exist_ok=True)
    temporary = _path("profiles", f".{name}.tmp.json.gz")
    profiler.export_chrome_trace(temporary)
    os.replace(temporary, _path("profiles", name))
    span["written"] = round(time.time(), 3)
    _record(f"profile written: {name} ({_state.profiled_steps} steps; {why})")
