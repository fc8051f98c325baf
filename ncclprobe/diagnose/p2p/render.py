"""What `topo --check` prints as text beside its matrices: the measurement's status, the platform
checks, NCCL's model, the findings and the advice, each line wrapped by the one renderer
(`ncclprobe.diagnose.render`)."""

from __future__ import annotations

from ncclprobe.diagnose.report import Lines


def topo_check_lines(doc: dict) -> tuple[Lines, Lines, Lines]:
    """(the headline, printed above the matrices; the platform and NCCL's model after them; the
    findings and advice) of a topo-check document."""
    m = doc["measurement"]
    head = [
        f"# topo --check: measurement {m['status']}"
        + (f" ({m['reason']})" if m.get("reason") else "")
        + f", {len(m['devices'])} GPU(s)"
    ]
    tail = check_lines(doc["platform"]) + nccl_lines(doc["nccl"], doc["nccl_model_vs_measured"])
    return Lines(head), Lines(tail), Lines(finding_lines(doc["findings"], doc["advice"]))


def check_lines(checks: list[dict]) -> list[str]:
    out = ["## platform"]
    for c in checks:
        out.append(f"  [{c['status']}] {c['check']}: {c['summary']} (source: {c['source']})")
        out += [f"      not readable: {unread}" for unread in c.get("not_readable", [])[:8]]
    return out


def nccl_lines(nccl: dict, disagree: list[str]) -> list[str]:
    out = [
        f"## NCCL's model: job {nccl.get('status')}"
        + (f" ({nccl['reason']})" if nccl.get("reason") else "")
        + "".join(f"; {x}" for x in nccl.get("missing", []))
    ]
    for g in nccl.get("graphs") or []:
        out.append(
            f"  {g['algorithm']}: {g['nchannels']} channel(s) x {g['speed_intra_gbps_per_channel']:g} GB/s "
            f"over {g['type_intra']}"
        )
    return out + [f"  disagrees: {d}" for d in disagree]


def finding_lines(findings: list[dict], advice: list[dict]) -> list[str]:
    out = ["## findings"] + ([] if findings else ["  none"])
    out += [f"  [{f['severity']}] {f['code']}: {f['message']}" for f in findings]
    return out + advice_lines(advice)


def advice_lines(advice: list[dict]) -> list[str]:
    out = ["## advice"]
    out += [
        f"  - {a['action']}: {a['reason']} (evidence: {', '.join(a['evidence']) or 'none'})"
        for a in advice
    ]
    return out
