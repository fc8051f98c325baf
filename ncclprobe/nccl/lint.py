"""Lint an NCCL environment: settings NCCL ignores silently, rejects, or that can corrupt data.

env-check runs it over what a worker actually saw, the sweep over each configuration before
measuring it, and recommend refuses anything it calls an error. Every rule comes from the
knowledge table (`ncclprobe.nccl.knobs`) and so from ../shared/reference/nccl-facts.md; a finding says
what NCCL will do with the value and how to fix it. `node` (what the topology says about the
GPUs: `ncclprobe.nccl.node`) and `nccl_version` sharpen the verdicts; None means unknown and the
lint says so instead of guessing.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from ncclprobe.errors import UsageProblem
from ncclprobe.findings import SEVERITIES, Finding, severity_rank
from ncclprobe.nccl.knobs import KNOBS, NO_CACHE_SINCE
from ncclprobe.nccl.knobs_tooling import DEBUG_SUBSYSTEM_SINCE
from ncclprobe.nccl.ll128 import ll128_default
from ncclprobe.nccl.names import ALGORITHM_SINCE, ALGORITHM_UNTIL
from ncclprobe.nccl.node import NVLINK_ALL, ONE_GPU, NodeFacts
from ncclprobe.nccl.p2p import (
    P2P_LEVEL_SINCE,
    P2P_LEVELS,
    P2P_LEVELS_UNDOCUMENTED,
    is_legacy_level,
    legacy_level,
)
from ncclprobe.nccl.values import forcing_ll128, parse_integer, subsystems_enabled, validate_value
from ncclprobe.nccl.version import Version, parse_version
from ncclprobe.verdict import Verdict


@dataclass(frozen=True, init=False)
class SettingFinding(Finding):
    """A finding about one NCCL setting: `code` is its rule, `message` its title, `fix` its next
    command. Built positionally, as every lint rule writes it; its JSON keeps the lint's keys."""

    variable: str | None = None

    def __init__(self, severity: str, variable: str | None, message: str, fix: str, code: str = ""):
        super().__init__(
            rule=code,  # stable rule id, e.g. "ll128-without-nvlink", for callers that filter
            severity=severity,
            confidence="high",  # the knowledge table says what NCCL does with the value
            title=message,
            detail="",
            next_command=fix,
        )
        object.__setattr__(self, "variable", variable)

    @property
    def message(self) -> str:
        return self.title

    @property
    def fix(self) -> str:
        return self.next_command

    @property
    def code(self) -> str:
        return self.rule

    def to_json(self) -> dict:
        return {
            "severity": self.severity,
            "variable": self.variable,
            "message": self.message,
            "fix": self.fix,
            "code": self.code,
        }


@dataclass(frozen=True)
class _Context:
    env: Mapping[str, str]
    node: NodeFacts | None
    version: Version | None

    def at_least(self, major: int, minor: int, patch: int = 0) -> bool | None:
        return None if self.version is None else self.version >= (major, minor, patch)


def lint_env(
    env: Mapping[str, str], *, node: NodeFacts | None = None, nccl_version: str | None = None
) -> list[SettingFinding]:
    """Findings for the NCCL_* variables in `env`, errors first. Other variables are ignored."""
    ctx = _Context(
        {k: v for k, v in env.items() if k.startswith("NCCL_")}, node, parse_version(nccl_version)
    )
    findings: list[SettingFinding] = []
    for rule in _RULES:
        findings.extend(rule(ctx))
    return sorted(findings, key=lambda f: (severity_rank(f.severity), f.variable or ""))


def verdict(findings: Iterable[SettingFinding]) -> Verdict:
    """FINDINGS when the lint found an error (warnings and notes alone are FINE)."""
    return Verdict.of(any(f.severity == "error" for f in findings))


def _values(ctx: _Context) -> Iterator[SettingFinding]:
    """Values the knowledge table's validation rejects, and values written with quotes or spaces.

    NCCL_P2P_LEVEL, NCCL_PROTO and NCCL_ALGO have their own rules with sharper messages."""
    for name, value in ctx.env.items():
        if name not in KNOBS or name in ("NCCL_P2P_LEVEL", "NCCL_PROTO", "NCCL_ALGO"):
            continue
        if value != value.strip() or value[:1] in "\"'":
            yield SettingFinding(
                "error",
                name,
                f"{name}={value!r} carries quotes or spaces that NCCL reads as part of the value",
                f"export {name}={value.strip().strip(_QUOTES)}",
                "quoted-value",
            )
            continue
        try:
            validate_value(name, value)
        except UsageProblem as exc:
            yield SettingFinding(
                "error",
                name,
                str(exc),
                f"use one of the values `ncclprobe knobs {name}` lists",
                "invalid-value",
            )


