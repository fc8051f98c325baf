"""NCCL_P2P_LEVEL: the level names NCCL accepts, the legacy integers, and the default level.

NCCL reads the variable once per process (ncclGetLevel -> the process-global
ncclTopoUserP2pLevel, src/graph/paths.cc): a name must match one of topoPathTypeStr exactly
(strcmp), else a value starting with a digit is an old-style level mapped by levelsOldToNew,
else it is ignored without a word.
"""

from __future__ import annotations

from ncclprobe.nccl.version import Version, parse_version
from ncclprobe.numbers import is_digits


def path_types(version: Version | None = None) -> tuple[str, ...]:
    """NCCL's path types nearest first (PATH_* in src/graph/topo.h) at `version` (None: the newest),
    the order of every `type <= PATH_X` comparison: PXN came in 2.12, C2C in 2.26, P2C in 2.27
    (after PXN in 2.27.3, before it from 2.27.5)."""
    if version is not None and version < (2, 12, 0):
        return ("LOC", "NVL", "NVB", "PIX", "PXB", "PHB", "SYS")
    if version is not None and version < (2, 26, 0):
        return ("LOC", "NVL", "NVB", "PIX", "PXB", "PXN", "PHB", "SYS")
    if version is not None and version < (2, 27, 0):
        return ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "PXN", "PHB", "SYS")
    if version is not None and version < (2, 27, 5):
        return ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "PXN", "P2C", "PHB", "SYS")
    return ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")


# the newest order: P2P between two GPUs is allowed when their path type is at most the level
# (`path->type <= p2pLevel`)
PATH_TYPES = path_types()
P2P_LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")  # the documented ones
# path types NCCL's code accepts beyond the documented six (topoPathTypeStr up to SYS), and the
# versions that added them (`path_types`): NVB always, PXN from 2.12, C2C from 2.26, P2C from 2.27
P2P_LEVELS_UNDOCUMENTED = ("NVB", "C2C", "P2C", "PXN")
P2P_LEVEL_SINCE = {"PXN": (2, 12, 0), "C2C": (2, 26, 0), "P2C": (2, 27, 0)}
# levelsOldToNew: old-style integer -> the path type NCCL uses (and logs); larger integers are SYS
LEGACY_P2P_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")


def is_legacy_level(value: str) -> bool:
    """An old-style integer level (ASCII digits only: the sweep never measures a value it cannot read)."""
    return is_digits(value)  # ASCII, and at most 19 digits: int() of 5000 digits fails


def legacy_level(value: str) -> str:
    """The path type NCCL reads an old-style level as: a value that starts with a digit and is no
    level name (`2` -> PXB, `9` -> SYS, `2abc` -> PXB).

    NCCL parses it with strtol(str, NULL, 0) and ignores what follows the number: a leading 0x makes
    it hex, a leading 0 octal, read up to the first digit that is not of that base (`010` is 8, `08`
    is 0)."""
    base, text = 10, value
    if value[:2] in ("0x", "0X") and value[2:3] and value[2:3] in _HEX:
        base, text = 16, value[2:]
    elif value.startswith("0"):
        base = 8
    digits = _HEX[:base] if base != 16 else _HEX
    count = len(text) - len(text.lstrip(digits))
    number = int(text[:count], base) if count else 0
    return LEGACY_P2P_LEVELS[min(number, len(LEGACY_P2P_LEVELS) - 1)]


_HEX = "0123456789abcdefABCDEF"


def level_as_logged(value: str) -> str:
    """The spelling of `NCCL_P2P_LEVEL set by environment to <LEVEL>`: integers as path names."""
    return legacy_level(value) if is_legacy_level(value) else value


def default_p2p_level(
    nccl_version: str | None, cpu_vendor: str | None, gpu_count: int
) -> str | None:
    """The P2P level NCCL uses when NCCL_P2P_LEVEL is unset (ncclTopoCheckP2p, src/graph/paths.cc).

    2.22 and older: SYS, lowered to PXB on ARM, Intel and Zhaoxin CPUs. 2.23+: PXB ("don't use
    P2P across CPU host bridges"), raised to SYS on AMD x86 with at most two GPUs. `cpu_vendor` is
    "intel", "amd", "zhaoxin" or "arm"; None (unknown) gives None unless the answer does not depend on it.
    """
    version = parse_version(nccl_version)
    if version is None:
        return None
    if version >= (2, 23, 0):
        if cpu_vendor is None:
            return "PXB" if gpu_count > 2 else None
        return "SYS" if cpu_vendor == "amd" and gpu_count <= 2 else "PXB"
    if cpu_vendor is None:
        return None
    return "PXB" if cpu_vendor in ("arm", "intel", "zhaoxin") else "SYS"
