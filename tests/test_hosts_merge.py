"""The merges across hosts on their own: the sweep's ranks put back on their hosts, env-check's node
documents read and judged (every rule beside its healthy twin), a job found on this host by its
launcher's id, and the options that take a command across hosts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from ncclprobe.diagnose.process_env import hosts as rules
from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.bundle import Evidence
from ncclprobe.evidence.live import host_env_checks as docs
from ncclprobe.evidence.live.job_processes import AGENT, JobSelector, job_roots
from ncclprobe.sweep.host_merge import HostMerge, notes, ranks_text
from ncclprobe.verdict import Verdict

# ---------------------------------------------------------------- the sweep's merge


def _pool(hosts: list[str], env_by_rank: dict[int, dict]) -> list[dict]:
    messages = [{"rank": r, "kind": "rendezvous", "host": h} for r, h in enumerate(hosts)]
    return messages + [
        {"rank": r, "kind": "config-start", "config_id": "c", "seen_env": env}
        for r, env in env_by_rank.items()
    ]


def test_the_same_settings_on_every_host_are_no_difference():
    merge = HostMerge(swept=("NCCL_PROTO",))
    same = {"NCCL_IB_DISABLE": "1", "NCCL_DEBUG_FILE": "/x/nccl-rank{r}.log"}
    merge.add(
        0, _pool(["a", "a", "b", "b"], {r: {**same, "NCCL_PROTO": str(r)} for r in range(4)}), None
    )
    summary = merge.summary({"launcher": "srun"})
    assert summary["differences"] == []  # the swept and the per-rank log file differ by design
    assert summary["nodes"] == [{"host": "a", "ranks": [0, 1]}, {"host": "b", "ranks": [2, 3]}]
    assert notes(summary) == ["hosts through srun: a,b (2 ranks each: ranks 0-3)"]


def test_a_setting_one_host_lacks_is_named_with_its_hosts_and_ranks():
    merge = HostMerge(swept=())
    env = {r: ({"NCCL_IB_HCA": "mlx5_0"} if r < 6 else {}) for r in range(8)}
    merge.add(0, _pool(["n1", "n1", "n2", "n2", "n3", "n3", "n4", "n4"], env), {"status": "ok"})
    [diff] = merge.differences()
    assert diff["values"] == [
        {"value": "mlx5_0", "hosts": ["n1", "n2", "n3"], "ranks": [0, 1, 2, 3, 4, 5], "pool": 0},
        {"value": None, "hosts": ["n4"], "ranks": [6, 7], "pool": 0},
    ]
    assert "NCCL_IB_HCA missing on n4 (ranks 6-7); 'mlx5_0' on n[1-3] (ranks 0-5)" in notes(
        merge.summary(None)
    )


def test_pools_placed_alike_and_launches_that_went_well_add_no_note():
    merge = HostMerge(swept=())
    for pool in (0, 1):
        merge.add(pool, _pool(["a", "b"], {}), {"status": "ok", "reason": None})
    merge.add(
        2, [{"rank": 0, "kind": "config-start", "config_id": "c"}], None
    )  # no seen_env: skipped
    summary = merge.summary({"launcher": "mpirun"})
    assert summary["placed_otherwise"] == [] and notes(summary) == [
        "hosts through mpirun: a,b (1 rank each: ranks 0-1)"
    ]


def test_a_pool_placed_otherwise_and_a_failed_launch_are_said():
    merge = HostMerge(swept=())
    merge.add(0, _pool(["a", "b"], {}), {"status": "ok"})
    merge.add(1, _pool(["b", "a"], {}), {"status": "hang", "reason": "nothing changed for 120 s"})
    said = notes(merge.summary({"launcher": "torchrun"}))
    assert "pool 1 placed the ranks otherwise: a,b (1 rank each: ranks 0-1)" in said
    assert "pool 1: the launch hang: nothing changed for 120 s" in said
    assert HostMerge(swept=()).summary(None) is None  # a sweep that never left this host


def test_ranks_read_as_ranges():
    assert ranks_text([3]) == "rank 3"
    assert ranks_text([0, 1, 2, 5, 7, 8]) == "ranks 0-2, 5, 7-8"
    spread = range(0, 4096, 512)  # one rank per node of eight, round-robin
    assert ranks_text(spread, limit=8) == "ranks 0, 512, 1024, 1536, 2048, 2560, 3072, 3584"
    assert ranks_text(spread, limit=7) == "ranks 0, 512, 1024, 1536, 2048, 2560, 3072, and 1 more"


# ---------------------------------------------------------------- env-check across hosts


def _doc(pid: int, env: dict, checks=(), findings=(), libnccl=None) -> dict:
    return {
        "schema_version": 1,
        "kind": "env-check",
        "root_pid": pid,
        "processes": [
            {
                "pid": pid,
                "ppid": 1,
                "role": "torchrun worker",
                "readable": True,
                "env": env,
                "libnccl": libnccl,
                "checks": [{"variable": v, "status": s} for v, s in checks],
            },
        ],  # fmt: skip
        "verdict": {"exit_code": 0, "checked_pids": [pid], "findings": list(findings)},
    }


def _evidence(tmp_path, by_host: dict[str, list[dict]], expected=None) -> docs.HostsEnvEvidence:
    for host, documents in by_host.items():
        doc = docs.node_document(host, {"env": {"X": "1"}}, [d["root_pid"] for d in documents], documents,
                                 None if documents else "no process of the job on this host",
                                 [f"10.0.0.{host[-1]}"])  # fmt: skip
        path = docs.node_path(tmp_path, host)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))
    return docs.HostsEnvEvidence(
        checks=docs.read_host_checks(tmp_path),
        expected=tuple(expected or by_host),
        launch={"status": "ok", "reason": None},
        selector={"env": {"TORCHELASTIC_RUN_ID": "r"}, "command": None},
        launcher="torchrun",
    )


def _judge(hosts: docs.HostsEnvEvidence):
    """env-check --launcher's judgement: the rule set across hosts over the evidence bundle."""
    return rules.hosts_report(Evidence(hosts=hosts))


