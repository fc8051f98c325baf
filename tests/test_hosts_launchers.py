"""ncclprobe.hosts without a cluster: host lists, a rank's identity from each launcher's variables,
the command lines each launcher gets, and a launch's run, failure and hang on real processes of
this host (the real launchers across real hosts: tests/test_hosts_netns.py)."""

from __future__ import annotations

import re
import shlex
import sys
import time
from pathlib import Path

import pytest

from ncclprobe.errors import UsageProblem
from ncclprobe.hosts import hostlist, identity, launchers, run
from ncclprobe.hosts.launchers import Hosts, Launcher, NodeCommand, Program

# ---------------------------------------------------------------- hostlist


def test_a_hostlist_expands_in_order_with_its_padding():
    assert hostlist.expand("node[01-03,07],gpu7,r[1-2]n[1-2]") == [
        "node01", "node02", "node03", "node07", "gpu7", "r1n1", "r1n2", "r2n1", "r2n2",
    ]  # fmt: skip
    assert hostlist.expand("10.213.0.[1-2]") == ["10.213.0.1", "10.213.0.2"]


@pytest.mark.parametrize(
    "text, problem",
    [
        ("node[1-3", "unbalanced '['"),
        ("node1-3]", "unbalanced ']'"),
        ("node[3-1]", "runs backwards"),
        ("node[a-b]", "not a number"),
        ("node1,node1", "named twice"),
        ("no de", "not a host name"),
        (" , ", "no host"),
        ("n[0-70000]", "larger than 65536"),
    ],
)
def test_a_bad_hostlist_is_one_line_naming_what(text, problem):
    with pytest.raises(UsageProblem, match=re.escape(problem)):
        hostlist.expand(text)


def test_compress_writes_what_expand_reads():
    names = [f"gpu{i:03d}" for i in range(1, 513) if i not in (17, 233)] + ["login1"]
    text = hostlist.compress(names)
    assert text == "gpu[001-016,018-232,234-512],login1"
    assert hostlist.expand(text) == sorted(names)
    assert hostlist.compress(["b9", "b10", "a"]) == "a,b[9-10]"  # unpadded numbers join


def test_compress_cuts_at_its_limit_and_counts_the_rest():
    odd = [f"n{i}" for i in range(1, 40, 2)]  # 20 runs of one
    assert (
        hostlist.compress(odd, limit=20) == "n[" + ",".join(str(i) for i in range(1, 40, 2)) + "]"
    )
    assert hostlist.compress(odd, limit=19).endswith("37], and 1 more host(s)")
    plain = ["a", "b", "c"]
    assert hostlist.compress(plain, limit=3) == "a,b,c"
    assert hostlist.compress(plain, limit=2) == "a,b, and 1 more host(s)"


# ---------------------------------------------------------------- identity


SLURM = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "4", "SLURM_NODEID": "1"}  # fmt: skip
OMPI = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}  # fmt: skip


def test_each_launchers_variables_become_torchs():
    assert identity.torch_env(SLURM) == {
        "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1",
    }  # fmt: skip
    assert identity.torch_env(OMPI) == {
        "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
    }  # fmt: skip
    pmi = {"PMI_RANK": "0", "PMI_SIZE": "2"}
    assert (
        identity.identify(pmi).launcher == "pmi"
        and identity.torch_env(pmi)["LOCAL_WORLD_SIZE"] == "1"
    )
    assert identity.torch_env({}) == {}


