"""The engine-run evidence: one owner for what an inference engine's run shows.

Three sources, one normalized view (`view.EngineRun`, docs/DESIGN.md "Evidence model"):
- `trace`: ncclprobe's own engine trace (schema, loader; `trace_checks`: merges, self-checks,
  exit code);
- `profile`: PyTorch profiler (Kineto) traces of any engine, `.json` or `.json.gz`, one per rank,
  CUDA or ROCm, read incrementally;
- `serverlog`: SGLang and vLLM server logs (`serverlog_lines`: what each engine's lines say).
`load_runs` reads whichever were given and returns them as one `RunSet`; `sniff` tells which kind
a file is, for the commands that take any of the three (`recommend --trace`, `report --trace`).
diagnose, recommend and report read the view, never a file's own keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.run.view import RunSet
from ncclprobe.validate import open_input

__all__ = ["RunSet", "load_any", "load_runs", "sniff"]


def sniff(path: str | Path) -> str:
    """engine-trace, profile or server-log, from the file's first bytes (gzip: a profile)."""
    with open_input(path, "") as f:
        head = f.read(4096)
    if head[:2] == b"\x1f\x8b":
        return "profile"
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    if text.startswith("{") or text.startswith("["):
        if '"traceEvents"' in text or '"schemaVersion"' in text or '"deviceProperties"' in text:
            return "profile"
        if '"engine-trace"' in text or '"kind"' in text:
            return "engine-trace"
        return "profile" if '"ph"' in text else "engine-trace"
    return "server-log"


def load_runs(
    *,
    trace: str | Path | None = None,
    profiles: Sequence[str | Path] = (),
    server_logs: Sequence[str | Path] = (),
    model_config: str | Path | None = None,
    required: bool = True,
    role: str = "input",
) -> RunSet:
    """Read the evidence of one run: an engine trace, or profiles (one per rank), or a server
    log, or a profile together with the server log of the same run (the log adds acceptance and
    throughput to the profile's steps)."""
    profiles, server_logs = [p for p in profiles or () if p], [p for p in server_logs or () if p]
    if trace and (profiles or server_logs):
        raise UsageProblem(
            f"give the {role} as an engine trace or as profiles/server logs, not both"
        )
    # read (and so validated) whichever evidence it comes with; an engine trace's own model shape wins,
    # the config.json fills in what the trace does not record (MLP width, heads)
    model = None
    if model_config:
        from ncclprobe.evidence.run.model_config import read_model_config

        model = read_model_config(model_config)
    if trace:
        if Path(trace).is_file() and sniff(trace) != "engine-trace":
            raise UsageProblem(
                f"{trace} looks like a {sniff(trace)}, not an ncclprobe engine trace: give it as "
                + ("--profile" if sniff(trace) == "profile" else "--server-log")
            )
        out = from_trace_file(trace)
    elif profiles:
        from ncclprobe.evidence.run.profile import load_profiles

        out = load_profiles(profiles)
        if server_logs:
            from ncclprobe.evidence.run.serverlog import add_log_to_profile

            add_log_to_profile(out, server_logs)
    elif server_logs:
        from ncclprobe.evidence.run.serverlog import load_server_logs

        out = load_server_logs(server_logs)
    else:
        out = None
    if out is not None:
        if model is not None:
            out.config["model"] = {**model, **(out.config.get("model") or {})}
        return out
    if required:
        raise UsageProblem(
            "nothing to diagnose: give --trace TRACE, --profile FILE (one per rank) or --server-log FILE"
        )
    return RunSet()


def load_any(paths: list[str | Path]) -> RunSet:
    """Files of any of the three kinds, told apart by their content (one kind per call)."""
    kinds = {sniff(p) for p in paths}
    if len(kinds) > 1:
        raise UsageProblem(
            f"these files are of different kinds ({', '.join(sorted(kinds))}); give one kind at a time"
        )
    kind = kinds.pop()
    if kind == "engine-trace":
        return from_trace_files(paths)
    return load_runs(profiles=paths) if kind == "profile" else load_runs(server_logs=paths)


def from_trace_file(path: str | Path) -> RunSet:
    return from_trace_files([path])


def from_trace_files(paths: list[str | Path]) -> RunSet:
    from ncclprobe.evidence.run.trace import to_runs
    from ncclprobe.evidence.run.trace_checks import side_by_side

    doc = side_by_side(list(paths))
    name = ", ".join(str(p) for p in paths)
    return RunSet(
        runs=to_runs(doc, name),
        config=dict(doc.get("config") or {}),
        kind="engine-trace",
        inputs={"trace": name},
        traces=[doc],
    )
