"""Runs across hosts, for real: two hosts made of network namespaces on this machine
(`tests/netns_hosts.py`: own addresses, names, processes), real launchers across them.

torchrun (c10d rendezvous over the namespaces' network): one sweep from one command, its ranks on
both hosts, each host's log and the merged results with the setting node2's profile sets named with
its host; one env-check of a running torchrun job on both hosts, merged, the same setting named
missing on node1. Then, where they are installed, mpirun (Open MPI's daemons reach node2 through
its rsh agent) and Slurm (a slurmctld and a slurmd per host, started here with a private munge):
the same sweep through each, and env-check of a Slurm job through srun.

Skips cleanly where namespaces cannot be made (no root, no CAP_NET_ADMIN: CI may lack them).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import netns_hosts, netns_slurm

WHY_NOT = netns_hosts.unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no namespace hosts: {WHY_NOT}")

HOSTS = ["node1", "node2"]
PROFILE = {"node2": {"NCCL_SOCKET_NTHREADS": "4"}}  # what node2's profile sets, node1's not
NCCLPROBE = [sys.executable, "-m", "ncclprobe"]
SWEEP = ["--sizes", "1K", "--proto", "default", "--algo", "default", "--placement", "in"]
ENV = {**os.environ, "NCCLPROBE_WORKER_THREADS": "1"}  # two cores for every rank of both hosts
JOB = """
import sys, time, torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
open(sys.argv[1] + "/ready-" + str(dist.get_rank()), "w").close()
time.sleep(600)
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    hosts = netns_hosts.Cluster(HOSTS, tmp_path_factory.mktemp("hosts"), extra_env=PROFILE)
    hosts.start()
    yield hosts
    hosts.close()


def _run(args, timeout=240, **kwargs):
    return subprocess.run(
        NCCLPROBE + args, capture_output=True, text=True, timeout=timeout, env=ENV, **kwargs
    )


