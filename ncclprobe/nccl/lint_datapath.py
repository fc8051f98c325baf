"""Lint rules for the data path: the P2P level and P2P/SHM switches, NCCL_PROTO and NCCL_ALGO (unknown
tokens, per-collective forms, algorithms too new or gone), LL128 forced where NCCL keeps it off,
channel and CTA bounds, NVLink SHARP without NVLink. Each rule reads the `Context` and yields
`SettingFinding`s; `ncclprobe.nccl.lint` runs them in its order.

The variables these rules read are the rows of `ncclprobe.nccl.knobs_datapath`; the debug log, the
cache, deprecated names and plugins are `lint_tooling`'s.
"""

from __future__ import annotations

from collections.abc import Iterator

from ncclprobe.errors import UsageProblem
from ncclprobe.nccl.lint_finding import Context, SettingFinding
from ncclprobe.nccl.ll128 import ll128_default
from ncclprobe.nccl.names import ALGORITHM_SINCE, ALGORITHM_UNTIL, FUNCTION_ALGORITHMS
from ncclprobe.nccl.node import NVLINK_ALL, ONE_GPU
from ncclprobe.nccl.p2p import (
    P2P_LEVEL_SINCE,
    P2P_LEVELS,
    P2P_LEVELS_UNDOCUMENTED,
    is_legacy_level,
    legacy_level,
)
from ncclprobe.nccl.values import (
    PER_COLLECTIVE_SINCE,
    ClauseWithoutFunction,
    forcing_ll128,
    parse_integer,
    read_number,
    stranded_functions,
    token_lists,
    validate_value,
)
from ncclprobe.nccl.version import release


def p2p_level(ctx: Context) -> Iterator[SettingFinding]:
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
    elif value[:1].isascii() and value[:1].isdigit():
        legacy = legacy_level(value)
        yield SettingFinding(
            "warning",
            "NCCL_P2P_LEVEL",
            f"NCCL_P2P_LEVEL={value!r} is no level name; as it starts with a digit NCCL reads the "
            f"number in front (strtol) as a legacy level and ignores the rest: {legacy}",
            f"export NCCL_P2P_LEVEL={legacy}",
            "p2p-level-legacy-prefix",
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


def _undocumented_level(ctx: Context, value: str) -> SettingFinding:
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


def p2p_disable_with_level(ctx: Context) -> Iterator[SettingFinding]:
    if ctx.env.get("NCCL_P2P_DISABLE") == "1" and "NCCL_P2P_LEVEL" in ctx.env:
        yield SettingFinding(
            "warning",
            "NCCL_P2P_DISABLE",
            "NCCL_P2P_DISABLE=1 turns P2P off, so NCCL_P2P_LEVEL="
            f"{ctx.env['NCCL_P2P_LEVEL']} has no effect",
            "unset one of the two",
            "p2p-disable-and-level",
        )


def tokens(ctx: Context) -> Iterator[SettingFinding]:
    """NCCL_PROTO / NCCL_ALGO: unknown tokens, per-collective forms before 2.24, too-new algorithms."""
    for name in ("NCCL_PROTO", "NCCL_ALGO"):
        value = ctx.env.get(name)
        if value is None:
            continue
        try:
            validate_value(name, value)
        except UsageProblem as exc:
            clause = isinstance(exc, ClauseWithoutFunction)
            older = (
                "before 2.24 `;` is no separator: NCCL reads unknown tokens and ignores them silently"
                if clause
                else "older versions ignore it silently"
            )
            consequence = {
                True: "NCCL 2.24+ refuses it and communicator creation fails",
                False: "Before 2.24 `;` is no separator: NCCL reads unknown tokens and ignores them "
                "silently"
                if clause
                else "NCCL before 2.24 ignores the unknown token silently",
                None: f"NCCL 2.24+ fails communicator creation; {older}",
            }
            yield SettingFinding(
                "error",
                name,
                f"{exc}. {consequence[ctx.at_least(2, 24)]}",
                f"see `ncclprobe knobs {name}` for the accepted names",
                "unknown-token",
            )
            continue
        if ":" in value and ctx.at_least(*PER_COLLECTIVE_SINCE) is False:
            yield SettingFinding(
                "error",
                name,
                f"{name}={value!r} uses the per-collective form, which NCCL reads only from 2.24",
                "use a plain comma list, or upgrade NCCL",
                "per-collective-too-old",
            )
        yield from _algorithm_versions(ctx, name, value)


def _algorithm_versions(ctx: Context, name: str, value: str) -> Iterator[SettingFinding]:
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


def ll128(ctx: Context) -> Iterator[SettingFinding]:
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


def _algorithms_gone(ctx: Context, name: str, tokens: set[str]) -> Iterator[SettingFinding]:
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
            f"algorithm {token!r} is an NCCL_ALGO name only before NCCL {release(until)}: "
            + consequence,
            "name CollNetDirect or CollNetChain (NCCL 2.14+)",
            "algo-too-old",
        )


