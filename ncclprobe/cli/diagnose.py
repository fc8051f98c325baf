"""`ncclprobe diagnose`: ranked causes from an engine run (engine trace, profiles or server log) and the
evidence around it."""

from __future__ import annotations

import click

from ncclprobe.cli import exit_codes
from ncclprobe.cli.output import emit_report, format_option
from ncclprobe.errors import UsageProblem

EPILOG = f"""\b
Examples:
  ncclprobe diagnose --trace trace.json
  ncclprobe diagnose --trace spec.json --baseline untuned.json --sweep sweep.jsonl
  ncclprobe diagnose --profile rank0.trace.json.gz --profile rank1.trace.json.gz
  ncclprobe diagnose --profile profiles/      # every trace run-engine --profile profiles/ wrote
  ncclprobe diagnose --profile spec.json.gz --baseline-profile plain.json.gz \\
      --model-config model/config.json
  ncclprobe diagnose --server-log sglang.log --baseline-server-log sglang-plain.log
  ncclprobe diagnose --profile spec.json.gz --server-log spec.log --format json
  ncclprobe diagnose --server-log vllm.log --collect-env collect_env.txt
  ncclprobe diagnose --server-log sglang.log --nccl-log nccl.rank0.log --nccl-log nccl.rank1.log
  ncclprobe diagnose --flight-recorder /tmp/fr --log job.log
  ncclprobe diagnose --flight-recorder /tmp/fr --nccl-log nccl.rank0.log --nccl-log nccl.rank1.log
  ncclprobe diagnose --env-check 4242 --expect NCCL_PROTO=LL --topo-check
  ncclprobe diagnose --capture capture-20261206-101500/

{exit_codes("no finding above informational", "findings")}"""


