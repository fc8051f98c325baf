"""What capture drives in SGLang and vLLM, read from their sources, because neither engine can run on
the CPU machine: their profiler directories (`capture.environment.ENGINE_PROFILER_ENV`) and their
profile endpoints (`capture.server.ENGINES`) against the excerpts quoted in
tests/fixtures/engine_source (each file's first line: repository, commit, path; the rows of
`engine_facts.profiler` are read there by tests/test_engine_facts_source.py too). The server path itself runs
for real against `transformers serve` (tests/test_capture_hf.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ncclprobe.capture.environment import ENGINE_PROFILER_ENV, job_environment
from ncclprobe.capture.server import ENGINES, ServerRequest, engine_of
from ncclprobe.errors import UsageProblem

SOURCE = Path(__file__).parent / "fixtures" / "engine_source"


def _text(name: str) -> str:
    return (SOURCE / name).read_text()


def test_sglang_endpoints_and_body_are_its_own():
    text = _text("sglang_http_server.py.txt")
    engine = ENGINES["sglang"]
    for path in (engine["start"], engine["stop"]):
        assert f'@app.api_route("{path}", methods=["GET", "POST"])' in text
    for field in (*engine["start_body"], "output_dir"):  # the capture adds output_dir itself
        assert f"{field}=obj.{field}" in text


def test_vllm_endpoints_exist_only_with_its_profiler_directory_set():
    text = _text("vllm_profile_api_router.py.txt")
    engine = ENGINES["vllm"]
    for path in (engine["start"], engine["stop"]):
        assert f'@router.post("{path}")' in text
    assert engine["start_body"] is None and "body" not in text.split("def start_profile")[1][:60]
    assert "if envs.VLLM_TORCH_PROFILER_DIR or envs.VLLM_TORCH_CUDA_PROFILE" in text
    assert "VLLM_TORCH_PROFILER_DIR" in ENGINE_PROFILER_ENV  # so the capture sets it


def test_the_profiler_variables_the_capture_sets_are_read_by_the_engines(tmp_path):
    sglang, vllm = _text("sglang_environ.py.txt"), _text("vllm_profiler_config.py.txt")
    assert re.search(r"SGLANG_TORCH_PROFILER_DIR = EnvStr\(", sglang)
    for name in ("VLLM_TORCH_PROFILER_DIR", "VLLM_TORCH_PROFILER_RECORD_SHAPES"):
        assert f'"{name}"' in vllm
    assert '"VLLM_TORCH_PROFILER_WITH_STACK",' in vllm
    assert 'value = value == "1"' in vllm  # so "1" is what turns shapes and stacks on
    env = job_environment({}, tmp_path, tmp_path / ".capture")
    assert env.added["VLLM_TORCH_PROFILER_DIR"] == str(tmp_path / "engine-profiles")
    assert Path(env.added["VLLM_TORCH_PROFILER_DIR"]).is_absolute()  # "must be an absolute path"
    assert env.added["VLLM_TORCH_PROFILER_RECORD_SHAPES"] == "1"
    assert env.added["VLLM_TORCH_PROFILER_WITH_STACK"] == "1"


def test_a_vllm_without_the_variables_is_told_its_profiler_config():
    """vLLM deprecates the variables for --profiler-config (to go in v0.14.0 or v1.0.0): where its
    /start_profile answers 404 the capture says what to add, being unable to add it itself."""
    from ncclprobe.engine_facts.profiler import VLLM_NO_ROUTE

    assert "v0.14.0 or v1.0.0" in _text("vllm_profiler_config.py.txt")
    assert "--profiler-config" in VLLM_NO_ROUTE and '"profiler": "torch"' in VLLM_NO_ROUTE


@pytest.mark.parametrize(
    "command, engine",
    [
        (("python", "-m", "sglang.launch_server", "--model-path", "m"), "sglang"),
        (("vllm", "serve", "m"), "vllm"),
        (("python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"), "vllm"),
        (("transformers", "serve", "m"), None),
        (("torchrun", "train.py"), None),
    ],
)
def test_engines_are_told_by_their_command_line(command, engine):
    assert engine_of(command) == engine


@pytest.mark.parametrize(
    "url, fine",
    [
        ("http://127.0.0.1:8000", True),
        ("http://localhost:30000/", True),
        ("http://[::1]:8000", True),
        ("http://127.0.0.2:8000", True),
        ("http://10.1.2.3:8000", False),
        ("http://example.com:8000", False),
        ("ftp://127.0.0.1:8000", False),
        ("127.0.0.1:8000", False),
    ],
)
def test_the_load_goes_to_loopback_only(url, fine):
    if fine:
        assert ServerRequest.of(url, 1, "p", 4, 60.0).url == url.rstrip("/")
    else:
        with pytest.raises(UsageProblem):
            ServerRequest.of(url, 1, "p", 4, 60.0)
