"""Lint rules for how NCCL is observed and steered: NCCL_DEBUG_SUBSYS (ENV left out, INFO off,
subsystems this version does not know), NCCL_DEBUG_FILE without %p, deprecated names and modes,
the tuner plugin and its config file, and NCCL_NO_CACHE (which caches it really lifts). Each rule
reads the `Context` and yields `SettingFinding`s; `ncclprobe.nccl.lint` runs them in its order.

The variables these rules read are the rows of `ncclprobe.nccl.knobs_tooling`; the data path's
rules are `lint_datapath`'s.
"""

from __future__ import annotations

from collections.abc import Iterator

from ncclprobe.nccl.knobs import KNOBS, NO_CACHE_SINCE
from ncclprobe.nccl.knobs_tooling import DEBUG_SUBSYSTEM_SINCE
from ncclprobe.nccl.lint_finding import Context, SettingFinding
from ncclprobe.nccl.values import subsystems_enabled
from ncclprobe.nccl.version import release


def debug_subsys(ctx: Context) -> Iterator[SettingFinding]:
    value = ctx.env.get("NCCL_DEBUG_SUBSYS")
    if value is None:
        return
    if "ENV" not in subsystems_enabled(value):
        yield SettingFinding(
            "warning",
            "NCCL_DEBUG_SUBSYS",
            f"NCCL_DEBUG_SUBSYS={value} replaces the default list and "
            "leaves out ENV: the `set by environment` lines, the proof a setting was read, vanish",
            f"export NCCL_DEBUG_SUBSYS={value.rstrip(',')},ENV"
            if not value.startswith("^")
            else "do not exclude ENV",
            "debug-subsys-without-env",
        )
    yield from _subsystems_too_new(ctx, value)
    if ctx.env.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        yield SettingFinding(
            "info",
            "NCCL_DEBUG_SUBSYS",
            "NCCL_DEBUG_SUBSYS only filters INFO lines, and NCCL_DEBUG is "
            f"{ctx.env.get('NCCL_DEBUG', 'unset')}",
            "export NCCL_DEBUG=INFO",
            "debug-subsys-without-info",
        )


def _subsystems_too_new(ctx: Context, value: str) -> Iterator[SettingFinding]:
    """Subsystem names this NCCL version does not know yet: ncclDebugInit skips them silently."""
    if ctx.version is None:
        return
    for name in sorted({t.strip().upper() for t in value.lstrip("^").split(",")}):
        since = DEBUG_SUBSYSTEM_SINCE.get(name)
        if since and ctx.version < since:
            yield SettingFinding(
                "info",
                "NCCL_DEBUG_SUBSYS",
                f"NCCL_DEBUG_SUBSYS names {name}, which NCCL knows from {release(since)}; "
                f"{'.'.join(map(str, ctx.version))} ignores the name",
                f"drop {name}",
                "debug-subsys-too-new",
            )


def debug_file(ctx: Context) -> Iterator[SettingFinding]:
    value = ctx.env.get("NCCL_DEBUG_FILE")
    if value is not None and "%p" not in value:
        yield SettingFinding(
            "warning",
            "NCCL_DEBUG_FILE",
            f"NCCL_DEBUG_FILE={value} has no %p: every process on a host "
            "opens the same file for writing and they overwrite each other",
            "add %p (pid) and %h (host) to the name, e.g. nccl.%h.%p.log",
            "debug-file-shared",
        )


