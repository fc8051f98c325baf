"""`ncclprobe knobs`: the NCCL knowledge table, one variable explained, or a lint of this environment."""

from __future__ import annotations

import click

from ncclprobe.cli import exit_codes
from ncclprobe.cli.output import emit, emit_report, format_option
from ncclprobe.cli.types import NonEmpty, Version
from ncclprobe.errors import UsageProblem
from ncclprobe.nccl.knobs import KNOBS, explain
from ncclprobe.nccl.version import parse_version
from ncclprobe.verdict import Verdict

EPILOG = f"""\b
Examples:
  ncclprobe knobs
  ncclprobe knobs NCCL_P2P_LEVEL
  ncclprobe knobs proto --format json
  NCCL_PROTO=^LL ncclprobe knobs --lint --topo topo.txt --nccl-version 2.28.9
  ncclprobe knobs --lint              # this machine: its GPU topology and torch's NCCL version
  ncclprobe knobs --lint --collect-env collect_env.txt   # what `vllm collect-env` printed

--topo FILE is saved `nvidia-smi topo -m` output; without it the lint reads this machine's
topology (none on a machine without GPUs: rules that depend on the links then say so instead of
deciding).

{exit_codes("shown, or the lint found no error", "the lint found an error")}
"""


@click.command(epilog=EPILOG, short_help="Explain NCCL variables; lint this environment.")
@click.argument("variable", required=False, type=NonEmpty())
@click.option(
    "--lint", "do_lint", is_flag=True, help="Lint the NCCL_* variables of this environment instead."
)
@click.option(
    "--topo",
    "topo_file",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="For --lint: the GPUs' topology (saved `nvidia-smi topo -m`)  [default: this machine's].",
)
@click.option(
    "--nccl-version",
    type=Version(),
    help="For --lint: the NCCL version in use, e.g. 2.28.9  [default: torch's NCCL].",
)
@click.option(
    "--collect-env",
    "collect_env",
    type=click.Path(dir_okay=False),
    help="For --lint: lint the NCCL settings, NCCL version and topology in `vllm collect-env` or "
    "`python -m sglang.check_env` output instead of this environment.",
)
@format_option
def command(variable, do_lint, topo_file, nccl_version, collect_env, fmt):
    """Print the NCCL knowledge table, or explain one VARIABLE (NCCL_P2P_LEVEL, p2p_level, ...):
    its values and syntax, when NCCL reads it (each communicator creation or once per process),
    version notes, risks, how NCCL's log proves it was read, and facts not yet checked on a GPU.

    With --lint, check the NCCL_* variables of the current environment; exits 1 on errors.
    """
    if do_lint:
        if variable:
            raise UsageProblem("--lint checks the environment; give no VARIABLE with it")
        if nccl_version is not None and parse_version(nccl_version) is None:
            raise UsageProblem(f"--nccl-version {nccl_version!r} is not a version like 2.28.9")
        return _lint(topo_file, nccl_version, collect_env, fmt)
    if topo_file or nccl_version or collect_env:
        raise UsageProblem("--topo, --nccl-version and --collect-env go with --lint")
    if variable:
        doc = explain(_canonical(variable))
        emit(
            fmt,
            {"schema_version": 1, **doc},
            _explain_rows(doc),
            title=f"{doc['name']}: {doc['summary']}",
        )
        return None
    rows = [
        {
            "variable": k.name,
            "read": k.scope.value,
            "values": ", ".join(k.values) or k.kind.value,
            "default": k.default,
            "summary": k.summary,
        }
        for k in KNOBS.values()
    ]
    emit(
        fmt,
        {"schema_version": 1, "knobs": [explain(name) for name in KNOBS]},
        rows,
        title="NCCL variables that matter for collectives on a node",
        notes=[
            "read: communicator = re-read at every communicator creation; process = once per process"
        ],
    )
    return None


def _canonical(name: str) -> str:
    name = name.strip().upper()
    return name if name.startswith("NCCL_") else "NCCL_" + name


def _explain_rows(doc: dict) -> list[dict]:
    rows = []
    for key, value in doc.items():
        if key in ("name", "summary") or value in (None, "", [], ()):
            continue
        if isinstance(value, (list, tuple)):
            value = "; ".join(map(str, value))
        elif isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        rows.append({"field": key, "value": value})
    return rows


def _lint(topo_file, nccl_version, collect_env, fmt) -> Verdict:
    from ncclprobe.diagnose.settings.lint import lint_report
    from ncclprobe.evidence.bundle import Evidence
    from ncclprobe.gather.settings import gather_settings

    settings = gather_settings(
        topo_file=topo_file, nccl_version=nccl_version, collect_env=collect_env
    )
    report = lint_report(Evidence(settings=settings))
    emit_report(report, fmt)
    return report.verdict()
