"""The child processes of the env-propagation probe (`env_propagation` is the parent): a driver per
mechanism, which delivers the variable to one worker the way a launcher does (a shell, a
multiprocessing start method, a pool, torchrun, subprocess env=), and the worker, which sets what
its spec says, creates NCCL communicators on a GPU and reports the three views it has of the
variable (/proc/self/environ, os.environ, C getenv).

Both run as `python -m ncclprobe.probes.env_propagation_child drive|work SPEC.json`, in processes
of their own, so they live apart from the parent, which imports only their module name and the
one marked line in which a driver or worker says the system refused a write (`say_disk_error`,
`raise_disk_error`).
"""

from __future__ import annotations

import ctypes
import errno
import json
import multiprocessing
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

MODULE = "ncclprobe.probes.env_propagation_child"


class Skip(Exception):
    """This mechanism can't be tried here (say, torchrun is not installed)."""


DISK_ERROR_MARK = "ncclprobe-env-propagation: write refused:"  # then errno and file
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})
DISK_ERROR_EXIT = 5


def say_disk_error(exc: OSError) -> bool:
    """In a driver or worker: a write the system refused (full disk, quota, read-only) is said in
    one marked line on the stderr the parent reads (workers share their driver's), so the parent
    can stop with the one-line error instead of putting a traceback in a row; False for others."""
    if exc.errno not in DISK_ERRNOS:
        return False
    print(f"{DISK_ERROR_MARK} {exc.errno} {exc.filename or ''}", file=sys.stderr, flush=True)
    return True


def raise_disk_error(stderr: str) -> None:
    """In the parent: the OSError a driver or its worker said it met, raised here."""
    for line in stderr.splitlines():
        if line.startswith(DISK_ERROR_MARK):
            code, _, filename = line[len(DISK_ERROR_MARK) :].strip().partition(" ")
            raise OSError(int(code), os.strerror(int(code)), filename or None)


# ---------------------------------------------------------------- driver side (one process per mechanism)


def drive(spec: dict) -> None:
    """Deliver spec["value"] to a worker by spec["mechanism"]; the worker writes the result file."""
    name, var, value = spec["mechanism"], spec["variable"], spec["value"]
    worker = {"variable": var, "nccl": spec["nccl"], "result": spec["result"]}
    if name.startswith("worker-"):
        key = {"worker-before-comm": "set_before", "worker-setenv": "setenv_before"}.get(
            name, "set_after"
        )
        worker[key] = {var: value}
    path = Path(spec["result"]).with_suffix(".worker.json")
    path.write_text(json.dumps(worker))
    _DRIVERS.get(name, _drive_plain)(spec, str(path))


def _worker_cmd(path: str) -> list[str]:
    return [sys.executable, "-m", MODULE, "work", path]


def _drive_plain(spec: dict, path: str) -> None:
    subprocess.run(_worker_cmd(path), check=True)


def _drive_shell(spec: dict, path: str, export: bool) -> None:
    assign = f"{spec['variable']}={shlex.quote(spec['value'])}"
    script = f"{'export ' if export else ''}{assign}; exec {shlex.join(_worker_cmd(path))}"
    subprocess.run(["/bin/sh", "-c", script], check=True)


def _drive_context(spec: dict, path: str, method: str) -> None:
    os.environ[spec["variable"]] = spec["value"]
    _run_process(multiprocessing.get_context(method), path)


def _drive_after_forkserver(spec: dict, path: str) -> None:
    ctx = multiprocessing.get_context("forkserver")
    os.environ[spec["variable"]] = spec["stale"]
    _run_process(ctx, None)  # starts the forkserver with the stale value
    os.environ[spec["variable"]] = spec["value"]
    _run_process(ctx, path)


def _drive_after_pool(spec: dict, path: str) -> None:
    os.environ[spec["variable"]] = spec["stale"]
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        pool.apply(os.getpid)  # the pool's worker is running now
        os.environ[spec["variable"]] = spec["value"]
        pool.apply(work_from_file, (path,))


