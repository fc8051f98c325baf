"""`ncclprobe diagnose`: ranked causes from an engine trace and the evidence around it."""

from __future__ import annotations

import textwrap

import click

from ncclprobe.cli.output import emit, format_option

EPILOG = """\b
Examples:
  ncclprobe diagnose --trace trace.json
  ncclprobe diagnose --trace spec.json --baseline untuned.json --sweep sweep.jsonl
  ncclprobe diagnose --trace trace.json --env-check envcheck.json --format json

Exit codes: 0 no finding above informational, 1 findings, 2 unreadable input."""


@click.command(epilog=EPILOG, short_help="Ranked causes of a slow engine run, with evidence and next steps.")
@click.option("--trace", "trace_path", required=True, type=click.Path(dir_okay=False),
              help="Engine trace from `ncclprobe run-engine --trace FILE`.")
@click.option("--sweep", "sweep_path", type=click.Path(dir_okay=False), help="Sweep results (JSONL) to compare collectives with.")
@click.option("--env-check", "env_check_path", type=click.Path(dir_okay=False),
              help="`ncclprobe env-check --format json` output of the live job.")
@click.option("--baseline", "baseline_path", type=click.Path(dir_okay=False),
              help="Another engine trace to compare with (e.g. the untuned or known-good run).")
@format_option
def command(trace_path, sweep_path, env_check_path, baseline_path, fmt):
    """Reason over an engine trace the way a careful engineer would: find phases that run without
    CUDA graphs, compare the verify step with what its extra tokens explain, check that NCCL
    settings reached every worker before NCCL read them, and compare the engine's collectives
    with sweep measurements. Each finding carries its numbers, a confidence and the next command;
    hypotheses the evidence excludes are listed as ruled out."""
    from ncclprobe.diagnose import diagnose, load_evidence
    ev = load_evidence(trace_path, sweep=sweep_path, env_check=env_check_path, baseline=baseline_path)
    result = diagnose(ev)
    if fmt == "table":
        click.echo(render_text(result))
    else:
        emit(fmt, result.to_json(), [_row(i, f) for i, f in enumerate(result.findings, 1)])
    return result.exit_code()


def _row(index, finding) -> dict:
    return {"rank": index, "severity": finding.severity, "confidence": finding.confidence, "rule": finding.rule,
            "cost_ms_per_token": finding.cost_ms_per_token, "finding": finding.title, "next_command": finding.next_command}


def render_text(result) -> str:
    lines = [f"# diagnosis of {result.inputs.get('trace')}"] + _expectation_lines(result.expectation)
    if not result.findings:
        lines.append("# no findings: nothing above informational")
    for index, f in enumerate(result.findings, 1):
        cost = f", costs ~{f.cost_ms_per_token:.3f} ms/token" if f.cost_ms_per_token else ""
        lines.append(f"{index}. [{f.severity}, {f.confidence} confidence{cost}] {f.title}")
        lines += _wrap(f.detail, "   ")
        lines += _wrap("evidence: " + _evidence_text(f.evidence), "   ")
        if f.next_command:
            lines.append(f"   next: {f.next_command}")
    if result.ruled_out:
        lines.append("ruled out:")
        lines += [f"  - {r.hypothesis}: {r.reason}" for r in result.ruled_out]
    if result.not_checked:
        lines.append("not checked (missing evidence):")
        lines += [f"  - {n.hypothesis}: {n.missing}" + (f" (next: {n.next_command})" if n.next_command else "")
                  for n in result.not_checked]
    return "\n".join(lines)


def _evidence_text(value) -> str:
    """Every number a finding rests on, nested runs and per-rank problems included (the JSON
    output has the same values unrounded); floats to 4 significant digits so a line stays readable."""
    if isinstance(value, dict):
        return ", ".join(f"{k}={_evidence_text(v) if not isinstance(v, dict) else '{' + _evidence_text(v) + '}'}"
                         for k, v in value.items())
    if isinstance(value, list):
        return "[" + "; ".join(_evidence_text(v) for v in value) + "]"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _expectation_lines(exp: dict | None) -> list[str]:
    """How the expected verify/decode ratio was derived (see ncclprobe.diagnose.expectations)."""
    if not exp:
        return []
    mb = lambda parts: ", ".join(f"{k} {v / 1e6:.3g} MB" for k, v in parts.items())
    lines = [f"# expected verify/decode {exp['expected_ratio']:.2f}x = bytes moved by a verify step / by a decode step "
             f"(weight-bandwidth bound); flagged above {exp['limit_ratio']:.2f}x",
             f"#   decode: {mb(exp['decode_bytes'])}", f"#   verify: {mb(exp['verify_bytes'])}"]
    return lines + [f"#   assumed: {a}" for a in exp.get("assumptions") or []]


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, width=100, initial_indent=indent, subsequent_indent=indent)
