"""Did each setting take effect? Evidence from the workers' environment and NCCL's own log.

Two independent checks per configuration:
  1. the environment: every rank reports the NCCL_* variables it saw right before its
     communicator was created; for each swept variable that must equal the configuration exactly
     (set to its value, or unset for `default`);
  2. NCCL's word: with NCCL_DEBUG=INFO and the ENV subsystem, NCCL prints `<VAR> set by
     environment to <value>` when it reads a variable. Per-communicator variables are printed at
     each communicator creation, so they are looked for in the log lines written during this
     configuration; once-per-process variables are printed once, at the pool's first
     communicator, so they are looked for in everything the process logged up to the end of it.

  3. NCCL's choice: where NCCL ran its tuning model (two or more ranks) it prints one TUNING line
     per collective call, `AllReduce: 1024 Bytes -> Algo RING proto LL ...`, naming the
     collective. For NCCL_PROTO and NCCL_ALGO every such line of the configuration must pick an
     allowed protocol/algorithm; `chosen_by_collective` splits the count per collective measured.
     Point-to-point operations (sendrecv, and alltoall, which NCCL runs as grouped sends and
     receives) go through no tuning model: the proof says so instead of counting nothing.

A setting NCCL did not report reading, or reported with another value, makes the configuration
`ignored`: its numbers are kept but never presented as the effect of that setting. On gloo NCCL
is not involved at all; only check 1 applies and the verdict says so.
"""

from __future__ import annotations

from ncclprobe.nccl.knobs import Kind, Scope, knob, proof_scope
from ncclprobe.nccl.p2p import level_as_logged
from ncclprobe.nccl.values import token_lists

GLOO_VERDICT = "not applicable: the gloo backend does not use NCCL, so NCCL settings do not affect it"


def env_mismatches(settings: dict[str, str], swept: list[str], seen_by_rank: dict[int, dict]) -> list[str]:
    """Ranks whose environment at communicator creation differs from the configuration."""
    problems = []
    for rank, seen in sorted(seen_by_rank.items()):
        for name in swept:
            if seen.get(name) != settings.get(name):
                problems.append(f"rank {rank} saw {name}={seen.get(name)!r}, the configuration sets "
                                f"{settings.get(name, 'it unset')!r}")
    return problems


def prove(settings: dict[str, str], swept: list[str], seen_by_rank: dict[int, dict], backend: str,
          logs: dict[int, tuple[str, str]] | None = None, *,
          collectives: tuple[str, ...] = ("all_reduce",)) -> tuple[str, str | None, dict]:
    """(status, reason, proof) for one configuration.

    `logs` maps rank -> (everything the process logged up to the end of the configuration, the
    part logged during it); None on gloo. `collectives`: what the configuration measured.
    """
    mismatches = env_mismatches(settings, swept, seen_by_rank)
    proof = {"seen_env": {str(r): env for r, env in sorted(seen_by_rank.items())},
             "env_matches": not mismatches, "env_mismatches": mismatches,
             "set_by_environment": {}, "tuning": [], "verdicts": {}}
    if mismatches:
        return "error", "workers did not see the configuration's environment: " + "; ".join(mismatches[:3]), proof
    if backend != "nccl":
        proof["verdicts"] = {name: GLOO_VERDICT for name in settings}
        return "ok", None, proof
    return _prove_from_log(settings, logs or {}, proof, collectives)


def _prove_from_log(settings, logs, proof, collectives=("all_reduce",)):
    parsed = _parse_rank_logs(logs)
    if parsed is None:
        proof["verdicts"] = {name: "unproven: NCCL log parser unavailable" for name in settings}
        return ("ignored" if settings else "ok"), ("cannot read NCCL's log" if settings else None), proof
    whole, during = parsed
    reported = {**whole.env, **during.env}
    proof["set_by_environment"] = {k: v for k, v in sorted(reported.items())}
    proof["tuning"] = summarize_tuning(during.tuning)
    proof["transports"] = dict(during.transports)   # "NET" with --share-gpu: how the ranks were connected
    proof["nccl_version"] = whole.nccl_version
    unproven = []
    for name, value in sorted(settings.items()):
        source = during if proof_scope(name) is Scope.COMMUNICATOR else whole
        verdict = verdict_for(name, value, source.env.get(name))
        check = tuning_check(name, value, during.tuning)
        if check is not None:
            proof.setdefault("chosen", {})[name] = check
            _per_collective(proof, name, value, during.tuning, collectives)
            if verdict == "applied" and check["calls"] and check["matching"] < check["calls"]:
                verdict = (f"ignored: NCCL read it, but its TUNING lines chose {', '.join(check['choices'])} "
                           f"in {check['calls'] - check['matching']} of {check['calls']} calls")
        proof["verdicts"][name] = verdict
        if verdict != "applied":
            unproven.append(f"{name}={value}: {verdict}")
    if unproven:
        return "ignored", "NCCL did not confirm " + "; ".join(unproven), proof
    return "ok", None, proof


