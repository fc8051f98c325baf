"""run-engine from a spec to its trace: the one library call (`run`) that the CLI, tests and users make.

Before any worker starts, every setting the workers will run with goes through the one safety rule
(`SettingsGuard`: `ncclprobe.nccl.safety` with this machine's GPUs and NCCL version). Then the
untuned runs (`ncclprobe.engine.runner`); with a `Tuning`, the same spec again with the recommended
NCCL settings on top of its own: those of a recommendation file, or those recommended from a quick
sweep of the engine's own all-reduce sizes (`ncclprobe.sweep` and `ncclprobe.recommend`: the same
code as `ncclprobe sweep` and `recommend`). The runs merge into one trace
(`ncclprobe.evidence.run.trace_checks.merge_tuned`), whose `verdict` is run-engine's exit code.

This module sits above `engine/`, so the engine never imports the sweep or the recommender.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from ncclprobe.engine.spec import Label, RunSpec
from ncclprobe.errors import UsageProblem

log = logging.getLogger("ncclprobe.run_engine")

# (total steps, label) -> a context manager whose value has `advance(what)`; e.g. cli.output.Progress
ProgressFactory = Callable[[int, str], AbstractContextManager]


@dataclass(frozen=True)
class Tuning:
    """What `--tuned` applies on top of the spec's settings: a recommendation file's `env`
    (`from_file`, read and validated when built), or, with no file, what a quick sweep of the
    engine's own all-reduce sizes recommends (`sweep_first`)."""

    source: str | None = None  # the recommendation file; None: sweep first
    settings: dict[str, str] | None = None  # its env

    def __post_init__(self):
        if (self.source is None) != (self.settings is None):
            raise ValueError(
                "Tuning: a recommendation file comes with its settings (Tuning.from_file)"
            )

    @classmethod
    def from_file(cls, path: str | Path) -> Tuning:
        from ncclprobe.evidence.recommendation_file import recommended_env

        return cls(str(path), recommended_env(path, "--tuned"))

    @classmethod
    def sweep_first(cls) -> Tuning:
        return cls()


class SettingsGuard:
    """The safety rule over what the workers will run with (`ncclprobe.nccl.safety`), with this
    machine's GPUs and NCCL version when the run uses NCCL."""

    def __init__(self, node, nccl_version: str | None, nccl_used: bool, allow_ll128: bool):
        self.node, self.nccl_version, self.nccl_used, self.allow_ll128 = (
            node,
            nccl_version,
            nccl_used,
            allow_ll128,
        )

    @classmethod
    def for_spec(cls, spec: RunSpec, allow_ll128: bool) -> SettingsGuard:
        if spec.resolved_device() != "cuda":
            return cls(None, None, False, allow_ll128)
        from ncclprobe.evidence.live.topo_live import live_node_facts
        from ncclprobe.provenance import nccl_version_string

        return cls(live_node_facts(gpus=spec.tp), nccl_version_string(), True, allow_ll128)

    def check(self, settings: dict, source: str) -> list[str]:
        """Warnings to show; UsageProblem (exit 2) for a lint error or an unsafe LL128."""
        from ncclprobe.nccl.safety import check_job_settings

        return check_job_settings(
            settings,
            source=source,
            node=self.node,
            nccl_version=self.nccl_version,
            nccl_used=self.nccl_used,
            allow_ll128=self.allow_ll128,
        )


def run(
    spec: RunSpec,
    *,
    tuning: Tuning | None = None,
    allow_ll128: bool = False,
    progress: ProgressFactory | None = None,
) -> dict:
    """The engine trace of `spec`'s runs (and, with `tuning`, of its tuned twin), with the
    warnings said before it started, the GPUs' facts the rules used and the profiles written."""
    progress = progress or _silent
    spec.check_runnable()
    profiles = planned_profiles(spec, tuned=tuning is not None)
    if tuning is not None and tuning.source is None and spec.tp == 1:
        raise UsageProblem(
            "--tuned without a FILE sweeps the engine's all-reduce sizes, but with --tp 1 the engine "
            "issues no collectives; give a recommendation FILE or --tp 2 or more"
        )
    guard = SettingsGuard.for_spec(spec, allow_ll128)
    warnings = (
        spec.warnings()
        + guard.check(spec.settings, "--env")
        + guard.check(spec.env_after_init, "--env-after-init")
    )
    if tuning is not None and tuning.source is not None:
        warnings += guard.check(
            {**spec.settings, **(tuning.settings or {})},
            f"--tuned {tuning.source} (on top of --env)",
        )
    for warning in warnings:
        log.warning("%s", warning)
    doc = _engine(spec, progress)
    if tuning is not None:
        doc, tuned_warnings = _with_tuned_runs(doc, spec, tuning, guard, progress)
        warnings += tuned_warnings
    if profiles:
        doc["profiles"] = [str(p) for p in profiles]
        warnings.append(
            "the measured loop ran under torch.profiler (--profile): its times include the profiler's "
            "overhead; take speed figures from a run without --profile"
        )
    doc["warnings"] = warnings
    doc["node"] = (
        guard.node.to_json() if guard.node else None
    )  # what the NCCL rules knew of the GPUs
    return doc


