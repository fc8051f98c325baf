"""`ncclprobe probe graph-capture`: what CUDA graphs change for NCCL collectives (GPU only)."""

from __future__ import annotations

import click

from ncclprobe.cli import exit_codes
from ncclprobe.cli.output import emit, format_option
from ncclprobe.errors import UsageProblem

EPILOG = f"""\b
Examples:
  ncclprobe probe graph-capture
  ncclprobe probe graph-capture --sizes 8K,64K,1M --format json
  ncclprobe probe graph-capture --trace trace.json --nranks 2
  ncclprobe probe graph-capture --variable NCCL_ALGO --values Ring,Tree --nranks 2
  ncclprobe probe graph-capture --share-gpu 2 --sizes 64K --iters 20 --graph-ops 2 --replays 3

--share-gpu N is a diagnostic mode for a machine with one GPU: N ranks share GPU 0, each with
its own NCCL_HOSTID, so NCCL takes them for separate hosts and connects them over NET/Socket.
Its timings say nothing about NVLink or PCIe; which setting a communicator and a captured graph
use (from NCCL's own TUNING lines) is real, and that is what one rank cannot show. Two
processes time-slice the GPU (about 4-5 ms per call on an H200, 36 ms for LL at 1M), so keep
--iters, --graph-ops and --replays small.

{
    exit_codes(
        "measured",
        "a captured graph did not keep its setting",
        "no CUDA GPU with NCCL here (or fewer GPUs than --nranks)",
    )
}"""


@click.command(
    epilog=EPILOG,
    short_help="Eager vs CUDA-graph collectives: host cost, settings baked in at capture.",
)
@click.option(
    "--sizes",
    default="8K,64K,1M,16M",
    show_default=True,
    help="All-reduce sizes (float32 buffers).",
)
@click.option(
    "--trace",
    "trace_path",
    type=click.Path(dir_okay=False),
    help="Take the sizes from an engine trace (`run-engine --trace`) instead of --sizes.",
)
@click.option("--nranks", default=1, show_default=True, type=int, help="Ranks, one GPU each.")
@click.option(
    "--share-gpu",
    default=0,
    type=int,
    metavar="N",
    help="DIAGNOSTIC: N ranks on GPU 0 (distinct NCCL_HOSTID each, NET/Socket transport): timings "
    "are not NVLink/PCIe, but the settings shown from NCCL's log are real.",
)
@click.option("--iters", default=200, show_default=True, type=int, help="Eager calls per timing.")
@click.option(
    "--graph-ops", default=20, show_default=True, type=int, help="Collectives per captured graph."
)
@click.option(
    "--replays", default=50, show_default=True, type=int, help="Graph replays per timing."
)
@click.option(
    "--variable",
    default="NCCL_PROTO",
    show_default=True,
    help="Per-communicator NCCL variable switched between the two communicators.",
)
@click.option(
    "--values", default="LL,Simple", show_default=True, help="FIRST,SECOND values of --variable."
)
@click.option(
    "--capture-size",
    default="1M",
    show_default=True,
    help="Size of the captured all-reduce for the settings part.",
)
@click.option(
    "--raw-nccl/--no-raw-nccl",
    default=True,
    show_default=True,
    help="Also time a raw NCCL communicator through cupy (optional extra).",
)
@format_option
@click.pass_context
def command(
    ctx,
    sizes,
    trace_path,
    nranks,
    share_gpu,
    iters,
    graph_ops,
    replays,
    variable,
    values,
    capture_size,
    raw_nccl,
    fmt,
):
    """Measure eager all-reduce calls against CUDA-graph replays, with the eager path's host cost
    separated from its device time; capture a graph under one value of a per-communicator NCCL
    setting, build a new communicator under another, replay the old graph and show from NCCL's
    own log that it keeps the value it was captured with; and compare torch.distributed with a
    raw NCCL communicator (cupy). The settings part needs two or more ranks (one rank runs no
    NCCL tuning model): two GPUs, or --share-gpu on one. Needs a GPU: on a CPU-only machine it
    exits 3 and says why."""
    from ncclprobe.probes.graph_capture_run import GraphCaptureSpec, run_graph_capture, verdict
    from ncclprobe.sizes import parse_size, parse_sizes

    first, second = _two_values(values)
    spec = GraphCaptureSpec(
        sizes=tuple(_trace_sizes(trace_path) if trace_path else parse_sizes(sizes)),
        nranks=nranks,
        share_gpu=share_gpu,
        iters=iters,
        graph_ops=graph_ops,
        replays=replays,
        variable=variable,
        first=first,
        second=second,
        capture_size=parse_size(capture_size),
        raw_nccl=raw_nccl,
    )
    doc = run_graph_capture(spec)
    emit(
        fmt,
        doc,
        doc["timings"],
        title="graph-capture: eager vs graph replay (us per all-reduce)",
        notes=doc["notes"] + capture_notes(doc.get("capture")),
    )
    return verdict(doc)


def _two_values(values: str) -> tuple[str, str]:
    parts = [v.strip() for v in values.split(",")]
    if len(parts) != 2 or not all(parts):
        raise UsageProblem(
            f"--values needs exactly two values separated by a comma, got {values!r}"
        )
    return parts[0], parts[1]


def _trace_sizes(path: str) -> list[int]:
    from ncclprobe.evidence.run import from_trace_file

    sizes = sorted({s for run in from_trace_file(path).runs for s in run.collective_sizes()})
    if not sizes:
        raise UsageProblem(f"the trace {path!r} records no collective sizes")
    return sizes


def capture_notes(verdict: dict | None) -> list[str]:
    if not verdict:
        return []
    var = verdict["variable"]
    timing = (
        f"old graph replay {verdict['replay_us_per_op_before_switch']:.2f} us/op before the switch, "
        f"{verdict['replay_us_per_op_after_switch']:.2f} after; new communicator's graph "
        f"{verdict['second_graph_us_per_op']:.2f} us/op"
    )
    if verdict["world_size"] < 2:
        return [verdict["why_not_shown"], timing]
    lines = [
        f"{var}: first communicator read {verdict['first_comm_read']!r}, second read "
        f"{verdict['second_comm_read']!r} (asked {verdict['first']!r}, {verdict['second']!r})",
        f"planned at first capture {verdict['planned_at_first_capture'] or 'none logged'}, "
        f"at second {verdict['planned_at_second_capture'] or 'none logged'}; "
        f"TUNING lines during the old graph's replay: {verdict['tuning_lines_at_replay']} "
        "(none: the replay built no new plan)",
        timing,
    ]
    word = {True: "yes", False: "NO", None: "unknown"}
    lines.append(
        f"captured under {verdict['first']}: {word[verdict['captured_under_first']]}; replay kept it: "
        f"{word[verdict['replay_kept_capture']]}; new communicator followed {verdict['second']}: "
        f"{word[verdict['new_comm_followed_switch']]}"
    )
    if verdict["why_not_shown"]:
        lines.append(verdict["why_not_shown"])
    return lines
