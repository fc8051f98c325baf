"""A sweep's ranks put back on their hosts: which host ran which ranks, what each launch did, and
the NCCL settings that differ between hosts.

Every worker names its host in its `ready` message and the NCCL variables it saw in each
`config-start`; `HostMerge` takes a pool's messages at a time and says, in the results' summary
record (`hosts`) and as notes, which settings were not the same on every host, naming the hosts
(as a Slurm hostlist, `gpu[001-004]`) and the ranks. The variables the sweep itself sets per rank or
per configuration (the swept ones, NCCL's log: `PROOF_VARIABLES`) are left out: they differ by
design. Values are shown under the one masking policy (`ncclprobe.secrets.display_value`).
"""

from __future__ import annotations

from collections.abc import Iterable

from ncclprobe.hosts.hostlist import compress
from ncclprobe.hosts.run import LaunchStatus
from ncclprobe.nccl.recipes import PROOF_VARIABLES
from ncclprobe.secrets import display_value, mask_text

UNSET = None  # a variable a rank's environment did not have


class HostMerge:
    """What the pools' messages tell about hosts (`add` each pool, then `summary`). Each pool is a
    launch of its own, and a rendezvous may place ranks on other hosts from one launch to the next
    (c10d numbers the nodes in the order they join): every fact is kept per pool."""

    def __init__(self, swept: Iterable[str]):
        self.ignored = set(swept) | set(PROOF_VARIABLES)
        self.pools: list[_Pool] = []
        self.launches: list[dict] = []

    def add(self, pool: int, messages: list[dict], launch: dict | None) -> None:
        seen = _Pool(pool)
        for message in messages:
            seen.read(message)
        self.pools.append(seen)
        if launch is not None:
            self.launches.append({"pool": pool, **launch})

    def differences(self) -> list[dict]:
        """Each variable whose value is not the same on every rank that reported one: its values,
        each with the hosts that had it and its ranks in the first pool that showed it (None:
        unset). The first pool's view of a variable wins; a host is listed once per value."""
        merged: dict[str, dict[str | None, dict]] = {}
        for pool in self.pools:
            for name, by_value in pool.values(self.ignored).items():
                if len(by_value) < 2 and name not in merged:
                    continue
                slot = merged.setdefault(name, {})
                for value, ranks in by_value.items():
                    entry = slot.setdefault(
                        value, {"hosts": set(), "ranks": ranks, "pool": pool.index}
                    )
                    entry["hosts"] |= {pool.host_of.get(rank, "?") for rank in ranks}
        return [
            {
                "variable": name,
                "values": [
                    {
                        "value": display_value(name, value),
                        "hosts": sorted(entry["hosts"]),
                        "ranks": entry["ranks"],
                        "pool": entry["pool"],
                    }
                    for value, entry in sorted(
                        slot.items(), key=lambda item: (-len(item[1]["hosts"]), item[1]["ranks"][0])
                    )
                ],
            }
            for name, slot in sorted(merged.items())
            if len(slot) > 1
        ]

    def summary(self, hosts: dict | None) -> dict | None:
        """The summary record's `hosts`: None for a sweep that never left this host's launcher."""
        placements = [p for p in self.pools if p.host_of]
        if hosts is None and not placements:
            return None
        first = placements[0] if placements else _Pool(0)
        return {
            "launch": hosts,
            "nodes": first.nodes(),
            "placed_otherwise": [
                {"pool": p.index, "nodes": p.nodes()}
                for p in placements[1:]
                if p.nodes() != first.nodes()
            ],
            "ranks_without_host": sorted(
                {rank for p in self.pools for rank in set(p.env_of) - set(p.host_of)}
            ),
            "differences": self.differences(),
            "launches": self.launches,
        }