@click.command(
    epilog=EPILOG, short_help="Ranked causes of a slow engine run, with evidence and next steps."
)
@click.option(
    "--trace",
    "trace_path",
    type=click.Path(dir_okay=False),
    help="Engine trace from `ncclprobe run-engine --trace FILE`.",
)
@click.option(
    "--profile",
    "profiles",
    multiple=True,
    type=click.Path(),
    help="PyTorch profiler trace (.json or .json.gz) of any engine, one per rank (repeatable), or the "
    "directory of them (run-engine --profile DIR: its baseline traces become --baseline-profile).",
)
@click.option(
    "--server-log",
    "server_logs",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="SGLang or vLLM server log of the run (repeatable; with --profile: the same run's log).",
)
@click.option(
    "--baseline",
    "baseline_path",
    type=click.Path(dir_okay=False),
    help="Another engine trace to compare with (e.g. the untuned or known-good run).",
)
@click.option(
    "--baseline-profile",
    "baseline_profiles",
    multiple=True,
    type=click.Path(),
    help="Profiles of the run to compare against, e.g. plain decoding (repeatable, one per rank).",
)
@click.option(
    "--baseline-server-log",
    "baseline_logs",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Server log of the run to compare against.",
)
@click.option(
    "--model-config",
    "model_config",
    type=click.Path(),
    help="The model's config.json (or its directory): the shape for the expected verify/decode ratio.",
)
@click.option(
    "--sweep",
    "sweep_path",
    type=click.Path(dir_okay=False),
    help="Sweep results (JSONL) to compare collectives with.",
)
@click.option(
    "--env-check",
    "env_check_path",
    type=click.Path(dir_okay=False),
    metavar="FILE|PID",
    help="`ncclprobe env-check --format json` output of the live job, or the PID of its root "
    "process: its tree is read now, as `env-check --pid PID` reads it (a file of that name wins).",
)
@click.option(
    "--expect",
    "expect",
    multiple=True,
    metavar="NAME=VALUE",
    help="With --env-check PID: a setting every process of the job should have (repeatable).",
)
@click.option(
    "--topo-check",
    "topo_check",
    is_flag=True,
    help="Measure this machine's P2P health as `topo --check` does (every GPU pair, the platform, "
    "NCCL's dumps) and judge it beside the rest.",
)
@click.option(
    "--collect-env",
    "collect_env_path",
    type=click.Path(dir_okay=False),
    help="`vllm collect-env` or `python -m sglang.check_env` output: its NCCL settings are linted (the "
    "collecting shell's, not the workers'), its NCCL version and topology used where the run has none.",
)
@click.option(
    "--flight-recorder",
    "flight_recorder",
    multiple=True,
    type=click.Path(),
    help="PyTorch Flight Recorder dump of a rank (pickle or JSON), or a folder of one dump per rank "
    "(TORCH_FR_DUMP_TEMP_FILE); repeatable. Pickles are read without running them.",
)
@click.option(
    "--log",
    "job_logs",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="The job's stderr or log (torchrun's, or one per rank): watchdog timeouts, [rankN]: lines, "
    "torchrun's failure summary (repeatable).",
)
@click.option(
    "--nccl-log",
    "nccl_logs",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="NCCL debug log of a rank of the job (NCCL_DEBUG=INFO); repeatable, one per rank.",
)
@click.option(
    "--draft-config",
    "draft_config",
    type=click.Path(),
    help="The speculative draft checkpoint's config.json (or its directory): what the draft is, "
    "against the algorithm the server log shows and the target's --model-config.",
)
@click.option(
    "--capture",
    "capture_dir",
    type=click.Path(file_okay=False),
    help="A directory `ncclprobe capture` wrote: every file in it, and what it saw of the job's "
    "processes (the settings that never reached a worker).",
)
@format_option
def command(
    trace_path,
    profiles,
    server_logs,
    baseline_path,
    baseline_profiles,
    baseline_logs,
    model_config,
    sweep_path,
    env_check_path,
    collect_env_path,
    flight_recorder,
    job_logs,
    nccl_logs,
    draft_config,
    capture_dir,
    expect,
    topo_check,
    fmt,
):
    """Reason over an engine run the way a careful engineer would: find phases that run without
    CUDA graphs, steps where the GPU waits for the host, compare the verify step with what its
    extra tokens explain, check that NCCL settings reached every worker before NCCL read them,
    and compare the engine's collectives with sweep measurements. The run is an ncclprobe engine
    trace, PyTorch profiler traces of any engine (SGLang, vLLM, ...), or an SGLang/vLLM server
    log; a hung or timed-out job is read from its ranks' Flight Recorder dumps, its log and its
    NCCL logs: which rank, which process group and sequence number, which collective. The NCCL
    logs of the job's ranks add what each rank's NCCL read, its version, the transports it
    connected the ranks with and its warnings, placed against the run or the hang. Each
    finding carries its numbers, a confidence and the next command; hypotheses the evidence
    excludes are listed as ruled out, and what the evidence cannot show is said. --topo-check and
    --env-check PID read this machine now and add what the P2P and process-environment rules find."""
    from ncclprobe.diagnose import diagnose, load_evidence
    from ncclprobe.evidence.run.profile_dir import expand

    pid = _live_pid(env_check_path)
    if expect and pid is None:
        raise UsageProblem("--expect goes with --env-check PID (a live job's root process)")
    job = flight_recorder or job_logs or nccl_logs or capture_dir
    if collect_env_path and not (trace_path or profiles or server_logs or job):
        raise UsageProblem(
            "--collect-env goes with the run it describes (--trace, --profile, --server-log, "
            "--flight-recorder, --log or --nccl-log); "
            f"alone: ncclprobe knobs --lint --collect-env {collect_env_path}"
        )
    profiles, baseline_profiles = expand(profiles, baseline_profiles)
    ev = load_evidence(
        trace_path,
        profiles=profiles,
        server_logs=server_logs,
        baseline=baseline_path,
        baseline_profiles=baseline_profiles,
        baseline_server_logs=baseline_logs,
        sweep=sweep_path,
        env_check=env_check_path if pid is None else None,
        model_config=model_config,
        collect_env=collect_env_path,
        flight_recorder=flight_recorder,
        logs=job_logs,
        nccl_logs=nccl_logs,
        capture=capture_dir,
        draft_config=draft_config,
        live=bool(topo_check or pid),
    )
    _gather_live(ev, pid, expect, topo_check)
    report = diagnose(ev)
    emit_report(report, fmt)
    return report.verdict()


def _live_pid(value: str | None) -> int | None:
    """--env-check's PID: digits that name no file here (an env-check document of that name wins)."""
    from pathlib import Path

    from ncclprobe.numbers import is_digits, parse_int

    if value is None or Path(value).exists() or not is_digits(value):
        return None
    return parse_int(value, "--env-check PID", min=1, max=2**31 - 1)


def _gather_live(ev, pid: int | None, expect, topo_check: bool) -> None:
    """This machine's evidence, read now: the job's processes, the P2P measurement."""
    if pid is not None:
        from ncclprobe.diagnose.process_env.expect import parse_expect
        from ncclprobe.gather.processes import gather_processes

        ev.processes = gather_processes(pid, expectations=parse_expect(expect))
        ev.inputs["env_check_pid"] = pid
    if topo_check:
        from ncclprobe.gather.p2p import gather_p2p

        click.echo(
            "diagnose --topo-check: measuring P2P, then the platform and an NCCL job ...", err=True
        )
        ev.p2p = gather_p2p()
        ev.inputs["topo_check"] = "this machine"
