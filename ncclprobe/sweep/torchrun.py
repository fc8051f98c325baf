"""Sweeps across nodes: torchrun starts the workers, ncclprobe plans the pools and collects.

`ncclprobe.launch` starts workers on this host only. Across nodes, torchrun (or any env://
launcher) starts them and the same worker code runs: `ncclprobe.worker` sees torchrun's
RANK/WORLD_SIZE/LOCAL_RANK and joins through env://. The workflow, with DIR on a filesystem every
node sees:

  1. ncclprobe sweep --torchrun-dir DIR --nranks 16 [grid options]
        writes one payload per pool and prints one torchrun command per pool;
  2. run each printed command on every node, pool after pool;
  3. ncclprobe sweep --collect DIR [--output FILE]
        turns the workers' messages and NCCL logs into a results file, with the same proof.

Each pool is one torchrun launch, so once-per-process settings still get fresh processes.
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

from ncclprobe import envvars
from ncclprobe.errors import UsageProblem
from ncclprobe.hosts.run import LaunchStatus
from ncclprobe.nccl.recipes import proof_env
from ncclprobe.numbers import is_digits
from ncclprobe.records_writer import ResultWriter
from ncclprobe.safe_output import atomic_directory, dumps_json
from ncclprobe.secrets import mask_text
from ncclprobe.sweep.host_merge import HostMerge
from ncclprobe.sweep.plan import Config, Pool, SweepSpec, build_grid, plan_pools
from ncclprobe.sweep.run import ENTRY, PoolRun, Recorder, pool_dir, pool_payload
from ncclprobe.validate import Where, load_json, read_text

PLAN = "plan.json"
TORCHRUN = (
    "torchrun --nnodes NNODES --nproc-per-node NPROC --rdzv-backend c10d "
    "--rdzv-endpoint HEAD_NODE:29500 -m ncclprobe.worker"
)


def write_plan(
    spec: SweepSpec, header: dict, directory: Path, what: str = "--torchrun-dir"
) -> list[str]:
    """Write DIR/plan.json and DIR/pool<k>/payload.json; return the command line of each pool.
    DIR (`what`: the option that named it) must be new or empty; it appears whole or not at all
    (`ncclprobe.safe_output`)."""
    if directory.exists() and directory.is_dir() and any(directory.iterdir()):
        raise UsageProblem(f"{what} {str(directory)!r} is not empty; give a new directory")
    pools = plan_pools(build_grid(spec.grid))
    commands = []
    with atomic_directory(directory, what=what) as work:
        for index, pool in enumerate(pools):
            here = pool_dir(work, index)
            here.mkdir()
            (here / "payload.json").write_text(dumps_json(pool_payload(spec, pool)))
            commands.append(pool_command(spec, pool, pool_dir(directory, index).resolve()))
        plan = {"header": header, "pools": [[c.settings for c in pool.configs] for pool in pools]}
        (work / PLAN).write_text(dumps_json(plan, indent=1))
    return commands


def pool_env(spec: SweepSpec, pool: Pool, pool_dir: Path) -> tuple[dict[str, str], tuple[str, ...]]:
    """What every rank of a pool gets, on whichever node: (set, unset). The swept variables start
    unset, as in a local pool; NCCL's proof log and the pool's once-per-process settings are set."""
    env = {
        **(proof_env() if spec.backend == "nccl" else {}),
        **pool.process_settings,
        envvars.ENTRY: ENTRY,
        envvars.RUN_DIR: str(pool_dir),
        envvars.BACKEND: spec.backend,
    }
    return env, tuple(sorted(spec.grid))


def pool_command(spec: SweepSpec, pool: Pool, pool_dir: Path) -> str:
    """`env -u <swept> VAR=value ... torchrun ...`, to run by hand on every node."""
    env, unset = pool_env(spec, pool, pool_dir)
    removed = " ".join(f"-u {name}" for name in unset)
    assignments = " ".join(f"{key}={shlex.quote(value)}" for key, value in env.items())
    return " ".join(part for part in ("env", removed, assignments, TORCHRUN) if part)


def read_plan(directory: Path) -> tuple[dict, list[Pool]]:
    if not (directory / PLAN).is_file():
        raise UsageProblem(
            f"--collect {str(directory)!r}: no {PLAN} there (made by --torchrun-dir)"
        )
    where = Where(str(directory / PLAN))
    plan = where.object(load_json(directory / PLAN, f"--collect {PLAN}"))
    header = where.at("header").object(where.field(plan, "header", "dict"))
    where.at("header").field(header, "spec", "dict")
    pools = []
    for index, settings_list in enumerate(where.field(plan, "pools", "list")):
        place = where.at("pools").at(index)
        if not isinstance(settings_list, list) or not all(
            isinstance(x, dict) for x in settings_list
        ):
            raise place.fail("expected a list of settings objects")
        for settings in settings_list:
            place.field({"settings": settings}, "settings", "str-map")
        configs = [Config(settings) for settings in settings_list]
        pools.append(Pool(configs[0].process_settings if configs else {}, configs))
    return header, pools


def collect(directory: Path, writer: ResultWriter) -> dict:
    """Write every pool's configurations from the messages its ranks left in DIR/pool<k>/."""
    header, pools = read_plan(directory)
    spec = SweepSpec.from_json(header["spec"])
    recorder, stamps = Recorder(writer), []
    merge = HostMerge(spec.grid)
    for index, pool in enumerate(pools):
        here = pool_dir(directory, index)
        messages = _rank_messages(here)
        launch = read_launch(here)
        merge.add(index, messages, launch)
        stamps += [m["t"] for m in messages if isinstance(m.get("t"), (int, float))]
        why = launch.get("reason") if launch and launch.get("status") != LaunchStatus.OK else None
        PoolRun(spec, pool, index=index, log_dir=here, recorder=recorder).replay(messages, why=why)
        recorder.stats.pools_run += 1
    summary = recorder.stats.summary(max(stamps) - min(stamps) if stamps else 0.0)
    hosts = merge.summary(header.get("hosts"))
    if hosts is not None:
        summary["hosts"] = hosts
    writer.write(summary)
    return summary


