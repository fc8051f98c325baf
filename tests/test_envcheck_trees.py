"""env-check on two more real trees: a torchrun job (agent and two workers) and a job part of
which another user owns (the walk reports what it can't read and goes on)."""

import json
import os
import shutil
import subprocess
import sys

import psutil
import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.evidence.live.walk import walk
from tests.test_envcheck import _stop_tree, _wait_for

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _start(argv, **env):
    """Start `argv` and return once it has exec'd: until then /proc shows the forked test's environment."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    proc = subprocess.Popen(
        argv,
        env={**clean, **env},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_for(lambda: psutil.Process(proc.pid).cmdline()[-len(argv) + 1 :] == argv[1:])
    return proc


@pytest.fixture
def torchrun_job(tmp_path):
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not installed")
    script = tmp_path / "train.py"
    script.write_text(
        "import os, pathlib, sys, time\n"
        "pathlib.Path(sys.argv[1], os.environ['RANK']).touch()\n"
        "time.sleep(120)\n"
    )
    proc = _start(
        [torchrun, "--standalone", "--nproc-per-node", "2", str(script), str(tmp_path)],
        NCCL_PROTO="LL",
    )
    try:
        _wait_for(lambda: (tmp_path / "0").exists() and (tmp_path / "1").exists(), timeout_s=60)
        yield proc.pid
    finally:
        _stop_tree(proc)


def test_torchrun_agent_and_workers(torchrun_job):
    infos = walk(torchrun_job)
    agent = infos[0]
    workers = [i for i in infos if i.role == "torchrun worker"]
    assert agent.role == "torchrun agent"
    assert sorted(w.environ["RANK"] for w in workers) == ["0", "1"]
    assert all(w.ppid == agent.pid and w.environ["NCCL_PROTO"] == "LL" for w in workers)
    result = CliRunner().invoke(cli, ["env-check", "--pid", str(torchrun_job), "--format", "json"])
    doc = json.loads(result.stdout)
    diffs = [p["diff_from_parent"] for p in doc["processes"] if p["role"] == "torchrun worker"]
    assert all(
        d["RANK"]["parent"] is None and d["LOCAL_RANK"]["child"] in ("0", "1") for d in diffs
    )


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to run the checker as another user",
)


def _check_as_nobody(pid: int, *args: str) -> subprocess.CompletedProcess:
    cmd = NOBODY + [sys.executable, "-m", "ncclprobe", "env-check", "--pid", str(pid), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd="/")


@needs_root
def test_unreadable_processes_are_reported_and_the_walk_goes_on():
    # a root-owned shell whose child runs as nobody: the checker (nobody) can read only the child
    job = _start(["/bin/sh", "-c", " ".join(NOBODY) + " sleep 60 & wait"], NCCL_PROTO="LL")
    try:
        _wait_for(lambda: len(_children(job.pid)) == 1)
        done = _check_as_nobody(job.pid, "--expect", "NCCL_PROTO=LL", "--format", "json")
        doc = json.loads(done.stdout)
        root, child = doc["processes"]
        assert (
            not root["readable"] and "permission denied" in root["problem"] and root["env"] is None
        )
        assert child["readable"] and child["env"]["NCCL_PROTO"] == "LL"
        assert done.returncode == 0 and doc["verdict"]["checked_pids"] == [child["pid"]]
    finally:
        _stop_tree(job)


@needs_root
def test_nothing_readable_exits_3():
    job = _start([sys.executable, "-c", "import time; time.sleep(60)"], NCCL_PROTO="LL")
    try:
        done = _check_as_nobody(job.pid)
        assert done.returncode == 3 and "permission denied" in done.stdout
    finally:
        _stop_tree(job)


def _children(pid: int) -> list:
    return psutil.Process(pid).children()


def test_lint_error_in_a_process_is_a_finding():
    job = _start([sys.executable, "-c", "import time; time.sleep(60)"], NCCL_P2P_LEVEL="sys")
    try:
        result = CliRunner().invoke(cli, ["env-check", "--pid", str(job.pid), "--format", "json"])
        doc = json.loads(result.stdout)
        assert result.exit_code == 1
        assert [f["code"] for f in doc["processes"][0]["lint"]] == ["p2p-level-case"]
        assert doc["verdict"]["findings"][0].startswith(
            f"pid {job.pid}: lint error: NCCL_P2P_LEVEL=sys"
        )
    finally:
        _stop_tree(job)


def test_expect_from_what_the_recommender_wrote(tmp_path):
    from tests.data.resultsets import config, curve, scaled, write_set

    default = curve(20.0, 0.05)
    results = write_set(
        tmp_path / "r.jsonl",
        [config({}, default), config({"NCCL_PROTO": "LL"}, scaled(default, 0.6, 1.3))],
    )
    rec = tmp_path / "rec.json"
    made = CliRunner().invoke(
        cli, ["recommend", results, "--sizes", "4K,16K", "--emit", "json", "--output", str(rec)]
    )
    assert made.exit_code == 0 and json.loads(rec.read_text())["env"] == {"NCCL_PROTO": "LL"}
    tuned = _start([sys.executable, "-c", "import time; time.sleep(60)"], NCCL_PROTO="LL")
    untuned = _start([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for job, code in ((tuned, 0), (untuned, 1)):
            result = CliRunner().invoke(
                cli, ["env-check", "--pid", str(job.pid), "--expect-from", str(rec)]
            )
            assert result.exit_code == code, result.stdout
    finally:
        _stop_tree(tuned)
        _stop_tree(untuned)


def test_an_empty_environment_block_is_called_out():
    job = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], env={}, start_new_session=True
    )
    try:
        _wait_for(lambda: psutil.Process(job.pid).cmdline()[1:2] == ["-c"])
        result = CliRunner().invoke(
            cli, ["env-check", "--pid", str(job.pid), "--expect", "NCCL_PROTO=LL", "--wide"]
        )
        assert result.exit_code == 1 and "environment block is empty" in result.stdout
        assert "NCCL_PROTO unknown" in result.stdout  # not "missing": /proc can't tell
    finally:
        _stop_tree(job)


def test_a_worker_renamed_with_setproctitle_hides_its_environment():
    """What vLLM and SGLang workers do: /proc then shows no environment though os.environ has it."""
    pytest.importorskip("setproctitle")
    code = (
        "import os, setproctitle, sys, time; setproctitle.setproctitle('sglang::scheduler_TP0'); "
        "print(os.environ['NCCL_PROTO'], flush=True); time.sleep(60)"
    )
    job = subprocess.Popen(
        [sys.executable, "-c", code],
        env=dict(os.environ, NCCL_PROTO="LL"),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert job.stdout.readline().strip() == "LL"  # renamed, and still has the variable
        result = CliRunner().invoke(
            cli,
            ["env-check", "--pid", str(job.pid), "--expect", "NCCL_PROTO=LL", "--format", "json"],
        )
        proc = json.loads(result.stdout)["processes"][0]
        assert proc["role"] == "SGLang process" and proc["command"] == "sglang::scheduler_TP0"
        assert (
            proc["env"] == {} and proc["checks"][0]["status"] == "unknown" and result.exit_code == 1
        )
    finally:
        _stop_tree(job)