ALIKE = {"NCCL_PROTO": "LL", "WORLD_SIZE": "4", "MASTER_ADDR": "n1"}


def test_hosts_with_the_same_settings_raise_nothing(tmp_path):
    ev = _evidence(
        tmp_path, {h: [_doc(10 + i, {**ALIKE, "RANK": str(i)})] for i, h in enumerate(["n1", "n2"])}
    )
    result = _judge(ev)
    assert result.findings == [] and result.verdict() is Verdict.FINE  # RANK differs by design
    assert result.rows[0]["settings"] == "NCCL_PROTO=LL MASTER_ADDR=n1 WORLD_SIZE=4"
    [alike] = result.sections[-1].rows  # the table: hosts alike are one row
    assert (alike["hosts"], alike["processes"]) == ("n[1-2]", 1) and "roots" not in alike


@pytest.mark.parametrize(
    "name, second, severity, title",
    [
        ("NCCL_ALGO", {"NCCL_ALGO": "Tree"}, "error", "NCCL_ALGO differs between hosts: 'Ring' on n1; 'Tree' on n2"),
        ("NCCL_ALGO", {}, "error", "NCCL_ALGO missing on n2; 'Ring' on n1"),
        ("NCCL_SOCKET_IFNAME", {"NCCL_SOCKET_IFNAME": "eth1"}, "warning",
         "NCCL_SOCKET_IFNAME differs between hosts: 'eth0' on n1; 'eth1' on n2"),
        ("TORCH_NCCL_BLOCKING_WAIT", {}, "warning", "TORCH_NCCL_BLOCKING_WAIT missing on n2; '1' on n1"),
    ],
)  # fmt: skip
def test_a_setting_that_differs_is_named_with_its_hosts(tmp_path, name, second, severity, title):
    first = {"NCCL_ALGO": "Ring", "NCCL_SOCKET_IFNAME": "eth0", "TORCH_NCCL_BLOCKING_WAIT": "1"}
    other = {k: v for k, v in first.items() if k != name} | second
    result = _judge(_evidence(tmp_path, {"n1": [_doc(1, first)], "n2": [_doc(2, other)]}))
    [finding] = result.findings
    assert (finding.rule, finding.severity, finding.title) == (
        "hosts-setting-differs",
        severity,
        title,
    )
    assert result.verdict() is (Verdict.FINDINGS if severity == "error" else Verdict.FINE)


