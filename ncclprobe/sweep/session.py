"""A sweep from start to results file: validate everything, open the file, run, read it back.

`run(SessionRequest)` is the one library call of `ncclprobe sweep` and of `run-engine --tuned`'s
quick sweep: a new sweep (a `build.SweepRequest`), `--resume FILE` or `--collect DIR`, then the
thresholds and the report (`table.Report`: the document, its notes, its tables) in an `Outcome`
with the verdict; `plan` writes a torchrun plan instead. The steps (`new_job`, `resume_job`,
`collect_job`, `run_job`, `verdict`) stay public for tests. Everything that can be wrong with the
input is found before the results file (or the default ./runs/ directory) is created, so bad
input never leaves a half-written file behind; the file follows `ncclprobe.safe_output`'s rules
(an existing one is replaced only with `force`).
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.probes.issue_loop import check as check_issue_loop
from ncclprobe.records import FINDING_STATUSES, ResultsFile, Status, read_results
from ncclprobe.records_writer import ResultWriter, trim_incomplete_tail
from ncclprobe.safe_output import check_appendable, check_output
from ncclprobe.sweep import defaults, setup, table, thresholds
from ncclprobe.sweep.build import SweepRequest, build_spec
from ncclprobe.sweep.plan import SweepSpec
from ncclprobe.sweep.run import configs_to_run, run_sweep
from ncclprobe.verdict import Verdict

log = logging.getLogger("ncclprobe.sweep")

# (total steps, label) -> a context manager whose value has `advance(what)`; e.g. cli.output.Progress
ProgressFactory = Callable[[int, str], AbstractContextManager]


@dataclass(frozen=True, kw_only=True)
class SessionRequest:
    """One sweep session: measure `sweep`, or continue `resume` (a results file), or collect a
    torchrun plan's directory (`collect`); then check the thresholds (`--min-busbw GBPS[@SIZE]`,
    `--max-latency US[@SIZE]`)."""

    sweep: SweepRequest | None = None
    resume: str | None = None
    collect: str | None = None
    output: str | None = None  # None: ./runs/sweep-<time>.jsonl (a collect: required)
    force: bool = False
    argv: tuple[str, ...] = ()
    min_busbw: str | None = None
    max_latency: str | None = None
    effort: defaults.Effort | None = None  # None: the defaults of where it runs


@dataclass
class Outcome:
    """What a session measured: the results file read back, the thresholds it missed, the report
    (document, notes, tables) and the verdict (FINDINGS: see `verdict`)."""

    path: Path
    results: ResultsFile
    shortfalls: list[str]
    report: table.Report
    verdict: Verdict

    @property
    def notes(self) -> list[str]:
        return self.report.notes


def run(
    request: SessionRequest,
    *,
    progress: ProgressFactory | None = None,
    started: Callable[[Job], None] | None = None,
    label: str = "sweep",
) -> Outcome:
    """Validate, open the results file, measure (or continue, or collect), read the file back,
    judge. `started(job)` is called once the job is known and before the first measurement (the
    CLI names the file and arms its Ctrl-C hint there)."""
    criteria = thresholds.parse(request.min_busbw, request.max_latency)
    job = _job(request)
    if started is not None:
        started(job)
    with (progress or _silent)(job.total, label) as bar:
        results_file = run_job(job, bar)
    shortfalls = thresholds.check(results_file.results, criteria)
    for line in shortfalls:
        log.error("%s", line)
    return Outcome(
        path=job.path,
        results=results_file,
        shortfalls=shortfalls,
        report=table.report(results_file, shortfalls),
        verdict=verdict(results_file, shortfalls),
    )


def _job(request: SessionRequest) -> Job:
    if request.collect:
        return collect_job(request.collect, request.output, request.force)
    if request.resume:
        check_issue_loop()  # as build_spec checks it for a new sweep
        return resume_job(request.resume)
    if request.sweep is None:
        raise ValueError("SessionRequest: give a sweep, resume or collect")
    spec, skipped = build_spec(request.sweep, effort=request.effort)
    return new_job(spec, skipped, request.output, list(request.argv), force=request.force)


def _silent(total: int, label: str):
    return nullcontext(None)


def plan(
    request: SweepRequest,
    directory: str,
    argv: list[str],
    *,
    output_given: bool = False,
    criteria: tuple[str | None, str | None] = (None, None),
) -> tuple[list[str], int]:
    """A multi-node sweep as a torchrun plan in `directory`: (one command per pool, the world size).
    The thresholds (`criteria`: --min-busbw, --max-latency) are only checked here."""
    thresholds.parse(*criteria)
    if not request.nranks:
        raise UsageProblem(
            "--torchrun-dir needs --nranks: the world size torchrun will start (nodes x GPUs per node)"
        )
    spec, skipped = build_spec(request, local=False)
    if output_given:  # after the grid's own checks, which say more
        raise UsageProblem(
            "--torchrun-dir writes a plan, not results; --output and --force belong to the "
            "later --collect"
        )
    return plan_torchrun(spec, skipped, directory, argv), spec.nranks


def resume_hint(path) -> str | None:
    """How to continue an interrupted sweep: only when its file holds a finished configuration
    (otherwise the file was removed and the sweep starts over)."""
    try:
        configs = len(read_results(path).configs)
    except Exception:  # gone, or unreadable mid-write: nothing to continue
        return None
    return (
        f"{configs} configuration(s) are kept in {path}; continue with: ncclprobe sweep --resume {path}"
        if configs
        else None
    )


@dataclass
class Job:
    spec: SweepSpec
    path: Path
    header: dict | None  # None when resuming: the file has one
    done: set[str] = field(default_factory=set)
    equivalent_levels: list[list[str]] | None = None
    collect_dir: Path | None = None  # torchrun: collect what the workers left here
    force: bool = False  # replace an existing results file (--force)

    @property
    def total(self) -> int:
        configs, skips = configs_to_run(self.spec, self.equivalent_levels)
        return sum(1 for c in configs + [s.config for s in skips] if c.config_id not in self.done)


def default_output() -> Path:
    """./runs/sweep-<time>.jsonl; ./runs/ is made only when the file is (`run_job`)."""
    return Path("runs") / f"sweep-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.jsonl"


def new_job(
    spec: SweepSpec,
    skipped_modes: dict[str, str],
    output: str | None,
    argv: list[str],
    force: bool = False,
) -> Job:
    path = _check_writable(output, force)
    topo, levels = setup.topology(spec) if spec.backend == "nccl" else (None, None)
    head = _linted_header(spec, skipped_modes, argv, topo, configs_to_run(spec, levels)[0])
    return Job(spec=spec, path=path, header=head, equivalent_levels=levels, force=force)


def _linted_header(
    spec: SweepSpec, skipped_modes: dict[str, str], argv: list[str], topo: dict | None, configs
) -> dict:
    """The results header, with the lint's findings over `configs` (with the GPUs' facts and the
    NCCL version in use) in its notes and `lint` (said on stderr too)."""
    head = setup.header(spec, list(argv), topo, [], skipped_modes)
    version = (head.get("versions") or {}).get("nccl") if spec.backend == "nccl" else None
    findings = setup.lint_findings(
        configs, spec.backend, setup.node_facts(spec, topo), version, spec.collectives
    )
    for entry in findings:
        log.warning("%s", setup.lint_note(entry))
    known_bad = setup.known_bad_notes(version, setup.node_facts(spec, topo))
    for note in known_bad:
        log.warning("%s", note)
    head["notes"] = (
        setup.notes(spec, skipped_modes)
        + [setup.lint_note(entry) for entry in findings]
        + known_bad
    )
    return {**head, "lint": findings}


def _check_writable(output: str | None, force: bool) -> Path:
    if output is not None:
        return check_output(output, force=force, what="output file")
    path = default_output()
    if not path.parent.is_dir():  # ./runs/ is made later, once nothing can fail any more
        check_output(Path(path.name), what="output file (under ./runs/)")
        return path
    return check_output(path, what="output file")


def resume_job(path_text: str) -> Job:
    """Reopen a results file: cut an unfinished tail, skip every configuration it recorded.

    Everything is checked before the tail is cut, so a refused file is left exactly as it was."""
    path = Path(path_text)
    spec = _resumable_spec(path_text, read_results(path).header)
    check_appendable(path, "--resume")
    existing = trim_incomplete_tail(path)
    _, levels = setup.topology() if spec.backend == "nccl" else (None, None)
    return Job(
        spec=spec,
        path=path,
        header=None,
        done={c["config_id"] for c in existing.configs},
        equivalent_levels=levels,
    )


def _resumable_spec(path_text: str, header: dict) -> SweepSpec:
    if header.get("kind") != "sweep" or "spec" not in header:
        raise UsageProblem(
            f"{path_text!r} is not a sweep results file (header kind {header.get('kind')!r})"
        )
    try:
        spec = SweepSpec.from_json(header["spec"])
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise UsageProblem(
            f"{path_text!r} has an unreadable sweep spec in its header ({exc})"
        ) from exc
    try:  # e.g. a GPU sweep resumed on a CPU host, or a torchrun sweep's file resumed on one node
        setup.check_ranks(spec.backend, spec.nranks, share_gpu=spec.share_gpu)
    except UsageProblem as exc:
        raise UsageProblem(f"cannot resume {path_text!r} here: {exc}") from exc
    return spec


def plan_torchrun(
    spec: SweepSpec,
    skipped_modes: dict[str, str],
    directory: str,
    argv: list[str],
    hosts: dict | None = None,
) -> list[str]:
    """Write the plan of a sweep on other hosts; `hosts`: how `sweep.hosts` reaches them (the header
    keeps it), None for a plan run by hand."""
    from ncclprobe.sweep import torchrun

    head = _linted_header(
        spec, skipped_modes, argv, None, configs_to_run(spec, None)[0]
    )  # other hosts: links unknown
    if hosts is None:
        return torchrun.write_plan(spec, head, Path(directory))
    return torchrun.write_plan(spec, {**head, "hosts": hosts}, Path(directory), "--shared-dir")


def collect_job(directory: str, output: str | None, force: bool = False) -> Job:
    """A job whose measurements already happened under torchrun: only the collection is left."""
    from ncclprobe.sweep import torchrun

    header = torchrun.collect_header(Path(directory))
    try:
        spec = SweepSpec.from_json(header["spec"])
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise UsageProblem(
            f"--collect {directory!r}: its plan has an unreadable sweep spec ({exc})"
        ) from None
    path = _check_writable(output, force)
    return Job(spec=spec, path=path, header=header, collect_dir=Path(directory), force=force)


def run_job(job: Job, progress=None) -> ResultsFile:
    if _finished(job):  # nothing to add, not even a summary
        return read_results(job.path)
    job.path.parent.mkdir(parents=True, exist_ok=True)  # ./runs/ by default; everything was checked
    with ResultWriter(
        job.path,
        job.header,
        resume=job.header is None,
        force=job.force,
        atomic=job.collect_dir is not None,
    ) as writer:
        if job.collect_dir is not None:  # written beside the path, renamed into place on closing
            from ncclprobe.sweep.torchrun import collect

            collect(job.collect_dir, writer)
        else:
            run_sweep(
                job.spec,
                writer,
                done=job.done,
                equivalent_levels=job.equivalent_levels,
                progress=progress,
            )
    return read_results(job.path)


def _finished(job: Job) -> bool:
    """A resumed file with every configuration recorded and its summary written. Without the
    summary (the sweep was killed between its last configuration and the summary) the run goes on:
    it has nothing to measure and writes the summary."""
    return job.header is None and job.total == 0 and bool(read_results(job.path).summaries)


def verdict(results_file: ResultsFile, shortfalls: Sequence[str] = ()) -> Verdict:
    """FINDINGS when any configuration is wrong, hung, crashed or not confirmed by NCCL, a
    measurement failed, or a threshold was missed (`shortfalls`, from `sweep.thresholds.check`)."""
    failed = any(r.status == Status.ERROR for r in results_file.results)
    return Verdict.of(
        failed
        or bool(shortfalls)
        or any(c["status"] in FINDING_STATUSES for c in results_file.configs)
    )
