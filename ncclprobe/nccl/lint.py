"""Lint an NCCL environment: settings NCCL ignores silently, rejects, or that can corrupt data.

env-check runs it over what a worker actually saw, the sweep over each configuration before
measuring it, and recommend refuses anything it calls an error. Every rule comes from the
knowledge table (`ncclprobe.nccl.knobs`) and so from ../shared/reference/nccl-facts.md; a finding says
what NCCL will do with the value and how to fix it. `node` (what the topology says about the
GPUs: `ncclprobe.nccl.node`) and `nccl_version` sharpen the verdicts; None means unknown and the
lint says so instead of guessing.

The rules over every variable live here (values the table's validation rejects or that carry
quotes, names that look like a typo of a table row) with the order all rules run in; the data
path's rules are in `lint_datapath`, the debug log's, the cache's and the plugins' in
`lint_tooling`, and what a rule builds and reads (`SettingFinding`, `Context`) in `lint_finding`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping

from ncclprobe.errors import UsageProblem
from ncclprobe.findings import severity_rank
from ncclprobe.nccl.knob_row import Kind
from ncclprobe.nccl.knobs import KNOBS
from ncclprobe.nccl.lint_datapath import (
    channel_bounds,
    functions_without_algorithm,
    ll128,
    nvls,
    p2p_disable_with_level,
    p2p_level,
    tokens,
    transports_off,
)
from ncclprobe.nccl.lint_finding import Context, SettingFinding
from ncclprobe.nccl.lint_tooling import (
    debug_file,
    debug_subsys,
    deprecations,
    no_cache,
    tuner_config,
    tuner_plugin,
)
from ncclprobe.nccl.names import COLLECTIVE
from ncclprobe.nccl.node import NodeFacts
from ncclprobe.nccl.values import number_meaning, read_number, validate_value
from ncclprobe.nccl.version import parse_version
from ncclprobe.verdict import Verdict


def lint_env(
    env: Mapping[str, str],
    *,
    node: NodeFacts | None = None,
    nccl_version: str | None = None,
    collectives: Iterable[str] | None = None,
) -> list[SettingFinding]:
    """Findings for the NCCL_* variables in `env`, errors first. Other variables are ignored.
    `collectives` (ncclprobe's names or NCCL's, e.g. `all_reduce`): the ones the job calls, where
    known (a sweep); a rule about what a collective can run then speaks of those only."""
    called = (
        frozenset(COLLECTIVE[c].token if c in COLLECTIVE else c.lower() for c in collectives)
        if collectives is not None
        else None
    )
    ctx = Context(
        {k: v for k, v in env.items() if k.startswith("NCCL_")},
        node,
        parse_version(nccl_version),
        called,
    )
    findings: list[SettingFinding] = []
    for rule in _RULES:
        findings.extend(rule(ctx))
    return sorted(findings, key=lambda f: (severity_rank(f.severity), f.variable or ""))


def verdict(findings: Iterable[SettingFinding]) -> Verdict:
    """FINDINGS when the lint found an error (warnings and notes alone are FINE)."""
    return Verdict.of(any(f.severity == "error" for f in findings))


def _values(ctx: Context) -> Iterator[SettingFinding]:
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
        read = read_number(name, value)
        if read is not None:
            yield from _number(name, value, read)
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


def _number(name: str, value: str, read) -> Iterator[SettingFinding]:
    """A variable NCCL reads as a number, judged as NCCL's parser reads it (strtoll, base 0) and as
    NCCL then uses the number (the row's `number_use`), never by its spelling alone: `2` of a 0/1
    switch NCCL tests with `!= 0` is on, `2abc` is 2, `true` is 0."""
    row = KNOBS[name]
    if read.number is None:
        yield SettingFinding(
            "error",
            name,
            f"{name}={value!r} is beyond 64 bits: NCCL logs `Invalid value` and keeps its default",
            f"use one of the values `ncclprobe knobs {name}` lists",
            "invalid-value",
        )
        return
    canonical = value in row.values or (row.kind is Kind.INT and not read.rest)
    if not canonical:
        yield _number_spelling(row, value, read)
    if row.kind is Kind.INT:
        try:
            validate_value(name, str(read.number))
        except UsageProblem as exc:
            yield SettingFinding(
                "error",
                name,
                str(exc),
                f"use one of the values `ncclprobe knobs {name}` lists",
                "invalid-value",
            )


def _number_spelling(row, value: str, read) -> SettingFinding:
    """A value outside the row's spellings, judged by what NCCL does with it. An error where that is
    not what the value says: no number in it, an integer written with a unit (`4M` is 4), or a
    number NCCL uses as a canonical value of the other truth (`NCCL_SHM_DISABLE=2` does what 0 does);
    a note where it does what a canonical value does (`NCCL_CUMEM_ENABLE=2` is 1) or what unset does;
    a warning where it does something no canonical value does (`NCCL_NVLS_ENABLE=3`)."""
    if read.rest == value:
        how = f"NCCL finds no number in it and reads {read.number}"
    else:
        how = f"NCCL reads it as {read.number} (strtoll" + (
            f", ignoring {read.rest!r})" if read.rest else ")"
        )
    twins = [v for v in row.values if read.meaning and number_meaning(row, int(v)) == read.meaning]
    same_truth = [v for v in twins if (int(v) != 0) == (read.number != 0)]
    explicit_unset = not read.rest and read.number == row.unset_reads_as
    if read.rest == value or (row.kind is Kind.INT and read.rest) or (twins and not same_truth):
        severity = "error"
    elif same_truth or explicit_unset:
        severity = "info"
    else:
        severity = "warning"
    like = f", as {twins[0]} does" if twins else ", as unset does" if explicit_unset else ""
    what = f"one of {', '.join(row.values)}" if row.values else "an integer"
    return SettingFinding(
        severity,
        row.name,
        f"{row.name}={value!r} is not {what}; {how}"
        + (f": {read.meaning}{like}" if read.meaning else ""),
        f"export {row.name}={same_truth[0]}"
        if same_truth
        else f"use one of the values `ncclprobe knobs {row.name}` lists",
        "invalid-value" if read.rest == value else "number-as-read",
    )


_QUOTES = "\"'"


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


def _typos(ctx: Context) -> Iterator[SettingFinding]:
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


_RULES: tuple[Callable[[Context], Iterable[SettingFinding]], ...] = (
    _values,
    p2p_level,
    p2p_disable_with_level,
    tokens,
    functions_without_algorithm,
    ll128,
    debug_subsys,
    debug_file,
    deprecations,
    channel_bounds,
    transports_off,
    nvls,
    tuner_config,
    tuner_plugin,
    no_cache,
    _typos,
)

__all__ = ["lint_env", "verdict"]