def test_many_hosts_read_as_one_line(tmp_path):
    by_host = {
        f"gpu{i:03d}": [_doc(i, {"NCCL_ALGO": "Ring"} if i != 17 else {})] for i in range(1, 65)
    }
    [finding] = _judge(_evidence(tmp_path, by_host)).findings
    assert finding.title == "NCCL_ALGO missing on gpu017; 'Ring' on gpu[001-016,018-064]"


def test_expectations_and_lint_errors_are_grouped_by_host(tmp_path):
    lint = "pid 7: lint error: NCCL_P2P_LEVEL=sys: `sys` is not a level name"
    ev = _evidence(
        tmp_path,
        {
            "n1": [_doc(7, {"NCCL_P2P_LEVEL": "sys"}, [("NCCL_PROTO", "missing")], [lint])],
            "n2": [
                _doc(
                    8,
                    {"NCCL_P2P_LEVEL": "sys"},
                    [("NCCL_PROTO", "missing")],
                    [lint.replace("7", "8")],
                )
            ],
            "n3": [_doc(9, {"NCCL_P2P_LEVEL": "sys", "NCCL_PROTO": "LL"}, [("NCCL_PROTO", "ok")])],
        },
    )
    titles = [f.title for f in _judge(ev).findings]
    assert "NCCL_PROTO missing on n[1-2] (2 process(es))" in titles
    assert "lint error on n[1-2]: NCCL_P2P_LEVEL=sys: `sys` is not a level name" in titles


def test_hosts_without_the_job_and_hosts_never_heard_from_are_named(tmp_path):
    ev = _evidence(tmp_path, {"n1": [_doc(1, ALIKE)], "n2": []}, expected=("n1", "10.0.0.2", "n3"))
    found = {f.rule: f for f in _judge(ev).findings}
    assert found["hosts-no-job"].title == "no process of the job on n2 (TORCHELASTIC_RUN_ID=r)"
    assert found["hosts-not-checked"].title.startswith("not checked: n3 (no document came back")
    assert _judge(ev).verdict() is Verdict.FINDINGS
    srun = docs.HostsEnvEvidence(checks=ev.checks, expected=2)
    assert srun.missing() == 0  # counted: two documents for two nodes
    # n2 named by its address is found; a name it does not answer to is not
    named = docs.HostsEnvEvidence(checks=ev.checks, expected=("n1", "n2.cluster"))
    assert named.missing() == ["n2.cluster"]


def test_no_readable_process_anywhere_is_nothing_here(tmp_path):
    result = _judge(_evidence(tmp_path, {"n1": [], "n2": []}))
    assert (
        result.verdict() is Verdict.NOTHING_HERE and result.to_json()["verdict"]["exit_code"] == 3
    )


def test_a_node_document_is_checked_on_reading(tmp_path):
    (tmp_path / "env-check").mkdir()
    (tmp_path / "env-check" / "x.json").write_text(
        json.dumps({"kind": "env-check", "schema_version": 1})
    )
    with pytest.raises(UsageProblem, match="x.json.*not an env-check node document"):
        docs.read_host_checks(tmp_path)
    bad_inner = docs.node_document("x", {}, [1], [{"kind": "env-check"}], None)
    (tmp_path / "env-check" / "x.json").write_text(json.dumps(bad_inner))
    with pytest.raises(UsageProblem, match=r"documents\[0\]"):
        docs.read_host_checks(tmp_path)


def test_secrets_in_a_node_document_are_masked_as_read(tmp_path):
    ev = _evidence(
        tmp_path,
        {"n1": [_doc(1, {"NCCL_PROTO": "LL", "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz12"})]},
    )
    text = json.dumps(_judge(ev).to_json())
    assert "hf_abcdefghijklmnopqrstuvwxyz12" not in text and '"NCCL_PROTO": "LL"' in text


# ---------------------------------------------------------------- the job on this host


