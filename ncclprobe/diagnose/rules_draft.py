"""The draft's own limit: a run longer than the positions the draft was trained on. One pure
function, as in `rules`; it reads the engine trace's config (`draft`, `draft_trained_positions`)."""

from __future__ import annotations

from ncclprobe.diagnose import evidence as E
from ncclprobe.diagnose.findings import Finding, NotChecked, RuledOut


def draft_positions(ev: E.Evidence) -> list:
    """The run goes past the positions the draft was trained on (`train-draft` records them, the
    trace's config carries them): there the draft predicts what it never learnt, and acceptance
    falls. Measured on the H200: a draft trained below 64 positions accepted 4.00 tokens per cycle
    in a 64-token run and 2.50 over 256 tokens (docs/LOG.md)."""
    specs = [(src, run) for src, run in ev.all_runs() if run.mode == "speculative" and src == "trace"]
    if not specs or not ev.config.get("draft"):
        return []
    hyp = "the run goes past the positions the draft was trained on"
    trained = ev.config.get("draft_trained_positions")
    reach = (ev.config.get("prompt_len") or 0) + (ev.config.get("new_tokens") or 0)
    if trained is None:
        return [NotChecked(rule="draft-positions", hypothesis=hyp,
                           missing="the trace does not record the draft's trained positions (a draft file without "
                                   "train-draft's metadata, or a trace from before they were recorded)")]
    if reach <= trained:
        return [RuledOut(rule="draft-positions", hypothesis=hyp,
                         reason=f"the run reaches position {reach}, within the {trained} the draft was trained on")]
    acceptance = {run.name(src): run.acceptance.mean_length if run.acceptance else None for src, run in specs}
    source = f"--checkpoint {ev.config['checkpoint']}" if ev.config.get("checkpoint") else \
        f"--preset {ev.config.get('preset')}"
    return [Finding(
        rule="draft-positions", severity="warning", confidence="medium",
        title=f"the run reaches position {reach}, but the draft was trained on positions below {trained}",
        detail=(f"{reach - trained} of the run's {reach} positions are beyond anything the draft saw in training, where "
                f"it predicts what it never learnt and the acceptance falls (on the H200 one such draft accepted 4.00 "
                f"tokens per cycle inside its positions and 2.50 over a run four times longer). Acceptance here: "
                + ", ".join(f"{name} {value:.2f}" for name, value in acceptance.items() if value is not None)
                + ". Train the draft on sequences as long as the runs it serves."),
        evidence={"draft_trained_positions": trained, "run_positions": reach,
                  "mean_acceptance_length": acceptance},
        next_command=f"ncclprobe train-draft {source} --gen-len {reach} --out draft-{reach}.safetensors")]


RULES = (draft_positions,)
