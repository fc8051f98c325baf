"""The `topo --check` measurement: host<->device per GPU and every GPU pair's bandwidth and latency,
with peer access disabled (host-staged, as the driver does it) and enabled, by copy engine and by SM
copy, unidirectional and bidirectional, a concurrent all-to-one test, and every copy checked.

This module decides what is measured and prints it as matrices; how one batch of copies is issued
through the CUDA runtime, timed and checked is `p2p_bench` (why ctypes, which clock, the pattern).
Each figure is the median of `--trials` batches of `--repeat` copies, with the spread (max - min)
beside it.

Run by `ncclprobe.diagnose.p2p.check` as `python -m ncclprobe.probes.p2p_bandwidth`, in its own process group
with a timeout (a broken P2P path can hang). Prints one JSON line per result.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ncclprobe.probes.p2p_bench import Bench, Runtime, load_cudart


def emit(out, **record) -> None:
    out.write(json.dumps(record) + "\n")
    out.flush()


def host_device(b: Bench, n: int, out, link_reader) -> None:
    t = b.torch
    h2d: list[float] = []
    d2h: list[float] = []
    lat_h2d: list[float] = []
    spread: list[list[float]] = [[], []]
    for d in range(n):
        src, dst = b.buffers(d)
        host = t.empty(b.count, dtype=t.int32, pin_memory=True)
        host.copy_(b.expected)
        stream = t.cuda.Stream(device=d)
        with t.cuda.stream(stream):
            value, sp = b.timed(stream, lambda: dst.copy_(host, non_blocking=True))
            h2d.append(value)
            spread[0].append(sp)
            b.verify("host->device", -1, d, dst)
            burst = [dst.copy_(host, non_blocking=True) for _ in range(64)]  # tens of ms of traffic
            time.sleep(0.005)  # let the link train up before reading its state
            emit(out, link_under_load={"device": d, "state": link_reader(d)})
            stream.synchronize()
            del burst
            back = t.empty(b.count, dtype=t.int32, pin_memory=True)
            value, sp = b.timed(stream, lambda: back.copy_(src, non_blocking=True))
            stream.synchronize()
            d2h.append(value)
            spread[1].append(sp)
            if not t.equal(back, b.expected):
                b.bad.append(
                    {
                        "what": "device->host",
                        "src": d,
                        "dst": -1,
                        "mismatches": int((back != b.expected).sum()),
                    }
                )
            one = t.empty(1, dtype=t.int32, pin_memory=True)
            lat_h2d.append(b.latency(stream, lambda: dst[:1].copy_(one, non_blocking=True)))
    gpus = [f"GPU{i}" for i in range(n)]
    emit(
        out,
        matrix=dict(
            metric="bandwidth",
            rows=["CPU"],
            cols=gpus,
            values=[h2d],
            spread=[spread[0]],
            engine="ce",
            source="topo --check: host->device, pinned, cudaMemcpyAsync",
        ),
    )
    emit(
        out,
        matrix=dict(
            metric="bandwidth",
            rows=gpus,
            cols=["CPU"],
            values=[[v] for v in d2h],
            spread=[[s] for s in spread[1]],
            engine="ce",
            source="topo --check: device->host, pinned, cudaMemcpyAsync",
        ),
    )
    emit(
        out,
        matrix=dict(
            metric="latency",
            rows=["CPU"],
            cols=gpus,
            values=[lat_h2d],
            engine="ce",
            timer="gpu",
            source="topo --check: host->device 4-byte copy latency",
        ),
    )


def pairs(b: Bench, n: int, out, self_pair: bool = False) -> None:
    """Every ordered pair (or 0->0 with self_pair, to exercise the code on one GPU)."""
    t = b.torch
    ordered = [(0, 0)] if self_pair else [(i, j) for i in range(n) for j in range(n) if i != j]
    size = 1 if self_pair else n
    can = [
        [i == j or bool(t.cuda.can_device_access_peer(i, j)) for j in range(n)] for i in range(n)
    ]
    emit(out, peer_access=can)
    bufs = {d: b.buffers(d) for d in range(n)}
    streams = {d: t.cuda.Stream(device=d) for d in range(n)}
    grids: dict[str, list[list[float | None]]] = {
        k: [[None] * size for _ in range(size)]
        for k in (
            "off",
            "on",
            "sm",
            "off_sp",
            "on_sp",
            "sm_sp",
            "off_lat",
            "on_lat",
            "off_bi",
            "on_bi",
        )
    }
    at = (lambda i, j: (0, 0)) if self_pair else (lambda i, j: (i, j))

    def stage(mode: str) -> None:
        for i, j in ordered:
            if mode == "on" and not can[i][j]:
                continue
            emit(out, checking=[i, j, mode])
            src, dst = bufs[i][0], bufs[j][1]
            r, c = at(i, j)
            copy = (
                (lambda: b.rt.peer_copy(dst, src, b.nbytes, streams[i]))
                if b.rt
                else (lambda: dst.copy_(src))
            )
            grids[mode][r][c], grids[mode + "_sp"][r][c] = b.timed(streams[i], copy)
            b.verify(f"P2P={'enabled' if mode == 'on' else 'disabled'} ce", i, j, dst)
            one_src, one_dst = src[:1], dst[:1]
            tiny = (
                (lambda: b.rt.peer_copy(one_dst, one_src, 4, streams[i]))
                if b.rt
                else (lambda: one_dst.copy_(one_src))
            )
            grids[mode + "_lat"][r][c] = b.latency(streams[i], tiny)
            if i < j or self_pair:
                # one GPU (self_pair): the way back needs its own target, or it would be the way there's
                back_src, back_dst = bufs[j][0], bufs[i][1] if i != j else t.empty_like(bufs[i][1])

                def both():
                    for _ in range(b.repeat):
                        b.rt.peer_copy(dst, src, b.nbytes, streams[i]) if b.rt else dst.copy_(src)
                        b.rt.peer_copy(
                            back_dst, back_src, b.nbytes, streams[j]
                        ) if b.rt else back_dst.copy_(back_src)
                    return 2 * b.nbytes * b.repeat

                value, _ = b.wall({i, j}, both)
                grids[mode + "_bi"][r][c] = value
                grids[mode + "_bi"][c][r] = value
                b.verify("bidirectional", i, j, dst)
                b.verify("bidirectional", j, i, back_dst)

    if b.rt:
        stage("off")  # before anything enables peer access
    for i, j in ordered:  # torch enables peer access on its first copy;
        if i != j and can[i][j]:  # the runtime call then finds it enabled (704)
            bufs[j][1][:1].copy_(bufs[i][0][:1])
            t.cuda.synchronize(j)
            if b.rt:
                b.rt.enable_peer(i, j)
    stage("on")
    for i, j in ordered:  # SM copies: torch's kernel reads/writes the peer
        if not can[i][j]:
            continue
        cols = 1024
        padded = t.empty(b.count // cols, cols + 1, dtype=t.int32, device=f"cuda:{j}")
        view = padded[:, :cols]  # not contiguous: copy_ launches a kernel
        src = bufs[i][0].view(-1, cols)
        r, c = at(i, j)

        def sm_batch():  # host clock: torch picks the stream of the copy
            for _ in range(b.repeat):
                view.copy_(src)
            return b.nbytes * b.repeat

        grids["sm"][r][c], grids["sm_sp"][r][c] = b.wall({i, j}, sm_batch)
        b.verify("P2P=enabled sm", i, j, view)
    labels = ["GPU0"] if self_pair else [f"GPU{k}" for k in range(n)]
    note = " (one GPU: GPU0->GPU0 exercises the code path; not a P2P figure)" if self_pair else ""
    for key, peer, engine, metric, direction in (
        ("off", "disabled", "ce", "bandwidth", "unidirectional"),
        ("on", "enabled", "ce", "bandwidth", "unidirectional"),
        ("sm", "enabled", "sm", "bandwidth", "unidirectional"),
        ("off_bi", "disabled", "ce", "bandwidth", "bidirectional"),
        ("on_bi", "enabled", "ce", "bandwidth", "bidirectional"),
        ("off_lat", "disabled", "ce", "latency", "unidirectional"),
        ("on_lat", "enabled", "ce", "latency", "unidirectional"),
    ):
        if key.startswith("off") and not b.rt:
            continue
        emit(
            out,
            matrix=dict(
                metric=metric,
                rows=labels,
                cols=labels,
                values=grids[key],
                direction=direction,
                peer_access=peer,
                engine=engine,
                access="write" if engine == "ce" else None,
                timer="gpu" if metric == "latency" else None,
                spread=grids.get(key + "_sp"),
                source=f"topo --check: {key}{note}",
            ),
        )
    if not self_pair:
        all_to_one(b, n, bufs, streams, can, out)


def all_to_one(b: Bench, n: int, bufs, streams, can, out) -> None:
    t = b.torch
    values = []
    for target in range(n):
        sinks = {
            s: t.empty(b.count, dtype=t.int32, device=f"cuda:{target}")
            for s in range(n)
            if s != target
        }

        def issue():
            for _ in range(b.repeat):
                for s, sink in sinks.items():
                    with t.cuda.stream(streams[s]):
                        sink.copy_(bufs[s][0], non_blocking=True)
            return b.nbytes * b.repeat * len(sinks)

        values.append(b.wall(set(range(n)), issue)[0])
        for s, sink in sinks.items():
            b.verify("all-to-one", s, target, sink)
    emit(
        out,
        matrix=dict(
            metric="bandwidth",
            rows=["all"],
            cols=[f"GPU{k}" for k in range(n)],
            values=[values],
            peer_access="enabled",
            engine="ce",
            source="topo --check: all-to-one, every other GPU copying into the column GPU at once "
            "(pairs without peer access go through the host)",
        ),
    )


def run(args, out=sys.stdout, link_reader=lambda d: None) -> int:
    try:
        import torch
    except ImportError:
        emit(out, status="unavailable", reason="torch is not installed")
        return 0
    if not torch.cuda.is_available():
        emit(out, status="unavailable", reason="no CUDA GPU visible")
        return 0
    torch.cuda.init()
    n = torch.cuda.device_count()
    for d in range(n):
        torch.empty(1, device=f"cuda:{d}")  # create every context before the runtime is called
    emit(out, devices=[_bus_id(torch, d) for d in range(n)])
    lib = load_cudart()
    if lib is None:
        emit(out, note="libcudart not found: peer-disabled (host-staged) copies are not measured")
    b = Bench(torch, args.bytes // 4 * 4, args.repeat, args.trials, Runtime(lib) if lib else None)
    emit(out, stage="host<->device", devices=n)
    host_device(b, n, out, link_reader)
    if n >= 2 or args.self_pair:
        emit(out, stage="pairs")
        pairs(b, n, out, self_pair=n < 2)
    emit(out, copy_checks=b.bad)
    emit(
        out,
        status="corrupt" if b.bad else "ok",
        devices=n,
        reason=f"{len(b.bad)} copy(ies) returned wrong data" if b.bad else None,
    )
    return 1 if b.bad else 0


def _bus_id(torch, device: int) -> str | None:
    """The device's PCI address as sysfs names it (0000:3b:00.0), or None on an older torch."""
    props = torch.cuda.get_device_properties(device)
    bus = getattr(props, "pci_bus_id", None)
    if isinstance(bus, int):  # torch 2.x: integers domain / bus / device
        return f"{getattr(props, 'pci_domain_id', 0):04x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
    if not bus:
        return None
    bus = bus.lower()
    return bus if len(bus.split(":")[0]) == 4 else bus[-12:]


def sysfs_link_reader():
    """Link state of each CUDA device from sysfs, read while a transfer runs."""
    import torch

    buses = {d: _bus_id(torch, d) for d in range(torch.cuda.device_count())}

    def read(d):
        bdf = buses.get(d)
        if not bdf:
            return None
        state = {"bdf": bdf}
        for key in ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width"):
            try:
                state[key] = Path(f"/sys/bus/pci/devices/{bdf}/{key}").read_text().strip()
            except OSError:
                state[key] = None
        return state

    return read


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=32 << 20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument(
        "--self-pair", action="store_true", help="one GPU: run the pair code on GPU0->GPU0"
    )
    args = parser.parse_args(argv)
    args.bytes = max(args.bytes // 4096 * 4096, 4096)  # whole rows of the SM copy's 1024-wide view
    return run(args, link_reader=sysfs_link_reader())


if __name__ == "__main__":
    sys.exit(main())
