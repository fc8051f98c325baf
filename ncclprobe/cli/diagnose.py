"""`ncclprobe diagnose`: ranked causes from an engine run (engine trace, profiles or server log) and the
evidence around it."""

from __future__ import annotations

import textwrap

import click

from ncclprobe.cli import exit_codes
from ncclprobe.cli.output import emit, format_option
from ncclprobe.cli.table import terminal_width
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
    help="`ncclprobe env-check --format json` output of the live job.",
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
    excludes are listed as ruled out, and what the evidence cannot show is said."""
    from ncclprobe.diagnose import diagnose, load_evidence
    from ncclprobe.evidence.run.profile_dir import expand

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
        env_check=env_check_path,
        model_config=model_config,
        collect_env=collect_env_path,
        flight_recorder=flight_recorder,
        logs=job_logs,
        nccl_logs=nccl_logs,
        capture=capture_dir,
        draft_config=draft_config,
    )
    result = diagnose(ev)
    if fmt == "table":
        click.echo(render_text(result, ev))
    else:
        doc = result.to_json()
        doc["runs"] = [run_summary(src, run) for src, run in ev.all_runs()]
        if ev.flight_recorder:
            from ncclprobe.diagnose.hang.hang import groups_summary

            doc["process_groups"] = groups_summary(ev.flight_recorder)
        emit(fmt, doc, [_row(i, f) for i, f in enumerate(result.findings, 1)])
    return result.verdict()


def _row(index, finding) -> dict:
    return {
        "rank": index,
        "severity": finding.severity,
        "confidence": finding.confidence,
        "rule": finding.rule,
        "cost_ms_per_token": finding.cost_ms_per_token,
        "cost_ms_per_step": finding.cost_ms_per_step,
        "finding": finding.title,
        "next_command": finding.next_command,
    }


def run_summary(source: str, run) -> dict:
    """A run of the view, for --format json: its phases and what could not be known."""
    return {
        "input": source,
        "label": run.label,
        "mode": run.mode,
        "source": run.source,
        "engine": run.engine,
        "path": run.path,
        "phases": {name: p.to_json() for name, p in run.phases.items()},
        "collective_share": run.collective_share,
        "graph_coverage": run.graph_coverage,
        "acceptance": run.acceptance.__dict__ if run.acceptance else None,
        "ranks": run.ranks,
        "log": run.log,
        "notes": run.notes,
    }


def render_text(result, ev=None) -> str:
    lines = [f"# diagnosis of {_inputs(result.inputs)}"] + _expectation_lines(result.expectation)
    if ev is not None and ev.kind != "engine-trace":
        lines += _step_lines(ev)
    if ev is not None and ev.flight_recorder:
        from ncclprobe.diagnose.hang.hang import groups_summary

        lines += _group_lines(groups_summary(ev.flight_recorder))
    lines += [f"# note: {note}" for note in result.notes]
    if not result.findings:
        lines.append("# no findings: nothing above informational")
    for index, f in enumerate(result.findings, 1):
        cost = (
            f", costs ~{f.cost_ms_per_token:.3f} ms/token"
            if f.cost_ms_per_token
            else f", costs ~{f.cost_ms_per_step:.3f} ms/step"
            if f.cost_ms_per_step
            else ""
        )
        lines.append(f"{index}. [{f.severity}, {f.confidence} confidence{cost}] {f.title}")
        lines += _wrap(f.detail, "   ")
        if f.evidence:  # a finding of missing evidence (no step found) has none to show
            lines += _wrap("evidence: " + _evidence_text(f.evidence), "   ")
        lines += next_lines(f.next_command, "   ")
    if result.ruled_out:
        lines.append("ruled out:")
        lines += [f"  - {r.hypothesis}: {r.reason}" for r in result.ruled_out]
    if result.not_checked:
        lines.append("not checked (missing evidence):")
        for n in result.not_checked:
            lines.append(f"  - {n.hypothesis}: {n.missing}")
            lines += next_lines(n.next_command, "    ")
    return "\n".join(_fit(lines, terminal_width()))


class _Command(str):
    """A command line of a next step: printed whole at any width (a wrapped command cannot be
    pasted: each line would run alone)."""


class _Remark(str):
    """A `# ` line of a next step: wrapped into further `# ` lines under its own indent."""


def next_lines(snippet: str, indent: str) -> list[str]:
    """A next step (diagnose.commands: command lines and `# ` remarks) as `next:` lines: every
    command on a line of its own, its trailing `  # ` remark on the lines after it."""
    if not snippet:
        return []
    lines, lead = [], indent + "next: "
    for part in snippet.split("\n"):
        command, _, remark = ("", "", part[2:]) if part.startswith("# ") else part.partition("  # ")
        if command:
            lines.append(_Command(lead + command))
            lead = " " * len(lead)
        if remark:
            lines.append(_Remark(lead + "# " + remark))
            lead = " " * len(lead)
    return lines


def _fit(lines: list[str], width: int | None) -> list[str]:
    """Every line wrapped to the terminal: `#` lines under their first words, a next step's remark
    under its `# `, the others under their own indent; a next step's command never (--wide: every
    line as it is)."""
    if width is None:
        return lines
    fitted = []
    for line in lines:
        if len(line) <= width or isinstance(line, _Command):
            fitted.append(line)
            continue
        lead = len(line) - len(line.lstrip())
        if isinstance(line, _Remark):
            indent = " " * (lead + len("next: ") if line.lstrip().startswith("next: ") else lead)
            indent += "# "
        else:
            indent = "#   " if line.startswith("#") else " " * (lead + 3)
        fitted += textwrap.wrap(
            line,
            width=width,
            subsequent_indent=indent,
            break_on_hyphens=False,
            break_long_words=False,
        )
    return fitted


def _inputs(inputs: dict) -> str:
    parts = []
    for key, value in inputs.items():
        if value:
            names = value if isinstance(value, list) else [value]
            parts.append(f"{key.replace('_', ' ')} " + ", ".join(map(str, names)))
    return "; ".join(parts) or "nothing"


def _step_lines(ev) -> list[str]:
    """Per run and phase: steps, time per step, GPU busy and idle, graph share, launches."""
    lines = []
    for source, run in ev.all_runs():
        for p in run.phases.values():
            if not p.count:
                continue
            gpu = (
                f", GPU busy {p.device_ms:.3f} ms, idle {p.idle_ms:.3f} ms"
                if p.device_ms is not None
                else ", no GPU events"
            )
            graph = f", graph {p.graph_share:.0%}" if p.graph_share is not None else ""
            launches = ", ".join(f"{k} {v:g}" for k, v in p.launches.items())
            tokens = f", {p.tokens_per_seq:g} tok/seq" if p.tokens_per_seq else ""
            batch = f", batch {p.batch}" if p.batch else ""
            lines.append(
                f"# {run.name(source)}: {p.name} x{p.count}: {p.median_ms:.3f} ms/step{gpu}{graph}"
                f"{tokens}{batch}" + (f"; launches per step: {launches}" if launches else "")
            )
    return lines


def _group_lines(groups: list[dict]) -> list[str]:
    """Per process group: each rank's last enqueued and completed collective, where it stopped."""
    lines = []
    for g in groups:
        ranks = "; ".join(
            f"rank {r} enqueued {p['enqueued']}, completed {p['completed']}"
            for r, p in g["ranks"].items()
        )
        stuck = {
            "missing": f"; stopped at #{g['stuck_at']}, which a member never entered",
            "mismatch": f"; the ranks disagree at #{g['stuck_at']}",
            "agreed": f"; every member is in #{g['stuck_at']}, unfinished",
        }.get(g["stuck_because"], "")
        lines.append(f"# {g['label']} (ranks {', '.join(map(str, g['members']))}): {ranks}{stuck}")
    return lines