_QUOTES = "\"'"


def _p2p_level(ctx: _Context) -> Iterator[SettingFinding]:
    value = ctx.env.get("NCCL_P2P_LEVEL")
    if value is None:
        return
    if value in P2P_LEVELS:
        return
    if is_legacy_level(value):
        legacy = legacy_level(value)
        yield SettingFinding(
            "info",
            "NCCL_P2P_LEVEL",
            f"NCCL_P2P_LEVEL={value} is a legacy integer; NCCL reads it as {legacy}",
            f"export NCCL_P2P_LEVEL={legacy}",
            "p2p-level-legacy-int",
        )
    elif value in P2P_LEVELS_UNDOCUMENTED:
        yield _undocumented_level(ctx, value)
    elif value.upper() in P2P_LEVELS + P2P_LEVELS_UNDOCUMENTED:
        yield SettingFinding(
            "error",
            "NCCL_P2P_LEVEL",
            f"NCCL_P2P_LEVEL={value}: `{value}` is not a level name (NCCL "
            f"compares them case-sensitively); NCCL ignores it and uses its default level; write "
            f"`{value.upper()}`",
            f"export NCCL_P2P_LEVEL={value.upper()}",
            "p2p-level-case",
        )
    else:
        yield SettingFinding(
            "error",
            "NCCL_P2P_LEVEL",
            f"NCCL_P2P_LEVEL={value!r} is not a P2P level; NCCL ignores it",
            "use one of " + ", ".join(P2P_LEVELS),
            "p2p-level-unknown",
        )


def _undocumented_level(ctx: _Context, value: str) -> SettingFinding:
    since = P2P_LEVEL_SINCE.get(value)
    shown = ".".join(map(str, since[:2])) if since else ""
    if since and ctx.version is not None and ctx.version < since:
        return SettingFinding(
            "error",
            "NCCL_P2P_LEVEL",
            f"NCCL_P2P_LEVEL={value} is not a level name before NCCL {shown} "
            f"(this is {'.'.join(map(str, ctx.version))}): NCCL ignores it and uses its default level",
            "use one of " + ", ".join(P2P_LEVELS),
            "p2p-level-too-new",
        )
    needs = f" (NCCL {shown}+; older versions ignore it)" if since else ""
    return SettingFinding(
        "info",
        "NCCL_P2P_LEVEL",
        f"NCCL_P2P_LEVEL={value} is accepted by NCCL's code but not "
        f"documented{needs}; its meaning may change between versions",
        "prefer one of " + ", ".join(P2P_LEVELS),
        "p2p-level-undocumented",
    )


def _p2p_disable_with_level(ctx: _Context) -> Iterator[SettingFinding]:
    if ctx.env.get("NCCL_P2P_DISABLE") == "1" and "NCCL_P2P_LEVEL" in ctx.env:
        yield SettingFinding(
            "warning",
            "NCCL_P2P_DISABLE",
            "NCCL_P2P_DISABLE=1 turns P2P off, so NCCL_P2P_LEVEL="
            f"{ctx.env['NCCL_P2P_LEVEL']} has no effect",
            "unset one of the two",
            "p2p-disable-and-level",
        )


def _tokens(ctx: _Context) -> Iterator[SettingFinding]:
    """NCCL_PROTO / NCCL_ALGO: unknown tokens, per-collective forms before 2.24, too-new algorithms."""
    for name in ("NCCL_PROTO", "NCCL_ALGO"):
        value = ctx.env.get(name)
        if value is None:
            continue
        try:
            validate_value(name, value)
        except UsageProblem as exc:
            consequence = {
                True: "NCCL 2.24+ refuses it and communicator creation fails",
                False: "NCCL before 2.24 ignores the unknown token silently",
                None: "NCCL 2.24+ fails communicator creation; older versions ignore it silently",
            }
            yield SettingFinding(
                "error",
                name,
                f"{exc}. {consequence[ctx.at_least(2, 24)]}",
                f"see `ncclprobe knobs {name}` for the accepted names",
                "unknown-token",
            )
            continue
        if ":" in value and ctx.at_least(2, 24) is False:
            yield SettingFinding(
                "error",
                name,
                f"{name}={value!r} uses the per-collective form, which NCCL reads only from 2.24",
                "use a plain comma list, or upgrade NCCL",
                "per-collective-too-old",
            )
        yield from _algorithm_versions(ctx, name, value)


