"""env-check against real process trees: a parent with known NCCL variables that starts spawn and
forkserver children, a child that changes its own environment after start, a grandchild started
with an extra variable, a zombie, and a process that exits while the walk runs.

`_tree` and `_recheck` stay private and tested directly (issue 38 §4): a process that exits
between the walk's listing and its reading is a race walk() cannot be made to lose on demand."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.diagnose.process_env.check import env_check_report
from ncclprobe.diagnose.process_env.expect import Expectation
from ncclprobe.evidence.bundle import Evidence
from ncclprobe.evidence.live.logcheck import pid_from_filename, read_logs
from ncclprobe.evidence.live.walk import _recheck, _tree, describe, walk
from ncclprobe.gather.processes import gather_processes
from ncclprobe.probes.env_propagation import kill_tree

HF_SECRET = "hf_PlantedTokenValue0123456789abcd"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYPLANTEDKEY"
ARG_SECRET = "hf_ArgvTokenValue9876543210zyxwvu"
SECRETS = (HF_SECRET, AWS_SECRET, ARG_SECRET)

JOB = textwrap.dedent("""
    import multiprocessing as mp, os, subprocess, sys, time
    from pathlib import Path

    def mark(name):
        Path(os.environ["ENVCHECK_DIR"], name).write_text(str(os.getpid()))

    def spawn_child():
        extra = dict(os.environ, NCCL_ALGO="Ring")
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=extra)
        mark("spawn")
        grandchild.wait()

    def mutating_child():
        os.environ["NCCL_PROTO"] = "Simple"   # after exec: /proc keeps showing LL
        mark("mutating")
        time.sleep(120)

    def forkserver_child():
        mark("forkserver")
        time.sleep(120)

    if __name__ == "__main__":
        procs = [mp.get_context("spawn").Process(target=spawn_child),
                 mp.get_context("spawn").Process(target=mutating_child),
                 mp.get_context("forkserver").Process(target=forkserver_child)]
        for p in procs:
            p.start()
        zombie = subprocess.Popen(["true"])   # never waited for: stays a zombie
        while len(list(Path(os.environ["ENVCHECK_DIR"]).iterdir())) < 3:
            time.sleep(0.05)
        mark("ready")
        time.sleep(120)
