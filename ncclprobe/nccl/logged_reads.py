"""Whether NCCL's debug log shows that it read a value: the one rule the sweep's proof and
diagnose's NCCL-log rules judge a setting by.

NCCL prints `<VAR> set by environment to <value>` (ENV subsystem) when it reads a variable that is
set: integer parameters as `%lld.`, strings as given, NCCL_P2P_LEVEL as its normalised path name
(`2` is logged `PXB`), token lists without case. NCCL_P2P_DISABLE is logged only when it is 1, and
before 2.23 as `NCCL_P2P_LEVEL set by environment to LOC` (`ncclGetLevel`, src/graph/paths.cc).
"""

from __future__ import annotations

from ncclprobe.nccl.values import reads_the_same, strtoll

P2P_DISABLE_LOGGED_SINCE = (2, 23, 0)  # before: NCCL_P2P_DISABLE=1 is logged as NCCL_P2P_LEVEL=LOC


def verdict_for(
    name: str, wanted: str, reported: str | None, *, read: dict | None = None, version=None
) -> str:
    """`applied` when NCCL reported reading the value; otherwise why not (`ignored: ...`), or
    `not observable here: ...` where NCCL never logs the read of this value."""
    if name == "NCCL_P2P_DISABLE":
        return _p2p_disable(wanted, reported, read or {}, version)
    if reported is None:
        return "ignored: NCCL did not report reading it (no `set by environment` line)"
    if _same_value(name, wanted, reported):
        return "applied"
    return f"ignored: NCCL reported {reported!r}, not {wanted!r}"


def _p2p_disable(wanted: str, reported: str | None, read: dict, version) -> str:
    """NCCL logs NCCL_P2P_DISABLE only when strtol reads it as 1 (ncclGetLevel, src/graph/paths.cc):
    since 2.23 as its own line, before as `NCCL_P2P_LEVEL set by environment to LOC`."""
    if _strtol(wanted) != 1:
        return (
            f"not observable here: NCCL logs NCCL_P2P_DISABLE only when it is 1; {wanted} leaves P2P "
            "as NCCL_P2P_LEVEL or the default decides"
        )
    if reported is not None:
        return (
            "applied" if _strtol(reported) == 1 else f"ignored: NCCL reported {reported!r}, not '1'"
        )
    if read.get("NCCL_P2P_LEVEL") == "LOC" and (
        version is None or version < P2P_DISABLE_LOGGED_SINCE
    ):
        return "applied"  # NCCL before 2.23 prints the level it turns into
    return "ignored: NCCL did not report reading it (no `set by environment` line)"


def _strtol(text: str) -> int | None:
    """strtol(text, NULL, 0), as NCCL reads NCCL_P2P_DISABLE."""
    return strtoll(text)


def _same_value(name: str, wanted: str, reported: str) -> bool:
    """NCCL logged what it was given, as NCCL parses values (`ncclprobe.nccl.values.as_logged`)."""
    return reads_the_same(name, wanted, reported)