def _algorithm_versions(ctx: _Context, name: str, value: str) -> Iterator[SettingFinding]:
    if name != "NCCL_ALGO":
        return
    tokens = {
        t.strip().lower()
        for t in value.replace(";", ",").replace(":", ",").replace("^", "").split(",")
    }
    yield from _algorithms_gone(ctx, name, tokens)
    if ctx.version is None:
        return
    for token in sorted(tokens):
        since = ALGORITHM_SINCE.get(token)
        if since and ctx.version < since:
            yield SettingFinding(
                "error",
                name,
                f"algorithm {token!r} needs NCCL {'.'.join(map(str, since[:2]))}+; "
                f"this is {'.'.join(map(str, ctx.version))}",
                "drop it or upgrade NCCL",
                "algo-too-new",
            )


def _ll128(ctx: _Context) -> Iterator[SettingFinding]:
    """LL128 forced on, directly or by a ^ list that does not exclude it, where NCCL's own rule keeps
    it off (`ncclprobe.nccl.ll128`) or cannot be decided from what is known."""
    forcing = forcing_ll128(ctx.env.get("NCCL_PROTO"))
    default = ll128_default(ctx.node, ctx.version, ll128_c2c=ctx.env.get("NCCL_LL128_C2C"))
    if not forcing or default.on is True:
        return
    clause = forcing[0]
    how = (
        f"`{clause}` is a ^ list that leaves LL128 in, and NCCL force-enables every protocol a ^ list "
        "leaves in (seen on 2.28.9: it then picks LL128 without NVLink)"
        if "^" in clause
        else f"`{clause}` names LL128"
    )
    # what happens when: with the setting LL128 is on; without it NCCL's own rule decides
    unset = (
        "Without the setting NCCL would keep LL128 off here"
        if default.on is False
        else "Whether NCCL would enable LL128 here without the setting is not known from this evidence"
    )
    yield SettingFinding(
        "error" if default.on is False else "warning",
        "NCCL_PROTO",
        f"NCCL_PROTO={ctx.env['NCCL_PROTO']} forces LL128 on: {how}. {unset}: {default.why}. "
        "NCCL enables LL128 by itself only where it verified that it cannot corrupt data silently.",
        "exclude LL128 too (NCCL_PROTO=^LL,LL128) or name only what you want (NCCL_PROTO=LL,Simple)",
        LL128_RULE,
    )


LL128_RULE = "ll128-without-nvlink"  # the rule id recommend and run-engine look for


def _algorithms_gone(ctx: _Context, name: str, tokens: set[str]) -> Iterator[SettingFinding]:
    """Tokens older NCCL accepts that later releases no longer know (CollNet before 2.14)."""
    for token in sorted(tokens):
        until = ALGORITHM_UNTIL.get(token)
        if until is None or ctx.at_least(*until) is False:
            continue
        consequence = {
            True: "NCCL 2.24+ refuses it and communicator creation fails",
            False: "NCCL 2.14-2.23 ignore it silently",
            None: "NCCL 2.14-2.23 ignore it silently, 2.24+ fail communicator creation",
        }[ctx.at_least(2, 24)]
        yield SettingFinding(
            "warning" if ctx.version is None else "error",
            name,
            f"algorithm {token!r} is an NCCL_ALGO name only before NCCL {_release(until)}: "
            + consequence,
            "name CollNetDirect or CollNetChain (NCCL 2.14+)",
            "algo-too-old",
        )


def _release(version: Version) -> str:
    """2.14 for (2, 14, 0), 2.30.7 for (2, 30, 7)."""
    return ".".join(map(str, version if version[2] else version[:2]))


def _debug_subsys(ctx: _Context) -> Iterator[SettingFinding]:
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


def _subsystems_too_new(ctx: _Context, value: str) -> Iterator[SettingFinding]:
    """Subsystem names this NCCL version does not know yet: ncclDebugInit skips them silently."""
    if ctx.version is None:
        return
    for name in sorted({t.strip().upper() for t in value.lstrip("^").split(",")}):
        since = DEBUG_SUBSYSTEM_SINCE.get(name)
        if since and ctx.version < since:
            yield SettingFinding(
                "info",
                "NCCL_DEBUG_SUBSYS",
                f"NCCL_DEBUG_SUBSYS names {name}, which NCCL knows from {_release(since)}; "
                f"{'.'.join(map(str, ctx.version))} ignores the name",
                f"drop {name}",
                "debug-subsys-too-new",
            )


