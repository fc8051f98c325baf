"""A sweep across hosts from one command: every pool started on every node through the launcher the
user has (srun, torchrun, mpirun: `ncclprobe.hosts`), the ranks' messages and NCCL logs left in a
directory every node shares, then merged into one results file.

The steps are the by-hand workflow's (`sweep.torchrun`), run here: the plan is written to the shared
directory (one payload per pool), each pool is one launch across the nodes, in order (so
once-per-process settings still get fresh processes), and `--collect`'s own code turns the
directory into the results file, with the same proof per configuration and per rank. What a launch
did is kept beside its pool (`pool<k>/launch.json`, each node's or task's output in
`pool<k>/nodes/`); a pool whose launch failed or hung leaves its unfinished configurations as
errors with the launch's reason, and the sweep goes on with the next pool. The results' summary
says which host ran which ranks and which NCCL settings differed between hosts
(`sweep.host_merge`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.hosts.launchers import Hosts, Launcher, Program, commands, store_address
from ncclprobe.hosts.run import LaunchOutcome, LaunchStatus, newest_change, run_launch
from ncclprobe.safe_output import check_output, check_output_dir, write_json
from ncclprobe.sweep import session, thresholds, torchrun
from ncclprobe.sweep.build import build_spec
from ncclprobe.sweep.plan import Pool, SweepSpec
from ncclprobe.sweep.run import pool_dir

log = logging.getLogger("ncclprobe.sweep")

WORKER = "ncclprobe.worker"


def run(
    request: session.SessionRequest,
    hosts: Hosts,
    shared_dir: str,
    *,
    progress: session.ProgressFactory | None = None,
    started: Callable | None = None,
) -> session.Outcome:
    """Plan, launch every pool across the hosts, collect: the Outcome `session.run` gives a local
    sweep, its results file written from the shared directory."""
    if request.sweep is None:
        raise ValueError("a sweep across hosts needs its SweepRequest")
    thresholds.parse(request.min_busbw, request.max_latency)
    if request.output is not None:  # before any launch: the run would be lost at the end
        check_output(request.output, force=request.force, what="output file")
    directory = check_output_dir(shared_dir, what="--shared-dir", has_force=False).absolute()
    nodes = hosts.node_count()
    spec, skipped = build_spec(
        _with_ranks(request.sweep, nodes), effort=request.effort, local=False
    )
    if spec.nranks % nodes:
        raise UsageProblem(f"--nranks {spec.nranks} does not spread evenly over {nodes} nodes")
    session.plan_torchrun(spec, skipped, str(directory), list(request.argv), hosts.describe())
    _, pools = torchrun.read_plan(directory)
    with (progress or _silent)(len(pools), "pools") as bar:
        for index, pool in enumerate(pools):
            outcome = launch_pool(spec, pool, index, hosts, directory, spec.nranks // nodes)
            if bar is not None:
                bar.advance(f"pool {index}: {outcome.status}")
    collect = replace(request, sweep=None, collect=str(directory))
    return session.run(collect, started=started)


def _with_ranks(request, nodes: int):
    """--nranks by default: one rank per node on gloo; on NCCL this host's GPUs per node (the
    nodes are taken to be alike), and none here is a usage error asking for --nranks."""
    if request.nranks is not None:
        return request
    if request.backend == "nccl":
        from ncclprobe.sweep.setup import gpu_count

        per_node = gpu_count()
        if not per_node:
            raise UsageProblem(
                "--backend nccl across hosts: no GPU here to count the nodes' by; give --nranks "
                "(nodes x GPUs per node)"
            )
        return replace(request, nranks=nodes * per_node)
    return replace(request, nranks=nodes)


def launch_pool(
    spec: SweepSpec, pool: Pool, index: int, hosts: Hosts, directory: Path, per_node: int
) -> LaunchOutcome:
    """One pool as one launch across the nodes; what it did goes to `pool<k>/launch.json`."""
    here = pool_dir(directory, index)
    env, unset = torchrun.pool_env(spec, pool, here)
    program = Program(module=WORKER, per_node=per_node, env=env, unset=unset)
    nodes_dir = here / "nodes"
    store, store_at = None, None
    if hosts.launcher is not Launcher.TORCHRUN:
        store_host = store_address(hosts)
        store = _host_store(spec.nranks)
        store_at = (store_host, store.port)
    argv = commands(
        hosts,
        program,
        run_id=f"ncclprobe-{uuid.uuid4().hex[:12]}-pool{index}",
        log_dir=nodes_dir,
        store=store_at,
    )
    try:
        outcome = run_launch(
            argv, log_dir=nodes_dir, timeout_s=spec.timeout_s, activity=lambda: newest_change(here)
        )
    finally:
        del store
    if outcome.status is not LaunchStatus.OK:
        log.warning("pool %d: the launch %s: %s", index, outcome.status, outcome.reason)
    write_json(here / torchrun.LAUNCH, outcome.to_json())
    return outcome


def _host_store(world_size: int):
    """The rendezvous store srun's and mpirun's ranks join, hosted here on a port the OS picks (it
    listens on every address of this host, as torchrun's c10d store does)."""
    from torch.distributed import TCPStore

    return TCPStore("0.0.0.0", 0, world_size, is_master=True, wait_for_workers=False)


def _silent(total: int, label: str):
    return nullcontext(None)