""")


def _wait_for(predicate, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("the test process tree did not come up in time")


def _start_tree(tmp_path, env_extra):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env.update(env_extra, ENVCHECK_DIR=str(marks))
    proc = subprocess.Popen(
        [sys.executable, str(script), "--hf-token", ARG_SECRET],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return proc, marks


def _stop_tree(proc):
    """torchrun starts its workers in sessions of their own, so killing the agent's group alone
    left them running as orphans: kill the tree by pid as well."""
    kill_tree(proc.pid)
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("envcheck")
    proc, marks = _start_tree(
        tmp_path,
        {
            "NCCL_PROTO": "LL",
            "NCCL_P2P_LEVEL": "SYS",
            "HF_TOKEN": HF_SECRET,
            "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
        },
    )
    try:
        _wait_for(lambda: (marks / "ready").exists())
        _wait_for(
            lambda: any(
                c.status() == psutil.STATUS_ZOMBIE for c in psutil.Process(proc.pid).children()
            )
        )
        pids = {
            name: int((marks / name).read_text()) for name in ("spawn", "mutating", "forkserver")
        }
        yield proc.pid, pids
    finally:
        _stop_tree(proc)


def _run(*args):
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_walk_finds_every_process_with_its_role(job):
    root, pids = job
    infos = {i.pid: i for i in walk(root)}
    roles = [i.role for i in infos.values()]
    assert infos[root].role == "launcher" and infos[root].depth == 0
    assert infos[pids["spawn"]].role == "multiprocessing spawn worker"
    assert infos[pids["mutating"]].role == "multiprocessing spawn worker"
    forkserver_worker = infos[pids["forkserver"]]
    assert forkserver_worker.role == "forkserver worker"
    assert infos[forkserver_worker.ppid].role == "multiprocessing forkserver"
    assert forkserver_worker.forked_from == forkserver_worker.ppid
    grandchildren = [i for i in infos.values() if i.ppid == pids["spawn"]]
    assert len(grandchildren) == 1 and grandchildren[0].depth == 2
    assert roles.count("zombie") == 1
    assert all(i.libnccl is None and i.maps_readable for i in infos.values() if i.readable)


def env_check(pid, **gather):
    """env-check's library road: the processes gathered, the process-environment rule set's Report."""
    return env_check_report(Evidence(processes=gather_processes(pid, **gather)))


def test_expectations_diff_and_caveats(job):
    root, pids = job
    result = env_check(
        root,
        expectations=[
            Expectation("NCCL_PROTO", "LL", "--expect"),
            Expectation("NCCL_ALGO", "Ring", "--expect"),
        ],
    )
    processes = result.data["processes"]
    by_pid = {p.info.pid: p for p in processes}
    status = {pid: {c.variable: c.status for c in p.checks} for pid, p in by_pid.items()}
    grandchild = next(p for p in processes if p.info.ppid == pids["spawn"])
    assert status[root] == {"NCCL_PROTO": "ok", "NCCL_ALGO": "missing"}
    assert status[grandchild.info.pid] == {"NCCL_PROTO": "ok", "NCCL_ALGO": "ok"}
    assert grandchild.diff(False) == {"NCCL_ALGO": {"parent": None, "child": "Ring"}}
    # the child set NCCL_PROTO=Simple after exec: /proc still says LL, and the report says why it can't know
    assert status[pids["mutating"]]["NCCL_PROTO"] == "ok"
    assert any("exec-time environment" in c for c in by_pid[pids["mutating"]].caveats)
    assert any("forked without exec" in c for c in by_pid[pids["forkserver"]].caveats)
    assert result.verdict().exit_code == 1
    assert any("NCCL_ALGO missing" in f.title for f in result.findings)


def test_exit_codes(job, tmp_path):
    root, pids = job
    assert _run("env-check", "--pid", str(root), "--expect", "NCCL_PROTO=LL")[0] == 0
    assert _run("env-check", "--pid", str(root), "--expect", "NCCL_PROTO=Simple")[0] == 1
    zombie = next(
        c.pid for c in psutil.Process(root).children() if c.status() == psutil.STATUS_ZOMBIE
    )
    assert _run("env-check", "--pid", str(zombie))[0] == 3
    code, out, err = _run("env-check", "--pid", "999999999")
    assert code == 2 and out == "" and err.strip().count("\n") == 0 and "999999999" in err
    for bad_pid in ("-5", "0", "abc"):
        code, out, err = _run("env-check", "--pid", bad_pid)
        assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    code, _, err = _run("env-check", "--pid", str(root), "--expect", "NCCL_PROTO")
    assert code == 2 and "NAME=VALUE" in err and err.count("\n") == 1
    bad = tmp_path / "rec.json"
    bad.write_text(json.dumps({"schema_version": 1, "kind": "sweep", "env": {}}))
    code, _, err = _run("env-check", "--pid", str(root), "--expect-from", str(bad))
    assert code == 2 and "not a recommendation" in err


def test_expect_from_recommendation_file(job, tmp_path):
    root, _ = job
    rec = tmp_path / "recommendation.json"
    rec.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "kind": "recommendation",
                "env": {"NCCL_PROTO": "LL", "NCCL_P2P_LEVEL": "SYS"},
            }
        )
    )
    code, out, _ = _run(
        "env-check", "--pid", str(root), "--expect-from", str(rec), "--format", "json"
    )
    doc = json.loads(out)
    assert code == 0 and doc["verdict"]["findings"] == []
    checks = [c for p in doc["processes"] for c in p["checks"]]
    assert {c["status"] for c in checks} == {"ok"} and len(checks) == 2 * len(
        doc["verdict"]["checked_pids"]
    )


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
@pytest.mark.parametrize("show_all", [False, True])
def test_secrets_never_printed(job, tmp_path, fmt, show_all):
    root, _ = job
    rec = tmp_path / "rec.json"
    rec.write_text(
        json.dumps({"schema_version": 1, "kind": "recommendation", "env": {"HF_TOKEN": HF_SECRET}})
    )
    args = [
        "env-check",
        "--pid",
        str(root),
        "--format",
        fmt,
        "--expect",
        f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}",
        "--expect-from",
        str(rec),
        "--wide",
    ] + (["--all"] if show_all else [])  # --wide: every column is searched
    code, out, err = _run(*args)
    assert code == 0
    for secret in SECRETS:
        assert secret not in out and secret not in err
    assert (
        "HF_TOKEN" in out
    ) == show_all or fmt == "json"  # names are shown with --all; JSON lists the expectation
    assert "<masked>" in out or not (show_all or fmt == "json")


def test_secrets_in_bad_expectations_stay_out_of_error_lines(job):
    root, _ = job
    code, out, err = _run(
        "env-check",
        "--pid",
        str(root),
        "--expect",
        f"HF_TOKEN={HF_SECRET}",
        "--expect",
        "HF_TOKEN=hf_AnotherPlantedValue00000000000",
    )
    assert code == 2 and HF_SECRET not in err and "HF_TOKEN" in err
    for mistyped in (f"HF_TOKEN:{HF_SECRET}", HF_SECRET, AWS_SECRET):
        code, out, err = _run("env-check", "--pid", str(root), "--expect", mistyped)
        assert code == 2 and "NAME=VALUE" in err and HF_SECRET not in err and AWS_SECRET not in err


def test_process_exiting_mid_walk_is_reported_and_walk_goes_on(tmp_path):
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
        import subprocess, sys, time
        kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
        print(" ".join(str(k.pid) for k in kids), flush=True)
        for k in kids:
            k.wait()
    """),
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        kids = [int(pid) for pid in parent.stdout.readline().split()]
        walker = _tree(psutil.Process(parent.pid), skip=os.getpid())
        assert next(walker)[0].pid == parent.pid
        first_kid, depth = next(walker)
        os.kill(first_kid.pid, signal.SIGKILL)  # exits after the walk listed it, before it is read
        _wait_for(lambda: not psutil.pid_exists(first_kid.pid))
        gone = describe(first_kid, depth, None)
        assert gone.status == "gone" and not gone.readable and "exited" in gone.problem
        rest = [describe(p, d, None) for p, d in walker]
        assert [i.pid for i in rest] == [k for k in kids if k != first_kid.pid] and rest[0].readable
    finally:
        _stop_tree(parent)


