"""What the sweep proves about each setting, per configuration and per rank, from the workers'
environment and NCCL's own log. Three levels, worded exactly as proven (`proof["proven"]`):

  read        NCCL printed `<VAR> set by environment to <value>` (NCCL_DEBUG=INFO, ENV subsystem)
              in every rank's log, in the lines that belong to this configuration: a variable
              read at every communicator creation only between the configuration's start and end
              (another configuration of the same pool does not count), one read once per process
              from everything that process logged up to its end (NCCL printed it at the pool's
              first communicator);
  chosen      read, and NCCL's log shows the choice it decides (`ncclprobe.sweep.choice`: TUNING
              lines for NCCL_PROTO/NCCL_ALGO, printed on rank 0 only; connection lines for
              disabled transports; channel counts);
  not observable here
              the log cannot show it: NCCL logs no choice for the setting, or not in this run (one
              rank runs no tuning model), or never logs the read of this value (NCCL_P2P_DISABLE=0).

Before any of that, every rank reports the NCCL_* variables it saw right before its communicator
was created; for each swept variable they must equal the configuration (else `error`). A setting
NCCL did not report reading on some rank, reported with another value, or read and then not
chosen in every call makes the configuration `ignored`: its numbers are kept but never presented
as the effect of that setting, and a rank that disagrees with the others is named
(`rank_disagreements`). Point-to-point operations (sendrecv, alltoall) go through no tuning model:
`chosen_by_collective` says so instead of counting nothing. On gloo NCCL is not involved at all;
only the environment check applies and the verdict says so.
"""

from __future__ import annotations

from ncclprobe.nccl.knob_row import Scope
from ncclprobe.nccl.knobs import proof_scope
from ncclprobe.nccl.logged_reads import verdict_for
from ncclprobe.nccl.version import parse_version
from ncclprobe.records import Status
from ncclprobe.secrets import mask_env
from ncclprobe.sweep.choice import P2P_NOT_TUNED, TUNED_BY, choice, tuning_check

GLOO_VERDICT = (
    "not applicable: the gloo backend does not use NCCL, so NCCL settings do not affect it"
)


def env_mismatches(
    settings: dict[str, str], swept: list[str], seen_by_rank: dict[int, dict]
) -> list[str]:
    """Ranks whose environment at communicator creation differs from the configuration."""
    problems = []
    for rank, seen in sorted(seen_by_rank.items()):
        for name in swept:
            if seen.get(name) != settings.get(name):
                problems.append(
                    f"rank {rank} saw {name}={seen.get(name)!r}, the configuration sets "
                    f"{settings.get(name, 'it unset')!r}"
                )
    return problems


def prove(
    settings: dict[str, str],
    swept: list[str],
    seen_by_rank: dict[int, dict],
    backend: str,
    logs: dict[int, tuple[str, str]] | None = None,
    *,
    collectives: tuple[str, ...] = ("all_reduce",),
) -> tuple[Status, str | None, dict]:
    """(status, reason, proof) for one configuration.

    `logs` maps rank -> (everything the process logged up to the end of the configuration, the
    part logged during it); None on gloo. `collectives`: what the configuration measured.
    """
    mismatches = env_mismatches(settings, swept, seen_by_rank)
    proof = {
        # what each rank saw, under the header env's policy: results files get attached to issues
        "seen_env": {str(r): mask_env(env) for r, env in sorted(seen_by_rank.items())},
        "env_matches": not mismatches,
        "env_mismatches": mismatches,
        "set_by_environment": {},
        "tuning": [],
        "verdicts": {},
    }
    if mismatches:
        return (
            Status.ERROR,
            "workers did not see the configuration's environment: " + "; ".join(mismatches[:3]),
            proof,
        )
    if backend != "nccl":
        proof["verdicts"] = {name: GLOO_VERDICT for name in settings}
        proof["proven"] = {name: GLOO_VERDICT for name in settings}
        return Status.OK, None, proof
    return _prove_from_log(settings, logs or {}, proof, collectives)


