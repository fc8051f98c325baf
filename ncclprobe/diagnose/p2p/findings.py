"""Findings over P2P matrices, whoever measured them: a pair far below its peers, asymmetric pairs,
peer access slower than host-staged copies, peer access refused by the driver, latency outliers,
and copies that returned wrong data.

Thresholds are deliberately coarse (a factor of two, 30 %) so run-to-run noise does not fire them;
where the matrix carries its spread (measured here), a pair is only called slow when even its best
trial is below the threshold. `where(i, j)` names what a pair crosses (a PCIe switch, a root
complex) when the PCIe tree is known; `link_class(i, j)` groups pairs of the same kind (NVLink,
PIX, SYS) so an NVLink pair does not make every PCIe pair look slow.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from ncclprobe.evidence.node.matrix import Matrix
from ncclprobe.findings import Finding, severity_rank

SLOW_FACTOR = 0.5  # a pair below half the median of its peers
ASYMMETRY = 0.30  # i->j and j->i differ by more than 30 % of the larger
STAGED_MARGIN = 0.90  # peer access below 90 % of the staged copy
LATENCY_FACTOR = 2.0  # latency above twice the median ...
LATENCY_MIN_EXCESS_US = 3.0  # ... and at least 3 us above it


@dataclass(frozen=True, init=False)
class P2PFinding(Finding):
    """A finding about GPU pairs of a P2P matrix: `code` is its rule, `message` its title, `pairs`
    the (i, j) pairs it names. Built positionally; its JSON keeps the keys `topo --check` prints."""

    pairs: tuple = ()

    def __init__(
        self,
        severity: str,
        code: str,
        message: str,
        pairs: tuple = (),
        evidence: dict | None = None,
    ):
        super().__init__(
            rule=code,
            severity=severity,
            confidence="high",  # measured (or read from the tool's own output), not inferred
            title=message,
            detail="",
            evidence={} if evidence is None else evidence,
        )
        object.__setattr__(self, "pairs", pairs)

    @property
    def code(self) -> str:
        return self.rule

    @property
    def message(self) -> str:
        return self.title

    def to_json(self) -> dict:
        return {
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "pairs": [list(p) for p in self.pairs],
            "evidence": self.evidence,
        }


def matrix_findings(
    matrices: list[Matrix],
    peer_access: list[list[bool | None]] | None = None,
    *,
    where: Callable[[int, int], str | None] | None = None,
    link_class: Callable[[int, int], str | None] | None = None,
    corrupt: list[dict] | None = None,
) -> list[P2PFinding]:
    where = where or (lambda i, j: None)
    gpu = [m for m in matrices if m.square and m.rows and m.rows[0].startswith("GPU")]
    out: list[P2PFinding] = []
    out += _corrupt(corrupt or [])
    out += _refused(peer_access)
    for m in gpu:
        if m.metric == "bandwidth":
            out += _slow_pairs(m, where, link_class)
            if m.direction == "unidirectional":
                out += _asymmetric(m, where)
        elif m.timer in (None, "gpu"):
            out += _latency_outliers(m, where, link_class)
    out += _peer_slower_than_staged(gpu, peer_access, where)
    return sorted(out, key=lambda f: severity_rank(f.severity))


def _pair_text(i: int, j: int, where: Callable[[int, int], str | None], arrow: str = "->") -> str:
    place = where(i, j)
    return f"GPU{i}{arrow}GPU{j}" + (f" (crosses {place})" if place else "")


def _corrupt(bad: list[dict]) -> list[P2PFinding]:
    return [
        P2PFinding(
            "error",
            "copy-corrupt",
            f"copy {b['what']} GPU{b['src']}->GPU{b['dst']} returned "
            f"{b['mismatches']} wrong element(s): P2P moves wrong data on this path",
            ((b["src"], b["dst"]),),
            b,
        )
        for b in bad
    ]


def reported_corrupt(tool: str, entries: list[dict]) -> list[P2PFinding]:
    """Wrong data a tool reported without naming the pair (nvbandwidth's pattern check): a peer test's
    failure is P2P moving wrong data (`copy-corrupt`); a host or local test's is the GPU or its link."""
    out = []
    for e in entries:
        peer = not any(word in e["test"] for word in ("host", "local"))
        where = f" at offset {e['offset']}" if e.get("offset") is not None else ""
        out.append(
            P2PFinding(
                "error",
                "copy-corrupt" if peer else "host-copy-corrupt",
                f"{tool} {e['test']}: its check found a wrong value{where} and the run stopped there: "
                + (
                    "a peer copy moved wrong data (the output does not name the pair)"
                    if peer
                    else "a copy between host and GPU (or inside the GPU) moved wrong data"
                ),
                (),
                dict(e),
            )
        )
    return out


def _refused(access: list[list[bool | None]] | None) -> list[P2PFinding]:
    if not access:
        return []
    pairs = [
        (i, j) for i, row in enumerate(access) for j, ok in enumerate(row) if i < j and ok is False
    ]
    if not pairs:
        return []
    n = len(access)
    scope = "every GPU pair" if len(pairs) == n * (n - 1) // 2 else f"{len(pairs)} GPU pair(s)"
    return [
        P2PFinding(
            "warning",
            "peer-access-refused",
            f"the driver refuses peer access for {scope}: "
            + " ".join(f"{i}-{j}" for i, j in pairs[:16])
            + " (NCCL moves data through host memory there: SHM or NET instead of P2P)",
            tuple(pairs),
            {"pairs": [list(p) for p in pairs]},
        )
    ]


def _classes(m: Matrix, link_class: Callable[[int, int], str | None] | None) -> dict:
    groups: dict = {}
    for i, j, v in m.pairs():
        groups.setdefault(link_class(i, j) if link_class else None, []).append((i, j, v))
    return groups


def _slow_pairs(
    m: Matrix,
    where: Callable[[int, int], str | None],
    link_class: Callable[[int, int], str | None] | None,
) -> list[P2PFinding]:
    out = []
    for group, cells in _classes(m, link_class).items():
        if len({(min(i, j), max(i, j)) for i, j, _ in cells}) < 3:
            continue  # too few peers to say what normal is
        median = statistics.median(v for _, _, v in cells)
        for i, j, v in cells:
            best = v + (m.spread[i][j] or 0 if m.spread else 0)
            if median > 0 and best < SLOW_FACTOR * median:
                out.append(
                    P2PFinding(
                        "warning",
                        "slow-pair",
                        f"{_pair_text(i, j, where)}: {v:.2f} {m.unit} is {v / median:.0%} of the median "
                        f"{median:.2f} {m.unit} of its peers ({m.label})",
                        ((i, j),),
                        {
                            "matrix": m.label,
                            "value": v,
                            "median": median,
                            "class": group,
                            "where": where(i, j),
                        },
                    )
                )
    return out


def _asymmetric(m: Matrix, where: Callable[[int, int], str | None]) -> list[P2PFinding]:
    out = []
    for i, j, v in m.pairs():
        w = m.values[j][i]
        if i < j and w is not None:
            if max(v, w) > 0 and abs(v - w) / max(v, w) > ASYMMETRY:
                out.append(
                    P2PFinding(
                        "warning",
                        "asymmetric-pair",
                        f"{_pair_text(i, j, where, '<->')}: {v:.2f} {m.unit} one way, {w:.2f} the other "
                        f"({m.label})",
                        ((i, j),),
                        {"matrix": m.label, "forward": v, "backward": w},
                    )
                )
    return out


def _latency_outliers(
    m: Matrix,
    where: Callable[[int, int], str | None],
    link_class: Callable[[int, int], str | None] | None,
) -> list[P2PFinding]:
    out = []
    for cells in _classes(m, link_class).values():
        if len(cells) < 3:
            continue
        median = statistics.median(v for _, _, v in cells)
        for i, j, v in cells:
            if v > LATENCY_FACTOR * median and v - median >= LATENCY_MIN_EXCESS_US:
                out.append(
                    P2PFinding(
                        "warning",
                        "latency-outlier",
                        f"{_pair_text(i, j, where)}: latency {v:.2f} us against a median of "
                        f"{median:.2f} us ({m.label})",
                        ((i, j),),
                        {"matrix": m.label, "value": v, "median": median},
                    )
                )
    return out


def _peer_slower_than_staged(
    gpu: list[Matrix],
    access: list[list[bool | None]] | None,
    where: Callable[[int, int], str | None],
) -> list[P2PFinding]:
    out = []
    for on in (
        m
        for m in gpu
        if m.metric == "bandwidth" and m.peer_access == "enabled" and m.access != "read"
    ):
        off = next(
            (
                m
                for m in gpu
                if m.metric == "bandwidth"
                and m.peer_access == "disabled"
                and m.direction == on.direction
                and m.rows == on.rows
            ),
            None,
        )
        if off is None:
            continue
        slow = [
            (i, j, v, staged)
            for i, j, v in on.pairs()
            if (staged := off.values[i][j])
            and (not access or access[i][j] is not False)
            and v < STAGED_MARGIN * staged
        ]
        if slow:
            out.append(
                P2PFinding(
                    "warning",
                    "p2p-slower-than-staged",
                    f"peer access is slower than host-staged copies for {len(slow)} transfer(s) ({on.label} "
                    "against P2P=disabled): "
                    + "; ".join(
                        f"{_pair_text(i, j, where)} {v:.2f} vs {s:.2f} {on.unit}"
                        for i, j, v, s in slow[:6]
                    ),
                    tuple((i, j) for i, j, _, _ in slow),
                    {
                        "matrix": on.label,
                        "gpus": len(on.rows),
                        "pairs": [[i, j, v, s] for i, j, v, s in slow],
                    },
                )
            )
    return out