def test_torchruns_own_variables_win_over_the_launcher_that_started_torchrun():
    torchrun = {"RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "1"}  # fmt: skip
    assert identity.torch_env({**SLURM, **torchrun}) == {}
    assert identity.identify({**SLURM, **torchrun}).node_rank == 1


def test_a_rank_without_its_world_is_no_launchers_rank():
    """A batch script's shell has SLURM_PROCID=0 and, without --ntasks, no SLURM_NTASKS: not a rank
    srun started, and nothing to map (rather than a refusal naming the missing world size)."""
    assert identity.identify({"SLURM_PROCID": "0"}) is None
    assert identity.identify({"SLURM_NTASKS": "4"}) is None
    assert identity.torch_env({"SLURM_PROCID": "0"}) == {}


def test_a_heterogeneous_steps_tasks_per_node_is_read():
    assert identity.identify({**SLURM, "SLURM_NTASKS_PER_NODE": "4(x2)"}).local_world_size == 4


@pytest.mark.parametrize(
    "change, problem",
    [
        (
            {"SLURM_PROCID": "8"},
            "SLURM_PROCID must be at most 7, got 8",
        ),  # rank == world size: one past the end
        ({"SLURM_PROCID": "x"}, "SLURM_PROCID"),
        ({"SLURM_LOCALID": "4"}, "SLURM_LOCALID"),
        ({"SLURM_NTASKS": "0"}, "SLURM_NTASKS"),
        ({"SLURM_PROCID": "-1"}, "SLURM_PROCID must be at least 0, got -1"),
    ],
)
def test_a_bad_launcher_value_is_named_not_guessed(change, problem):
    with pytest.raises(UsageProblem, match=problem):
        identity.identify({**SLURM, **change})
    last = {**SLURM, "SLURM_PROCID": "7", "SLURM_LOCALID": "3"}  # the healthy twin at the bound
    assert identity.identify(last).rank == 7


# ---------------------------------------------------------------- command lines


PROGRAM = Program(
    module="ncclprobe.worker", per_node=2, env={"NCCL_PROTO": "LL"}, unset=("NCCL_ALGO",)
)
LOGS = Path("/shared/pool0/nodes")


def test_srun_gets_one_command_for_every_node():
    hosts = Hosts(launcher=Launcher.SRUN, nodes=2, python="/venv/bin/python")
    three = Program(
        module="ncclprobe.worker", per_node=3, env={"NCCL_PROTO": "LL"}, unset=("NCCL_ALGO",)
    )
    [cmd] = launchers.commands(hosts, three, run_id="r", log_dir=LOGS, store=("head", 4242))
    assert cmd == NodeCommand(
        "srun",
        ("srun", "--nodes=2", "--ntasks=6", "--ntasks-per-node=3", "--kill-on-bad-exit=1",
         "--output=/shared/pool0/nodes/%N.%t.log", "env", "-u", "NCCL_ALGO", "NCCL_PROTO=LL",
         "MASTER_ADDR=head", "MASTER_PORT=4242", "NCCLPROBE_STORE_PORT=4242", "/venv/bin/python",
         "-m", "ncclprobe.hosts.rank", "ncclprobe.worker"),
    )  # fmt: skip


def test_mpirun_fills_the_hosts_in_order_and_allows_root_only_as_root(monkeypatch):
    hosts = Hosts(launcher=Launcher.MPIRUN, hosts=("a", "b"), launcher_args=("--mca", "x", "y"))
    for euid, extra in ((0, ("--allow-run-as-root",)), (1000, ())):
        monkeypatch.setattr(launchers.os, "geteuid", lambda euid=euid: euid)
        [cmd] = launchers.commands(
            hosts, PROGRAM, run_id="r", log_dir=LOGS
        )  # no store: no rendezvous
        head = ("mpirun", "-np", "4", "--host", "a:2,b:2", "--map-by", "slot", "--output-filename",
                "/shared/pool0/nodes/mpirun", *extra, "--mca", "x", "y", "env")  # fmt: skip
        assert cmd.argv[: len(head)] == head
        assert "MASTER_ADDR=head" not in cmd.argv


def test_torchrun_gets_one_command_per_host_through_node_exec():
    hosts = Hosts(
        launcher=Launcher.TORCHRUN,
        hosts=("n1", "n2"),
        node_exec=("ssh", "-tt", "{host}"),
        launcher_args=("--local-addr={host}",),
        python="/venv/bin/python",
    )
    cmds = launchers.commands(hosts, PROGRAM, run_id="run7", log_dir=LOGS)
    assert [c.label for c in cmds] == ["n1", "n2"]
    assert cmds[1].argv[:3] == ("ssh", "-tt", "n2")
    assert shlex.split(cmds[1].argv[3]) == [
        "env", "-u", "NCCL_ALGO", "NCCL_PROTO=LL", "/venv/bin/python", "-m", "torch.distributed.run",
        "--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d", "--rdzv-endpoint=n1:29400",
        "--rdzv-id=run7", "--local-addr=n2", "-m", "ncclprobe.worker",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "fields, problem",
    [
        ({"launcher": Launcher.TORCHRUN, "node_exec": ("ssh", "{host}")}, "needs --hosts"),
        ({"launcher": Launcher.TORCHRUN, "hosts": ("a",)}, "give --node-exec"),
        ({"launcher": Launcher.MPIRUN}, "needs --hosts"),
        (
            {"launcher": Launcher.SRUN, "node_exec": ("ssh",)},
            "--node-exec is for --launcher torchrun",
        ),
        ({"launcher": Launcher.SRUN, "hosts": ("a",), "nodes": 2}, "--nodes 2 but --hosts names 1"),
    ],
)
def test_hosts_that_cannot_be_reached_are_refused(fields, problem):
    with pytest.raises(UsageProblem, match=problem):
        Hosts(**fields)


def test_srun_takes_its_node_count_from_the_allocation():
    srun = Hosts(launcher=Launcher.SRUN)
    assert srun.node_count({"SLURM_JOB_NUM_NODES": "3"}) == 3
    assert Hosts(launcher=Launcher.SRUN, nodes=2).node_count({"SLURM_JOB_NUM_NODES": "3"}) == 2
    with pytest.raises(UsageProblem, match="needs --nodes N"):
        srun.node_count({})
    with pytest.raises(UsageProblem, match="SLURM_JOB_NUM_NODES must be at least 1, got 0"):
        srun.node_count({"SLURM_JOB_NUM_NODES": "0"})


def test_auto_picks_the_launcher_the_situation_implies(monkeypatch):
    found = {"srun", "mpirun"}
    monkeypatch.setattr(launchers.shutil, "which", lambda tool: tool if tool in found else None)
    detect = launchers.detect
    assert detect("auto", environ={"SLURM_JOB_ID": "7"}) is Launcher.SRUN
    assert detect("auto", node_exec=("ssh",), environ={"SLURM_JOB_ID": "7"}) is Launcher.TORCHRUN
    assert detect("auto", hosts=("a",), environ={}) is Launcher.MPIRUN
    assert detect("mpirun", environ={"SLURM_JOB_ID": "7"}) is Launcher.MPIRUN  # as given
    found.clear()
    with pytest.raises(UsageProblem, match="no launcher found"):
        detect("auto", hosts=("a",), environ={"SLURM_JOB_ID": "7"})


def test_the_store_is_reached_at_this_hosts_address_on_the_route():
    assert launchers.route_address("127.0.0.1") == "127.0.0.1"
    assert (
        launchers.store_address(
            Hosts(launcher=Launcher.MPIRUN, hosts=("127.0.0.1",), store_addr="h")
        )
        == "h"
    )


# ---------------------------------------------------------------- a launch on real processes


def _sh(label: str, line: str) -> NodeCommand:
    return NodeCommand(label, ("sh", "-c", line))


def test_a_launch_is_ok_when_every_command_exits_0(tmp_path):
    out = run.run_launch([_sh("a", "echo hi"), _sh("b", "true")], log_dir=tmp_path, timeout_s=30)
    assert (out.status, out.returncodes) == (run.LaunchStatus.OK, {"a": 0, "b": 0})
    assert Path(out.logs["a"]).read_text() == "hi\n"


def test_a_failed_command_ends_the_others_and_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "GRACE_S", 0.3)
    started = time.monotonic()
    out = run.run_launch(
        [_sh("n1", "echo 'srun: error: Unable to create step'; exit 3"), _sh("n2", "sleep 60")],
        log_dir=tmp_path,
        timeout_s=30,
    )
    elapsed = time.monotonic() - started
    assert (
        out.status is run.LaunchStatus.ERROR and run.GRACE_S <= elapsed < 20
    )  # the grace, then ended
    assert out.reason.startswith("n1 exited with exit code 3 (srun: error: Unable to create step)")
    assert out.returncodes["n2"] == -15  # ended (SIGTERM), not left behind
    assert 0 < out.wall_s < 20 and out.to_json()["wall_s"] == round(out.wall_s, 3)