def _evidence_text(value) -> str:
    """Every number a finding rests on, nested runs and per-rank problems included (the JSON
    output has the same values unrounded); floats to 4 significant digits so a line stays readable."""
    if isinstance(value, dict):
        return ", ".join(
            f"{k}={_evidence_text(v) if not isinstance(v, dict) else '{' + _evidence_text(v) + '}'}"
            for k, v in value.items()
        )
    if isinstance(value, list):
        return "[" + "; ".join(_evidence_text(v) for v in value) + "]"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _expectation_lines(exp: dict | None) -> list[str]:
    """How the expected verify/decode ratio was derived (see ncclprobe.diagnose.run.expectations)."""
    if not exp:
        return []
    mb = lambda parts: ", ".join(f"{k} {v / 1e6:.3g} MB" for k, v in parts.items())
    lines = [
        f"# expected verify/decode {exp['expected_ratio']:.2f}x = bytes moved by a verify step / by a decode step "
        f"(weight-bandwidth bound); flagged above {exp['limit_ratio']:.2f}x",
        f"#   decode: {mb(exp['decode_bytes'])}",
        f"#   verify: {mb(exp['verify_bytes'])}",
    ]
    return lines + [f"#   assumed: {a}" for a in exp.get("assumptions") or []]


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(
        text,
        width=terminal_width() or len(indent) + len(text),
        initial_indent=indent,
        subsequent_indent=indent,
        break_on_hyphens=False,
        break_long_words=False,
    )