def planned_profiles(spec: RunSpec, *, tuned: bool) -> list[Path]:
    """The profile files the run will write (`--profile DIR`), refused before anything runs if one exists."""
    if not spec.profile_dir:
        return []
    from ncclprobe.engine.profiling import profile_paths

    labels = (Label.UNTUNED, Label.TUNED) if tuned else (Label.UNTUNED,)
    paths = profile_paths(spec.profile_dir, labels=labels, modes=spec.modes, tp=spec.tp)
    # a new or empty directory only (ncclprobe.safe_output's directory rule): an earlier run's profiles
    # beside these would be read as ranks of this run by `diagnose --profile DIR/*`
    from ncclprobe.safe_output import check_output_dir

    check_output_dir(spec.profile_dir, what="--profile", has_force=False)
    return paths


def quick_sweep(
    untuned: dict, spec: RunSpec, progress: ProgressFactory | None = None
) -> tuple[dict[str, str], dict]:
    """Sweep the default protocol x algorithm grid at the engine's own all-reduce sizes (from the
    untuned trace's collectives), in its own mode, and recommend: (env, recommendation JSON)."""
    from ncclprobe import tempdirs
    from ncclprobe.recommend.recommendation import build_recommendation
    from ncclprobe.recommend.workload import from_trace
    from ncclprobe.sweep import session
    from ncclprobe.sweep.build import SweepRequest
    from ncclprobe.sweep.defaults import QUICK

    workload = from_trace(untuned)
    request = SweepRequest(
        sizes=tuple(sorted(workload.counts)),
        placement="in",
        modes=("graph",) if spec.graphs != "none" else QUICK.modes,
        nranks=spec.tp,
        backend=untuned["config"]["backend"],
    )
    with tempdirs.owned("ncclprobe-tuned-") as tmp:
        path = tmp / "sweep.jsonl"
        session.run(
            session.SessionRequest(
                sweep=request, output=str(path), argv=("run-engine", "--tuned"), effort=QUICK
            ),
            progress=progress,
            label="tuning sweep",
        )
        recommendation = build_recommendation([path], workload=workload)
        return recommendation.env, recommendation.to_json()


def _with_tuned_runs(
    doc: dict, spec: RunSpec, tuning: Tuning, guard: SettingsGuard, progress: ProgressFactory
) -> tuple[dict, list[str]]:
    """Run `spec` again with the recommended settings on top of its own; merge into one trace. A
    quick sweep's recommendation is checked like --env before it runs; its warnings come back."""
    from ncclprobe.evidence.run.trace_checks import merge_tuned

    recommended, recommendation, warnings = tuning.settings or {}, None, []
    if tuning.source is None:
        recommended, recommendation = quick_sweep(doc, spec, progress)
        warnings = guard.check(
            {**spec.settings, **recommended},
            "--tuned: the quick sweep's recommendation (on top of --env)",
        )
    tuned = dataclasses.replace(spec, settings={**spec.settings, **recommended}, label=Label.TUNED)
    merged = merge_tuned(doc, _engine(tuned, progress))
    merged["tuning"] = {"settings": recommended, "recommendation": recommendation}
    return merged, warnings


def _engine(spec: RunSpec, progress: ProgressFactory) -> dict:
    from ncclprobe.engine.runner import run_engine

    with progress(len(spec.modes) * spec.tp, "run-engine") as bar:

        def on_message(message: dict) -> None:
            if message.get("kind") == "engine-digest":
                bar.advance(message["mode"])

        return run_engine([spec], on_message=on_message)


class _Silent:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def advance(self, what: str = "", steps: int = 1) -> None:
        return None


def _silent(total: int, label: str) -> _Silent:
    return _Silent()
