"""What NCCL chose, for the settings whose choice its log shows: the check behind "chosen".

NCCL logs that it read a variable (`set by environment`) for most of them, but what it then did
only for a few, each in lines of its own (read at v2.28.9-1):
  NCCL_PROTO, NCCL_ALGO   one TUNING line per collective call, `AllReduce: 4096 Bytes -> Algo RING
                          proto LL ...`, printed by the communicator's rank 0 only (src/enqueue.cc,
                          `if (comm->rank == 0)`);
  NCCL_P2P_DISABLE=1, NCCL_P2P_LEVEL=LOC, NCCL_SHM_DISABLE=1
                          the connection lines every rank prints, `Channel 00/0 : 0[0] -> 1[0] via
                          P2P/CUMEM/read` (src/transport/p2p.cc, shm.cc, net.cc): no P2P (SHM) line;
  NCCL_CUMEM_ENABLE       the P2P connection lines say CUMEM (1) or IPC (0);
  NCCL_MAX_NCHANNELS, NCCL_MAX_CTAS
                          `N coll channels, ...` on every rank (src/init.cc): at most N
                          (src/graph/connect.cc clamps to both).
Every other setting, and these where the lines are absent, is "not observable here", with why.
"""

from __future__ import annotations

from ncclprobe.nccl.p2p import level_as_logged
from ncclprobe.nccl.values import token_lists

TUNED_BY = {
    "NCCL_PROTO": "proto",
    "NCCL_ALGO": "algo",
}  # variable -> the TuningEntry field it decides
NO_TUNING = (
    "no TUNING line: NCCL ran no tuning model here (one rank, or only point-to-point operations)"
)
NO_CONNECTIONS = "no connection line: NCCL connected no peers during this configuration (one rank)"
P2P_NOT_TUNED = (
    "point-to-point (NCCL runs no tuning model for sends and receives): "
    "NCCL_PROTO/NCCL_ALGO do not apply"
)


def tuning_check(name: str, value: str, entries) -> dict | None:
    """How many of NCCL's per-call choices the setting allows; None where no check applies.

    Plain lists (`LL`, `LL,Simple`) and exclusions (`^LL128`) are checked; the per-collective
    forms of 2.24+ (`allreduce:tree;...`) are not. With no TUNING lines (one rank) `calls` is 0:
    no evidence either way.
    """
    field = TUNED_BY.get(name)
    if field is None or ";" in value or ":" in value:
        return None
    from ncclprobe.evidence.nccl.nccl_log import algo_name, proto_name

    canonical = proto_name if field == "proto" else algo_name
    clause = token_lists(value).get("all")
    if clause is None:
        return None
    named = {canonical(token) for token in clause.names}
    choices = [getattr(entry, field) for entry in entries]
    matching = sum(1 for choice in choices if (choice in named) != clause.exclude)
    return {
        "allowed": ("all but " if clause.exclude else "") + ",".join(sorted(named)),
        "calls": len(choices),
        "matching": matching,
        "choices": sorted(set(choices)),
    }


def choice(name: str, value: str, during: dict) -> dict:
    """{"observable", "chosen" (None when not observable), "evidence", ...} for one setting, from
    each rank's log of this configuration (`during`: rank -> NcclLog)."""
    if name in TUNED_BY:
        return _tuning(name, value, during)
    transport = _transport_forbidden(name, value)
    if transport:
        return _transports(name, transport, during)
    if name == "NCCL_CUMEM_ENABLE" and value in ("0", "1"):
        return _cumem(value, during)
    if name in ("NCCL_MAX_NCHANNELS", "NCCL_MAX_CTAS") and value.isascii() and value.isdigit():
        return _channels(int(value), during)
    return _unobservable(_why_not_logged(name, value))


