"""Resume after SIGKILL of the sweep's parent: the file stays valid and ends complete, without duplicates."""

import json
import os
import signal
import subprocess
import sys
import time

import psutil

from ncclprobe.records import read_results
from ncclprobe.sweep import session
from ncclprobe.sweep.plan import SweepSpec

ARGS = [
    "--sizes",
    "8,4K",
    "--iters",
    "2",
    "--trials",
    "2",
    "--warmup",
    "1",
    "--proto",
    "default,LL",
    "--algo",
    "default",
    "--p2p-level",
    "default,SYS",
    "--backend",
    "gloo",
    "--nranks",
    "2",
]


def _cli(*args, tmp_dir=None, **kw):
    """The sweep CLI as a separate process. A SIGKILLed sweep cannot remove its working directories,
    so the tests give it their own TMPDIR instead of littering the machine's /tmp."""
    env = {**os.environ, "TMPDIR": str(tmp_dir)} if tmp_dir else None
    return subprocess.Popen(
        [sys.executable, "-m", "ncclprobe", "-q", "sweep", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
        **kw,
    )


def _wait_for_config_record(path, proc, limit_s=60):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and '"record": "config"' in path.read_text():
            return True
        time.sleep(0.05)
    return False


def test_resume_after_sigkill_completes_the_file_without_duplicates(tmp_path):
    out = tmp_path / "sweep.jsonl"
    proc = _cli(*ARGS, "--output", str(out), tmp_dir=tmp_path)
    assert _wait_for_config_record(out, proc), proc.communicate()[1]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed = read_results(out)
    assert 1 <= len(killed.configs) < 4, "the kill came too late to test resuming"

    assert list(tmp_path.glob("ncclprobe-pool-*")), (
        "a SIGKILLed launcher cannot remove its pool directory"
    )
    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "ncclprobe",
            "-q",
            "sweep",
            "--resume",
            str(out),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert resumed.returncode == 0, resumed.stderr
    assert not list(tmp_path.glob("ncclprobe-*")), (
        "the next run removes what a killed one left (tempdirs)"
    )
    final = read_results(out)
    ids = [c["config_id"] for c in final.configs]
    assert sorted(ids) == sorted(
        ["default", "NCCL_PROTO=LL", "NCCL_P2P_LEVEL=SYS", "NCCL_P2P_LEVEL=SYS,NCCL_PROTO=LL"]
    )
    keys = [
        (r.config_id, r.collective, r.mode, r.in_place, r.dtype, r.size_bytes)
        for r in final.results
    ]
    assert len(keys) == len(set(keys)) == 4 * 2 * 2  # configs x sizes x placements
    assert all(r.wrong == 0 for r in final.results)
    lines = out.read_text().splitlines()
    assert sum(json.loads(line)["record"] == "header" for line in lines) == 1
    doc = json.loads(resumed.stdout)
    assert doc["schema_version"] == 1 and len(doc["results"]) == len(keys)


def test_resume_writes_the_missing_summary_then_adds_nothing(tmp_path):
    """A sweep killed after its last configuration but before its summary (the file as it was then:
    every record is fsynced as written) gets the summary on --resume; a finished file, nothing."""
    out = tmp_path / "done.jsonl"
    spec = SweepSpec(grid={}, sizes=(8,), iters=1, trials=1, warmup=0, nranks=2, backend="gloo")
    session.run_job(session.new_job(spec, {}, str(out), ["test"]))
    *records, summary = out.read_text().splitlines(keepends=True)
    assert json.loads(summary)["record"] == "summary"
    out.write_text("".join(records))

    job = session.resume_job(str(out))
    assert job.total == 0
    resumed = session.run_job(job)
    assert [c["config_id"] for c in resumed.configs] == ["default"]
    *kept, added = out.read_text().splitlines(keepends=True)
    assert kept == records and json.loads(added)["record"] == "summary"
    assert json.loads(added)["configs_run"] == 0  # this session ran nothing: it only finished

    before = out.read_bytes()
    assert session.run_job(session.resume_job(str(out))).summaries
    assert out.read_bytes() == before


def test_sigkill_takes_the_workers_down_too(tmp_path):
    proc = _cli(*ARGS, "--output", str(tmp_path / "k.jsonl"), tmp_dir=tmp_path)
    deadline = time.monotonic() + 60
    workers = []
    while time.monotonic() < deadline and len(workers) < 2:
        workers = [
            p
            for p in psutil.Process(proc.pid).children(recursive=True)
            if "ncclprobe.worker" in p.cmdline()
        ]
        time.sleep(0.1)
    assert len(workers) == 2
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert alive == []
