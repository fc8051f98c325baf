"""The draft's own limits: a run longer than the positions the draft was trained on, and a draft
trained for another target. Pure functions, as in `rules`; they read the engine trace's config
(`draft`, `draft_trained_positions`, `draft_target`, `target`)."""

from __future__ import annotations

from ncclprobe.diagnose.commands import draft_command, draft_note, engine_command, fresh
from ncclprobe.diagnose.run.rules_log import LOW_ACCEPTANCE
from ncclprobe.engine.target_identity import mismatch
from ncclprobe.evidence import bundle as E
from ncclprobe.findings import Finding, NotChecked, RuledOut


def draft_positions(ev: E.Evidence) -> list:
    """The run goes past the positions the draft was trained on (`train-draft` records them, the
    trace's config carries them): there the draft predicts what it never learnt, and acceptance
    falls. Measured on the H200: a draft trained below 64 positions accepted 4.00 tokens per cycle
    in a 64-token run and 2.50 over 256 tokens (docs/LOG.md)."""
    specs = [
        (src, run) for src, run in ev.all_runs() if run.mode == "speculative" and src == "trace"
    ]
    if not specs or not ev.config.get("draft"):
        return []
    hyp = "the run goes past the positions the draft was trained on"
    trained = ev.config.get("draft_trained_positions")
    reach = (ev.config.get("prompt_len") or 0) + (ev.config.get("new_tokens") or 0)
    if trained is None:
        return [
            NotChecked(
                rule="draft-positions",
                hypothesis=hyp,
                missing="the trace does not record the draft's trained positions (a draft file without "
                "train-draft's metadata, or a trace from before they were recorded)",
            )
        ]
    if reach <= trained:
        return [
            RuledOut(
                rule="draft-positions",
                hypothesis=hyp,
                reason=f"the run reaches position {reach}, within the {trained} the draft was trained on",
            )
        ]
    acceptance = {
        run.name(src): run.acceptance.mean_length if run.acceptance else None for src, run in specs
    }
    measured = ", ".join(
        f"{name} {value:.2f}" for name, value in acceptance.items() if value is not None
    )
    return [
        Finding(
            rule="draft-positions",
            severity="warning",
            confidence="low",
            title=f"the run reaches position {reach}, but the draft was trained on positions below {trained}",
            detail=(
                f"Read from the trace: {reach - trained} of the run's {reach} positions are beyond anything "
                "the draft saw in training. Not measured in this run: whether its acceptance fell there. "
                "The trace counts accepted drafts over the whole run, not by position, so this is "
                "inferred from another run (on the H200 one such draft accepted 4.00 tokens per cycle "
                "inside its positions and 2.50 over a run four times longer, docs/LOG.md)."
                + (
                    f" Acceptance over this whole run: {measured} tokens per cycle."
                    if measured
                    else ""
                )
                + " A run of the same draft within its positions, or a draft trained on sequences as "
                "long as the runs it serves, tells."
            ),
            evidence={
                "draft_trained_positions": trained,
                "run_positions": reach,
                "mean_acceptance_length": acceptance,
                "acceptance_by_position": None,
            },
            next_command=_retrain(ev, f"draft-{reach}.safetensors", "--gen-len", str(reach)),
        )
    ]


def draft_for_another_target(ev: E.Evidence) -> list:
    """The draft's file records the target it was trained for (train-draft); this run's target is
    another (another seed, preset or checkpoint): the draft predicts hidden states it never saw."""
    if not ev.config.get("draft") or not any(run.mode == "speculative" for run in ev.runs):
        return []
    hyp = "the draft was trained for another target"
    trained_for, running = ev.config.get("draft_target"), ev.config.get("target")
    if not trained_for or not running:
        return [
            NotChecked(
                rule="draft-target",
                hypothesis=hyp,
                missing="the target the draft was trained for (a draft saved before train-draft recorded "
                "it, or a trace from before the target was recorded)",
            )
        ]
    differs = mismatch(trained_for, running)
    if not differs:
        return [
            RuledOut(
                rule="draft-target",
                hypothesis=hyp,
                reason=f"the draft records the target this run used ({_name(running)})",
            )
        ]
    acceptance = [
        run.acceptance.mean_length
        for run in ev.runs
        if run.mode == "speculative" and run.acceptance and run.acceptance.mean_length
    ]
    best = max(acceptance) if acceptance else None
    low = best is not None and best < LOW_ACCEPTANCE
    if best is None:
        effect = (
            "so it is expected to accept little (tiny seed 0's draft on seed 1: 1.0 tokens per cycle "
            "against 2.99, docs/LOG.md); this trace records no acceptance to show it"
        )
    elif low:
        effect = (
            f"and here it accepts little: at most {best:.2f} tokens per cycle (bonus included; below "
            f"{LOW_ACCEPTANCE:.1f} the drafts are rarely kept)"
        )
    else:
        effect = (
            f"yet here it accepts {best:.2f} tokens per cycle (bonus included): the mismatch has not "
            "cost this run its acceptance (two targets can be close, e.g. the same checkpoint "
            "re-saved), so it is a risk to fix, not the cause of a slow run"
        )
    return [
        Finding(
            rule="draft-target",
            severity="warning" if best is None or low else "info",
            confidence="high",
            title=f"the draft was trained for another target: {differs}",
            detail=(
                f"Read from the draft's file and the trace: a draft learns one target's hidden states; "
                f"trained for {_name(trained_for)} it serves {_name(running)}, whose weights it never saw, "
                f"{effect}."
            ),
            evidence={
                "draft_target": trained_for,
                "target": running,
                "mean_acceptance_length": best,
                "low_acceptance_below": LOW_ACCEPTANCE,
            },
            next_command=_retrain(ev, "draft-this-target.safetensors"),
        )
    ]


def _retrain(ev: E.Evidence, name: str, *extra: str) -> str:
    """Train a draft for the trace's target, then run with it: a command that runs as printed."""
    draft = fresh(name)
    return (
        f"{draft_command(ev.config, draft, *extra)} && "
        f"{engine_command(ev.config, draft=draft, trace_out='trace-new-draft.json', train_missing_draft=False)}"
        f"  # {draft_note(ev.config)}"
    )


def _name(identity: dict) -> str:
    if identity.get("checkpoint"):
        return f"checkpoint {identity['checkpoint']}"
    return f"preset {identity.get('preset')} seed {identity.get('seed')}"


RULES = (draft_positions, draft_for_another_target)