def test_the_others_get_the_grace_to_end_on_their_own(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "GRACE_S", 5.0)
    out = run.run_launch(
        [_sh("n1", "exit 3"), _sh("n2", "sleep 0.5")], log_dir=tmp_path, timeout_s=30
    )
    assert out.status is run.LaunchStatus.ERROR and out.returncodes == {"n1": 3, "n2": 0}
    monkeypatch.setattr(run, "GRACE_S", 0.2)  # one done early is no failure: the other goes on
    early = run.run_launch(
        [_sh("n1", "true"), _sh("n2", "sleep 1")], log_dir=tmp_path / "b", timeout_s=30
    )
    assert early.status is run.LaunchStatus.OK


def test_a_command_killed_by_a_signal_is_said_so(tmp_path):
    out = run.run_launch([_sh("n1", "kill -HUP $$")], log_dir=tmp_path, timeout_s=30)
    assert out.reason.startswith("n1 was killed by signal SIGHUP")


def test_a_silent_launch_is_a_hang_and_activity_keeps_it_alive(tmp_path):
    started = time.monotonic()
    out = run.run_launch([_sh("n1", "sleep 5")], log_dir=tmp_path, timeout_s=1.5)
    assert out.status is run.LaunchStatus.HANG and "nothing changed for 1.5 s" in out.reason
    assert 1.5 <= time.monotonic() - started < 5
    busy = run.run_launch(  # the ranks' files keep changing: 1.5 s past a 0.5 s bound, fine
        [_sh("n1", "sleep 1.5")],
        log_dir=tmp_path / "b",
        timeout_s=0.5,
        activity=time.time,
    )
    assert busy.status is run.LaunchStatus.OK