LAUNCH = "launch.json"  # a pool's launch across the hosts, as `ncclprobe.sweep.hosts` ran it


def read_launch(pool_dir: Path) -> dict | None:
    """What the launch of a pool did (status, reason, each command's exit code), or None where the
    pool was run by hand (--torchrun-dir) or its record cannot be read (said as its reason)."""
    path = pool_dir / LAUNCH
    if not path.exists():
        return None
    try:
        doc = Where(str(path)).object(load_json(path, "launch record"))
    except UsageProblem as exc:
        return {"status": "unknown", "reason": f"unreadable launch record: {exc}"}
    return {
        "status": str(doc.get("status")),
        "reason": mask_text(str(doc["reason"])) if doc.get("reason") else None,
        "returncodes": doc.get("returncodes") if isinstance(doc.get("returncodes"), dict) else {},
    }


def _rank_messages(pool_dir: Path) -> list[dict]:
    """Every rank's messages, rank by rank (each file is one rank's own order)."""
    out = []
    ranks = sorted(int(p.stem[4:]) for p in pool_dir.glob("rank*.jsonl") if is_digits(p.stem[4:]))
    for rank in ranks:
        text = read_text(pool_dir / f"rank{rank}.jsonl", "worker message file")
        for line in text.splitlines():
            try:
                message = json.loads(line)
            except (ValueError, RecursionError):
                continue  # a line torn by a killed rank (or 5000 digits, nesting: no message)
            if isinstance(message, dict):
                out.append({"rank": rank, **message})
    return out


def collect_header(directory: Path) -> dict:
    header, _ = read_plan(directory)
    return {**header, "collected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