def _drive_torchrun(spec: dict, path: str) -> None:
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        raise Skip("torchrun is not installed here")
    os.environ[spec["variable"]] = spec["value"]
    subprocess.run(
        [torchrun, "--standalone", "--nproc-per-node", "1", "--module", MODULE, "work", path],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def _drive_subprocess_env(spec: dict, path: str) -> None:
    subprocess.run(
        _worker_cmd(path), env={**os.environ, spec["variable"]: spec["value"]}, check=True
    )


def _run_process(ctx, path: str | None) -> None:
    proc = ctx.Process(target=work_from_file if path else os.getpid, args=(path,) if path else ())
    proc.start()
    proc.join()
    if proc.exitcode != 0:
        raise RuntimeError(f"the worker exited with {proc.exitcode}")


_DRIVERS = {
    "shell-export": lambda s, p: _drive_shell(s, p, export=True),
    "shell-no-export": lambda s, p: _drive_shell(s, p, export=False),
    "spawn": lambda s, p: _drive_context(s, p, "spawn"),
    "fork": lambda s, p: _drive_context(s, p, "fork"),
    "forkserver": lambda s, p: _drive_context(s, p, "forkserver"),
    "forkserver-after-start": _drive_after_forkserver,
    "pool-after-start": _drive_after_pool,
    "torchrun": _drive_torchrun,
    "subprocess-env": _drive_subprocess_env,
}


# ---------------------------------------------------------------- worker side


def work_from_file(path: str) -> None:
    try:
        work(json.loads(Path(path).read_text()))
    except OSError as exc:  # a multiprocessing worker: its traceback is not the parent's to read
        say_disk_error(exc)
        raise


def work(spec: dict) -> None:
    """Set what the spec says, create communicators on a GPU, and report the three views."""
    var, libc = spec["variable"], ctypes.CDLL(None)
    os.environ.update(spec.get("set_before", {}))
    for name, value in spec.get("setenv_before", {}).items():
        libc.setenv(name.encode(), value.encode(), 1)
    nccl_error = None
    try:
        comms = _Communicators() if spec["nccl"] else None
        os.environ.update(spec.get("set_after", {}))
        if comms and spec.get("set_after"):
            comms.create_another()
        if comms:
            comms.close()
    except Exception as exc:  # report, don't hide: the NCCL column then says why it is empty
        nccl_error = f"NCCL communicator failed: {type(exc).__name__}: {exc}"
    libc.fflush(None)  # NCCL's debug FILE*: multiprocessing children leave through os._exit
    Path(spec["result"]).write_text(
        json.dumps(_views(var, libc) | {"pid": os.getpid(), "nccl_error": nccl_error})
    )


def _views(var: str, libc) -> dict:
    from ncclprobe.evidence.live.environ import read_environ

    libc.getenv.restype = ctypes.c_char_p
    raw = libc.getenv(var.encode())
    return {
        "proc": read_environ(os.getpid()).get(var),
        "os_environ": os.environ.get(var),
        "getenv": raw.decode() if raw is not None else None,
    }


class _Communicators:
    """One-rank NCCL communicators through torch.distributed (GPU only)."""

    def __init__(self):
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
        self._use(None)

    def _use(self, group) -> None:
        tensor = self.torch.ones(1, device="cuda")
        self.dist.all_reduce(
            tensor, group=group
        )  # torch creates the NCCL communicator lazily, here
        self.torch.cuda.synchronize()

    def create_another(self) -> None:
        self._use(self.dist.new_group([0]))

    def close(self) -> None:
        self.dist.destroy_process_group()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("drive", "work"):
        print(
            "usage: python -m ncclprobe.probes.env_propagation_child drive|work SPEC.json",
            file=sys.stderr,
        )
        return 2
    spec = json.loads(Path(argv[1]).read_text())
    # through the installed module, not __main__, so multiprocessing pickles importable names
    from ncclprobe.probes import env_propagation_child as probe

    try:
        probe.drive(spec) if argv[0] == "drive" else probe.work(spec)
    except probe.Skip as exc:  # the installed module's class, not this __main__ copy's
        print(f"skipped: {exc}", file=sys.stderr)
        return 3
    except OSError as exc:
        if probe.say_disk_error(exc):
            return probe.DISK_ERROR_EXIT
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
