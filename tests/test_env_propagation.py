"""The propagation probe against what each mechanism really does (POSIX exec/fork semantics and
CPython's multiprocessing), measured in real processes: every row is a fresh driver and worker."""

import json

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.probes.env_propagation import (
    MECHANISMS,
    NEEDS_GPU,
    STALE,
    run_probe,
    table_rows,
    verdict,
)

V, S = "SYS", STALE
# mechanism -> (/proc, C getenv, os.environ) in the worker. Why:
#   exec'd children get the environment their parent's C environ held at exec (shell export,
#   spawn, subprocess env=, torchrun); fork copies the C environ but /proc keeps showing the
#   ancestor's exec-time block; a forkserver or pool worker started earlier keeps what it had;
#   a worker's own writes never reach /proc, and C setenv bypasses Python's os.environ.
TRUTH = {
    "shell-export": (V, V, V),
    "shell-no-export": (None, None, None),
    "spawn": (V, V, V),
    "fork": (None, V, V),
    "forkserver": (V, V, V),
    "forkserver-after-start": (S, S, S),
    "pool-after-start": (S, S, S),
    "torchrun": (V, V, V),
    "subprocess-env": (V, V, V),
    "worker-before-comm": (None, V, V),
    "worker-setenv": (None, V, None),
    "worker-after-comm": (None, V, V),
}


@pytest.fixture(scope="module")
def cpu_matrix():
    return run_probe(nccl=False, timeout_s=120)


def test_every_mechanism_is_measured(cpu_matrix):
    assert [r["mechanism"] for r in cpu_matrix["rows"]] == [m.name for m in MECHANISMS]
    assert {r["status"] for r in cpu_matrix["rows"]} == {"measured"}


@pytest.mark.parametrize("mechanism", sorted(TRUTH))
def test_cpu_columns_match_what_the_mechanism_does(cpu_matrix, mechanism):
    row = next(r for r in cpu_matrix["rows"] if r["mechanism"] == mechanism)
    assert (row["proc"], row["getenv"], row["os_environ"]) == TRUTH[mechanism]
    assert row["nccl"] == NEEDS_GPU


def test_per_communicator_row_uses_its_own_path(cpu_matrix):
    row = next(r for r in cpu_matrix["rows"] if r["mechanism"] == "worker-after-comm-percomm")
    assert row["variable"] == "NCCL_TOPO_DUMP_FILE" and row["value_set"].endswith(".xml")
    assert (row["proc"], row["getenv"], row["os_environ"]) == (
        None,
        row["value_set"],
        row["value_set"],
    )


def test_table_cells(cpu_matrix):
    cells = {r["mechanism"]: r for r in table_rows(cpu_matrix)}
    assert (cells["fork"]["/proc"], cells["fork"]["getenv"]) == ("no", "yes")
    assert cells["forkserver-after-start"]["getenv"] == f"no ({STALE})"
    assert cells["spawn"]["read by NCCL"] == NEEDS_GPU


def test_cli_json_subset_and_no_gpu_error():
    result = CliRunner().invoke(
        cli,
        [
            "probe",
            "env-propagation",
            "--mechanism",
            "fork",
            "--mechanism",
            "worker-setenv",
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["schema_version"] == 1 and [r["mechanism"] for r in doc["rows"]] == [
        "fork",
        "worker-setenv",
    ]
    import torch

    if not torch.cuda.is_available():
        result = CliRunner().invoke(cli, ["probe", "env-propagation", "--nccl"])
        assert result.exit_code == 3 and result.stdout == "" and result.stderr.count("\n") == 1


def test_torchrun_missing_is_a_skip_not_an_error(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    doc = run_probe(["torchrun"])
    assert (
        doc["rows"][0]["status"] == "skipped"
        and "torchrun is not installed" in doc["rows"][0]["reason"]
    )
    assert verdict(doc).exit_code == 3


def test_a_mechanism_past_its_timeout_is_killed_with_its_workers():
    doc = run_probe(["spawn", "worker-before-comm"], timeout_s=0.05)
    assert {r["status"] for r in doc["rows"]} == {"error"} and "no result within 0.05 s" in doc[
        "rows"
    ][0]["reason"]
    assert verdict(doc).exit_code == 3
    mixed = {"rows": [doc["rows"][0], {"status": "measured"}]}
    assert verdict(mixed).exit_code == 1


def test_probe_group_lists_env_propagation():
    result = CliRunner().invoke(cli, ["probe", "--help"])
    assert result.exit_code == 0 and "env-propagation" in result.stdout


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_nccl_reads_what_getenv_sees_except_after_its_first_communicator(tmp_path):
    doc = run_probe(nccl=True, workdir=tmp_path, timeout_s=300)
    rows = {r["mechanism"]: r for r in doc["rows"]}
    assert {r["status"] for r in rows.values()} == {"measured"}, [
        r.get("reason") for r in rows.values()
    ]
    for name, (_, getenv, _) in TRUTH.items():
        if name != "worker-after-comm":
            assert rows[name]["nccl"] == getenv, (name, rows[name])
    assert rows["worker-after-comm"]["nccl"] is None  # once per process: the second comm ignores it
    percomm = rows["worker-after-comm-percomm"]
    assert percomm["nccl"] == percomm["value_set"]  # per communicator: the second comm reads it
    assert (tmp_path / "topo.worker-after-comm-percomm.xml").exists()


@pytest.mark.parametrize(
    "args, message",
    [(["--timeout", "0"], "--timeout"), (["--output", "/proc/no-such-dir/x"], "--output")],
)
def test_bad_timeout_or_workdir_is_one_line_exit_2(args, message):
    result = CliRunner().invoke(cli, ["probe", "env-propagation", "--mechanism", "fork", *args])
    assert result.exit_code == 2 and result.stdout == "" and message in result.stderr
    assert result.stderr.count("\n") == 1
