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
from ncclprobe.nccl.recipes import check_share_gpu_ranks
from ncclprobe.probes.collectives import COLLECTIVES
from ncclprobe.probes.collectives.base import DTYPES, OPS
from ncclprobe.records import ResultsFile, ResultWriter, read_results, trim_incomplete_tail
from ncclprobe.safe_output import check_appendable, check_output
from ncclprobe.sizes import parse_sizes
from ncclprobe.sweep import setup
from ncclprobe.sweep.plan import SweepSpec
from ncclprobe.sweep.run import configs_to_run, run_sweep

log = logging.getLogger("ncclprobe.sweep")

FINDING_STATUSES = ("wrong", "hang", "error", "ignored")


@dataclass
class Job:
    spec: SweepSpec
    path: Path
    header: dict | None                      # None when resuming: the file has one
    done: set[str] = field(default_factory=set)
    equivalent_levels: list[list[str]] | None = None
    collect_dir: Path | None = None          # torchrun: collect what the workers left here
    force: bool = False                      # replace an existing results file (--force)

    @property
    def total(self) -> int:
        configs, skips = configs_to_run(self.spec, self.equivalent_levels)
        return sum(1 for c in configs + [s.config for s in skips] if c.config_id not in self.done)


def spec_from_options(options: dict, *, tuning_explicit: bool = True, local: bool = True) -> tuple[SweepSpec, dict[str, str]]:
    """Options as the CLI collects them -> a validated spec and the modes skipped (with why).

    With one NCCL rank NCCL never runs its tuner (no `NCCL_PROTO set by environment` line, real
    2.28.9 log in the fixtures), so the default protocol/algorithm axes are dropped there; given
    explicitly they are measured and reported as ignored. `local=False` plans for torchrun on other
    hosts: this host's GPU count says nothing about theirs.
    """
    share = options.get("share_gpu")
    backend = setup.resolve_backend(options["backend"])
    if share is not None:
        check_share_gpu_ranks(share)
        if options["nranks"] and options["nranks"] != share:
            raise UsageProblem(f"--nranks {options['nranks']} contradicts --share-gpu {share}, which sets the rank count")
        if not local:
            raise UsageProblem("--share-gpu runs every rank on this host's GPU 0; it cannot be planned for torchrun")
    nranks = share if share is not None else options["nranks"]
    if nranks is None:
        nranks = setup.gpu_count() if backend == "nccl" else 2
    if local:
        setup.check_ranks(backend, nranks, share_gpu=share is not None)
    grid = dict(options["grid"])
    if backend == "nccl" and nranks == 1 and not tuning_explicit:
        grid = {k: v for k, v in grid.items() if k not in ("NCCL_PROTO", "NCCL_ALGO")}
    modes, skipped = setup.usable_modes(tuple(m.strip() for m in options["mode"].split(",") if m.strip()), backend)
    placement = {"both": (True, False), "in": (True,), "out": (False,)}[options["placement"]]
    if (options.get("path") or "torch") == "nccl" and local:
        import importlib.util
        if importlib.util.find_spec("cupy") is None:
            raise UsageProblem("--path nccl calls NCCL through cupy, which is not installed here "
                               "(pip install cupy-cuda12x, or cupy-cuda13x on CUDA 13)")
    if options["timeout"] <= 0:
        raise UsageProblem(f"--timeout must be positive, got {options['timeout']:g}")
    spec = SweepSpec(grid=grid, sizes=tuple(parse_sizes(options["sizes"])),
                     collectives=names(options.get("collective") or "all_reduce", COLLECTIVES),
                     dtypes=names(options.get("dtype") or "float32", DTYPES), ops=names(options.get("op") or "sum", OPS),
                     in_place=placement, modes=modes, warmup=options["warmup"], iters=options["iters"],
                     trials=options["trials"], agg=options.get("agg") or 1, check=options.get("check", True),
                     buffers=options.get("buffers") or "rotate", path=options.get("path") or "torch",
                     iter_events=options.get("iter_events", True), nranks=nranks, backend=backend,
                     timeout_s=options["timeout"], share_gpu=share is not None)
    return spec, skipped


def names(text: str, universe) -> tuple[str, ...]:
    """`all_reduce,all_gather` -> a tuple, in the order given; `all` -> every name of `universe`."""
    given = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    return tuple(universe) if given == ("all",) else given


def default_output() -> Path:
    """./runs/sweep-<time>.jsonl; ./runs/ is made only when the file is (`run_job`)."""
    return Path("runs") / f"sweep-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.jsonl"


