"""The graph-capture probe's verdict on settings baked in at capture, read from NCCL's own log.

The worker (`graph_capture.capture_settings`) hands over, per step, what NCCL logged meanwhile:
`set by environment` lines (the value a communicator read at its init) and TUNING lines (the
algorithm and protocol planned for a collective; rank 0 prints one whenever a plan is built, that
is for an eager call or at capture, and none for a graph replay, which reuses the captured plan).

With one rank NCCL runs no tuning model: it neither reports reading NCCL_PROTO/NCCL_ALGO nor plans
a collective (real H200 log: tests/fixtures/nccl_logs/nccl_2.28.9_1x_h200_1rank_*), so nothing
about settings can be shown there and the verdict claims nothing (every judgement is None).
"""

from __future__ import annotations

from ncclprobe.evidence.nccl.nccl_log import algo_name, parse_nccl_log, proto_name
from ncclprobe.nccl.names import ALGORITHM_NAMES, PROTOCOL_NAMES
from ncclprobe.nccl.values import token_list_for

ONE_RANK = (
    "one rank: NCCL runs no tuning model for a one-rank communicator, so it neither reports reading "
    "{var} nor plans an algorithm/protocol; settings baked in at capture cannot be shown here "
    "(use --share-gpu 2 on one GPU, or --nranks 2 on two)"
)

# the TUNING-line field each per-communicator variable decides, and its canonical names
_DECIDES = {
    "NCCL_PROTO": ("proto", PROTOCOL_NAMES, proto_name),
    "NCCL_ALGO": ("algo", ALGORITHM_NAMES, algo_name),
}


def log_segment(text: str) -> dict:
    """The parts of a stretch of NCCL log the verdict reads (what the worker reports per step)."""
    parsed = parse_nccl_log(text)
    return {
        "env": parsed.env,
        "env_values": parsed.env_values,
        "tuning": [
            {"collective": t.collective, "bytes": t.bytes, "algo": t.algo, "proto": t.proto}
            for t in parsed.tuning
        ],
        "communicators": len(parsed.communicators),
        "enabled_matrix": parsed.enabled_matrix,
    }


def capture_verdict(variable: str, first: str, second: str, world_size: int, steps: dict) -> dict:
    """What NCCL's log (and, as support, the timings) show about the setting a captured graph keeps."""
    logs = {name: step.get("log") or {} for name, step in steps.items()}
    before = steps["first_comm_capture"]["graph_us_per_op"]
    after = steps["first_graph_replayed_after_switch"]["graph_us_per_op"]
    verdict = {
        "variable": variable,
        "first": first,
        "second": second,
        "world_size": world_size,
        "steps": steps,
        "first_comm_read": _read(logs["first_comm_capture"], variable),
        "second_comm_read": _read(logs["second_comm_capture"], variable),
        "planned_at_first_capture": planned(logs["first_comm_capture"]),
        "planned_at_second_capture": planned(logs["second_comm_capture"]),
        "tuning_lines_at_replay": len(
            logs["first_graph_replayed_after_switch"].get("tuning") or []
        ),
        "planned_first_comm_after_switch": planned(logs["first_comm_eager_after_switch"]),
        "replay_us_per_op_before_switch": before,
        "replay_us_per_op_after_switch": after,
        "replay_timing_ratio": round(after / before, 3) if before > 0 else None,
        "second_graph_us_per_op": steps["second_comm_capture"]["graph_us_per_op"],
    }
    if world_size < 2:
        verdict.update(
            each_comm_read_its_value=None,
            captured_under_first=None,
            replay_kept_capture=None,
            new_comm_followed_switch=None,
            shown=False,
            why_not_shown=ONE_RANK.format(var=variable),
        )
        return verdict
    verdict["each_comm_read_its_value"] = _same(verdict["first_comm_read"], first) and _same(
        verdict["second_comm_read"], second
    )
    verdict["captured_under_first"] = follows(logs["first_comm_capture"], variable, first)
    verdict["replay_kept_capture"] = _replay_kept(
        logs["first_comm_capture"], logs["first_graph_replayed_after_switch"]
    )
    verdict["new_comm_followed_switch"] = follows(logs["second_comm_capture"], variable, second)
    missing = [
        key
        for key in (
            "each_comm_read_its_value",
            "captured_under_first",
            "replay_kept_capture",
            "new_comm_followed_switch",
        )
        if verdict[key] is not True
    ]
    verdict["shown"] = not missing
    verdict["why_not_shown"] = (
        None
        if not missing
        else "not shown by NCCL's log: " + ", ".join(f"{key}={verdict[key]}" for key in missing)
    )
    return verdict


def planned(log: dict) -> list[str]:
    """The distinct ALGO/PROTO plans in a log segment's TUNING lines, e.g. ["RING/LL"]."""
    return sorted({f"{t['algo']}/{t['proto']}" for t in log.get("tuning") or []})


def allowed(variable: str, value: str) -> set[str] | None:
    """The canonical names an all-reduce may use under VAR=value; None when we cannot tell
    (2.24+ `func:list` clauses: the all-reduce one wins over a clause without a function)."""
    if variable not in _DECIDES:
        return None
    _, universe, canonical = _DECIDES[variable]
    clause = token_list_for(value, "allreduce")
    if clause is None:
        return None
    named = {canonical(token) for token in clause.names}
    return {name for name in universe if (name in named) != clause.exclude}


def follows(log: dict, variable: str, value: str) -> bool | None:
    """Whether every collective planned in this segment obeys VAR=value; None without TUNING lines."""
    entries, names = log.get("tuning") or [], allowed(variable, value)
    if not entries or names is None:
        return None
    field, _, canonical = _DECIDES[variable]
    return all(canonical(entry[field]) in names for entry in entries)


def _replay_kept(capture_log: dict, replay_log: dict) -> bool | None:
    """A replay that built no new plan kept the captured one. Unknowable when the capture itself
    logged no TUNING line (logging off, or nothing planned); broken when the replay re-planned
    with something the capture did not use."""
    if not capture_log.get("tuning"):
        return None
    return set(planned(replay_log)) <= set(planned(capture_log))


def _read(log: dict, variable: str) -> str | None:
    return (log.get("env") or {}).get(variable)


def _same(read: str | None, value: str) -> bool:
    return read is not None and read.strip().lower() == value.lower()