def test_what_was_read_is_dropped_when_the_process_dies_before_the_walk_is_done():
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], env=dict(os.environ, NCCL_PROTO="LL")
    )
    try:
        handle = psutil.Process(proc.pid)
        _wait_for(
            lambda: handle.cmdline()[1:2] == ["-c"]
        )  # exec'd: /proc now shows its own environment
        info = describe(handle, 1, None)
        assert info.readable and info.environ["NCCL_PROTO"] == "LL"
        proc.kill()  # not reaped yet: a zombie, whose /proc/PID/environ now reads as empty
        _wait_for(lambda: handle.status() == psutil.STATUS_ZOMBIE)
        _recheck(handle, info)
        assert (info.status, info.readable, info.environ) == ("gone", False, {})
    finally:
        proc.kill()
        proc.wait()


def test_log_cross_check(job, tmp_path):
    root, pids = job
    pid = pids["mutating"]
    log = tmp_path / f"nccl.host.{pid}.log"
    host = socket.gethostname()
    log.write_text(
        f"{host}:{pid}:{pid} [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n"
        f"{host}:{pid}:{pid} [0] NCCL INFO NCCL_PROTO set by environment to Simple\n"
        f"{host}:{pid}:{pid} [0] NCCL INFO NCCL_BUFFSIZE set by environment to 8388608.\n"
    )
    code, out, _ = _run(
        "env-check",
        "--pid",
        str(root),
        "--log",
        str(log),
        "--expect",
        "NCCL_PROTO=Simple",
        "--format",
        "json",
    )
    doc = json.loads(out)
    kinds = {(d["variable"], d["kind"]) for d in doc["log_checks"]}
    assert kinds == {
        ("NCCL_PROTO", "read, other value"),
        ("NCCL_BUFFSIZE", "read, not in /proc"),
        ("NCCL_P2P_LEVEL", "set, never read"),
    }
    proc = next(p for p in doc["processes"] if p["pid"] == pid)
    assert proc["checks"] == [
        {
            "variable": "NCCL_PROTO",
            "expected": "Simple",
            "actual": "Simple",
            "status": "ok",
            "source": "NCCL log",
        }
    ]
    assert code == 1  # the other processes still have LL
    # a disagreement alone explains, it doesn't fail: expectations and lint decide the exit code
    code, out, _ = _run(
        "env-check", "--pid", str(root), "--log", str(log), "--expect", "NCCL_P2P_LEVEL=SYS"
    )
    assert code == 0 and "NCCL_PROTO: read, other value (/proc 'LL', NCCL 'Simple')" in out


FIXTURE_LOGS = Path(__file__).parent / "fixtures" / "nccl_logs"