def new_job(spec: SweepSpec, skipped_modes: dict[str, str], output: str | None, argv: list[str],
            force: bool = False) -> Job:
    path = _check_writable(output, force)
    topo, levels = setup.topology(spec) if spec.backend == "nccl" else (None, None)
    head = _linted_header(spec, skipped_modes, argv, topo, configs_to_run(spec, levels)[0])
    return Job(spec=spec, path=path, header=head, equivalent_levels=levels, force=force)


def _linted_header(spec: SweepSpec, skipped_modes: dict[str, str], argv: list[str], topo: dict | None,
                   configs) -> dict:
    """The results header, with the lint's findings over `configs` (with the GPUs' facts and the
    NCCL version in use) in its notes and `lint` (said on stderr too)."""
    head = setup.header(spec, list(argv), topo, [], skipped_modes)
    version = (head.get("versions") or {}).get("nccl") if spec.backend == "nccl" else None
    findings = setup.lint_findings(configs, spec.backend, setup.node_facts(spec, topo), version)
    for entry in findings:
        log.warning("%s", setup.lint_note(entry))
    head["notes"] = setup.notes(spec, skipped_modes) + [setup.lint_note(entry) for entry in findings]
    return {**head, "lint": findings}


def _check_writable(output: str | None, force: bool) -> Path:
    if output is not None:
        return check_output(output, force=force, what="output file")
    path = default_output()
    if not path.parent.is_dir():   # ./runs/ is made later, once nothing can fail any more
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
    return Job(spec=spec, path=path, header=None, done={c["config_id"] for c in existing.configs},
               equivalent_levels=levels)


def _resumable_spec(path_text: str, header: dict) -> SweepSpec:
    if header.get("kind") != "sweep" or "spec" not in header:
        raise UsageProblem(f"{path_text!r} is not a sweep results file (header kind {header.get('kind')!r})")
    try:
        spec = SweepSpec.from_json(header["spec"])
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise UsageProblem(f"{path_text!r} has an unreadable sweep spec in its header ({exc})") from exc
    try:  # e.g. a GPU sweep resumed on a CPU host, or a torchrun sweep's file resumed on one node
        setup.check_ranks(spec.backend, spec.nranks, share_gpu=spec.share_gpu)
    except UsageProblem as exc:
        raise UsageProblem(f"cannot resume {path_text!r} here: {exc}") from exc
    return spec


def plan_torchrun(spec: SweepSpec, skipped_modes: dict[str, str], directory: str, argv: list[str]) -> list[str]:
    from ncclprobe.sweep import torchrun
    head = _linted_header(spec, skipped_modes, argv, None, configs_to_run(spec, None)[0])  # other hosts: links unknown
    return torchrun.write_plan(spec, head, Path(directory))


def collect_job(directory: str, output: str | None, force: bool = False) -> Job:
    """A job whose measurements already happened under torchrun: only the collection is left."""
    from ncclprobe.sweep import torchrun
    header = torchrun.collect_header(Path(directory))
    try:
        spec = SweepSpec.from_json(header["spec"])
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise UsageProblem(f"--collect {directory!r}: its plan has an unreadable sweep spec ({exc})") from None
    path = _check_writable(output, force)
    return Job(spec=spec, path=path, header=header, collect_dir=Path(directory), force=force)


def run_job(job: Job, progress=None) -> ResultsFile:
    if job.header is None and job.total == 0:  # a finished file: nothing to add, not even a summary
        return read_results(job.path)
    job.path.parent.mkdir(parents=True, exist_ok=True)   # ./runs/ by default; everything was checked
    with ResultWriter(job.path, job.header, resume=job.header is None, force=job.force,
                      atomic=job.collect_dir is not None) as writer:
        if job.collect_dir is not None:   # written beside the path, renamed into place on closing
            from ncclprobe.sweep.torchrun import collect
            collect(job.collect_dir, writer)
        else:
            run_sweep(job.spec, writer, done=job.done, equivalent_levels=job.equivalent_levels, progress=progress)
    return read_results(job.path)


def exit_code(results_file: ResultsFile) -> int:
    """1 when any configuration is wrong, hung, crashed or not confirmed by NCCL, or a measurement
    failed; else 0."""
    failed = any(r.get("status") == "error" for r in results_file.results)
    return 1 if failed or any(c["status"] in FINDING_STATUSES for c in results_file.configs) else 0