def _debug_file(ctx: _Context) -> Iterator[SettingFinding]:
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


def _deprecations(ctx: _Context) -> Iterator[SettingFinding]:
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


def _channel_bounds(ctx: _Context) -> Iterator[SettingFinding]:
    for low_name, high_name in (
        ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"),
        ("NCCL_MIN_CTAS", "NCCL_MAX_CTAS"),
    ):
        low, high = ctx.env.get(low_name, ""), ctx.env.get(high_name, "")
        low_n, high_n = parse_integer(low), parse_integer(high)
        if low_n is not None and high_n is not None and low_n > high_n:
            yield SettingFinding(
                "error",
                low_name,
                f"{low_name}={low} is above {high_name}={high}",
                "make the minimum at most the maximum",
                "min-above-max",
            )


def _transports_off(ctx: _Context) -> Iterator[SettingFinding]:
    if ctx.env.get("NCCL_P2P_DISABLE") == "1" and ctx.env.get("NCCL_SHM_DISABLE") == "1":
        yield SettingFinding(
            "warning",
            "NCCL_SHM_DISABLE",
            "P2P and SHM are both disabled: GPUs of one node talk through "
            "the network transport (sockets), far slower",
            "re-enable one of them",
            "no-intranode-transport",
        )


def _nvls(ctx: _Context) -> Iterator[SettingFinding]:
    links = ctx.node.links if ctx.node else None
    if (
        ctx.env.get("NCCL_NVLS_ENABLE") == "1"
        and links is not None
        and links not in (NVLINK_ALL, ONE_GPU)
    ):
        yield SettingFinding(
            "warning",
            "NCCL_NVLS_ENABLE",
            "NCCL_NVLS_ENABLE=1 asks for NVLink SHARP, which needs every "
            "GPU on one NVSwitch fabric; this node's GPUs are not all linked by NVLink",
            "unset it",
            "nvls-without-nvlink",
        )


def _tuner_config(ctx: _Context) -> Iterator[SettingFinding]:
    if "NCCL_TUNER_CONFIG_FILE" not in ctx.env:
        return
    if ctx.at_least(2, 27, 5) is False:
        yield SettingFinding(
            "warning",
            "NCCL_TUNER_CONFIG_FILE",
            "NCCL's example tuner plugin reads NCCL_TUNER_CONFIG_FILE "
            f"only from 2.27.5; this is {'.'.join(map(str, ctx.version))}",
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


def _tuner_plugin(ctx: _Context) -> Iterator[SettingFinding]:
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


def _no_cache(ctx: _Context) -> Iterator[SettingFinding]:
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


# NCCL variables that sit close to a table name but are real (not typos)
_REAL_NEIGHBOURS = {
    "NCCL_LL_BUFFSIZE",
    "NCCL_LL128_BUFFSIZE",
    "NCCL_LL128_NTHREADS",
    "NCCL_NVLS_CHUNKSIZE",
    "NCCL_GRAPH_FILE",
    "NCCL_TOPO_DUMP_FILE_RANK",
    "NCCL_CONF_FILE",
    "NCCL_DEBUG_TIMESTAMP_LEVELS",
    "NCCL_DEBUG_TIMESTAMP_FORMAT",
    "NCCL_PROFILER_PLUGIN",
    "NCCL_NET_PLUGIN",
    "NCCL_P2P_NET_CHUNKSIZE",
    "NCCL_P2P_READ_ENABLE",
    "NCCL_SHM_USE_CUDA_MEMCPY",
}


def _typos(ctx: _Context) -> Iterator[SettingFinding]:
    for name in ctx.env:
        if name in KNOBS or name in _REAL_NEIGHBOURS:
            continue
        close = difflib.get_close_matches(name, list(KNOBS), n=1, cutoff=0.85)
        if close:
            yield SettingFinding(
                "warning",
                name,
                f"{name} is not a variable NCCL reads; it is ignored",
                f"did you mean {close[0]}?",
                "unknown-variable",
            )


_RULES: tuple[Callable[[_Context], Iterable[SettingFinding]], ...] = (
    _values,
    _p2p_level,
    _p2p_disable_with_level,
    _tokens,
    _ll128,
    _debug_subsys,
    _debug_file,
    _deprecations,
    _channel_bounds,
    _transports_off,
    _nvls,
    _tuner_config,
    _tuner_plugin,
    _no_cache,
    _typos,
)

__all__ = ["LL128_RULE", "SEVERITIES", "SettingFinding", "lint_env"]