class _Pool:
    """One pool's ranks: each one's host, and the NCCL variables its first configuration saw."""

    def __init__(self, index: int):
        self.index = index
        self.host_of: dict[int, str] = {}
        self.env_of: dict[int, dict[str, str]] = {}

    def read(self, message: dict) -> None:
        rank, kind = message.get("rank"), message.get("kind")
        if not isinstance(rank, int):
            return
        if kind in ("rendezvous", "ready") and isinstance(message.get("host"), str):
            self.host_of.setdefault(rank, mask_text(message["host"]))
        seen = message.get("seen_env")
        if kind == "config-start" and isinstance(seen, dict):
            self.env_of.setdefault(rank, {str(k): str(v) for k, v in seen.items()})

    def values(self, ignored: set[str]) -> dict[str, dict[str | None, list[int]]]:
        """variable -> value (None: unset) -> the ranks that had it."""
        names = {name for env in self.env_of.values() for name in env} - ignored
        out: dict[str, dict[str | None, list[int]]] = {}
        for name in sorted(names):
            for rank in sorted(self.env_of):
                out.setdefault(name, {}).setdefault(self.env_of[rank].get(name, UNSET), []).append(
                    rank
                )
        return out

    def nodes(self) -> list[dict]:
        by_host: dict[str, list[int]] = {}
        for rank, host in sorted(self.host_of.items()):
            by_host.setdefault(host, []).append(rank)
        return [{"host": host, "ranks": ranks} for host, ranks in by_host.items()]


def notes(hosts: dict | None) -> list[str]:
    """The table's notes: where the ranks ran, each setting that differs between hosts, each launch
    that failed."""
    if not hosts:
        return []
    nodes = hosts.get("nodes") or []
    launch = hosts.get("launch") or {}
    through = f" through {launch['launcher']}" if launch.get("launcher") else ""
    out = [f"hosts{through}: " + "; ".join(_node_groups(nodes))] if nodes else []
    for other in hosts.get("placed_otherwise") or []:
        out.append(
            f"pool {other['pool']} placed the ranks otherwise: "
            + "; ".join(_node_groups(other["nodes"]))
        )
    if hosts.get("ranks_without_host"):
        out.append(f"no host reported for {ranks_text(hosts['ranks_without_host'])}")
    for diff in hosts.get("differences") or []:
        values = sorted(diff["values"], key=lambda v: v["value"] is not None)  # missing first
        parts = [
            f"{'missing' if v['value'] is None else repr(v['value'])} on {compress(v['hosts'])} "
            f"({ranks_text(v['ranks'])})"
            for v in values
        ]
        head = "" if values[0]["value"] is None else "differs between hosts: "
        out.append(f"{diff['variable']} {head}" + "; ".join(parts))
    for launch_done in hosts.get("launches") or []:
        if launch_done.get("status") != LaunchStatus.OK:
            out.append(
                f"pool {launch_done['pool']}: the launch {launch_done.get('status')}: "
                f"{launch_done.get('reason')}"
            )
    return out


def _node_groups(nodes: list[dict]) -> list[str]:
    """`hosta, hostb: 2 ranks each` (hosts with as many ranks grouped), each group's ranks."""
    groups: dict[int, list[dict]] = {}
    for node in nodes:
        groups.setdefault(len(node["ranks"]), []).append(node)
    out = []
    for count, members in sorted(groups.items()):
        ranks = [rank for node in members for rank in node["ranks"]]
        each = "each" if len(members) > 1 else ""
        out.append(
            f"{compress(n['host'] for n in members)} ({count} rank{'s' if count > 1 else ''}"
            f"{' ' + each if each else ''}: {ranks_text(ranks)})"
        )
    return out


def ranks_text(ranks: Iterable[int], limit: int = 12) -> str:
    """`rank 3`, `ranks 0-3, 8-11`: consecutive ranks as a range; past `limit` runs the rest is
    counted (`..., and 500 more`), so a note stays one line at any scale."""
    runs: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:limit])
    rest = sum(b - a + 1 for a, b in runs[limit:])
    text += f", and {rest} more" if rest else ""
    return f"rank {text}" if len(runs) == 1 and runs[0][0] == runs[0][1] else f"ranks {text}"
