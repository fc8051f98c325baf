"""Every module of the package imports on a CPU-only machine.

Worker entries and GPU probes are only imported inside worker processes or on GPUs, so a stale import
(a name another module renamed) would otherwise surface first on the device: this catches it in CI."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import ncclprobe


def _modules() -> list[str]:
    return sorted(info.name for info in pkgutil.walk_packages(ncclprobe.__path__, prefix="ncclprobe.")
                  if not info.name.endswith("__main__"))


@pytest.mark.parametrize("name", _modules())
def test_module_imports(name):
    importlib.import_module(name)
