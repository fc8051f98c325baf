"""The command group's contract: --version, help with examples, one-line errors with exit code 2."""

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from ncclprobe import __version__
from ncclprobe.cli import cli


def _invoke(*args):
    return CliRunner().invoke(cli, list(args), prog_name="ncclprobe")


def test_version():
    result = _invoke("--version")
    assert result.exit_code == 0 and __version__ in result.output


def test_sweep_help_has_examples_and_states_the_cpu_defaults():
    result = _invoke("sweep", "--help")
    assert result.exit_code == 0
    assert "Examples:" in result.output and "ncclprobe sweep --resume" in result.output
    assert "64..1M:16" in result.output and "2 local ranks" in result.output


def test_python_dash_m_prints_help_and_lists_sweep():
    out = subprocess.run(
        [sys.executable, "-m", "ncclprobe", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0
    assert "sweep" in out.stdout and "Measure a collective" in out.stdout


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--sizes", "1Q"], "bad size '1Q'"),
        (["--sizes", "-5"], "'-5'"),
        (["--sizes", "1M..1K"], "below the minimum"),
        (["--proto", "Fast"], "unknown token 'Fast'"),
        (["--algo", "Ringg"], "'Ringg'"),
        (["--p2p-level", "sys"], "did you mean SYS"),
        (["--set", "NCCL_BUFFSIZE"], "expected NCCL_VAR=value1,value2"),
        (["--set", "NCCL_SHM_DISABLE=2"], "NCCL_SHM_DISABLE='2'"),
        (["--backend", "nccl", "--nranks", "64"], "GPU"),
        (["--mode", "graph", "--backend", "gloo"], "--mode graph needs CUDA"),
        (["--iters", "0"], "--iters must be at least 1"),
        (["--output", "/nonexistent-dir/x.jsonl"], "does not exist"),
        (["--nranks", "0"], "--nranks must be at least 1"),  # not silently the default 2
        (["--set", "NCCL_DEBUG=WARN"], "cannot be swept"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, needle):
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = _invoke("sweep", *args)
    finally:
        os.chdir(cwd)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ncclprobe: error:") and needle in lines[0]
    assert "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []  # nothing half-written, not even ./runs


def test_existing_output_is_never_overwritten(tmp_path):
    out = tmp_path / "taken.jsonl"
    out.write_text("precious\n")
    result = _invoke("sweep", "--output", str(out))
    assert result.exit_code == 2 and "already exists" in result.stderr
    assert out.read_text() == "precious\n"


@pytest.mark.parametrize(
    "content,needle",
    [
        (
            json.dumps({"record": "header", "schema_version": 99, "kind": "sweep"}) + "\n",
            "schema version 99",
        ),
        ("not json at all\n", "not an ncclprobe results file"),
        (
            json.dumps({"record": "header", "schema_version": 1, "kind": "nccl-tests"}) + "\n",
            "not a sweep results file",
        ),
    ],
)
def test_resume_of_another_file_is_refused(tmp_path, content, needle):
    path = tmp_path / "other.jsonl"
    path.write_text(content)
    result = _invoke("sweep", "--resume", str(path))
    assert result.exit_code == 2, result.output
    assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert path.read_text() == content


def test_resume_cannot_be_combined_with_grid_options(tmp_path):
    result = _invoke("sweep", "--resume", str(tmp_path / "x.jsonl"), "--proto", "LL")
    assert result.exit_code == 2 and "drop --proto" in result.stderr


def test_resume_of_a_missing_file_is_refused(tmp_path):
    result = _invoke("sweep", "--resume", str(tmp_path / "missing.jsonl"))
    assert result.exit_code == 2 and "cannot read results file" in result.stderr


def test_resume_of_a_header_with_a_broken_spec_is_a_usage_error(tmp_path):
    path = tmp_path / "broken.jsonl"
    content = (
        json.dumps({"record": "header", "schema_version": 1, "kind": "sweep", "spec": {"grid": {}}})
        + "\n"
    )
    path.write_text(content)
    result = _invoke("sweep", "--resume", str(path))
    assert result.exit_code == 2, result.output
    assert "unreadable sweep spec" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert path.read_text() == content


@pytest.mark.parametrize(
    "quiet_first", [True, False], ids=["ncclprobe -q sweep", "ncclprobe sweep -q"]
)
def test_cpu_sweep_states_why_graph_mode_was_skipped(tmp_path, quiet_first):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("graph mode runs where CUDA is available")
    out = tmp_path / "r.jsonl"
    args = [
        "sweep",
        "--sizes",
        "64",
        "--proto",
        "default",
        "--algo",
        "default",
        "--iters",
        "1",
        "--trials",
        "1",
        "--warmup",
        "0",
        "--output",
        str(out),
    ]
    result = _invoke(*(["-q", *args] if quiet_first else [*args, "-q"]))
    assert result.exit_code == 0, result.output
    assert "# graph mode skipped: CUDA graphs need a GPU" in result.stdout
    assert result.stderr == ""  # -q: no progress, no notes on stderr
    results = [json.loads(line) for line in out.read_text().splitlines() if '"result"' in line]
    assert {r["mode"] for r in results} == {"eager"} and len(
        results
    ) == 2  # in and out of place, no graph rows


def test_sweep_json_is_stdout_only_and_carries_the_lint(tmp_path):
    out = tmp_path / "r.jsonl"
    result = _invoke(
        "sweep",
        "--sizes",
        "64",
        "--proto",
        "default",
        "--algo",
        "default",
        "--set",
        "NCCL_BUFSIZE=8",
        "--iters",
        "1",
        "--trials",
        "1",
        "--warmup",
        "0",
        "--backend",
        "gloo",
        "--output",
        str(out),
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)  # one JSON document, nothing else
    assert doc["schema_version"] == 1 and {"time_us", "busbw_gbps", "size_bytes"} <= set(
        doc["results"][0]
    )
    assert [(f["code"], f["config_ids"]) for f in doc["lint"]] == [
        ("unknown-variable", ["NCCL_BUFSIZE=8"])
    ]
    assert "did you mean NCCL_BUFFSIZE" in result.stderr  # said on stderr before the run too


def test_resume_of_a_gpu_sweep_on_a_host_without_enough_gpus_is_refused(tmp_path):
    from ncclprobe.sweep.plan import SweepSpec

    spec = SweepSpec(grid={}, sizes=(8,), nranks=64, backend="nccl")
    path = tmp_path / "gpu.jsonl"
    content = (
        json.dumps(
            {"record": "header", "schema_version": 1, "kind": "sweep", "spec": spec.to_json()}
        )
        + "\n"
        + json.dumps({"record": "config", "config_id": "default", "results_expected": 2})
        + "\n"
    )
    path.write_text(content)  # an unfinished tail: left alone when refused
    result = _invoke("sweep", "--resume", str(path))
    assert result.exit_code == 2, result.output
    assert (
        "cannot resume" in result.stderr
        and "GPU" in result.stderr
        and len(result.stderr.strip().splitlines()) == 1
    )
    assert path.read_text() == content