@pytest.fixture
def a_job(tmp_path):
    """A job of two processes (a parent and its child) carrying a job id, and ncclprobe's agent."""
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    job = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "HOSTS_TEST_JOB": "j1"})
    agent = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, "HOSTS_TEST_JOB": "j1", AGENT: "1"},
    )
    deadline = time.monotonic() + 20
    import psutil

    while not psutil.Process(job.pid).children():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    yield job
    for proc in (job, agent):
        for child in psutil.Process(proc.pid).children():
            child.kill()
        proc.kill()
        proc.wait()


def test_the_job_is_found_by_its_launchers_id_and_only_its_top_process(a_job):
    assert job_roots(JobSelector.parse(("HOSTS_TEST_JOB=j1",))) == [a_job.pid]  # not the agent
    assert job_roots(JobSelector.parse(("HOSTS_TEST_JOB=j2",))) == []
    both = JobSelector.parse(("HOSTS_TEST_JOB=j1",), "subprocess.Popen")
    assert job_roots(both) == [a_job.pid]
    assert job_roots(JobSelector.parse((), "no such command line anywhere 8d1f")) == []


def test_a_selector_says_what_it_needs():
    with pytest.raises(UsageProblem, match="say which job"):
        JobSelector.parse((), None)
    with pytest.raises(UsageProblem, match="expected NAME=VALUE"):
        JobSelector.parse(("SLURM_JOB_ID",))
    assert JobSelector.parse(("A=1",), "train.py").args() == ["--job", "A=1", "--match", "train.py"]


# ---------------------------------------------------------------- the command line


@pytest.mark.parametrize(
    "args, message",
    [
        (["sweep", "--hosts", "a,b"], "--hosts is for a run across hosts; add --launcher"),
        (["sweep", "--launcher", "mpirun", "--hosts", "a"], "--launcher needs --shared-dir"),
        (
            ["sweep", "--launcher", "torchrun", "--hosts", "a", "--shared-dir", "d"],
            "give --node-exec",
        ),
        (
            ["env-check", "--job", "A=1"],
            "--job and --match find the job on every node; add --launcher",
        ),
        (["env-check"], "--pid is required (or --launcher"),
        (
            [
                "env-check",
                "--launcher",
                "mpirun",
                "--hosts",
                "a",
                "--pid",
                "1",
                "--shared-dir",
                "d",
            ],
            "drop --pid",
        ),
    ],
)
def test_contradictions_are_one_line_and_exit_2(args, message, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "ncclprobe", *args], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1


# ---------------------------------------------------------------- pinned by the mutation run


def _two(first: dict, second: dict, *, checked=(2,)) -> dict:
    """A document of two processes (pids 1 and 2), only `checked` counting (libnccl mapped)."""
    doc = _doc(1, first)
    doc["processes"].append({**doc["processes"][0], "pid": 2, "env": second})
    doc["verdict"]["checked_pids"] = list(checked)
    return doc


def test_only_the_processes_that_matter_count(tmp_path):
    """n1's launcher (no libnccl, not counted) lacks NCCL_PROTO; its worker and n2's have it."""
    ev = _evidence(
        tmp_path, {"n1": [_two({}, {"NCCL_PROTO": "LL"})], "n2": [_doc(3, {"NCCL_PROTO": "LL"})]}
    )
    assert _judge(ev).findings == []


def test_a_host_whose_processes_disagree_is_shown_with_both_values(tmp_path):
    mixed = _two({"NCCL_ALGO": "Ring"}, {}, checked=(1, 2))
    ev = _evidence(tmp_path, {"n1": [mixed], "n2": [_doc(3, {"NCCL_ALGO": "Ring"})]})
    [finding] = _judge(ev).findings
    assert finding.title == "NCCL_ALGO differs between hosts: 'Ring' or unset on n1; 'Ring' on n2"
    assert "NCCL_ALGO" not in _judge(ev).rows[0]["settings"]
    apart = _evidence(
        tmp_path / "b", {"n1": [_two({"NCCL_ALGO": "Ring"}, {"NCCL_ALGO": "Tree"}, checked=(1, 2))]}
    )
    assert _judge(apart).rows[0]["settings"] == ""  # not alike: not shown