def _per_collective(proof: dict, name: str, value: str, entries, collectives) -> None:
    """The TUNING check of `name` split by the collective each line names."""
    from ncclprobe.probes.collectives import COLLECTIVES
    by = proof.setdefault("chosen_by_collective", {})
    for coll_name in collectives:
        coll = COLLECTIVES[coll_name]
        if not coll.tuned_by_nccl:
            by.setdefault(coll_name, {})[name] = {"not_applicable": P2P_NOT_TUNED}
            continue
        mine = [e for e in entries if (e.collective or "").lower() == coll.nccl_name.lower()]
        by.setdefault(coll_name, {})[name] = tuning_check(name, value, mine)


P2P_NOT_TUNED = ("point-to-point (NCCL runs no tuning model for sends and receives): "
                 "NCCL_PROTO/NCCL_ALGO do not apply")


def _parse_rank_logs(logs):
    """(log of the whole process up to now, log of this configuration) for the lowest rank with a log."""
    try:
        from ncclprobe.evidence.nccl_log import parse_nccl_log
    except ImportError:
        return None
    if not logs:
        return parse_nccl_log(""), parse_nccl_log("")
    whole, during = logs[min(logs)]
    return parse_nccl_log(whole), parse_nccl_log(during)


def verdict_for(name: str, wanted: str, reported: str | None) -> str:
    """`applied` when NCCL reported reading the value; otherwise why not."""
    if reported is None:
        return "ignored: NCCL did not report reading it (no `set by environment` line)"
    if _same_value(name, wanted, reported):
        return "applied"
    return f"ignored: NCCL reported {reported!r}, not {wanted!r}"


def _same_value(name: str, wanted: str, reported: str) -> bool:
    row = knob(name)
    if row is not None and row.kind is Kind.LEVEL:
        return level_as_logged(wanted) == reported
    if row is not None and row.kind is Kind.TOKENS:
        return wanted.replace(" ", "").lower() == reported.replace(" ", "").lower()
    return wanted == reported.rstrip(".")


TUNED_BY = {"NCCL_PROTO": "proto", "NCCL_ALGO": "algo"}   # variable -> the TuningEntry field it decides


def tuning_check(name: str, value: str, entries) -> dict | None:
    """How many of NCCL's per-call choices the setting allows; None where no check applies.

    Plain lists (`LL`, `LL,Simple`) and exclusions (`^LL128`) are checked; the per-collective
    forms of 2.24+ (`allreduce:tree;...`) are not. With no TUNING lines (one rank) `calls` is 0:
    no evidence either way.
    """
    field = TUNED_BY.get(name)
    if field is None or ";" in value or ":" in value:
        return None
    from ncclprobe.evidence.nccl_log import algo_name, proto_name
    canonical = proto_name if field == "proto" else algo_name
    clause = token_lists(value).get("all")
    if clause is None:
        return None
    named = {canonical(token) for token in clause.names}
    choices = [getattr(entry, field) for entry in entries]
    matching = sum(1 for choice in choices if (choice in named) != clause.exclude)
    return {"allowed": ("all but " if clause.exclude else "") + ",".join(sorted(named)), "calls": len(choices),
            "matching": matching, "choices": sorted(set(choices))}


def summarize_tuning(entries) -> list[dict]:
    """NCCL's per-call choices, one row per (collective, bytes, algo, proto) with how often."""
    counts: dict[tuple, int] = {}
    for entry in entries:
        key = (entry.collective, entry.bytes, entry.algo, entry.proto)
        counts[key] = counts.get(key, 0) + 1
    return [{"collective": c, "size_bytes": b, "algo": a, "proto": p, "calls": n}
            for (c, b, a, p), n in sorted(counts.items(), key=lambda kv: (kv[0][1], str(kv[0])))]