def test_real_logs_split_per_process_and_per_host():
    one_node = read_logs([FIXTURE_LOGS / "nccl_2.27.3_4x_l40s_g6e48xlarge_1pod_shm.log"])
    assert sorted(e.pid for e in one_node) == [232, 233, 234, 235]
    assert {e.env["NCCL_P2P_LEVEL"] for e in one_node} == {"NVL"} and {
        e.nccl_version for e in one_node
    } == {"2.27.3"}
    two_nodes = read_logs(
        [FIXTURE_LOGS / "nccl_2.22.3_2node_16x_h100_p5_efa_ofi_tuner_mpirun_tagged.log"]
    )
    assert len({e.host for e in two_nodes}) == 2 and not any(e.on_this_host() for e in two_nodes)
    assert (
        pid_from_filename("nccl.node12.4242.log") == 4242 and pid_from_filename("nccl.log") is None
    )
    assert (
        pid_from_filename("nccl.4242.gpu12.log") == 4242
        and pid_from_filename("nccl-4242.log") == 4242
    )


def test_a_log_from_another_host_is_not_matched_to_local_pids(job):
    root, _ = job
    log = FIXTURE_LOGS / "nccl_2.27.3_4x_l40s_g6e48xlarge_1pod_shm.log"
    result = env_check(root, log_paths=[log])
    assert result.data["disagreements"] == [] and any("not this host" in n for n in result.notes)


def test_watch_follows_workers_that_come_and_go(tmp_path):
    churn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
        import subprocess, sys, time
        while True:
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
            time.sleep(0.2)
    """),
        ],
        start_new_session=True,
        env=dict(os.environ, NCCL_PROTO="LL"),
    )
    try:
        code, out, err = _run(
            "env-check",
            "--pid",
            str(churn.pid),
            "--watch",
            "0.3",
            "--count",
            "4",
            "--format",
            "json",
            "--expect",
            "NCCL_PROTO=LL",
        )
        snapshots = [json.loads(line) for line in out.splitlines()]
        assert code == 0 and [s["snapshot"] for s in snapshots] == [1, 2, 3, 4]
        child_pids = {p["pid"] for s in snapshots for p in s["processes"] if p["depth"] == 1}
        assert len(child_pids) >= 3 and "appeared" in err and "gone" in err
    finally:
        _stop_tree(churn)


def test_secret_spellings_that_slipped_past_names_and_shapes_are_masked():
    """Short secrets under names with no TOKEN/KEY word, passwords in userless URLs, and
    `env NAME=secret cmd` on a command line: each was printed before these rules."""
    from ncclprobe.secrets import MASK as MASKED
    from ncclprobe.secrets import display_value, mask_argv

    assert display_value("MYSQL_PWD", "hunter2") == MASKED
    assert display_value("REDIS_URL", "redis://:s3cretpw@cache:6379/0") == MASKED
    assert (
        display_value("PWD", "/work/job") == "/work/job" and display_value("OLDPWD", "/w") == "/w"
    )
    assert display_value("MASTER_ADDR", "http://host:29500/x") == "http://host:29500/x"
    argv = [
        "env",
        "HF_TOKEN=short1",
        "python",
        "serve.py",
        "--lr=3e-4",
        "--cache",
        "redis://:pw12345@h/0",
    ]
    assert mask_argv(argv) == [
        "env",
        f"HF_TOKEN={MASKED}",
        "python",
        "serve.py",
        "--lr=3e-4",
        "--cache",
        f"redis://{MASKED}@h/0",
    ]  # by structure: the host stays, the password goes


def test_diagnose_env_check_pid_runs_the_process_rules_on_the_live_job(job, tmp_path, monkeypatch):
    """`diagnose --env-check PID` reads the tree now (no document) and ranks what env-check finds;
    its healthy twin (every expectation met) finds nothing; --expect without a PID is bad usage."""
    root, _ = job
    monkeypatch.chdir(tmp_path)  # no file named like the pid here
    code, out, _ = _run(
        "diagnose", "--env-check", str(root), "--expect", "NCCL_ALGO=Ring", "--format", "json"
    )
    doc = json.loads(out)
    assert code == 1 and doc["env_check"]["kind"] == "env-check"
    assert any("NCCL_ALGO missing" in f["title"] for f in doc["findings"])
    assert {f["rule"] for f in doc["findings"]} == {"env-check"}
    code, out, _ = _run(
        "diagnose", "--env-check", str(root), "--expect", "NCCL_PROTO=LL", "--format", "json"
    )
    assert code == 0 and json.loads(out)["findings"] == []
    assert _run("diagnose", "--trace", "t.json", "--expect", "NCCL_PROTO=LL")[0] == 2