def deprecations(ctx: Context) -> Iterator[SettingFinding]:
    for old, new in (
        ("NCCL_MIN_NCHANNELS", "NCCL_MIN_CTAS"),
        ("NCCL_MAX_NCHANNELS", "NCCL_MAX_CTAS"),
    ):
        if old in ctx.env and ctx.at_least(2, 17) is not False:
            yield SettingFinding(
                "info",
                old,
                f"{old} is deprecated since NCCL 2.17; the most restrictive of it, {new} "
                "and the communicator config wins",
                f"use {new}",
                "deprecated",
            )
    mode = ctx.env.get("NCCL_LAUNCH_MODE", "").strip()
    if mode.upper() == "GROUP" and mode != "GROUP" and ctx.at_least(2, 13) is False:
        yield SettingFinding(
            "error",
            "NCCL_LAUNCH_MODE",
            f"NCCL_LAUNCH_MODE={mode} means PARALLEL before NCCL 2.13, which "
            "compares it with exact case",
            "export NCCL_LAUNCH_MODE=GROUP (or unset it)",
            "launch-mode-case",
        )
    elif mode.upper() == "GROUP":
        yield SettingFinding(
            "info",
            "NCCL_LAUNCH_MODE",
            "NCCL_LAUNCH_MODE=GROUP is deprecated since NCCL 2.9",
            "unset it",
            "deprecated",
        )


def tuner_config(ctx: Context) -> Iterator[SettingFinding]:
    if "NCCL_TUNER_CONFIG_FILE" not in ctx.env:
        return
    if ctx.at_least(2, 27, 5) is False:
        yield SettingFinding(
            "warning",
            "NCCL_TUNER_CONFIG_FILE",
            "NCCL's example tuner plugin reads NCCL_TUNER_CONFIG_FILE "
            f"only from 2.27.5; this is {'.'.join(map(str, ctx.version or ()))}",
            "upgrade NCCL or unset it",
            "tuner-config-too-old",
        )
    if "NCCL_TUNER_PLUGIN" not in ctx.env:
        yield SettingFinding(
            "info",
            "NCCL_TUNER_CONFIG_FILE",
            "NCCL_TUNER_CONFIG_FILE is read only by NCCL's example "
            "tuner plugin, and NCCL_TUNER_PLUGIN is not set",
            "set NCCL_TUNER_PLUGIN to that plugin",
            "tuner-config-without-plugin",
        )


def tuner_plugin(ctx: Context) -> Iterator[SettingFinding]:
    value = ctx.env.get("NCCL_TUNER_PLUGIN", "")
    if value.strip().lower() == "none" and ctx.at_least(2, 28) is False:
        yield SettingFinding(
            "warning",
            "NCCL_TUNER_PLUGIN",
            "NCCL_TUNER_PLUGIN=none means `no plugin` only from NCCL 2.28; "
            "older versions look for a library called none, fail, and fall back (to a tuner inside the "
            "net plugin, else the internal one)",
            "unset it to get the internal tuner",
            "tuner-none-too-old",
        )


def no_cache(ctx: Context) -> Iterator[SettingFinding]:
    """NCCL_NO_CACHE (2.29.7+): which once-per-process caches it really lifts."""
    value = ctx.env.get("NCCL_NO_CACHE")
    if value is None:
        return
    if ctx.version is not None and ctx.version < NO_CACHE_SINCE:
        yield SettingFinding(
            "warning",
            "NCCL_NO_CACHE",
            f"NCCL_NO_CACHE exists from NCCL 2.29.7; this is "
            f"{'.'.join(map(str, ctx.version))}, which caches every variable once per process",
            "upgrade NCCL or unset it",
            "no-cache-too-old",
        )
    for token in (t for t in value.split(",") if t and t != "ALL"):
        row = KNOBS.get(token)
        if not token.startswith("NCCL_"):
            yield SettingFinding(
                "warning",
                "NCCL_NO_CACHE",
                f"NCCL_NO_CACHE lists {token!r}: NCCL compares full names "
                "exactly (NCCL_BUFFSIZE, ALL), so this matches nothing",
                f"write NCCL_{token.upper()}" if token.upper() != "ALL" else "write ALL",
                "no-cache-name",
            )
        elif row is not None and not row.nccl_param:
            yield SettingFinding(
                "info",
                "NCCL_NO_CACHE",
                f"NCCL_NO_CACHE lists {token}, which NCCL does not read through "
                "its cached parameters: it stays read once per process",
                f"drop {token}",
                "no-cache-no-effect",
            )