def test_values_are_listed_most_hosts_first_then_by_first_host(tmp_path):
    by_host = {"n1": "Tree", "n2": "Ring", "n3": "Ring", "n4": "Ring"}
    ev = _evidence(
        tmp_path, {h: [_doc(i, {"NCCL_ALGO": v})] for i, (h, v) in enumerate(by_host.items(), 1)}
    )
    assert _judge(ev).findings[0].title == (
        "NCCL_ALGO differs between hosts: 'Ring' on n[2-4]; 'Tree' on n1"
    )
    tie = {"n1": "Ring", "n2": "Tree", "n3": "Tree", "n4": "Ring"}
    ev = _evidence(
        tmp_path / "t", {h: [_doc(i, {"NCCL_ALGO": v})] for i, (h, v) in enumerate(tie.items(), 1)}
    )
    assert _judge(ev).findings[0].title == (
        "NCCL_ALGO differs between hosts: 'Ring' on n[1,4]; 'Tree' on n[2-3]"
    )


def test_each_rules_words_and_counts(tmp_path):
    ev = _evidence(
        tmp_path,
        {
            "n1": [_two({"NCCL_ALGO": "Ring"}, {"NCCL_ALGO": "Ring"}, checked=(1, 2))],
            "n2": [_doc(3, {"NCCL_ALGO": "Tree", "NCCL_SOCKET_IFNAME": "eth1"})],
        },
    )
    by_name = {f.evidence["variable"]: f for f in _judge(ev).findings}
    assert "NCCL reads it on every rank" in by_name["NCCL_ALGO"].detail
    assert "for its own hardware" in by_name["NCCL_SOCKET_IFNAME"].detail
    two = _two({}, {}, checked=(1, 2))
    for proc in two["processes"]:
        proc["checks"] = [{"variable": "NCCL_PROTO", "status": "missing"}]
    unknown = _doc(4, {}, [("NCCL_PROTO", "unknown")])
    titles = [
        f.title for f in _judge(_evidence(tmp_path / "e", {"n1": [two], "n2": [unknown]})).findings
    ]
    assert titles == [
        "NCCL_PROTO missing on n1 (2 process(es))",
        "NCCL_PROTO unknown on n2 (1 process(es))",
    ]


def test_the_hosts_never_heard_from_say_why_and_where(tmp_path):
    ev = _evidence(tmp_path, {"n1": [_doc(1, ALIKE)]}, expected=("n1", "n3"))
    [finding] = _judge(ev).findings
    assert (
        finding.title
        == "not checked: n3 (no document came back: the agent wrote no document there)"
    )
    assert finding.detail.startswith("The torchrun's run of the agent left no document")
    ev.launch = {
        "status": "error",
        "reason": "n3 exited with exit code 255 (ssh: connect to host n3)",
    }
    assert (
        _judge(ev)
        .findings[0]
        .title.endswith(
            "(no document came back: n3 exited with exit code 255 (ssh: connect to host n3))"
        )
    )
    result = _judge(ev)
    assert result.to_json()["schema_version"] == 1 and result.rows[0]["roots"] == "1"


def test_the_agent_finds_a_job_that_started_before_it(a_job):
    """An agent always starts after the job it looks for: a lower pid than its own is no reason
    to pass a process by."""
    code = (
        "from ncclprobe.evidence.live.job_processes import JobSelector, job_roots; "
        "print(job_roots(JobSelector.parse(('HOSTS_TEST_JOB=j1',))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == f"[{a_job.pid}]", done.stderr


def test_node_documents_are_bounded_and_their_roots_are_pids(tmp_path, monkeypatch):
    _evidence(tmp_path, {"n1": [_doc(1, ALIKE)], "n2": [_doc(2, ALIKE)]})
    monkeypatch.setattr(docs, "MAX_FILES", 1)
    with pytest.raises(UsageProblem, match="holds more than 1 node documents"):
        docs.read_host_checks(tmp_path)
    monkeypatch.setattr(docs, "MAX_FILES", 2)
    assert len(docs.read_host_checks(tmp_path)) == 2
    (tmp_path / "env-check" / "n2.json").write_text(
        json.dumps(docs.node_document("n2", {}, [0], [], None))
    )
    with pytest.raises(UsageProblem, match=r'field "roots"\[0\] must be a whole number'):
        docs.read_host_checks(tmp_path)