def test_a_missing_launcher_is_one_line(tmp_path):
    out = run.run_launch(
        [NodeCommand("srun", ("no-such-launcher-here",))], log_dir=tmp_path, timeout_s=5
    )
    assert (out.status, out.reason) == (
        run.LaunchStatus.ERROR,
        "cannot start 'no-such-launcher-here': not found here",
    )


def test_the_line_that_says_what_went_wrong_is_chosen():
    mpirun = (
        "nsenter: cannot open /proc/1/ns/uts\n"
        + "-" * 74
        + "\nORTE was unable to start\n"
        + "-" * 74
    )
    assert run.problem_line(mpirun) == "nsenter: cannot open /proc/1/ns/uts"
    traceback = (
        'Traceback (most recent call last):\n  File "x", line 1\nRuntimeError: rank 1 failed\nbye'
    )
    assert run.problem_line(traceback) == "RuntimeError: rank 1 failed"
    assert run.problem_line("all fine\nlast words") == "last words"
    assert run.problem_line("") == ""


def test_the_rank_entry_maps_the_launchers_variables_before_the_module_runs(tmp_path):
    import subprocess

    (tmp_path / "show_rank.py").write_text(
        "import os; print(os.environ['RANK'], os.environ['WORLD_SIZE'])"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path), **{k: v for k, v in OMPI.items()}}
    done = subprocess.run(
        [sys.executable, "-m", "ncclprobe.hosts.rank", "show_rank"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.stdout == "3 4\n", done.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "ncclprobe.hosts.rank", "show_rank"],
        env={**env, "OMPI_COMM_WORLD_RANK": "4"},
        capture_output=True,
        text=True,
    )
    assert (
        bad.returncode == 2 and bad.stderr.count("\n") == 1 and "OMPI_COMM_WORLD_RANK" in bad.stderr
    )
