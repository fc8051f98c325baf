"""Every module of the package imports on a CPU-only machine.

Worker entries and GPU probes are only imported inside worker processes or on GPUs, so a stale import
(a name another module renamed) would otherwise surface first on the device: this catches it in CI."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import ncclprobe


def _modules() -> list[str]:
    return sorted(
        info.name
        for info in pkgutil.walk_packages(ncclprobe.__path__, prefix="ncclprobe.")
        if not info.name.endswith("__main__")
    )


@pytest.mark.parametrize("name", _modules())
def test_module_imports(name):
    importlib.import_module(name)


def test_setup_cfg_installs_every_package():
    """An editable install finds every package in the tree; a wheel only those setup.cfg lists (a new
    package missing there installs nothing, which CI's editable install would never show)."""
    import configparser
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    cfg = configparser.ConfigParser()
    cfg.read(root / "setup.cfg")
    listed = set(cfg["options"]["packages"].split())
    homes = {
        "ncclprobe": root / "ncclprobe",
        "ncclprobe.engine": root / "engine",
        "ncclprobe.probes": root / "probes",
    }
    found = set()
    for prefix, home in homes.items():
        for init in home.rglob("__init__.py"):
            parts = init.parent.relative_to(home).parts
            if prefix == "ncclprobe" and parts[:1] in (("engine",), ("probes",)):
                continue
            found.add(".".join((prefix, *parts)))
    assert sorted(found - listed) == [] and sorted(listed - found) == []