def _tuning(name, value, during) -> dict:
    first = min(during) if during else None
    check = tuning_check(name, value, during[first].tuning if first is not None else [])
    if check is None:
        return _unobservable(
            "per-collective forms (`func:list`) are not checked against the TUNING lines"
        )
    if not check["calls"]:
        return {**_unobservable(NO_TUNING), **check}
    chosen = check["matching"] == check["calls"]
    return {
        "observable": True,
        "chosen": chosen,
        **check,
        "evidence": f"rank {first}'s TUNING lines (NCCL prints them on rank 0 only): {check['matching']} of "
        f"{check['calls']} calls chose {check['allowed']}"
        + ("" if chosen else f" (the calls chose {', '.join(check['choices'])})"),
    }


def _transport_forbidden(name: str, value: str) -> str | None:
    """The transport a value forbids: P2P for NCCL_P2P_DISABLE=1 and NCCL_P2P_LEVEL=LOC, SHM for
    NCCL_SHM_DISABLE=1."""
    if name == "NCCL_P2P_DISABLE" and value == "1":
        return "P2P"
    if name == "NCCL_P2P_LEVEL" and level_as_logged(value) == "LOC":
        return "P2P"
    if name == "NCCL_SHM_DISABLE" and value == "1":
        return "SHM"
    return None


def _transports(name, transport, during) -> dict:
    lines = {rank: log.transports for rank, log in sorted(during.items())}
    if not any(lines.values()):
        return _unobservable(NO_CONNECTIONS)
    offending = [rank for rank, counts in lines.items() if counts.get(transport)]
    evidence = f"connection lines of ranks {_ranks(lines)}: " + (
        "; ".join(f"rank {r}: {_counts(c)}" for r, c in lines.items() if c)
    )
    return {
        "observable": True,
        "chosen": not offending,
        "transports_by_rank": {str(r): c for r, c in lines.items()},
        "evidence": evidence
        + ("" if not offending else f" ({transport} used by ranks {_ranks(offending)})"),
    }


def _cumem(value, during) -> dict:
    p2p = {
        rank: [
            via
            for via in log.transport_details
            if via.startswith("P2P/") and ("CUMEM" in via or "IPC" in via)
        ]
        for rank, log in during.items()
    }  # P2P/direct pointer (ranks of one process) shows neither
    if not any(p2p.values()):
        return _unobservable("no P2P connection line, whose path (CUMEM or IPC) shows it")
    wanted = "CUMEM" if value == "1" else "IPC"
    other = [rank for rank, vias in p2p.items() if any(wanted not in via for via in vias)]
    return {
        "observable": True,
        "chosen": not other,
        "evidence": f"P2P connection lines read {', '.join(sorted({v for vs in p2p.values() for v in vs}))}",
    }


def _channels(limit: int, during) -> dict:
    counts = {rank: log.channel_counts.get("coll") for rank, log in sorted(during.items())}
    if all(count is None for count in counts.values()):
        return _unobservable("no `coll channels` line (INIT subsystem)")
    over = [rank for rank, count in counts.items() if count is not None and count > limit]
    return {
        "observable": True,
        "chosen": not over,
        "coll_channels_by_rank": {str(r): c for r, c in counts.items()},
        "evidence": "coll channels per rank: "
        + ", ".join(f"rank {r}: {c}" for r, c in counts.items()),
    }


def _why_not_logged(name: str, value: str) -> str:
    if name == "NCCL_P2P_LEVEL":
        return (
            "which pairs use P2P depends on their path type, which NCCL's INFO log does not print: "
            "compare the connection lines with `ncclprobe topo`"
        )
    if name in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"):
        return f"{name}={value} is the default: nothing in the log tells it from an unset variable"
    return f"NCCL logs no choice that {name} decides"


def _unobservable(why: str) -> dict:
    return {"observable": False, "chosen": None, "evidence": f"not observable here: {why}"}


def _ranks(ranks) -> str:
    return ",".join(str(r) for r in ranks)


def _counts(counts: dict) -> str:
    return ", ".join(f"{n} via {t}" for t, n in sorted(counts.items()))
