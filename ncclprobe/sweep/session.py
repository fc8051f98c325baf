"""A sweep from start to results file: validate everything, open the file, run, read it back.

The CLI is a thin layer over these functions, and tests call them directly. Everything that can
be wrong with the input is found before the results file (or the default ./runs/ directory) is
created, so bad input never leaves a half-written file behind; the file follows
`ncclprobe.safe_output`'s rules (an existing one is replaced only with `force`).
"""

from __future__ import annotations

import datetime as _dt
import logging
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.records import (
    FINDING_STATUSES,
    ResultsFile,
    ResultWriter,
    Status,
    read_results,
    trim_incomplete_tail,
)
from ncclprobe.safe_output import check_appendable, check_output
from ncclprobe.sweep import setup
from ncclprobe.sweep.plan import SweepSpec
from ncclprobe.sweep.run import configs_to_run, run_sweep
from ncclprobe.verdict import Verdict

log = logging.getLogger("ncclprobe.sweep")


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
    findings = setup.lint_findings(configs, spec.backend, setup.node_facts(spec, topo), version)
    for entry in findings:
        log.warning("%s", setup.lint_note(entry))
    head["notes"] = setup.notes(spec, skipped_modes) + [
        setup.lint_note(entry) for entry in findings
    ]
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
    spec: SweepSpec, skipped_modes: dict[str, str], directory: str, argv: list[str]
) -> list[str]:
    from ncclprobe.sweep import torchrun

    head = _linted_header(
        spec, skipped_modes, argv, None, configs_to_run(spec, None)[0]
    )  # other hosts: links unknown
    return torchrun.write_plan(spec, head, Path(directory))


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
    if job.header is None and job.total == 0:  # a finished file: nothing to add, not even a summary
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


def verdict(results_file: ResultsFile, shortfalls: list[str] = ()) -> Verdict:
    """FINDINGS when any configuration is wrong, hung, crashed or not confirmed by NCCL, a
    measurement failed, or a threshold was missed (`shortfalls`, from `sweep.thresholds.check`)."""
    failed = any(r.get("status") == Status.ERROR for r in results_file.results)
    return Verdict.of(
        failed
        or bool(shortfalls)
        or any(c["status"] in FINDING_STATUSES for c in results_file.configs)
    )