def _on_node1(cluster, args, timeout=240, env=None):
    """ncclprobe started on node1 (mpirun and srun run from a node of the job)."""
    assignments = [f"{k}={v}" for k, v in {"NCCLPROBE_WORKER_THREADS": "1", **(env or {})}.items()]
    words = ["cd", os.getcwd(), "&&", *assignments, *NCCLPROBE, *args]
    line = " ".join(shlex.quote(w) if w != "&&" else w for w in words)
    proc = cluster.run(
        "node1", line, launcher=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        netns_hosts.stop(proc)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


# ---------------------------------------------------------------- torchrun: the shared sweep


@pytest.fixture(scope="module")
def torchrun_sweep(cluster, tmp_path_factory):
    where = tmp_path_factory.mktemp("sweep")
    args = ["sweep", "--launcher", "torchrun", "--hosts", "node[1-2]", "--node-exec"]
    args += [cluster.node_exec(), "--shared-dir", str(where / "shared")]
    done = _run(args + SWEEP + ["--output", str(where / "r.jsonl"), "--format", "json"])
    table = subprocess.run(
        NCCLPROBE
        + ["sweep", "--collect", str(where / "shared"), "--output", str(where / "t.jsonl")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**ENV, "COLUMNS": "100"},
    )
    return where, done, table


def test_one_command_runs_the_sweep_on_both_hosts(torchrun_sweep):
    where, done, _ = torchrun_sweep
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    hosts = doc["summary"]["hosts"]
    assert hosts["nodes"] == [{"host": "node1", "ranks": [0]}, {"host": "node2", "ranks": [1]}]
    assert hosts["launch"]["launcher"] == "torchrun" and hosts["launches"][0]["status"] == "ok"
    # the rendezvous joined both hosts: one all_reduce of two ranks, exact on both
    [result] = doc["results"]
    assert (result["status"], result["nranks"], result["wrong"]) == ("ok", 2, 0)


def test_each_host_leaves_its_own_log_and_messages(torchrun_sweep):
    where, _, _ = torchrun_sweep
    pool = where / "shared" / "pool0"
    launch = json.loads((pool / "launch.json").read_text())
    assert launch["logs"] == {host: str(pool / "nodes" / f"{host}.log") for host in HOSTS}
    assert all(Path(path).is_file() for path in launch["logs"].values())
    by_rank = {
        rank: [json.loads(line) for line in (pool / f"rank{rank}.jsonl").read_text().splitlines()]
        for rank in (0, 1)
    }
    assert {m["host"] for r in (0, 1) for m in by_rank[r] if m["kind"] == "rendezvous"} == set(
        HOSTS
    )
    assert launch["returncodes"] == {"node1": 0, "node2": 0}


def test_the_setting_one_host_sets_is_named_with_its_host(torchrun_sweep):
    _, done, table = torchrun_sweep
    [diff] = json.loads(done.stdout)["summary"]["hosts"]["differences"]
    assert diff["variable"] == "NCCL_SOCKET_NTHREADS"
    assert [(v["value"], v["hosts"], v["ranks"]) for v in diff["values"]] == [
        (None, ["node1"], [0]),
        ("4", ["node2"], [1]),
    ]
    # the same merge from the shared directory alone (--collect), as a table's notes
    assert table.returncode == 0, table.stderr[-2000:]
    assert "# hosts through torchrun: node[1-2] (1 rank each: ranks 0-1)" in table.stdout
    assert "# NCCL_SOCKET_NTHREADS missing on node1 (rank 0); '4' on node2 (rank 1)" in table.stdout


# ---------------------------------------------------------------- env-check of a torchrun job


@pytest.fixture(scope="module")
def torchrun_job(cluster, tmp_path_factory):
    """A user's job on both hosts: torchrun, rendezvous id `userjob`, NCCL_PROTO=LL everywhere."""
    where = tmp_path_factory.mktemp("job")
    (where / "job.py").write_text(JOB)
    line = (
        f"cd {where} && NCCL_PROTO=LL {sys.executable} -m torch.distributed.run --nnodes=2 "
        "--nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=node1:29455 --rdzv-id=userjob "
        f"job.py {where}"
    )
    procs = [
        cluster.run(host, line, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for host in HOSTS
    ]
    try:
        deadline = time.monotonic() + 120
        while len(list(where.glob("ready-*"))) < 2:
            assert time.monotonic() < deadline, "the job did not start on both hosts"
            time.sleep(0.2)
        yield where
    finally:
        for proc in procs:
            netns_hosts.stop(proc)


@pytest.fixture(scope="module")
def env_check_across(cluster, torchrun_job, tmp_path_factory):
    shared = tmp_path_factory.mktemp("ec") / "shared"
    args = ["env-check", "--launcher", "torchrun", "--hosts", "node1,node2", "--node-exec"]
    args += [
        cluster.node_exec(),
        "--job",
        "TORCHELASTIC_RUN_ID=userjob",
        "--expect",
        "NCCL_PROTO=LL",
    ]
    return shared, _run(args + ["--shared-dir", str(shared), "--format", "json"])


def test_env_check_finds_the_job_on_every_host_and_merges(env_check_across):
    shared, done = env_check_across
    assert done.returncode == 1, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["kind"] == "env-check-hosts" and doc["launch"]["status"] == "ok"
    by_host = {h["host"]: h for h in doc["hosts"]}
    assert sorted(by_host) == HOSTS
    for host in HOSTS:  # each host sees only its own worker (its own PID namespace)
        [proc] = by_host[host]["processes"]
        assert proc["env"]["NCCL_PROTO"] == "LL" and proc["checks"] == [
            {"variable": "NCCL_PROTO", "status": "ok"}
        ]
        assert (shared / "env-check" / f"{host}.json").is_file()


def test_env_check_names_the_setting_missing_on_one_host(env_check_across):
    _, done = env_check_across
    findings = json.loads(done.stdout)["findings"]
    assert [f["rule"] for f in findings] == ["hosts-setting-differs"]
    [differs] = findings
    assert differs["severity"] == "error"
    assert differs["title"] == "NCCL_SOCKET_NTHREADS missing on node1; '4' on node2"
    assert differs["evidence"]["values"] == [
        {"value": [None], "hosts": ["node1"]},
        {"value": ["4"], "hosts": ["node2"]},
    ]


# ---------------------------------------------------------------- mpirun


@pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="mpirun (Open MPI) is not installed here"
)
def test_mpirun_runs_the_sweep_on_both_hosts(cluster, tmp_path):
    args = ["sweep", "--launcher", "mpirun", "--hosts", "node1,node2"]
    args += [
        "--launcher-arg=--mca",
        "--launcher-arg=plm_rsh_agent",
        f"--launcher-arg={cluster.rsh_agent}",
    ]
    args += ["--shared-dir", str(tmp_path / "shared"), "--output", str(tmp_path / "r.jsonl")]
    done = _on_node1(cluster, args + SWEEP + ["--format", "json"])
    assert done.returncode == 0, done.stderr[-3000:]
    hosts = json.loads(done.stdout)["summary"]["hosts"]
    assert hosts["nodes"] == [{"host": "node1", "ranks": [0]}, {"host": "node2", "ranks": [1]}]
    assert [d["variable"] for d in hosts["differences"]] == ["NCCL_SOCKET_NTHREADS"]
    outputs = sorted(
        p.parent.name for p in (tmp_path / "shared" / "pool0" / "nodes").rglob("stdout")
    )
    assert outputs == ["rank.0", "rank.1"]  # mpirun's own per-rank output files


# ---------------------------------------------------------------- Slurm: srun


@pytest.fixture(scope="module")
def slurm(cluster):
    why = netns_slurm.unavailable()
    if why:
        pytest.skip(f"no Slurm here: {why}")
    [(host, setting)] = [(h, f"{k}={v}") for h, env in PROFILE.items() for k, v in env.items()]
    cluster_slurm = netns_slurm.Slurm(cluster, host, setting).start()
    yield cluster_slurm
    cluster_slurm.close()


def test_srun_runs_the_sweep_on_both_hosts(cluster, slurm, tmp_path):
    args = ["sweep", "--launcher", "srun", "--nodes", "2", "--store-addr", "node1"]
    args += ["--shared-dir", str(tmp_path / "shared"), "--output", str(tmp_path / "r.jsonl")]
    done = _on_node1(cluster, args + SWEEP + ["--format", "json"], env=slurm.env)
    assert done.returncode == 0, done.stderr[-3000:]
    hosts = json.loads(done.stdout)["summary"]["hosts"]
    assert hosts["launch"]["launcher"] == "srun"
    assert hosts["nodes"] == [{"host": "node1", "ranks": [0]}, {"host": "node2", "ranks": [1]}]
    # the TaskProlog's setting on node2: named with its host
    [diff] = hosts["differences"]
    assert [(v["value"], v["hosts"]) for v in diff["values"]] == [
        (None, ["node1"]),
        ("4", ["node2"]),
    ]
    logs = sorted(p.name for p in (tmp_path / "shared" / "pool0" / "nodes").iterdir())
    assert logs == ["node1.0.log", "node2.1.log", "srun.log"]  # srun's own per-task output files


def test_env_check_of_a_slurm_job_through_srun(cluster, slurm, tmp_path):
    ready = tmp_path / "ready"
    ready.mkdir()
    task = f"echo $SLURM_JOB_ID > {ready}/$SLURM_NODEID && exec sleep 600"
    line = (
        f"SLURM_CONF={slurm.env['SLURM_CONF']} NCCL_PROTO=LL srun --nodes=2 --ntasks-per-node=1 "
        f"sh -c {shlex.quote(task)}"
    )
    job = cluster.run(
        "node1", line, launcher=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while len(list(ready.iterdir())) < 2:
            assert time.monotonic() < deadline, "the Slurm job did not start on both hosts"
            time.sleep(0.2)
        job_id = (ready / "0").read_text().strip()
        args = [
            "env-check",
            "--launcher",
            "srun",
            "--nodes",
            "2",
            "--job",
            f"SLURM_JOB_ID={job_id}",
        ]
        args += [
            "--expect",
            "NCCL_PROTO=LL",
            "--shared-dir",
            str(tmp_path / "shared"),
            "--format",
            "json",
        ]
        done = _on_node1(cluster, args, env=slurm.env)
    finally:
        netns_hosts.stop(job)
    assert done.returncode == 1, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert {h["host"]: len(h["processes"]) for h in doc["hosts"]} == {"node1": 1, "node2": 1}
    assert [f["title"] for f in doc["findings"]] == [
        "NCCL_SOCKET_NTHREADS missing on node1; '4' on node2"
    ]


# ---------------------------------------------------------------- NCCL across the hosts (GPU)


@pytest.mark.gpu
def test_nccl_runs_across_the_hosts_over_their_network(cluster, tmp_path):
    """Real NCCL between two namespace hosts: each host has its own name, so NCCL takes them for two
    nodes and connects them over NET/Socket through the namespaces' network (even on one GPU, which
    both then share, as `--share-gpu` does on one host); every rank's log proves what it read."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    # a GPU of its own per host where there are two; on one, both hosts share it
    second = 1 if torch.cuda.device_count() > 1 else 0
    wrapper = tmp_path / "gpuexec.sh"
    wrapper.write_text(
        f'#!/bin/sh\ncase "$1" in node1) gpu=0;; *) gpu={second};; esac\n'
        "exec env CUDA_VISIBLE_DEVICES=$gpu NCCL_NVLS_ENABLE=0 NCCL_SOCKET_IFNAME=eth0 "
        f'{cluster.exec_script} "$1" "$2"\n'
    )
    wrapper.chmod(0o755)
    node_exec = f"{wrapper} {{host}}"
    args = ["sweep", "--launcher", "torchrun", "--hosts", "node1,node2", "--node-exec", node_exec]
    args += ["--backend", "nccl", "--nranks", "2", "--sizes", "1M", "--proto", "default,LL"]
    args += ["--algo", "default", "--placement", "in", "--mode", "eager"]
    args += [
        "--shared-dir",
        str(tmp_path / "shared"),
        "--output",
        str(tmp_path / "r.jsonl"),
        "--format",
        "json",
    ]
    done = _run(args)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    # NCCL_PROTO=LL read and chosen, per rank, from each rank's own NCCL log
    assert {c["status"] for c in doc["configs"]} == {"ok"}
    assert doc["summary"]["hosts"]["nodes"] == [
        {"host": "node1", "ranks": [0]},
        {"host": "node2", "ranks": [1]},
    ]
    pool = tmp_path / "shared" / "pool0"
    logs = {rank: (pool / f"nccl-rank{rank}.log").read_text() for rank in (0, 1)}
    # the two hosts met over the network, and NCCL's own lines name each rank's host
    assert all("NET/Socket" in text for text in logs.values())
    assert "node2" in logs[1] and "node1" in logs[0]