def _prove_from_log(settings, logs, proof, collectives=("all_reduce",)):
    parsed = _parse_rank_logs(logs)
    if parsed is None:
        proof["verdicts"] = {name: "unproven: NCCL log parser unavailable" for name in settings}
        return (
            (Status.IGNORED if settings else Status.OK),
            ("cannot read NCCL's log" if settings else None),
            proof,
        )
    if not parsed:
        parsed = {0: (_empty_log(), _empty_log())}
    lowest = min(parsed)
    whole, during = parsed[lowest]
    read = {rank: read_in_configuration(w, d) for rank, (w, d) in parsed.items()}
    version = parse_version(whole.nccl_version)
    proof["set_by_environment"] = mask_env(dict(sorted(read[lowest].items())))
    proof["read_by_rank"] = {  # masked as recorded, like seen_env: read from the user's environment
        str(rank): mask_env(dict(sorted(values.items()))) for rank, values in sorted(read.items())
    }
    proof["tuning"] = summarize_tuning(during.tuning)
    proof["transports"] = dict(
        during.transports
    )  # "NET" with --share-gpu: how the ranks were connected
    proof["nccl_version"] = whole.nccl_version
    proof["rank_disagreements"] = []
    during_by_rank = {rank: d for rank, (_, d) in parsed.items()}
    unproven = []
    for name, value in sorted(settings.items()):
        verdict, wording = _one_setting(
            proof, name, value, read, during_by_rank, version, collectives
        )
        proof["verdicts"][name] = verdict
        proof.setdefault("proven", {})[name] = wording
        if verdict.startswith("ignored"):
            unproven.append(f"{name}={value}: {verdict}")
    if unproven:
        return Status.IGNORED, "NCCL did not confirm " + "; ".join(unproven), proof
    return Status.OK, None, proof


def _one_setting(proof, name, value, read, during, version, collectives) -> tuple[str, str]:
    """(verdict, the exact wording of what was proven) for one setting over every rank."""
    per_rank = {
        rank: verdict_for(name, value, values.get(name), read=values, version=version)
        for rank, values in sorted(read.items())
    }
    readers = [rank for rank, verdict in per_rank.items() if verdict == "applied"]
    others = {rank: verdict for rank, verdict in per_rank.items() if verdict != "applied"}
    if readers and others:
        proof["rank_disagreements"] += [
            f"{name}: rank {rank}: {verdict.removeprefix('ignored: ')}, while "
            f"{_ranks(readers)} read it"
            for rank, verdict in others.items()
        ]
    if others:
        rank, verdict = next(iter(others.items()))
        where = f"rank {rank}: " if len(per_rank) > 1 else ""
        if verdict.startswith("not observable"):
            return verdict, verdict
        return (
            "ignored: " + where + verdict.removeprefix("ignored: ")
        ), "not read: " + where + verdict.removeprefix("ignored: ")
    picked = choice(name, value, during)
    proof.setdefault("chosen", {})[name] = picked
    if name in TUNED_BY:
        _per_collective(proof, name, value, during[min(during)].tuning, collectives)
    who = f"read by {_ranks(readers)}"
    if not picked["observable"]:
        return "applied", f"read: {who}; its choice is {picked['evidence']}"
    if picked["chosen"]:
        return "applied", f"read and chosen: {who}; {picked['evidence']}"
    return (
        f"ignored: NCCL read it, but {picked['evidence']}",
        f"read, not chosen: {who}; {picked['evidence']}",
    )


def read_in_configuration(whole, during) -> dict[str, str]:
    """What NCCL reported reading that holds for this configuration: a variable read at every
    communicator creation only from the lines written during it, one read once per process from
    everything the process logged up to its end (NCCL printed it at the pool's first communicator)."""
    out = {name: value for name, value in whole.env.items() if proof_scope(name) is Scope.PROCESS}
    out.update({name: value for name, value in during.env.items()})
    return out


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


def _parse_rank_logs(logs):
    """rank -> (log of the whole process up to now, log of this configuration), every rank with a log."""
    try:
        from ncclprobe.evidence.nccl.nccl_log import parse_nccl_log
    except ImportError:
        return None
    return {
        rank: (parse_nccl_log(whole), parse_nccl_log(during))
        for rank, (whole, during) in sorted(logs.items())
    }


def _empty_log():
    from ncclprobe.evidence.nccl.nccl_log import parse_nccl_log

    return parse_nccl_log("")


def _ranks(ranks) -> str:
    ranks = list(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(str(rank) for rank in ranks)


def summarize_tuning(entries) -> list[dict]:
    """NCCL's per-call choices, one row per (collective, bytes, algo, proto) with how often."""
    counts: dict[tuple, int] = {}
    for entry in entries:
        key = (entry.collective, entry.bytes, entry.algo, entry.proto)
        counts[key] = counts.get(key, 0) + 1
    return [
        {"collective": c, "size_bytes": b, "algo": a, "proto": p, "calls": n}
        for (c, b, a, p), n in sorted(counts.items(), key=lambda kv: (kv[0][1], str(kv[0])))
    ]
