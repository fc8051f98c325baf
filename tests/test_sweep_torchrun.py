"""A sweep started by real torchrun (the multi-node path), planned and collected by ncclprobe."""

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from ncclprobe.errors import UsageProblem
from ncclprobe.sweep import session
from ncclprobe.sweep.plan import SweepSpec

pytestmark = pytest.mark.skipif(
    shutil.which("torchrun", path=os.path.dirname(sys.executable)) is None,
    reason="torchrun not installed next to this python",
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_torchrun_pools_collect_into_a_proven_results_file(tmp_path):
    spec = SweepSpec(
        grid={"NCCL_PROTO": ("default", "LL"), "NCCL_P2P_LEVEL": ("default", "SYS")},
        sizes=(8, 4096),
        iters=2,
        trials=2,
        warmup=1,
        nranks=2,
        backend="gloo",
    )
    commands = session.plan_torchrun(spec, {}, str(tmp_path / "plan"), ["test"])
    assert len(commands) == 2  # one torchrun launch per once-per-process setting
    env = {
        **os.environ,
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
        "NCCL_PROTO": "Simple",
    }  # inherited, must be removed by the command's env -u
    for command in commands:
        line = (
            command.replace("NNODES", "1")
            .replace("NPROC", "2")
            .replace("HEAD_NODE:29500", f"127.0.0.1:{_free_port()}")
        )
        done = subprocess.run(
            line, shell=True, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-2000:]
    job = session.collect_job(str(tmp_path / "plan"), str(tmp_path / "results.jsonl"))
    results = session.run_job(job)
    by_id = {c["config_id"]: c for c in results.configs}
    assert sorted(by_id) == sorted(
        ["default", "NCCL_PROTO=LL", "NCCL_P2P_LEVEL=SYS", "NCCL_P2P_LEVEL=SYS,NCCL_PROTO=LL"]
    )
    assert all(c["status"] == "ok" and c["proof"]["env_matches"] for c in by_id.values())
    assert by_id["NCCL_P2P_LEVEL=SYS"]["proof"]["seen_env"]["1"]["NCCL_P2P_LEVEL"] == "SYS"
    assert len(results.results) == 4 * 2 * 2 and all(r.wrong == 0 for r in results.results)
    assert results.summaries[-1]["pools_run"] == 2


def test_a_plan_never_overwrites_a_directory(tmp_path):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("keep")
    spec = SweepSpec(grid={}, sizes=(8,), nranks=2, backend="gloo")
    with pytest.raises(UsageProblem, match="not empty"):
        session.plan_torchrun(spec, {}, str(tmp_path / "used"), ["test"])


def test_a_plan_carries_the_lint_of_its_configurations(tmp_path):
    spec = SweepSpec(
        grid={"NCCL_PROTO": ("LL128",), "NCCL_BUFSIZE": ("1",)},
        sizes=(8,),
        nranks=2,
        backend="nccl",
    )
    session.plan_torchrun(spec, {}, str(tmp_path / "plan"), ["test"])
    header = json.loads((tmp_path / "plan" / "plan.json").read_text())["header"]
    codes = {(f["code"], f["severity"]) for f in header["lint"]}
    # the plan runs on other hosts whose links are unknown here: LL128 is a warning, not an error
    assert codes == {("unknown-variable", "warning"), ("ll128-without-nvlink", "warning")}
    assert any(note.startswith("lint warning:") for note in header["notes"])