def channel_bounds(ctx: Context) -> Iterator[SettingFinding]:
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


def transports_off(ctx: Context) -> Iterator[SettingFinding]:
    if ctx.env.get("NCCL_P2P_DISABLE") == "1" and ctx.env.get("NCCL_SHM_DISABLE") == "1":
        yield SettingFinding(
            "warning",
            "NCCL_SHM_DISABLE",
            "P2P and SHM are both disabled: GPUs of one node talk through "
            "the network transport (sockets), far slower",
            "re-enable one of them",
            "no-intranode-transport",
        )


def nvls(ctx: Context) -> Iterator[SettingFinding]:
    links = ctx.node.links if ctx.node else None
    value = ctx.env.get("NCCL_NVLS_ENABLE")
    read = read_number("NCCL_NVLS_ENABLE", value) if value is not None else None
    forced = read is not None and read.number not in (None, 0, 2)  # NCCL: `!= 0`, and 2 is auto
    if forced and links is not None and links not in (NVLINK_ALL, ONE_GPU):
        yield SettingFinding(
            "warning",
            "NCCL_NVLS_ENABLE",
            f"NCCL_NVLS_ENABLE={value} asks for NVLink SHARP, which needs every "
            "GPU on one NVSwitch fabric; this node's GPUs are not all linked by NVLink",
            "unset it",
            "nvls-without-nvlink",
        )


def functions_without_algorithm(ctx: Context) -> Iterator[SettingFinding]:
    """An NCCL_ALGO list that leaves a collective none of the algorithms it can run at all
    (`FUNCTION_ALGORITHMS`: NCCL_ALGO=Tree leaves broadcast and reduce nothing, as they run only
    Ring): 2.24+ fails that collective's call, 2.23 and older fall back to Ring."""
    value = ctx.env.get("NCCL_ALGO")
    if value is None or ctx.at_least(*PER_COLLECTIVE_SINCE) is False:
        return  # before 2.24 NCCL falls back to Ring: nothing fails
    try:
        validate_value("NCCL_ALGO", value)
    except UsageProblem:
        return  # `tokens` reports it
    known = frozenset().union(*FUNCTION_ALGORITHMS.values())
    if any(not clause.names <= known for clause in token_lists(value).values()):
        return  # a name this NCCL may not know (CollNet): `tokens` and `algo-too-old` say so
    stranded = stranded_functions(value)
    if ctx.collectives is not None:  # the job's own collectives: only theirs count, and they fail
        stranded = [f for f in stranded if f in ctx.collectives]
    if not stranded:
        return
    names = ", ".join(stranded)
    consequence = (
        f"NCCL 2.24+ fails each {names} call (`no algorithm/protocol available`, ncclInvalidUsage)"
        + ("" if ctx.at_least(2, 24) else "; older versions run them on Ring anyway")
    )
    yield SettingFinding(
        # an error where the job is known to call them on 2.24+; else a warning: a job that calls
        # only the collectives the list allows runs (an all-reduce-only job with NCCL_ALGO=Tree)
        "error" if ctx.collectives is not None and ctx.at_least(2, 24) else "warning",
        "NCCL_ALGO",
        f"NCCL_ALGO={value} leaves {names} no algorithm they can run (broadcast and reduce run only "
        f"Ring; all-gather and reduce-scatter Ring, PAT, NVLS or CollNetDirect): {consequence}",
        f"name the collective: NCCL_ALGO=allreduce:{value} (2.24+), or add Ring"
        if ":" not in value and ";" not in value
        else "add Ring to the clause that governs them",
        "algo-leaves-function-nothing",
    )
